//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `40971488Ki`), as plugins read them
//! from requests and capacities.

/// Parses a Kubernetes quantity into thousandths of a unit, rounding up; `None` if invalid
/// or beyond `u64`.
pub fn parse_milli(quantity: &str) -> Option<u64> {
    let text = quantity.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut digits: u64 = 0;
    for c in whole.chars().chain(fraction.chars()) {
        digits = digits
            .checked_mul(10)?
            .checked_add(u64::from(c.to_digit(10)?))?;
    }
    let mut divisor = 10u64.checked_pow(fraction.len() as u32)?;
    let multiplier: u64 = match suffix {
        "" => 1,
        "m" => {
            divisor = divisor.checked_mul(1000)?;
            1
        }
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    Some(
        digits
            .checked_mul(multiplier)?
            .checked_mul(1000)?
            .div_ceil(divisor),
    )
}

#[cfg(test)]
mod tests {
    use super::parse_milli;

    #[test]
    fn quantities_parse_into_thousandths_rounding_up() {
        assert_eq!(parse_milli("1500m"), Some(1500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5Gi"), Some(1_610_612_736_000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("100Mi"), Some(104_857_600_000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1m"), Some(1));
        assert_eq!(parse_milli("0.0001"), Some(1));
        assert_eq!(parse_milli(""), None);
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Zi"), None);
        assert_eq!(parse_milli("99999999999999999999"), None);
    }
}
