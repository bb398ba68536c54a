//! Plain-text tables for the terminal, as kubectl prints them: every column as wide as its
//! widest cell, so that no value, however long, pushes the columns after it out of line.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A table being filled row by row, printed by [`TextTable::render`].
#[derive(Debug, Clone)]
pub struct TextTable {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    /// An empty table with these column headings.
    pub fn new(columns: &[(&str, Align)]) -> TextTable {
        TextTable {
            columns: columns.iter().map(|(h, a)| (h.to_string(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, one line per row after the headings, columns two spaces apart and no
    /// trailing blanks.
    pub fn render(&self) -> String {
        let cell = |row: &[String], i: usize| row.get(i).map_or("", String::as_str).to_string();
        let width = |i: usize| {
            std::iter::once(self.columns[i].0.chars().count())
                .chain(self.rows.iter().map(|r| cell(r, i).chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.columns.len()).map(width).collect();
        let headings: Vec<String> = self.columns.iter().map(|(h, _)| h.clone()).collect();
        let mut out = String::new();
        for row in std::iter::once(&headings).chain(&self.rows) {
            let mut line = String::new();
            for (i, (_, align)) in self.columns.iter().enumerate() {
                let text = cell(row, i);
                let pad = " ".repeat(widths[i] - text.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                match align {
                    Align::Left => {
                        line.push_str(&text);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(&text);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = TextTable::new(&[
            ("NAME", Align::Left),
            ("NODES", Align::Right),
            ("NOTE", Align::Left),
        ]);
        table.row(vec![
            "a-very-long-nodeclass-name".into(),
            "3".into(),
            "x".into(),
        ]);
        table.row(vec!["b".into(), "12".into()]);
        assert_eq!(
            table.render(),
            "NAME                        NODES  NOTE\n\
             a-very-long-nodeclass-name      3  x\n\
             b                              12\n"
        );
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let mut table = TextTable::new(&[("A", Align::Left), ("B", Align::Left)]);
        table.row(vec!["é…".into(), "x".into()]);
        table.row(vec!["abc".into(), "y".into()]);
        assert_eq!(table.render(), "A    B\né…   x\nabc  y\n");
    }
}
