//! `verify=true`: every write carries a pattern that names its tenant, block and
//! generation, and every read of a block the tenant wrote is checked against the last
//! write of it that completed. A mismatch is data that came back wrong: a lost write, a
//! torn one, a read served from the wrong place.
//!
//! Requests in flight never share a block, so "the last write" is always defined: request
//! slot `s` of `iodepth` only touches blocks `b` with `b % iodepth == s`
//! ([`Verifier::block`]).

/// Generation of a block the tenant has not written (its content is unknown).
const UNWRITTEN: u32 = 0;
/// Generation of a block whose last write failed (its content is unknown).
const UNKNOWN: u32 = u32::MAX;

pub struct Verifier {
    seed: u64,
    iodepth: u64,
    /// Per block: the generation its content has, or [`UNWRITTEN`] / [`UNKNOWN`].
    generation: Vec<u32>,
    /// Reads whose data did not match.
    pub mismatches: u64,
    /// The first mismatch, described, for the report.
    pub first_mismatch: Option<String>,
}

impl Verifier {
    /// For a tenant with `blocks` blocks and `iodepth` slots; `seed` tells tenants apart.
    pub fn new(seed: u64, blocks: u64, iodepth: usize) -> Result<Self, String> {
        if blocks < iodepth as u64 {
            return Err(format!(
                "verify: the volume holds {blocks} blocks, fewer than iodepth {iodepth}"
            ));
        }
        Ok(Verifier {
            seed,
            iodepth: iodepth as u64,
            generation: vec![UNWRITTEN; blocks as usize],
            mismatches: 0,
            first_mismatch: None,
        })
    }

    /// The block for slot `slot`, the `n`th of the slot's own stripe (wrapped).
    pub fn block(&self, slot: usize, n: u64) -> u64 {
        let per_slot = self.generation.len() as u64 / self.iodepth;
        (n % per_slot) * self.iodepth + slot as u64
    }

    /// Fills `buf` with the next generation of `block` and returns that generation, to be
    /// passed to [`Verifier::write_done`].
    pub fn fill(&self, block: u64, buf: &mut [u8]) -> u32 {
        let last = self.generation[block as usize];
        let generation = if last >= UNKNOWN - 1 { 1 } else { last + 1 };
        self.pattern(block, generation, buf);
        generation
    }

    /// The write of `generation` to `block` completed (`ok`) or failed.
    pub fn write_done(&mut self, block: u64, generation: u32, ok: bool) {
        self.generation[block as usize] = if ok { generation } else { UNKNOWN };
    }

    /// Checks a successful read of `block` into `buf`; false on a mismatch.
    pub fn check(&mut self, block: u64, buf: &[u8]) -> bool {
        let generation = self.generation[block as usize];
        if generation == UNWRITTEN || generation == UNKNOWN {
            return true;
        }
        let mut expected = vec![0u8; buf.len()];
        self.pattern(block, generation, &mut expected);
        if expected == buf {
            return true;
        }
        self.mismatches += 1;
        if self.first_mismatch.is_none() {
            let at = expected
                .iter()
                .zip(buf)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.first_mismatch = Some(format!(
                "block {block} (generation {generation}): first wrong byte at {at} of {}",
                buf.len()
            ));
        }
        false
    }

    fn pattern(&self, block: u64, generation: u32, buf: &mut [u8]) {
        let base = splitmix(self.seed ^ block.rotate_left(20) ^ (u64::from(generation) << 44));
        for (i, word) in buf.chunks_mut(8).enumerate() {
            let v = splitmix(base.wrapping_add(i as u64)).to_le_bytes();
            word.copy_from_slice(&v[..word.len()]);
        }
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_match_the_last_completed_write_only() {
        let mut v = Verifier::new(7, 16, 4).unwrap();
        let mut disk = vec![vec![0u8; 4096]; 16];
        // Slots keep to their stripes.
        assert_eq!((v.block(1, 0), v.block(1, 1), v.block(1, 4)), (1, 5, 1));
        // Never written: anything reads back fine.
        assert!(v.check(5, &disk[5]));
        let g1 = v.fill(5, &mut disk[5]);
        v.write_done(5, g1, true);
        assert!(v.check(5, &disk[5]));
        // A newer generation lost on the way (the disk kept the old data) is caught.
        let mut lost = vec![0u8; 4096];
        let g2 = v.fill(5, &mut lost);
        assert_ne!(g1, g2);
        v.write_done(5, g2, true);
        assert!(!v.check(5, &disk[5]));
        // So is another block's data, or a single flipped byte.
        let g = v.fill(9, &mut disk[9]);
        v.write_done(9, g, true);
        assert!(!v.check(5, &disk[9]));
        disk[9][4095] ^= 1;
        assert!(!v.check(9, &disk[9]));
        assert_eq!(v.mismatches, 3);
        assert!(v.first_mismatch.as_deref().unwrap().starts_with("block 5"));
        // After a failed write the content is unknown, and not checked.
        let g = v.fill(9, &mut lost);
        v.write_done(9, g, false);
        assert!(v.check(9, &disk[9]));
        // Tenants' patterns differ.
        let other = Verifier::new(8, 16, 4).unwrap();
        let mut theirs = vec![0u8; 4096];
        other.fill(5, &mut theirs);
        assert_ne!(theirs, disk[5]);
        assert!(Verifier::new(1, 3, 4).is_err());
    }
}
