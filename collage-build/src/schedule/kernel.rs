//! The space of kernel plans' knobs: the defaults a target gives each kind, and points drawn at
//! random from every kind's ranges ([`PlanChoice::ranges`]) for tests of the whole space. Every
//! point is correct: the planner legalises a knob that does not fit a stage (a tile wider than
//! the row, a jam factor that divides no dimension, a flag whose condition does not hold) to
//! the nearest one that does, and the plan's text shows what it used.
use crate::target::Cpu;
use crate::te::{Isa, PlanChoice, PlanKind};

/// The default register tile of a stage whose row is `row` elements long, for the variant
/// `isa`: the widest that the row fills (up to 4 vectors), and as many rows as keep
/// accumulators and operands within the vector registers (4 rows of 4 vectors, 6 of fewer: 16
/// to 24 accumulators; with 32 registers (AVX-512) 8 rows of 3 vectors). The jam takes the
/// largest factor up to the rows that divides a dimension.
pub fn gemm_defaults(row: usize, isa: Isa, _cpu: &Cpu) -> (usize, usize) {
    let vecs = (row / isa.lanes()).clamp(1, 4);
    let rows = match vecs {
        4.. => 4,
        3 if isa.vector_registers() >= 32 => 8,
        _ => 6,
    };
    (vecs, rows)
}

/// The default row reduction on `cpu`: four rows at a time, with a quarter of L1 for their
/// accumulators.
pub fn row_defaults(cpu: &Cpu) -> (usize, u32) {
    (4, (cpu.l1d / 4).min(u32::MAX as usize) as u32)
}

/// A stream of pseudo-random numbers (splitmix64) for drawing points of the space.
pub struct Draw(u64);

impl Draw {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Draw {
        Draw(seed)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }

    /// A number in `lo..=hi`; for ranges of more than 64 values a power of two in it (byte
    /// counts, bands: their interesting values are spread over orders of magnitude).
    fn knob(&mut self, lo: u32, hi: u32) -> u32 {
        if hi - lo < 64 {
            return lo + self.below(u64::from(hi - lo) + 1) as u32;
        }
        let (a, b) = (lo.next_power_of_two().ilog2(), hi.ilog2());
        1 << (a + self.below(u64::from(b - a) + 1) as u32)
    }
}

/// A point of `kind`'s space drawn from `draw`: every knob uniformly in its range (powers of
/// two in the long ones).
pub fn random_choice(kind: PlanKind, draw: &mut Draw) -> PlanChoice {
    let ranges = PlanChoice::ranges(kind);
    let values: Vec<(&str, u32)> = ranges
        .iter()
        .map(|&(k, lo, hi)| (k, draw.knob(lo, hi)))
        .collect();
    PlanChoice::from_knobs(kind, &|k| {
        values
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| *v)
            .expect("a knob of the kind")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    #[test]
    fn choices_round_trip_through_text_and_bad_text_is_an_error() {
        let mut draw = Draw::new(7);
        for _ in 0..50 {
            for kind in PlanKind::ALL {
                let c = random_choice(kind, &mut draw);
                assert_eq!(c.kind(), kind);
                assert_eq!(c.to_string().parse::<PlanChoice>(), Ok(c), "{c}");
                // A whole plan's line parses to its choice.
                let line = format!("{c} | vector i3 outer [i0] trips 9");
                assert_eq!(line.parse::<PlanChoice>(), Ok(c));
            }
        }
        for (bad, why) in [
            (
                "register-blocked vecs=4 rows=4",
                "lacks its knob `prefetch`",
            ),
            (
                "register-blocked vecs=4 rows=4 prefetch=0 vecs=2",
                "given twice",
            ),
            (
                "register-blocked vecs=9 rows=4 prefetch=0",
                "out of its range",
            ),
            ("row jam=0 acc=8192", "out of its range"),
            ("row jam=x acc=8192", "non-integer"),
            (
                "row jam=2 acc=8192 tile=4",
                "unknown knob `tile` of a row plan",
            ),
            (
                "window simd=1",
                "unknown knob `simd` of a window plan (known: none)",
            ),
            ("row jam2 acc=8192", "not `name=value`"),
            ("tiled vecs=4", "unknown plan kind `tiled`"),
            ("", "an empty plan"),
        ] {
            let e = bad.parse::<PlanChoice>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn defaults_follow_the_target() {
        let v3 = Target::named("x86-64-v3").unwrap();
        let cpu = v3.cpu().unwrap();
        assert_eq!(gemm_defaults(256, Isa::Avx2, cpu), (4, 4));
        assert_eq!(gemm_defaults(16, Isa::Avx2, cpu), (2, 6));
        assert_eq!(gemm_defaults(48, Isa::Avx512, cpu), (3, 8));
        assert_eq!(gemm_defaults(48, Isa::Base, cpu), (4, 4));
        assert_eq!(gemm_defaults(24, Isa::Avx2, cpu), (3, 6));
        assert_eq!(row_defaults(cpu), (4, 8192));
        let arm = Target::named("aarch64").unwrap();
        assert_eq!(row_defaults(arm.cpu().unwrap()).1, 16384);
    }
}
