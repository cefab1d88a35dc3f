//! Kernel plans: the loop shape of one generated stage, with its knobs, as data. A planner
//! (`schedule::plan`) chooses one per stage and instruction-set variant, once, from the stage,
//! its program and a target; it is stored on the [`Program`](super::Program)
//! (`Program::plans`) and every consumer reads that value: the C emitter prints it, groups take
//! their tile widths from it, the pricer its rate, `explain` and the goldens its text. A stage's
//! printed plan is, by construction, the one its code was generated from.
//!
//! The types live here, beside [`Stage`](super::Stage), so that a program can hold them; the
//! analyses that fill them in are the scheduling room's.
use std::fmt;

use super::{BufId, Expr, Src};

/// An instruction-set variant the C emitter compiles every generated stage for: x86-64 builds
/// get all three, chosen at run time; other targets the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// AVX-512 (F, VL, BW, DQ): 16 f32 lanes, 32 vector registers.
    Avx512,
    /// AVX2 with FMA: 8 f32 lanes, 16 vector registers.
    Avx2,
    /// The baseline: 4 f32 lanes (SSE2, NEON), 16 vector registers.
    Base,
}

impl Isa {
    /// Every variant, in the order the emitter writes and dispatches them (widest first).
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Base];

    /// The f32 lanes of a vector.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2 => 8,
            Isa::Base => 4,
        }
    }

    /// The suffix of the variant's C functions (`k12_avx512`); the baseline has none.
    pub fn suffix(self) -> &'static str {
        match self {
            Isa::Avx512 => "_avx512",
            Isa::Avx2 => "_avx2",
            Isa::Base => "",
        }
    }

    /// The short name used in text (`avx512`, `avx2`, `base`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Base => "base",
        }
    }

    /// The most f32 lanes of any variant (AVX-512's): what a plan that must give every variant
    /// the same tasks makes its blocks of (a block of channels is whole vectors of each).
    pub const WIDEST_LANES: usize = 16;

    /// Architectural vector registers: what a register tile of accumulators, the operands it
    /// loads and a broadcast must fit in.
    pub fn vector_registers(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Base => 16,
        }
    }

    /// The preprocessor symbols that make the generated code dispatch to this variant on a
    /// machine that has a wider one (`CL_NO_AVX512`, and for the baseline
    /// `COLLAGE_NO_DISPATCH`): how a test or a tuning run checks a narrower variant's plans.
    pub fn defines(self) -> &'static [&'static str] {
        match self {
            Isa::Avx512 => &[],
            Isa::Avx2 => &["CL_NO_AVX512"],
            Isa::Base => &["COLLAGE_NO_DISPATCH"],
        }
    }

    /// The preprocessor symbols that leave every variant but this one out of the generated
    /// code, the baseline included (`CL_NO_BASE`): what measurements on a machine whose widest
    /// variant this is compile (a third of the C of all three; the same code runs).
    pub fn only(self) -> &'static [&'static str] {
        match self {
            Isa::Avx512 => &["CL_NO_AVX2", "CL_NO_BASE"],
            Isa::Avx2 => &["CL_NO_AVX512", "CL_NO_BASE"],
            Isa::Base => &["COLLAGE_NO_DISPATCH"],
        }
    }

    /// The position of the variant in [`Isa::ALL`] (and in a stage's plans).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The loop shape of one generated stage, with its knobs (legal for the stage: a planner
/// legalises every knob it is given).
#[derive(Clone, Debug, PartialEq)]
pub enum KernelPlan {
    /// An injective stage: one loop nest over the output.
    Injective(InjectivePlan),
    /// A padded window reduction (pooling): window loops outside, the row of outputs inside
    /// over a row of accumulators, the guard turned into loop bounds.
    Window(WindowPlan),
    /// A reduction with its reduction loops innermost, one output at a time.
    Plain(PlainPlan),
    /// A reduction with a row of accumulators, the contiguous dimension innermost.
    Row(RowPlan),
    /// A contraction with a tile of SIMD accumulators in registers.
    Gemm(GemmPlan),
    /// A depthwise window over zero-padded image planes.
    Plane(PlanePlan),
    /// A contraction vectorised along its output channels, the reduction in blocks.
    Channel(ChannelPlan),
    /// A cumulative reduction (CumSum): a running accumulator along one dimension.
    Scan(ScanPlan),
}

/// How a plan's outer iterations cover the positions of its stage's first `dims` output
/// dimensions (flattened): what a [`super::RowGroup`] runs of each member per instance.
///
/// Positions come in rows of `row` (the extent of the last of those dimensions). Where the
/// granule is at most a row, a row's positions go in granules of `granule` (its last granule may
/// be short: a register-blocked plan whose rows per tile do not divide the row), `per` outer
/// iterations each, and a row takes `row.div_ceil(granule) * per` iterations; a position at a
/// granule's start or a row's end maps to [`RowTrips::trip`]. Where the granule is larger (a
/// loop over fewer dimensions than the group's), it is a whole number of rows, and positions at
/// its multiples map to `p / granule * per`. The range repeats `repeats` times, `stride`
/// iterations apart (a register-blocked plan's column tiles and a depthwise plan's parts are its
/// slowest-varying outer index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowTrips {
    /// Positions per granule: an instance starts and ends at a granule's start (or a row's
    /// end).
    pub granule: usize,
    /// Positions per row (the extent of the last split dimension).
    pub row: usize,
    /// Outer iterations per granule.
    pub per: usize,
    /// Copies of the range, `stride` iterations apart.
    pub repeats: usize,
    /// Outer iterations between copies.
    pub stride: usize,
}

impl RowTrips {
    /// The first outer iteration of position `p` (a granule's start, or a row's end).
    pub fn trip(&self, p: usize) -> usize {
        if self.granule <= self.row {
            (p / self.row * self.row.div_ceil(self.granule) + (p % self.row).div_ceil(self.granule))
                * self.per
        } else {
            p / self.granule * self.per
        }
    }

    /// [`RowTrips::trip`] as C, of the C expression `p`.
    pub fn trip_c(&self, p: &str) -> String {
        let (g, n, per) = (self.granule, self.row, self.per);
        if g == 1 && per == 1 {
            p.to_string()
        } else if g == 1 {
            format!("{p} * {per}")
        } else if g <= n {
            format!(
                "({p} / {n} * {} + ({p} % {n} + {}) / {g}) * {per}",
                n.div_ceil(g),
                g - 1
            )
        } else {
            format!("{p} / {g} * {per}")
        }
    }

    /// Outer iterations of positions `[p0, p1)`, as `repeats` ranges.
    pub fn ranges(&self, p0: usize, p1: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (lo, hi) = (self.trip(p0), self.trip(p1));
        (0..self.repeats).map(move |t| (lo + t * self.stride, hi + t * self.stride))
    }
}

/// [`RowTrips`] of a flattened outer loop over the leading `nd` dimensions of `shape`, row-major,
/// `inner` iterations per position (tiles varying fastest).
fn leading_trips(shape: &[usize], nd: usize, dims: usize, inner: usize) -> RowTrips {
    let (granule, per) = if nd >= dims {
        (1, shape[dims..nd].iter().product::<usize>() * inner)
    } else {
        (shape[nd..dims].iter().product(), inner)
    };
    let rows: usize = shape[..dims].iter().product();
    RowTrips {
        granule,
        row: shape[dims - 1],
        per,
        repeats: 1,
        stride: rows / granule * per,
    }
}

/// [`RowTrips`] of an outer loop over the dimensions `outer` (row-major, in that order), the
/// jammed one counted in blocks of `jam.1` (its last block short when they do not divide it),
/// `inner` iterations per position, the whole repeated `repeats` times.
fn listed_trips(
    shape: &[usize],
    outer: &[usize],
    jam: Option<(usize, usize)>,
    dims: usize,
    inner: usize,
    repeats: usize,
) -> Option<RowTrips> {
    if outer.len() < dims || outer[..dims].iter().enumerate().any(|(j, &k)| j != k) {
        return None;
    }
    let (jk, jn) = jam.unwrap_or((usize::MAX, 1));
    let ext = |k: usize| {
        if k == jk {
            shape[k].div_ceil(jn)
        } else {
            shape[k]
        }
    };
    let per: usize = outer[dims..].iter().map(|&k| ext(k)).product::<usize>() * inner;
    let granule = match jam.map(|(k, _)| (k + 1).cmp(&dims)) {
        Some(std::cmp::Ordering::Less) => return None,
        Some(std::cmp::Ordering::Equal) => jn,
        _ => 1,
    };
    let row = shape[dims - 1];
    let outer_rows: usize = shape[..dims - 1].iter().product();
    Some(RowTrips {
        granule,
        row,
        per,
        repeats,
        stride: outer_rows * row.div_ceil(granule) * per,
    })
}

impl KernelPlan {
    /// How the plan's outer iterations cover the positions of the first `dims` dimensions of
    /// its stage's output `shape` ([`RowTrips`]); `None` when a block of those positions is not
    /// a set of whole outer iterations (a channel-vectorised plan's tasks are column groups,
    /// a register-blocked plan may vectorise along one of them).
    pub fn row_trips(&self, shape: &[usize], dims: usize) -> Option<RowTrips> {
        if dims == 0 || dims > shape.len() {
            return None;
        }
        let t = match self {
            KernelPlan::Injective(i) => leading_trips(shape, i.outer, dims, 1),
            KernelPlan::Window(w) => leading_trips(shape, w.outer, dims, 1),
            KernelPlan::Plain(x) => leading_trips(shape, x.outer, dims, 1),
            KernelPlan::Scan(x) => leading_trips(shape, x.outer, dims, 1),
            KernelPlan::Row(r) => {
                let tiles = shape[r.v].div_ceil(r.tile);
                listed_trips(shape, &r.outer, r.jam, dims, tiles, 1)?
            }
            KernelPlan::Gemm(g) => {
                let tiles = shape[g.v].div_ceil(g.lanes * g.vecs);
                listed_trips(shape, &g.outer, g.jam, dims, 1, tiles)?
            }
            KernelPlan::Plane(x) if x.chan => {
                let ncb = shape[1] / x.chan_block;
                match dims {
                    1 => RowTrips {
                        granule: 1,
                        row: shape[0],
                        per: ncb,
                        repeats: 1,
                        stride: shape[0] * ncb,
                    },
                    2 => RowTrips {
                        granule: x.chan_block,
                        row: shape[1],
                        per: 1,
                        repeats: 1,
                        stride: shape[0] * ncb,
                    },
                    _ => return None,
                }
            }
            KernelPlan::Plane(x) => {
                let planes = shape[0] * shape[1];
                let per = match dims {
                    1 => shape[1],
                    2 => 1,
                    _ => return None,
                };
                RowTrips {
                    granule: 1,
                    row: shape[dims - 1],
                    per,
                    repeats: x.parts,
                    stride: planes,
                }
            }
            KernelPlan::Channel(_) => return None,
        };
        // Every outer iteration is covered once.
        (t.repeats * t.stride == self.n_outer()).then_some(t)
    }
}

impl KernelPlan {
    /// The kind as one word (`elementwise`, `window`, `plain`, `row`, `register-blocked`,
    /// `depthwise`, `channel-vectorised`): what the pricer's rates and `explain` name.
    pub fn kind(&self) -> PlanKind {
        match self {
            KernelPlan::Injective(_) => PlanKind::Elementwise,
            KernelPlan::Window(_) => PlanKind::Window,
            KernelPlan::Plain(_) => PlanKind::Plain,
            KernelPlan::Row(_) => PlanKind::Row,
            KernelPlan::Gemm(_) => PlanKind::RegisterBlocked,
            KernelPlan::Plane(_) => PlanKind::Plane,
            KernelPlan::Channel(_) => PlanKind::Channel,
            KernelPlan::Scan(_) => PlanKind::Scan,
        }
    }

    /// Iterations of the flattened outer (parallel) loop: the tasks a `parallel_for` splits.
    pub fn n_outer(&self) -> usize {
        match self {
            KernelPlan::Injective(i) => i.n_outer,
            KernelPlan::Window(w) => w.n_outer,
            KernelPlan::Plain(x) => x.n_outer,
            KernelPlan::Row(r) => r.n_outer,
            KernelPlan::Gemm(g) => g.n_outer,
            KernelPlan::Plane(x) => x.n_outer,
            KernelPlan::Channel(c) => c.n_outer,
            KernelPlan::Scan(x) => x.n_outer,
        }
    }

    /// Whether its tasks run on the thread pool ([`InjectivePlan::parallel`] and the like).
    pub fn parallel(&self) -> bool {
        match self {
            KernelPlan::Injective(i) => i.parallel,
            KernelPlan::Window(w) => w.parallel,
            KernelPlan::Plain(x) => x.parallel,
            KernelPlan::Row(r) => r.parallel,
            KernelPlan::Gemm(g) => g.parallel,
            KernelPlan::Plane(x) => x.parallel,
            KernelPlan::Channel(c) => c.parallel,
            KernelPlan::Scan(x) => x.parallel,
        }
    }

    /// Sets whether its tasks run on the thread pool (the planner's thread split).
    pub fn set_parallel(&mut self, on: bool) {
        match self {
            KernelPlan::Injective(i) => i.parallel = on,
            KernelPlan::Window(w) => w.parallel = on,
            KernelPlan::Plain(x) => x.parallel = on,
            KernelPlan::Row(r) => r.parallel = on,
            KernelPlan::Gemm(g) => g.parallel = on,
            KernelPlan::Plane(x) => x.parallel = on,
            KernelPlan::Channel(c) => c.parallel = on,
            KernelPlan::Scan(x) => x.parallel = on,
        }
    }

    /// The kind and knobs the plan was realised from (legal for its stage: realising them
    /// again gives the same plan).
    pub fn choice(&self) -> PlanChoice {
        match self {
            KernelPlan::Injective(i) => PlanChoice::Elementwise { copy: i.copy },
            KernelPlan::Window(_) => PlanChoice::Window,
            KernelPlan::Plain(x) => PlanChoice::Plain {
                simd: x.simd,
                chains: x.chains as u8,
            },
            KernelPlan::Row(r) => PlanChoice::Row {
                jam: r.max_jam as u8,
                acc: r.acc,
            },
            KernelPlan::Gemm(g) => PlanChoice::Gemm {
                vecs: g.vecs as u8,
                rows: g.rows as u8,
                prefetch: g.prefetch_tiles as u8,
            },
            KernelPlan::Plane(x) => PlanChoice::Plane {
                parts: x.parts as u8,
                band: x.band as u16,
                flat: x.flat,
                chan: x.chan,
                prefetch: x.prefetch,
            },
            KernelPlan::Channel(c) => PlanChoice::Channel {
                vecs: c.vecs as u8,
                rows: c.rows as u8,
                kc: c.kc as u16,
                groups: c.n_groups as u16,
            },
            KernelPlan::Scan(_) => PlanChoice::Scan,
        }
    }

    /// The register tile's width in columns, for a register-blocked plan.
    pub fn tile_width(&self) -> Option<usize> {
        match self {
            KernelPlan::Gemm(g) => Some(g.vecs * g.lanes),
            _ => None,
        }
    }

    /// The plan with every buffer it names renumbered by `f`. A plan names its stage's
    /// operands by buffer id, as the stage's body does: the guards of injective, window and
    /// row plans (their bounds and their guarded value), a register-blocked plan's prefetched
    /// loads, a depthwise plan's input, plane and weight. So a stage whose operands are
    /// renumbered (a kernel cut out of its program into a program of its own) plans to its
    /// plan renumbered the same way, and only so: compare the two after this, not before.
    /// The expressions are rebuilt node for node, not simplified (unlike [`Expr::map_src`]):
    /// a planner builds some of them unsimplified, and the plan of the renumbered stage keeps
    /// them so.
    pub fn map_bufs(&self, f: &dyn Fn(BufId) -> BufId) -> KernelPlan {
        let e = |x: &Expr| rename_bufs(x, f);
        let window = |w: &Window| Window {
            bounds: w
                .bounds
                .iter()
                .map(|b| Bound {
                    num: e(&b.num),
                    ..b.clone()
                })
                .collect(),
            invariant: w.invariant.iter().map(e).collect(),
            value: e(&w.value),
        };
        match self {
            KernelPlan::Injective(i) => KernelPlan::Injective(InjectivePlan {
                guard: i.guard.as_ref().map(window),
                ..i.clone()
            }),
            KernelPlan::Window(w) => KernelPlan::Window(WindowPlan {
                window: window(&w.window),
                ..w.clone()
            }),
            KernelPlan::Plain(x) => KernelPlan::Plain(x.clone()),
            KernelPlan::Row(r) => KernelPlan::Row(RowPlan {
                guard: r.guard.as_ref().map(|g| Guard {
                    lo: g.lo.iter().map(e).collect(),
                    hi: g.hi.iter().map(e).collect(),
                    hoisted: g.hoisted.iter().map(e).collect(),
                    value: e(&g.value),
                }),
                ..r.clone()
            }),
            KernelPlan::Gemm(g) => KernelPlan::Gemm(GemmPlan {
                prefetch: g.prefetch.iter().map(e).collect(),
                ..g.clone()
            }),
            KernelPlan::Plane(x) => KernelPlan::Plane(PlanePlan {
                x: f(x.x),
                plane: e(&x.plane),
                weight: e(&x.weight),
                ..x.clone()
            }),
            KernelPlan::Channel(c) => KernelPlan::Channel(c.clone()),
            KernelPlan::Scan(x) => KernelPlan::Scan(ScanPlan {
                value: e(&x.value),
                ..x.clone()
            }),
        }
    }
}

/// `e` with every `Src::Buf(b)` it loads from renamed `Src::Buf(f(b))`, node for node.
fn rename_bufs(e: &Expr, f: &dyn Fn(BufId) -> BufId) -> Expr {
    let src = |s: Src| match s {
        Src::Buf(b) => Src::Buf(f(b)),
        s => s,
    };
    let sub = |x: &Expr| Box::new(rename_bufs(x, f));
    match e {
        Expr::Load(s, idx) => Expr::Load(src(*s), idx.iter().map(|i| rename_bufs(i, f)).collect()),
        Expr::LoadFlat(s, i) => Expr::LoadFlat(src(*s), sub(i)),
        Expr::Un(op, a) => Expr::Un(*op, sub(a)),
        Expr::Cast(d, a) => Expr::Cast(*d, sub(a)),
        Expr::Bin(op, a, b) => Expr::Bin(*op, sub(a), sub(b)),
        Expr::Select(c, a, b) => Expr::Select(sub(c), sub(a), sub(b)),
        Expr::Var(_) | Expr::RVar(_) | Expr::Acc | Expr::Const(_) => e.clone(),
    }
}

/// The kinds of [`KernelPlan`], without their knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanKind {
    /// [`KernelPlan::Injective`].
    Elementwise,
    /// [`KernelPlan::Window`].
    Window,
    /// [`KernelPlan::Plain`].
    Plain,
    /// [`KernelPlan::Row`].
    Row,
    /// [`KernelPlan::Gemm`].
    RegisterBlocked,
    /// [`KernelPlan::Plane`].
    Plane,
    /// [`KernelPlan::Channel`].
    Channel,
    /// [`KernelPlan::Scan`].
    Scan,
}

/// What a plan is made of that a tuner, a test's seed or the cost cache may choose: its kind
/// and that kind's knobs. The planner realises a choice for a stage (`schedule::plan_stage`):
/// every knob legalised to what fits the stage (a flag whose condition does not hold is off),
/// and the default plan where the kind itself does not fit. Its text (`register-blocked vecs=3
/// rows=8 prefetch=0`) is the part of a plan's one-line text before ` | `; it parses back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanChoice {
    /// [`KernelPlan::Injective`]: `copy`, a guarded stride-1 f32 load is copied in whole
    /// vectors.
    Elementwise {
        /// Copy the guarded range in whole vectors.
        copy: bool,
    },
    /// [`KernelPlan::Window`] (no knobs).
    Window,
    /// [`KernelPlan::Plain`].
    Plain {
        /// Vectorise the innermost reduction loop (`#pragma omp simd`).
        simd: bool,
        /// Independent vector accumulators of a vectorised reduction (1..=8; 1 is one).
        chains: u8,
    },
    /// [`KernelPlan::Row`].
    Row {
        /// Rows reduced together (1..=8; 1 is none).
        jam: u8,
        /// Bytes of accumulators one tile keeps (64..=65536).
        acc: u32,
    },
    /// [`KernelPlan::Gemm`].
    Gemm {
        /// Vectors per tile row (1..=4).
        vecs: u8,
        /// Rows per tile (1..=8).
        rows: u8,
        /// Prefetch streaming row loads this many tiles ahead (0..=4; 0 is none).
        prefetch: u8,
    },
    /// [`KernelPlan::Plane`].
    Plane {
        /// Parts of each plane's rows (1, 2, 4 or 8).
        parts: u8,
        /// Output rows per band (1..=65535).
        band: u16,
        /// Narrow rows run flat.
        flat: bool,
        /// Channel-blocked.
        chan: bool,
        /// Prefetch the next task's plane.
        prefetch: bool,
    },
    /// [`KernelPlan::Channel`].
    Channel {
        /// Vectors of channels per tile (1..=4).
        vecs: u8,
        /// Columns per tile (1..=24).
        rows: u8,
        /// Reduction block (1..=1024).
        kc: u16,
        /// Column groups: the thread split of each channel tile's columns into tasks
        /// (1..=4096).
        groups: u16,
    },
    /// [`KernelPlan::Scan`] (no knobs).
    Scan,
}

/// An injective stage's loop nest.
#[derive(Clone, Debug, PartialEq)]
pub struct InjectivePlan {
    /// Leading output dimensions flattened into the outer (parallel) loop.
    pub outer: usize,
    /// Their iterations.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// The last dimension iterated as two loops of `w` (it is read only as `i / w` and
    /// `i % w`: an im2col over a flattened image), so no division is left per element.
    pub split: Option<usize>,
    /// A body `guard ? value : 0` with the guard affine in the innermost loop variable
    /// (padding): that loop runs as three ranges (zeros, values, zeros).
    pub guard: Option<Window>,
    /// The guarded value is an f32 load walking its source with stride 1: its range is copied
    /// in whole vectors, the last one overlapping.
    pub copy: bool,
    /// The inner dimensions from this one on run as one flat loop (every load walks them as
    /// one row-major run: an element-wise stage over an image's rows and columns), so that the
    /// loop is long, its vector constants are set up once and no short row leaves a remainder.
    pub flat: Option<usize>,
    /// A transpose: the body reads a source with stride 1 along the last outer dimension and
    /// with a long stride along the last one. This many consecutive positions of the last
    /// outer dimension run together, innermost, so that every line of the source read is used
    /// whole instead of one element of it (the tasks are unchanged: positions of the outer
    /// loop, a run ending at a block's or the task's end).
    pub block: Option<usize>,
}

/// A padded window reduction's loops.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowPlan {
    /// Leading output dimensions flattened into the outer loop.
    pub outer: usize,
    /// Their iterations.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// The guard split for the last dimension.
    pub window: Window,
}

/// A cumulative reduction (CumSum): output `i` along `axis` reduces the stage's value at the
/// positions up to `i` (from `i` to the end when `reverse`; `i` itself excluded when
/// `exclusive`). One running accumulator per position of the dimensions after `axis`, walked
/// along it: one operation per element instead of a reduction per element.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanPlan {
    /// The dimension scanned; the dimensions before it are the outer (parallel) loop.
    pub axis: usize,
    /// Leading output dimensions flattened into the outer loop (`axis` of them).
    pub outer: usize,
    /// Their iterations.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// Walk from the end.
    pub reverse: bool,
    /// An output excludes its own position.
    pub exclusive: bool,
    /// The value at position `Var(axis)` (the stage's masked value, its reduction variable
    /// replaced).
    pub value: Expr,
}

/// A reduction computed one output at a time.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainPlan {
    /// Leading output dimensions flattened into the outer loop.
    pub outer: usize,
    /// Their iterations.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// The innermost reduction loop is vectorised (`#pragma omp simd`).
    pub simd: bool,
    /// Independent accumulators of a vectorised reduction: the innermost reduction runs in
    /// blocks of `chains` vectors, each lane of each vector summing on its own, combined by a
    /// tree once the row is done. One vector accumulator makes a row's reduction a chain of
    /// dependent adds, one a vector (its latency, not the adder's throughput, is the bound).
    pub chains: usize,
}

/// A range check `s * v + rest OP bound`, as `v >= lo` (lower) or `v < hi` (upper) with
/// `lo`/`hi` = ceil or floor of `(bound - rest) / s`.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// A lower bound (`v >=`), else an exclusive upper bound (`v <`).
    pub lower: bool,
    /// `bound - rest`.
    pub num: Expr,
    /// The positive coefficient `s`.
    pub s: i64,
    /// Round the quotient up (else down and add one).
    pub ceil: bool,
}

/// The guard of a padded window split for one loop variable.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Range checks on the variable.
    pub bounds: Vec<Bound>,
    /// Conjuncts without it.
    pub invariant: Vec<Expr>,
    /// The body without its guard.
    pub value: Expr,
}

/// Bounds on the row variable implied by a guard `select(cond, value, identity)`: the loop runs
/// over `[lo, hi)` only, and conjuncts that do not involve the row variable are hoisted.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    /// Lower bounds (the loop starts at their maximum).
    pub lo: Vec<Expr>,
    /// Exclusive upper bounds (it ends at their minimum).
    pub hi: Vec<Expr>,
    /// Conjuncts free of the row variable, tested once per row.
    pub hoisted: Vec<Expr>,
    /// The body without its guard.
    pub value: Expr,
}

/// The row-reduction plan: the contiguous last output dimension innermost with a row of
/// accumulators, optionally several rows at once along a dimension the contiguous loads do not
/// depend on ("unroll and jam", so each loaded row is reused), and guards turned into loop
/// bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct RowPlan {
    /// The row dimension (the last).
    pub v: usize,
    /// The jammed dimension and factor.
    pub jam: Option<(usize, usize)>,
    /// The most rows jammed (the knob; `jam` is the largest factor up to it that fits).
    pub max_jam: usize,
    /// Bytes of accumulators a tile may keep (the knob `tile` follows from).
    pub acc: u32,
    /// Row elements per tile (the accumulators of one tile stay in L1).
    pub tile: usize,
    /// Dimensions of the flattened outer loop, outermost first (the jammed one counts in
    /// blocks).
    pub outer: Vec<usize>,
    /// Iterations of the outer loop.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// The guard turned into loop bounds, if the body has one.
    pub guard: Option<Guard>,
}

/// The register-blocked plan for contraction-like stages (matmul, im2col convolution): a tile
/// of `rows` × `vecs` SIMD vectors of accumulators stays in registers while the reduction runs;
/// loads along the row are vector loads, everything else is a scalar broadcast.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmPlan {
    /// The row dimension (the last, vectorised).
    pub v: usize,
    /// Jammed dimension and rows per tile.
    pub jam: Option<(usize, usize)>,
    /// The most rows per tile (the knob; `jam` follows from it).
    pub rows: usize,
    /// Rows of the jammed dimension's last block when the rows per tile do not divide it (0
    /// when they do): that block runs the same code for fewer rows.
    pub jam_rem: usize,
    /// f32 lanes of a vector.
    pub lanes: usize,
    /// Vectors per tile row.
    pub vecs: usize,
    /// Dimensions of the flattened outer loop (the jammed one last).
    pub outer: Vec<usize>,
    /// Iterations of the outer loop.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// The row loads whose tile `prefetch_tiles` ahead each task prefetches; empty when none
    /// is worth it.
    pub prefetch: Vec<Expr>,
    /// How many tiles ahead the prefetches reach (1: the next tile; 0 when none).
    pub prefetch_tiles: usize,
}

/// One spatial axis of a depthwise window: input index `stride * i + dilation * r + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    /// Output extent.
    pub out: usize,
    /// Input extent.
    pub input: usize,
    /// The output's step in the input.
    pub stride: usize,
    /// The taps' step in the input.
    pub dilation: usize,
    /// Taps (the reduction extent).
    pub taps: usize,
    /// The reduction variable of the taps.
    pub rvar: u32,
    /// Constant offset (minus the leading padding).
    pub offset: i64,
}

impl Axis {
    /// Input positions one band of `rows` outputs spans.
    pub fn span(&self, rows: usize) -> usize {
        (rows - 1) * self.stride + (self.taps - 1) * self.dilation + 1
    }

    /// Padded positions per phase of the stride: position `p` lies at `p / stride` of phase
    /// `p % stride`.
    pub fn phase_len(&self) -> usize {
        self.span(self.out).div_ceil(self.stride)
    }
}

/// The plan of a depthwise window stage over whole image planes (`codegen/c/plane.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct PlanePlan {
    /// The input buffer.
    pub x: BufId,
    /// The input plane's flat offset with its spatial indices at 0, over `i0`, `i1`.
    pub plane: Expr,
    /// The weight (the factor that does not read `x`).
    pub weight: Expr,
    /// Reduction variables of extent 1 (set to 0).
    pub unit_rvars: Vec<u32>,
    /// The rows' axis.
    pub h: Axis,
    /// The columns' axis.
    pub w: Axis,
    /// Parts of each plane's output rows, each its own task.
    pub parts: usize,
    /// Output rows per part (the last part may have fewer).
    pub part_rows: usize,
    /// Output rows per band (within a part).
    pub band: usize,
    /// Narrow rows at unit strides with an epilogue that reads no spatial index: the band is
    /// computed as one flat run of whole vectors over the padded rows, then its rows are
    /// copied out.
    pub flat: bool,
    /// Channel-blocked: a task takes a block of channels, transposes their padded planes into
    /// a scratch of pixels, computes every output as vectors along the channels and transposes
    /// the outputs back in registers.
    pub chan: bool,
    /// Channels per task of a channel-blocked plan.
    pub chan_block: usize,
    /// Each task prefetches the next task's input plane while it copies its own.
    pub prefetch: bool,
    /// Outer tasks: parts of output planes (`parts * shape[0] * shape[1]`), part-major; or
    /// blocks of channels (`shape[0] * shape[1] / chan_block`).
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
}

/// The plan of a channel-vectorised contraction (`codegen/c/channel.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelPlan {
    /// The channel dimension (vectorised).
    pub c: usize,
    /// The row dimension (jammed).
    pub row: usize,
    /// f32 lanes of a vector.
    pub lanes: usize,
    /// Vectors of channels per tile.
    pub vecs: usize,
    /// Columns per register tile.
    pub rows: usize,
    /// Reduction block.
    pub kc: usize,
    /// Columns per task (a multiple of `rows`, but for the last group).
    pub group: usize,
    /// Tiles of channels.
    pub n_tiles: usize,
    /// Column groups.
    pub n_groups: usize,
    /// Tasks: every other dimension, the channel tiles, the column groups.
    pub n_outer: usize,
    /// Whether the tasks run on the thread pool (`parallel_for`); else the calling thread runs
    /// them all (work too small to pay for the fork).
    pub parallel: bool,
    /// Two columns a vector: eight channels (`lanes` 8) in a variant of sixteen lanes, lane
    /// `2 * c + t` holding channel `c` of the pair's column `t`, each pair of adjacent inputs
    /// one 64-bit broadcast and each weight vector's lanes doubled; half the multiply-adds of
    /// eight-lane vectors. The sums go back to the unpaired scratch before the epilogue.
    pub paired: bool,
}

fn dims(o: &[usize]) -> String {
    o.iter()
        .map(|k| format!("i{k}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn jam(j: Option<(usize, usize)>) -> String {
    j.map_or("none".to_string(), |(k, n)| format!("i{k}x{n}"))
}

/// One line: the choice (kind and knobs, [`PlanChoice`]'s text), then after ` | ` what follows
/// from it for the stage: for reductions the vectorised dimension, the jammed dimension and
/// factor, the tile, and the dimensions of the flattened outer (parallel) loop with its trip
/// count. What `explain`, the goldens, the generated C and the cost cache show.
impl fmt::Display for KernelPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} | ", self.choice())?;
        match self {
            KernelPlan::Injective(i) => {
                write!(f, "outer {}", i.outer)?;
                if let Some(w) = i.split {
                    write!(f, " split {w}")?;
                }
                if i.guard.is_some() {
                    write!(f, " guarded")?;
                }
                if let Some(k) = i.flat {
                    write!(f, " flat from {k}")?;
                }
                if let Some(b) = i.block {
                    write!(f, " block {b}")?;
                }
                Ok(())
            }
            KernelPlan::Window(w) => write!(f, "outer {}", w.outer),
            KernelPlan::Plain(x) => write!(f, "outer {}", x.outer),
            KernelPlan::Row(r) => write!(
                f,
                "vector i{} jam {} tile {} outer [{}] trips {}{}",
                r.v,
                jam(r.jam),
                r.tile,
                dims(&r.outer),
                r.n_outer,
                if r.guard.is_some() { " guarded" } else { "" }
            ),
            KernelPlan::Gemm(g) => {
                write!(
                    f,
                    "vector i{} lanes {}x{} jam {}",
                    g.v,
                    g.vecs,
                    g.lanes,
                    jam(g.jam)
                )?;
                if g.jam_rem > 0 {
                    write!(f, " last {}", g.jam_rem)?;
                }
                write!(f, " outer [{}] trips {}", dims(&g.outer), g.n_outer)
            }
            KernelPlan::Plane(x) if x.chan => write!(
                f,
                "channels {} taps {}x{} stride {}x{} outer [i0,i1] trips {}",
                x.chan_block, x.h.taps, x.w.taps, x.h.stride, x.w.stride, x.n_outer
            ),
            KernelPlan::Plane(x) => {
                write!(
                    f,
                    "taps {}x{} stride {}x{}",
                    x.h.taps, x.w.taps, x.h.stride, x.w.stride
                )?;
                if x.parts > 1 {
                    write!(f, " parts {}x{}", x.parts, x.part_rows)?;
                }
                write!(f, " outer [i0,i1] trips {}", x.n_outer)
            }
            KernelPlan::Channel(c) => write!(
                f,
                "vector i{} lanes {}x{} jam i{}x{} tasks {}x{} columns {}{}",
                c.c,
                c.vecs,
                c.lanes,
                c.row,
                c.rows,
                c.n_tiles,
                c.n_groups,
                c.group,
                if c.paired { " paired" } else { "" }
            ),
            KernelPlan::Scan(x) => write!(
                f,
                "along i{}{}{} outer {}",
                x.axis,
                if x.reverse { " reversed" } else { "" },
                if x.exclusive { " exclusive" } else { "" },
                x.outer
            ),
        }?;
        // The thread split: several tasks run by the calling thread alone.
        if self.n_outer() > 1 && !self.parallel() {
            write!(f, " serial")?;
        }
        Ok(())
    }
}

impl PlanChoice {
    /// The kind's name in text.
    pub fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    /// The kind without its knobs.
    pub fn kind(&self) -> PlanKind {
        match self {
            PlanChoice::Elementwise { .. } => PlanKind::Elementwise,
            PlanChoice::Window => PlanKind::Window,
            PlanChoice::Plain { .. } => PlanKind::Plain,
            PlanChoice::Row { .. } => PlanKind::Row,
            PlanChoice::Gemm { .. } => PlanKind::RegisterBlocked,
            PlanChoice::Plane { .. } => PlanKind::Plane,
            PlanChoice::Channel { .. } => PlanKind::Channel,
            PlanChoice::Scan => PlanKind::Scan,
        }
    }

    /// The knobs as `(name, value)` pairs (flags as 0 and 1), in text order.
    pub fn knobs(&self) -> Vec<(&'static str, u32)> {
        let b = u32::from;
        match *self {
            PlanChoice::Elementwise { copy } => vec![("copy", b(copy))],
            PlanChoice::Window => vec![],
            PlanChoice::Plain { simd, chains } => {
                vec![("simd", b(simd)), ("chains", chains.into())]
            }
            PlanChoice::Row { jam, acc } => vec![("jam", jam.into()), ("acc", acc)],
            PlanChoice::Gemm {
                vecs,
                rows,
                prefetch,
            } => vec![
                ("vecs", vecs.into()),
                ("rows", rows.into()),
                ("prefetch", prefetch.into()),
            ],
            PlanChoice::Plane {
                parts,
                band,
                flat,
                chan,
                prefetch,
            } => vec![
                ("parts", parts.into()),
                ("band", band.into()),
                ("flat", b(flat)),
                ("chan", b(chan)),
                ("prefetch", b(prefetch)),
            ],
            PlanChoice::Channel {
                vecs,
                rows,
                kc,
                groups,
            } => vec![
                ("vecs", vecs.into()),
                ("rows", rows.into()),
                ("kc", kc.into()),
                ("groups", groups.into()),
            ],
            PlanChoice::Scan => vec![],
        }
    }

    /// The legal range of every knob of a kind, by name (flags 0..=1). What a tuner searches
    /// and a seed draws from; the planner legalises a knob to what fits the stage.
    pub fn ranges(kind: PlanKind) -> &'static [(&'static str, u32, u32)] {
        match kind {
            PlanKind::Elementwise => &[("copy", 0, 1)],
            PlanKind::Window => &[],
            PlanKind::Plain => &[("simd", 0, 1), ("chains", 1, 8)],
            PlanKind::Row => &[("jam", 1, 8), ("acc", 64, 65536)],
            PlanKind::RegisterBlocked => &[("vecs", 1, 4), ("rows", 1, 8), ("prefetch", 0, 4)],
            PlanKind::Plane => &[
                ("parts", 1, 8),
                ("band", 1, 65535),
                ("flat", 0, 1),
                ("chan", 0, 1),
                ("prefetch", 0, 1),
            ],
            PlanKind::Channel => &[
                ("vecs", 1, 4),
                ("rows", 1, 24),
                ("kc", 1, 1024),
                ("groups", 1, 4096),
            ],
            PlanKind::Scan => &[],
        }
    }

    /// The choice of `kind` with the knobs `value` gives by name (each in its range; none
    /// missing).
    pub fn from_knobs(kind: PlanKind, value: &dyn Fn(&str) -> u32) -> PlanChoice {
        let flag = |k: &str| value(k) != 0;
        match kind {
            PlanKind::Elementwise => PlanChoice::Elementwise { copy: flag("copy") },
            PlanKind::Window => PlanChoice::Window,
            PlanKind::Plain => PlanChoice::Plain {
                simd: flag("simd"),
                chains: value("chains") as u8,
            },
            PlanKind::Row => PlanChoice::Row {
                jam: value("jam") as u8,
                acc: value("acc"),
            },
            PlanKind::RegisterBlocked => PlanChoice::Gemm {
                vecs: value("vecs") as u8,
                rows: value("rows") as u8,
                prefetch: value("prefetch") as u8,
            },
            PlanKind::Plane => PlanChoice::Plane {
                parts: value("parts") as u8,
                band: value("band") as u16,
                flat: flag("flat"),
                chan: flag("chan"),
                prefetch: flag("prefetch"),
            },
            PlanKind::Channel => PlanChoice::Channel {
                vecs: value("vecs") as u8,
                rows: value("rows") as u8,
                kc: value("kc") as u16,
                groups: value("groups") as u16,
            },
            PlanKind::Scan => PlanChoice::Scan,
        }
    }
}

impl PlanKind {
    /// The kind's name in a plan's text.
    pub fn name(self) -> &'static str {
        match self {
            PlanKind::Elementwise => "elementwise",
            PlanKind::Window => "window",
            PlanKind::Plain => "plain",
            PlanKind::Row => "row",
            PlanKind::RegisterBlocked => "register-blocked",
            PlanKind::Plane => "depthwise",
            PlanKind::Channel => "channel-vectorised",
            PlanKind::Scan => "scan",
        }
    }

    /// Every kind.
    pub const ALL: [PlanKind; 8] = [
        PlanKind::Elementwise,
        PlanKind::Window,
        PlanKind::Plain,
        PlanKind::Row,
        PlanKind::RegisterBlocked,
        PlanKind::Plane,
        PlanKind::Channel,
        PlanKind::Scan,
    ];
}

/// `register-blocked vecs=3 rows=8 prefetch=0`: the kind, then every knob.
impl fmt::Display for PlanChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind_name())?;
        for (k, v) in self.knobs() {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// Reads a choice back from its text or from a whole plan's line (what follows ` | ` is what
/// the choice gives a stage, not a choice, and is not read). Every knob of the kind must be
/// present once and in its range.
impl std::str::FromStr for PlanChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<PlanChoice, String> {
        let text = s.split(" | ").next().unwrap_or("").trim();
        let mut words = text.split_whitespace();
        let name = words.next().ok_or("an empty plan")?;
        let kind = PlanKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown plan kind `{name}` (known: elementwise, window, plain, row, register-blocked, depthwise, channel-vectorised)"
                )
            })?;
        let ranges = PlanChoice::ranges(kind);
        let mut values: Vec<Option<u32>> = vec![None; ranges.len()];
        for part in words {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("plan knob `{part}` is not `name=value`"))?;
            let at = ranges.iter().position(|r| r.0 == k).ok_or_else(|| {
                let known: Vec<&str> = ranges.iter().map(|r| r.0).collect();
                format!(
                    "unknown knob `{k}` of a {name} plan (known: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            })?;
            let v: u32 = v
                .parse()
                .map_err(|_| format!("plan knob `{k}` has a non-integer value `{v}`"))?;
            let (_, lo, hi) = ranges[at];
            if !(lo..=hi).contains(&v) {
                return Err(format!(
                    "plan knob `{k}={v}` is out of its range {lo}..={hi}"
                ));
            }
            if values[at].replace(v).is_some() {
                return Err(format!("plan knob `{k}` given twice"));
            }
        }
        if let Some(at) = values.iter().position(Option::is_none) {
            return Err(format!(
                "the {name} plan `{text}` lacks its knob `{}`",
                ranges[at].0
            ));
        }
        Ok(PlanChoice::from_knobs(kind, &|k| {
            let at = ranges
                .iter()
                .position(|r| r.0 == k)
                .expect("a knob of the kind");
            values[at].expect("checked")
        }))
    }
}
