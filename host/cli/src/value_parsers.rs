//! Parsers of flag values shared by several commands, so that a bad value is a usage error
//! (exit code 2) that names the flag and its range, caught before anything starts.

/// The largest `--speed` accepted. Real time faster than this is not real time any more: no
/// component keeps up (the lag meter refuses far lower speeds), and simulated deadlines would
/// overflow the clock. Virtual time (`joinery simulate` without `--realtime`) has no limit.
pub const MAX_SPEED: f64 = 1000.0;

/// `--speed`: simulated seconds per real second, a number in (0, [`MAX_SPEED`]].
pub fn speed(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| {
        format!("{text:?} is not a number (write simulated seconds per real second, e.g. 1 or 20)")
    })?;
    if !(value.is_finite() && value > 0.0 && value <= MAX_SPEED) {
        return Err(format!(
            "{text} is out of range: --speed is simulated seconds per real second, more than 0 and at most {MAX_SPEED}; for faster runs use virtual time (`joinery simulate` without --realtime)"
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speed_is_positive_finite_and_bounded() {
        assert_eq!(speed("20"), Ok(20.0));
        assert_eq!(speed("0.5"), Ok(0.5));
        assert_eq!(speed("1000"), Ok(1000.0));
        for bad in ["0", "-1", "1e20", "inf", "NaN", "1001"] {
            let message = speed(bad).unwrap_err();
            assert!(message.contains("out of range"), "{bad}: {message}");
        }
        assert!(speed("fast").unwrap_err().contains("not a number"));
    }
}
