//! `joinery simulate --plot FILE.svg`: the report's [`Sample`]s drawn over simulated time in
//! three panels — nodes by instance type, pods pending and running, hourly cost — as an SVG
//! (plotters' SVG backend).

use std::collections::BTreeSet;

use plotters::prelude::*;

use crate::observer::Sample;
use crate::report::Report;

/// One line of a chart: its name, its colour and its points (seconds, value).
type Series = (String, RGBColor, Vec<(f64, f64)>);

/// The plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the plot: {0}")]
pub struct PlotError(String);

fn failed(error: impl std::fmt::Display) -> PlotError {
    PlotError(error.to_string())
}

/// The points of a step line: each value holds until the next sample, the last until `end`.
fn steps(values: impl Iterator<Item = (f64, f64)>, end: f64) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for (at, value) in values {
        if let Some(&(_, previous)) = points.last() {
            points.push((at, previous));
        }
        points.push((at, value));
    }
    if let Some(&(at, value)) = points.last()
        && end > at
    {
        points.push((end, value));
    }
    points
}

/// What a panel's y axis measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Nodes or pods: ticks only at whole numbers.
    Count,
    /// Money: ticks anywhere.
    Amount,
}

/// The y-axis ticks of a panel whose values reach `y_max`: how many, and the text of the
/// one at `value` (empty for a count's fractional tick, which would read as half a node).
fn y_ticks(measure: Measure, y_max: f64) -> (usize, impl Fn(&f64) -> String) {
    let count = match measure {
        Measure::Count => (y_max.floor() as usize + 1).clamp(2, 10),
        Measure::Amount => 10,
    };
    let label = move |value: &f64| match measure {
        Measure::Count if value.fract().abs() > 1e-9 => String::new(),
        Measure::Count => format!("{value:.0}"),
        Measure::Amount => format!("{value:.2}"),
    };
    (count, label)
}

/// One panel: `series` (label, colour, step points) on a y axis from 0 to their maximum.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    (y_label, measure): (&str, Measure),
    end: f64,
    series: &[Series],
) -> Result<(), PlotError> {
    let top = series
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let y_max = if top <= 0.0 { 1.0 } else { top * 1.15 };
    let (y_tick_count, y_tick_label) = y_ticks(measure, y_max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..end.max(1.0), 0f64..y_max)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .x_desc("simulated seconds")
        .y_desc(y_label)
        .y_labels(y_tick_count)
        .y_label_formatter(&y_tick_label)
        .draw()
        .map_err(failed)?;
    for (label, colour, points) in series {
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(failed)?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(failed)?;
    Ok(())
}

fn colour(index: usize) -> RGBColor {
    let c = Palette99::pick(index).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// The SVG document of `report`'s samples.
pub fn svg(report: &Report) -> Result<String, PlotError> {
    let samples: &[Sample] = &report.samples;
    let end = samples
        .last()
        .map(|s| s.at)
        .unwrap_or(0.0)
        .max(report.simulated_seconds);
    let types: BTreeSet<&String> = samples
        .iter()
        .flat_map(|s| s.nodes_by_instance_type.keys())
        .collect();
    let nodes: Vec<Series> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let points = steps(
                samples.iter().map(|s| {
                    (
                        s.at,
                        s.nodes_by_instance_type.get(*t).copied().unwrap_or(0) as f64,
                    )
                }),
                end,
            );
            (t.to_string(), colour(i), points)
        })
        .collect();
    let pods = vec![
        (
            "pending".to_string(),
            RGBColor(230, 120, 20),
            steps(samples.iter().map(|s| (s.at, s.pods_pending as f64)), end),
        ),
        (
            "running".to_string(),
            RGBColor(40, 150, 60),
            steps(samples.iter().map(|s| (s.at, s.pods_running as f64)), end),
        ),
    ];
    let cost = vec![(
        "cost per hour".to_string(),
        RGBColor(40, 90, 200),
        steps(samples.iter().map(|s| (s.at, s.cost_per_hour)), end),
    )];
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 960)).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let root = root
            .titled(&format!("scenario {}", report.scenario), ("sans-serif", 22))
            .map_err(failed)?;
        let areas = root.split_evenly((3, 1));
        panel(
            &areas[0],
            "Nodes by instance type",
            ("nodes", Measure::Count),
            end,
            &nodes,
        )?;
        panel(&areas[1], "Pods", ("pods", Measure::Count), end, &pods)?;
        panel(&areas[2], "Cost", ("per hour", Measure::Amount), end, &cost)?;
        root.present().map_err(failed)?;
    }
    Ok(out)
}

/// The SVG of a comparison: each variant's hourly cost and node count over simulated time,
/// overlaid (one colour per variant).
pub fn compare_svg(comparison: &crate::compare::Comparison) -> Result<String, PlotError> {
    let end = comparison
        .reports
        .values()
        .map(|r| r.simulated_seconds)
        .fold(0.0, f64::max);
    let mut cost = Vec::new();
    let mut nodes = Vec::new();
    for (i, row) in comparison.rows.iter().enumerate() {
        let Some(report) = comparison.reports.get(&row.variant) else {
            continue;
        };
        let samples = &report.samples;
        cost.push((
            row.variant.clone(),
            colour(i),
            steps(samples.iter().map(|s| (s.at, s.cost_per_hour)), end),
        ));
        nodes.push((
            row.variant.clone(),
            colour(i),
            steps(
                samples.iter().map(|s| {
                    (
                        s.at,
                        s.nodes_by_instance_type.values().sum::<usize>() as f64,
                    )
                }),
                end,
            ),
        ));
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 660)).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let root = root
            .titled(
                &format!("scenario {}: variants compared", comparison.scenario),
                ("sans-serif", 22),
            )
            .map_err(failed)?;
        let areas = root.split_evenly((2, 1));
        panel(&areas[0], "Cost", ("per hour", Measure::Amount), end, &cost)?;
        panel(&areas[1], "Nodes", ("nodes", Measure::Count), end, &nodes)?;
        root.present().map_err(failed)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_hold_each_value_until_the_next_sample_and_the_last_until_the_end() {
        let points = steps([(0.0, 0.0), (10.0, 2.0), (30.0, 1.0)].into_iter(), 50.0);
        assert_eq!(
            points,
            vec![
                (0.0, 0.0),
                (10.0, 0.0),
                (10.0, 2.0),
                (30.0, 2.0),
                (30.0, 1.0),
                (50.0, 1.0)
            ]
        );
        assert!(steps(std::iter::empty(), 10.0).is_empty());
    }

    #[test]
    fn a_count_axis_labels_whole_numbers_only() {
        let (count, label) = y_ticks(Measure::Count, 1.15);
        assert_eq!(count, 2);
        assert_eq!(
            (label(&0.0), label(&1.0), label(&0.5)),
            ("0".into(), "1".into(), String::new())
        );
        let (count, _) = y_ticks(Measure::Count, 240.0);
        assert_eq!(count, 10);
        let (_, label) = y_ticks(Measure::Amount, 1.0);
        assert_eq!(label(&0.25), "0.25");
    }
}
