//! The schedule of one generated stage: the knobs of its loop nest that the code generator
//! consumes and never chooses itself. The default comes from the target description; a tuner
//! (or a test drawing points of the space at random) sets `Stage::schedule` to override it.
//! Every point of the space is correct: the code generator legalises a knob that does not fit a
//! stage (a tile wider than the row, a jam factor that divides no dimension) to the nearest one
//! that does, and the schedule text shows what it used.
use std::fmt;
use std::str::FromStr;

use crate::target::Cpu;
pub use crate::te::Schedule;
use crate::te::Stage;

/// The largest register tile of a register-blocked stage, in vectors per row.
pub const MAX_VECS: u8 = 4;
/// The most rows a tile jams.
pub const MAX_ROWS: u8 = 8;

impl Schedule {
    /// The default schedule of a stage whose row is `row` elements long, for `lanes` f32 lanes
    /// on `cpu`: the widest register tile that the row fills (up to 4 vectors); as many rows
    /// as keep accumulators and operands within the vector registers (4 rows of 4 vectors, 6 of
    /// fewer: 16 to 24 accumulators; with AVX-512's 16 lanes and 32 registers 8 rows of 3
    /// vectors, measured 15% faster than 6 on ResNet-18's 7x7 layers), the jam taking the
    /// largest factor up to it that divides a dimension; row reductions four rows at a time
    /// with a quarter of L1 for their accumulators.
    pub fn default_for(row: usize, lanes: usize, cpu: &Cpu) -> Schedule {
        let vecs = (row / lanes.max(1)).clamp(1, MAX_VECS as usize) as u8;
        Schedule {
            vecs,
            rows: match (vecs, lanes) {
                (4.., _) => 4,
                // 32 vector registers (AVX-512): 8 rows of 3 vectors.
                (3, 16) => 8,
                _ => 6,
            },
            jam: 4,
            acc_bytes: (cpu.l1d / 4).min(u32::MAX as usize) as u32,
        }
    }

    /// The knobs of `st` for `lanes` lanes on `cpu`: its own if set, else the default.
    pub fn of(st: &Stage, lanes: usize, cpu: &Cpu) -> Schedule {
        Schedule::of_row(st, st.ty.shape.last().copied().unwrap_or(1), lanes, cpu)
    }

    /// [`Schedule::of`] for a stage vectorised along a dimension of `row` elements (its last,
    /// or its channels).
    pub fn of_row(st: &Stage, row: usize, lanes: usize, cpu: &Cpu) -> Schedule {
        st.schedule
            .unwrap_or_else(|| Schedule::default_for(row, lanes, cpu))
    }

    /// A point of the space drawn from `seed` (tests of the whole space): vecs 1..=4, rows
    /// 1..=8, jam 1..=8, accumulators 64 B..64 KiB.
    pub fn random(seed: u64) -> Schedule {
        let mut s = seed;
        let mut next = |n: u64| {
            // splitmix64
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        };
        Schedule {
            vecs: 1 + next(MAX_VECS as u64) as u8,
            rows: 1 + next(MAX_ROWS as u64) as u8,
            jam: 1 + next(MAX_ROWS as u64) as u8,
            acc_bytes: 64 << next(11),
        }
    }
}

/// `vecs=4 rows=4 jam=4 acc=8192`: the form `explain` prints and the cache stores.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vecs={} rows={} jam={} acc={}",
            self.vecs, self.rows, self.jam, self.acc_bytes
        )
    }
}

/// Reads the [`Display`](fmt::Display) form back; every knob must be present and in range.
impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Schedule, String> {
        let mut vecs = None;
        let mut rows = None;
        let mut jam = None;
        let mut acc = None;
        for part in s.split_whitespace() {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("schedule knob `{part}` is not `name=value`"))?;
            let v: u32 = v
                .parse()
                .map_err(|_| format!("schedule knob `{k}` has a non-integer value `{v}`"))?;
            let slot = match k {
                "vecs" => &mut vecs,
                "rows" => &mut rows,
                "jam" => &mut jam,
                "acc" => &mut acc,
                _ => {
                    return Err(format!(
                        "unknown schedule knob `{k}` (known: vecs, rows, jam, acc)"
                    ))
                }
            };
            if slot.replace(v).is_some() {
                return Err(format!("schedule knob `{k}` given twice"));
            }
        }
        let (Some(vecs), Some(rows), Some(jam), Some(acc_bytes)) = (vecs, rows, jam, acc) else {
            return Err(format!(
                "schedule `{s}` lacks a knob (it needs vecs, rows, jam and acc)"
            ));
        };
        let rows_ok = |r: u32| (1..=MAX_ROWS as u32).contains(&r);
        if !(1..=MAX_VECS as u32).contains(&vecs)
            || !rows_ok(rows)
            || !rows_ok(jam)
            || acc_bytes == 0
        {
            return Err(format!(
                "schedule `{s}` is out of range (vecs 1..={MAX_VECS}, rows and jam 1..={MAX_ROWS}, acc > 0)"
            ));
        }
        Ok(Schedule {
            vecs: vecs as u8,
            rows: rows as u8,
            jam: jam as u8,
            acc_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    #[test]
    fn text_round_trips_and_bad_text_is_an_error() {
        for seed in 0..200 {
            let s = Schedule::random(seed);
            assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
        }
        for (bad, why) in [
            ("vecs=4 rows=4 acc=8192", "lacks a knob"),
            ("vecs=4 rows=4 jam=4 acc=8192 vecs=2", "given twice"),
            ("vecs=9 rows=4 jam=4 acc=8192", "out of range"),
            ("vecs=4 rows=4 jam=0 acc=8192", "out of range"),
            ("vecs=4 rows=x jam=4 acc=8192", "non-integer"),
            ("tile=4", "unknown schedule knob `tile`"),
            ("vecs4", "not `name=value`"),
        ] {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn defaults_follow_the_target() {
        let v3 = Target::named("x86-64-v3").unwrap();
        let cpu = v3.cpu().unwrap();
        assert_eq!(
            Schedule::default_for(256, 8, cpu).to_string(),
            "vecs=4 rows=4 jam=4 acc=8192"
        );
        assert_eq!(
            Schedule::default_for(16, 8, cpu).to_string(),
            "vecs=2 rows=6 jam=4 acc=8192"
        );
        let arm = Target::named("aarch64").unwrap();
        assert_eq!(
            Schedule::default_for(3, 4, arm.cpu().unwrap()).acc_bytes,
            16384
        );
    }
}
