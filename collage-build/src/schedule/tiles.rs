//! The tile graph (Welder, OSDI'23, §3): the program's kernels as nodes and, on every edge from
//! a producer to a consumer, the memory level at which the producer's tile meets the
//! consumer's — what the fusion and grouping steps decided, in one structure that `explain`,
//! the `--html` page and the goldens print.
//!
//! - **register**: the producer's values are computed inside the consumer's loops (inlined,
//!   or the consumer's epilogue applied to the producer's accumulators: `Program::absorbed`);
//!   nothing is stored.
//! - **L1 / L2 / L3**: the two run as one loop of instances (a group, a row or band group) and
//!   the producer's tile is read back from the cache level its instance fits
//!   (`group::describe`, `rows::describe`), from a per-thread scratch slot where nothing else
//!   reads it.
//! - **memory**: the producer's whole output is written to its arena buffer before the
//!   consumer starts (a small one may still be found in a cache; the schedule does not rely on
//!   it).
//!
//! A GPU printer names the same levels register, shared memory, L2 and global
//! ([`Level::gpu_name`]).
use std::fmt::Write;

use crate::target::Target;
use crate::te::{BufId, BufKind, Program};

/// Where a producer's tile meets its consumer's, deepest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Computed in the consumer's loops; never stored.
    Register,
    /// Read back from the first-level data cache (a group's scratch that fits half of L1d).
    L1,
    /// From the core's L2.
    L2,
    /// From the shared last-level cache.
    L3,
    /// Through a full-size buffer in memory.
    Memory,
}

impl Level {
    /// Every level, deepest first.
    pub const ALL: [Level; 5] = [
        Level::Register,
        Level::L1,
        Level::L2,
        Level::L3,
        Level::Memory,
    ];

    /// The level's name on a CPU.
    pub fn name(self) -> &'static str {
        match self {
            Level::Register => "register",
            Level::L1 => "L1",
            Level::L2 => "L2",
            Level::L3 => "L3",
            Level::Memory => "memory",
        }
    }

    /// The level's name on a GPU: a block's first level is its shared memory, and the last
    /// two are global memory.
    pub fn gpu_name(self) -> &'static str {
        match self {
            Level::Register => "register",
            Level::L1 => "shared",
            Level::L2 => "L2",
            Level::L3 | Level::Memory => "global",
        }
    }
}

impl std::fmt::Display for Level {
    /// The CPU name ([`Level::name`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What connects an edge's two ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Fusion: the producer is computed inside the consumer.
    Fused,
    /// A group (`g<consumer>`): the producer's panels in per-thread scratch slots.
    Group(BufId),
    /// A row or band group (`r<last>`); `scratch` when the producer lives only in its slots.
    RowGroup {
        /// The group's last member (its name in the generated C).
        last: BufId,
        /// Whether the producer's output lives only in scratch slots.
        scratch: bool,
    },
    /// The producer's arena buffer.
    Buffer,
}

/// One edge of the tile graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileEdge {
    /// The producer stage (for a register edge, a stage fusion removed or copied).
    pub from: BufId,
    /// The consuming kernel.
    pub to: BufId,
    /// The level they meet at.
    pub level: Level,
    /// What connects them.
    pub via: Via,
    /// Bytes of the producer's output (what memory would carry at the memory level).
    pub bytes: usize,
}

/// The program's kernels and the edges between them (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TileGraph {
    /// Every kernel (a stage of the fused program), in program order.
    pub kernels: Vec<BufId>,
    /// Register edges first (by consumer, then producer), then the edges between kernels (by
    /// producer, then consumer).
    pub edges: Vec<TileEdge>,
}

/// The tile graph of the planned and grouped program `p` for `target` (whose caches decide
/// a group's level, as they decided the group).
pub fn tile_graph(p: &Program, target: &Target) -> TileGraph {
    let kernels: Vec<BufId> = p
        .buf_ids()
        .filter(|&b| matches!(p.bufs[b.index()].kind, BufKind::Stage(_)))
        .collect();
    let bytes = |b: BufId| p.bufs[b.index()].ty.bytes();
    let mut fused: Vec<TileEdge> = p
        .absorbed
        .iter()
        .filter(|(_, k)| p.stage(*k).is_some())
        .map(|&(b, k)| TileEdge {
            from: b,
            to: k,
            level: Level::Register,
            via: Via::Fused,
            bytes: bytes(b),
        })
        .collect();
    fused.sort_by_key(|e| (e.to, e.from));
    let groups: Vec<_> = p
        .groups
        .iter()
        .map(|g| (g, super::group::describe(p, g, target)))
        .collect();
    let rows: Vec<_> = p
        .row_groups
        .iter()
        .map(|g| (g, super::rows::describe(p, g, target)))
        .collect();
    let readers = p.readers();
    let mut between = Vec::new();
    for &b in &kernels {
        for &c in &readers[b.index()] {
            if p.stage(c).is_none() {
                continue;
            }
            let (level, via) = if let Some((g, info)) = groups
                .iter()
                .find(|(g, _)| g.producer == b && g.consumer == c)
            {
                (info.level, Via::Group(g.consumer))
            } else if let Some((g, info)) = rows
                .iter()
                .find(|(g, _)| g.stages.contains(&b) && g.stages.contains(&c))
            {
                let via = Via::RowGroup {
                    last: g.last(),
                    scratch: g.scratch.contains(&b),
                };
                (info.level, via)
            } else {
                (Level::Memory, Via::Buffer)
            };
            between.push(TileEdge {
                from: b,
                to: c,
                level,
                via,
                bytes: bytes(b),
            });
        }
    }
    fused.extend(between);
    TileGraph {
        kernels,
        edges: fused,
    }
}

impl TileGraph {
    /// Edges per level, deepest first.
    pub fn counts(&self) -> [(Level, usize); 5] {
        Level::ALL.map(|l| (l, self.edges.iter().filter(|e| e.level == l).count()))
    }

    /// The level of the edge from `from` to `to`, if there is one.
    pub fn level(&self, from: BufId, to: BufId) -> Option<Level> {
        self.edges
            .iter()
            .find(|e| e.from == from && e.to == to)
            .map(|e| e.level)
    }

    /// The kernel that computes stage `b`: `b` itself when it is a kernel, else the first
    /// kernel it is fused into.
    pub fn kernel_of(&self, b: BufId) -> Option<BufId> {
        if self.kernels.contains(&b) {
            return Some(b);
        }
        self.edges
            .iter()
            .find(|e| e.from == b && e.level == Level::Register)
            .map(|e| e.to)
    }

    /// The text `explain` and the goldens print: the counts, then per kernel the stages it
    /// computes at registers, then every edge between kernels with its level, what connects
    /// it and the producer's bytes.
    pub fn render(&self, p: &Program) -> String {
        let name = |b: BufId| {
            p.stage(b)
                .map_or_else(|| p.bufs[b.index()].name.clone(), |s| s.name.clone())
        };
        let mut out = String::new();
        let counts: Vec<String> = self
            .counts()
            .iter()
            .map(|(l, n)| format!("{} {n}", l.name()))
            .collect();
        writeln!(
            out,
            "tile graph: {} kernels; edges by the level producer and consumer meet at: {}",
            self.kernels.len(),
            counts.join(", ")
        )
        .unwrap();
        let mut k = 0;
        while k < self.edges.len() && self.edges[k].level == Level::Register {
            let to = self.edges[k].to;
            let mut inside = Vec::new();
            while k < self.edges.len()
                && self.edges[k].level == Level::Register
                && self.edges[k].to == to
            {
                inside.push(format!(
                    "b{} {}",
                    self.edges[k].from,
                    name(self.edges[k].from)
                ));
                k += 1;
            }
            writeln!(
                out,
                "  k{to} {} computes at registers: {}",
                name(to),
                inside.join(", ")
            )
            .unwrap();
        }
        for e in &self.edges[k..] {
            let via = match e.via {
                Via::Group(g) => format!(" (group g{g}, scratch)"),
                Via::RowGroup { last, scratch } => format!(
                    " (row group r{last}{})",
                    if scratch { ", scratch" } else { "" }
                ),
                Via::Fused | Via::Buffer => String::new(),
            };
            writeln!(
                out,
                "  k{} -> k{}: {}{via}, {} KiB",
                e.from,
                e.to,
                e.level.name(),
                e.bytes.div_ceil(1024)
            )
            .unwrap();
        }
        out
    }
}
