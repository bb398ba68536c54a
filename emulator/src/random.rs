//! The seeded generator behind every random decision of the emulated world (injected
//! faults, fake IDs): splitmix64, so the same seed and the same calls give the same run.

/// Advances `state` and returns the next 64 random bits.
pub(crate) fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Advances `state` and returns a uniform float in [0, 1).
pub(crate) fn next_unit(state: &mut u64) -> f64 {
    (next_u64(state) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_repeats_and_units_stay_in_range() {
        let (mut a, mut b) = (42u64, 42u64);
        let first: Vec<u64> = (0..8).map(|_| next_u64(&mut a)).collect();
        assert_eq!(first, (0..8).map(|_| next_u64(&mut b)).collect::<Vec<_>>());
        assert_ne!(first[0], first[1]);
        let mut c = 7u64;
        assert!(
            (0..1000)
                .map(|_| next_unit(&mut c))
                .all(|u| (0.0..1.0).contains(&u))
        );
    }
}
