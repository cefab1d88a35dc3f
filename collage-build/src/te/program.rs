//! A whole model as buffers: run-time inputs, constants, and stages in topological order.
use std::fmt;
use std::sync::Arc;

use super::{KernelPlan, Src, Stage};
use crate::tensor::{DType, Tensor, TensorType};

/// Index of a buffer in a [`Program`] (`Src::Buf`). Prints as the bare number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufId(pub u32);

impl BufId {
    /// The buffer with index `i` (which must fit in a `u32`).
    pub fn new(i: usize) -> BufId {
        BufId(u32::try_from(i).expect("buffer index overflows u32"))
    }

    /// The index of the buffer in [`Program::bufs`] (and every vector kept by buffer).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BufId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What a buffer holds.
#[derive(Clone, Debug)]
pub enum BufKind {
    /// Run-time input `i` of the model.
    Input(usize),
    /// A compile-time constant (embedded weight).
    Const(Arc<Tensor>),
    /// Computed by a stage.
    Stage(Stage),
    /// Removed by fusion; nothing reads it any more.
    Dead,
}

/// A buffer of a [`Program`].
#[derive(Clone, Debug)]
pub struct Buffer {
    /// The value's name, for messages and comments.
    pub name: String,
    /// Its type.
    pub ty: TensorType,
    /// Its contents.
    pub kind: BufKind,
    /// For constants: stored in column panels (see [`PANEL`]) instead of row-major.
    pub packed: bool,
}

/// Width of the column panels of packed constants: a logical `[rows, n]` matrix (the last dimension
/// against all others) is stored as `[ceil(n / PANEL)][rows][PANEL]`, zero-padded, so that a
/// register-blocked kernel reads each panel row contiguously.
pub const PANEL: usize = 64;

impl Buffer {
    /// Bytes the buffer occupies in memory (packed buffers are padded to whole panels).
    pub fn stored_size(&self) -> usize {
        if !self.packed {
            return self.ty.bytes();
        }
        let n = *self.ty.shape.last().unwrap_or(&1);
        let rows = self.ty.numel() / n.max(1);
        n.div_ceil(PANEL) * rows * PANEL * self.ty.dtype.size()
    }

    /// The stored bytes of a constant: row-major, or packed in panels.
    pub fn stored_bytes(&self) -> Option<Vec<u8>> {
        let BufKind::Const(t) = &self.kind else {
            return None;
        };
        if !self.packed {
            return Some(t.data.clone());
        }
        let n = *t.ty.shape.last().unwrap_or(&1);
        let rows = t.numel() / n.max(1);
        let es = t.ty.dtype.size();
        let panels = n.div_ceil(PANEL);
        let mut out = vec![0u8; panels * rows * PANEL * es];
        for r in 0..rows {
            for c in 0..n {
                let src = (r * n + c) * es;
                let dst = ((c / PANEL) * rows * PANEL + r * PANEL + c % PANEL) * es;
                out[dst..dst + es].copy_from_slice(&t.data[src..src + es]);
            }
        }
        Some(out)
    }
}

/// The lowered model: every buffer, its inputs and outputs. Stage buffers only read buffers with a
/// lower index.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// All buffers.
    pub bufs: Vec<Buffer>,
    /// The buffers of the model's inputs, in signature order.
    pub inputs: Vec<BufId>,
    /// The buffers of the model's outputs, in signature order.
    pub outputs: Vec<BufId>,
    /// The names of the model's inputs and outputs.
    pub input_names: Vec<String>,
    /// The names of the model's outputs.
    pub output_names: Vec<String>,
    /// Stages fused into groups that run one instance at a time (`schedule::group` plans them,
    /// the code generator emits each as one parallel loop).
    pub groups: Vec<Group>,
    /// Stages run as one loop of instances split along their shared leading output dimensions
    /// (`schedule::group::plan_row_groups`): attention rows, a normalisation's passes.
    pub row_groups: Vec<RowGroup>,
    /// The kernel plan of every stage, by buffer, one per variant of [`super::Isa::ALL`] (empty
    /// for buffers that are not stages, for library calls with nothing left to generate, and
    /// before `schedule::plan::plan_program` has run). The code generator prints these.
    pub plans: Vec<Vec<KernelPlan>>,
    /// The library GEMM calls whose blocks run on the thread pool (the others run on the calling
    /// thread): their thread split, chosen with the plans (`codegen::plan`), printed by the
    /// emitter.
    pub parallel_calls: Vec<BufId>,
    /// What fusion computes at registers (`te::fuse`): `(b, k)` when stage `b`'s values are
    /// computed inside kernel `k` (inlined into its loops, or `k`'s epilogue applied to `b`'s
    /// accumulator) instead of read from `b`'s buffer; sorted. The tile graph's register
    /// edges (`schedule::tiles`).
    pub absorbed: Vec<(BufId, BufId)>,
}

/// Two stages that run as one loop of instances (GraphTurbo §3–4): each instance is a range of
/// the consumer's output columns (its last dimension); the producer computes, into a scratch
/// slot of the arena, the part of its output the instance reads, and the consumer then computes
/// the instance from that slot while it is still in the core's cache. Instances are split over
/// at most `slots` threads at once. The producer's buffer holds `slots` slots instead of its
/// whole output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The stage whose output lives only in scratch slots: an injective stage stored in column
    /// panels ([`PANEL`]), read by nothing but the consumer.
    pub producer: BufId,
    /// The register-blocked contraction that reads the producer along its row.
    pub consumer: BufId,
    /// Columns per instance: a multiple of [`PANEL`] and of the consumer's register tile.
    pub cols: usize,
    /// Instances (the consumer's columns over `cols`, rounded up).
    pub instances: usize,
    /// Scratch slots: at most this many instances are in flight at once.
    pub slots: usize,
}

impl Group {
    /// Bytes of one slot: the producer's panels for one instance.
    pub fn slot_bytes(&self, producer: &Buffer) -> usize {
        let n = *producer.ty.shape.last().unwrap_or(&1);
        let rows = producer.ty.numel() / n.max(1);
        rows * self.cols * producer.ty.dtype.size()
    }
}

/// Stages that run as one loop of instances split along the leading output dimensions they
/// share (GraphTurbo §3–4; Welder's tiles connected below memory): every member reads the
/// members before it only at its own position of those dimensions (`x[i0, i1, i2, ..]` for an
/// output `[i0, i1, i2, ..]`), so an instance — a block of `block` consecutive positions of the
/// flattened leading dimensions — runs each member in order over its block alone, and a member's
/// output that nothing outside the group reads lives only in a per-thread scratch slot of the
/// arena (`scratch`), never in a full-size buffer. The scores of an attention (batch, head and
/// query rows; the keys whole) and the mean, variance and normalisation of a LayerNorm (rows of
/// tokens) are such groups. The group runs where its last member stood; the stages between its
/// members that are not members read none of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// The members, in program order (at least two).
    pub stages: Vec<BufId>,
    /// Leading output dimensions the members share and are split along.
    pub dims: usize,
    /// Positions of those dimensions, flattened (their product).
    pub rows: usize,
    /// Positions of the last of them (a row).
    pub row: usize,
    /// Positions per instance ([`super::KernelPlan::row_trips`]): below a row, a multiple of
    /// every member's granule in every variant, the row cut in chunks of `block` (its last chunk
    /// may be short); else a whole number of rows (and of every larger granule), the last
    /// instance possibly short.
    pub block: usize,
    /// Instances: rows times chunks per row, or `rows` over `block`, rounded up.
    pub instances: usize,
    /// Scratch slots: at most this many instances are in flight at once.
    pub slots: usize,
    /// Members' outputs read by members only: they hold `slots` slots of one instance each.
    pub scratch: Vec<BufId>,
    /// A band group's split along image rows (`schedule::bands`), where `dims` is 0, `rows`
    /// and `row` are the last member's output rows and `block` its rows per instance; `None`
    /// for a split along leading dimensions.
    pub band: Option<Band>,
}

/// How a band group (a [`RowGroup`] split along the rows of an image, `schedule::bands`) cuts
/// its members: the last is a depthwise window over `[N, C, H, W]` planes computing a band of
/// `block` output rows of every plane per instance; the first, a pointwise stage over the same
/// buffer's flattened pixels `[N, C, H * W]`, computes the input rows that band's window reads
/// (its halo recomputed by the neighbouring instance) into a scratch slot of `pixels` pixels per
/// plane, addressed from the band's first input pixel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// The window's rows: output extent, input extent, stride, span of the taps, offset.
    pub axis: super::plan::Axis,
    /// Pixels per input row (the image's width).
    pub width: usize,
    /// Pixels per plane of one scratch slot: the most input rows a band reads, times `width`.
    pub pixels: usize,
}

impl Band {
    /// The input rows `[lo, hi)` the window reads for output rows `[y0, y1)`, clamped to the
    /// image.
    pub fn input_rows(&self, y0: usize, y1: usize) -> (usize, usize) {
        let a = &self.axis;
        let lo = (y0 as i64 * a.stride as i64 + a.offset).max(0);
        let hi =
            ((y1 as i64 - 1) * a.stride as i64 + a.offset + a.span(1) as i64).min(a.input as i64);
        (lo as usize, hi.max(lo) as usize)
    }
}

impl RowGroup {
    /// Bytes of one slot of scratch buffer `b` (one instance's rows of it, or a band's input
    /// rows of every plane).
    pub fn slot_bytes(&self, b: &Buffer) -> usize {
        if let Some(band) = &self.band {
            let planes = b.ty.numel() / (band.axis.input * band.width).max(1);
            return planes * band.pixels * b.ty.dtype.size();
        }
        b.ty.numel() / self.rows.max(1) * self.block * b.ty.dtype.size()
    }

    /// Chunks per row when an instance is a chunk of a row, else `None`.
    pub fn chunks(&self) -> Option<usize> {
        (self.block < self.row).then(|| self.row.div_ceil(self.block))
    }

    /// The positions `[p0, p1)` of instance `q`.
    pub fn positions(&self, q: usize) -> (usize, usize) {
        match self.chunks() {
            Some(c) => {
                let (h, k) = (q / c, q % c);
                let start = h * self.row;
                (
                    start + k * self.block,
                    start + (k * self.block + self.block).min(self.row),
                )
            }
            None => (q * self.block, (q * self.block + self.block).min(self.rows)),
        }
    }

    /// The last member: where the group runs.
    pub fn last(&self) -> BufId {
        *self.stages.last().expect("a group has members")
    }
}

impl Program {
    /// The row group stage `b` is a member of, if any.
    pub fn row_group_of(&self, b: BufId) -> Option<&RowGroup> {
        self.row_groups.iter().find(|g| g.stages.contains(&b))
    }

    /// Adds a buffer.
    pub fn push(&mut self, name: impl Into<String>, ty: TensorType, kind: BufKind) -> BufId {
        self.bufs.push(Buffer {
            name: name.into(),
            ty,
            kind,
            packed: false,
        });
        BufId::new(self.bufs.len() - 1)
    }

    /// The id of every buffer, in order.
    pub fn buf_ids(&self) -> impl Iterator<Item = BufId> {
        (0..self.bufs.len()).map(BufId::new)
    }

    /// The element type of a source (which must be `Src::Buf`).
    pub fn dtype(&self, s: Src) -> DType {
        match s {
            Src::Buf(b) => self.bufs[b.index()].ty.dtype,
            other => panic!("unresolved source {other:?} in a program"),
        }
    }

    /// The plan of stage `b` for `isa`, once the program is planned.
    pub fn plan(&self, b: BufId, isa: super::Isa) -> Option<&KernelPlan> {
        self.plans.get(b.index())?.get(isa.index())
    }

    /// The stage of a buffer, if it is computed.
    pub fn stage(&self, b: BufId) -> Option<&Stage> {
        match &self.bufs[b.index()].kind {
            BufKind::Stage(s) => Some(s),
            _ => None,
        }
    }

    /// Bytes buffer `b` takes in the arena: its stored size, or for a group's producer its
    /// scratch slots.
    pub fn arena_bytes(&self, b: BufId) -> usize {
        let buf = &self.bufs[b.index()];
        if let Some(g) = self.groups.iter().find(|g| g.producer == b) {
            return g.slots * g.slot_bytes(buf);
        }
        match self.row_groups.iter().find(|g| g.scratch.contains(&b)) {
            Some(g) => g.slots * g.slot_bytes(buf),
            None => buf.stored_size(),
        }
    }

    /// For every buffer, the stage buffers that read it.
    pub fn readers(&self) -> Vec<Vec<BufId>> {
        let mut r = vec![Vec::new(); self.bufs.len()];
        for (i, b) in self.buf_ids().zip(&self.bufs) {
            if let BufKind::Stage(st) = &b.kind {
                for k in st.reads() {
                    let v: &mut Vec<BufId> = &mut r[k.index()];
                    if v.last() != Some(&i) {
                        v.push(i);
                    }
                }
            }
        }
        r
    }
}
