//! A fast hasher for in-memory indexes, and requirement fingerprints.

use std::hash::{Hash, Hasher};

/// A fast, non-cryptographic hasher (the Fx multiply-rotate scheme) for in-memory indexes of
/// trusted data.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
        }
        for &byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(SEED);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A 64-bit fingerprint (SipHash with fixed keys) of a requirement, label value or other
/// hashable datum: equal data have equal fingerprints, and for the few thousand distinct
/// requirements of a catalog a collision is vanishingly unlikely (about 1 in 10^12), so
/// indexes built per scheduling pass let a fingerprint stand for its datum.
pub(crate) fn fingerprint<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}
