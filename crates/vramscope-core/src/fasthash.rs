//! Hashers for the simulator's and builder's internal maps, whose keys are module paths or
//! integers (addresses, hashes): the default SipHash guards against adversarial keys, which these
//! are not, and costs more than the lookups it serves.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by an integer (an address, a hash).
pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Multiply and rotate the one integer a key writes (bytes, if a key writes those, one at a time).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(K).rotate_left(29);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A hash of a dotted path: eight bytes at a time, multiply and rotate.
pub(crate) fn path_hash(path: &str) -> u64 {
    const P: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut h = 0u64;
    let mut chunks = path.as_bytes().chunks_exact(8);
    for c in &mut chunks {
        let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ word).wrapping_mul(P);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(P);
    }
    h
}
