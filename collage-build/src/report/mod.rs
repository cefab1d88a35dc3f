//! Reports for `collage explain`: every generated kernel with the nodes it came from, its
//! schedule, an analytic cost estimate and, when the cost cache has it, its measured latency
//! (kernels are keyed in the cache by a canonical signature of their tensor expression,
//! `tune::price::kernel_key`, so the same kernel in another model shares an entry); the page of
//! `--html` is [`html`].
//!
//! The placement report ([`render_placement`], [`html_page`]) shows every partition with its
//! backend, cost and the best alternative the search rejected.
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::codegen::Compiled;
use crate::target::Target;
use crate::te::{BufId, Isa, KernelPlan};
use crate::tune::measure;
use crate::tune::price::{kernel_estimate_us, kernel_key};
use crate::tune::{CostCache, Entry, Key, TargetFingerprint};

pub mod html;

/// One generated kernel.
#[derive(Clone, Debug)]
pub struct KernelReport {
    /// Stage buffer id in the program (`k<id>` in the generated C).
    pub id: BufId,
    /// The stage name (the node it came from; fused stages keep their last node's name).
    pub name: String,
    /// The backend that computes it (`c`: generated loops; else a library call).
    pub backend: &'static str,
    /// The kernel plan for AVX-512's 16 lanes (of generated kernels and of library calls'
    /// in-place epilogues): the one the C emitter printed.
    pub plan: Option<KernelPlan>,
    /// Output type.
    pub output: String,
    /// Body evaluations.
    pub work: usize,
    /// Analytic estimate in microseconds (one thread).
    pub estimate_us: f64,
    /// The cache key.
    pub key: Key,
    /// The cached measurement, if any.
    pub measured: Option<Entry>,
}

/// Every kernel of a compiled model, with measurements from `cache` where present.
pub fn kernels(
    c: &Compiled,
    target: &TargetFingerprint,
    cache: Option<&CostCache>,
) -> Vec<KernelReport> {
    let p = &c.program;
    measure::stages(p)
        .into_iter()
        .map(|id| {
            let st = p.stage(id).expect("a stage");
            let plan = p.plan(id, Isa::Avx512).cloned();
            let key = kernel_key(p, id, target);
            let measured = cache.and_then(|c| c.get(&key)).cloned();
            KernelReport {
                id,
                name: st.name.clone(),
                backend: st.exec.backend(),
                plan,
                output: p.bufs[id.index()].ty.to_string(),
                work: st.work(),
                estimate_us: kernel_estimate_us(p, id),
                key,
                measured,
            }
        })
        .collect()
}

/// One group of stages ([`crate::te::Group`]) with what [`crate::schedule::group::describe`]
/// predicts of it.
#[derive(Clone, Debug)]
pub struct GroupReport {
    /// The group.
    pub group: crate::te::Group,
    /// Producer and consumer stage names.
    pub names: (String, String),
    /// Tiles, memory level, footprint and traffic.
    pub info: crate::schedule::GroupInfo,
}

impl GroupReport {
    /// `g<consumer>`, the group's task in the generated C.
    pub fn name(&self) -> String {
        format!("g{}", self.group.consumer)
    }

    /// `k10 Conv_16_0 -> k13 Relu_24_0`.
    pub fn stages(&self) -> String {
        format!(
            "k{} {} -> k{} {}",
            self.group.producer, self.names.0, self.group.consumer, self.names.1
        )
    }

    /// Instances, tiles, the edge's memory level, footprint and traffic, on one line.
    pub fn detail(&self) -> String {
        let (g, i) = (&self.group, &self.info);
        format!(
            "{} instances of {:?} in {} slots; each reads {:?} of k{} at {}; {} KiB live; traffic {:.2} MB (apart {:.2} MB)",
            g.instances,
            i.tile,
            g.slots,
            i.region,
            g.producer,
            i.level,
            i.footprint / 1024,
            i.traffic as f64 / 1e6,
            i.traffic_apart as f64 / 1e6,
        )
    }
}

/// Every group of a compiled model, for the `target` it was compiled for.
pub fn groups(c: &Compiled, target: &Target) -> Vec<GroupReport> {
    let p = &c.program;
    let name = |b: BufId| stage_name(p, b);
    p.groups
        .iter()
        .map(|g| GroupReport {
            group: g.clone(),
            names: (name(g.producer), name(g.consumer)),
            info: crate::schedule::group::describe(p, g, target),
        })
        .collect()
}

/// One row group of stages ([`crate::te::RowGroup`]) with what
/// [`crate::schedule::rows::describe`] predicts of it.
#[derive(Clone, Debug)]
pub struct RowGroupReport {
    /// The group.
    pub group: crate::te::RowGroup,
    /// Its members' stage names, in order.
    pub names: Vec<String>,
    /// The instance's tile, the level its scratch meets at, footprint and traffic saved.
    pub info: crate::schedule::RowGroupInfo,
}

impl RowGroupReport {
    /// `r<last>`, the group's task in the generated C.
    pub fn name(&self) -> String {
        format!("r{}", self.group.last())
    }

    /// `k15 Transpose_23_0 -> k23 Div_36_0 -> ..`, scratch members marked `*`.
    pub fn stages(&self) -> String {
        let g = &self.group;
        g.stages
            .iter()
            .zip(&self.names)
            .map(|(b, n)| {
                let mark = if g.scratch.contains(b) { "*" } else { "" };
                format!("k{b} {n}{mark}")
            })
            .collect::<Vec<_>>()
            .join(" -> ")
    }

    /// Instances, the block, the scratch's level, footprint and traffic saved, on one line (a
    /// band group's: its bands of output rows and the rows its first member computes).
    pub fn detail(&self) -> String {
        let (g, i) = (&self.group, &self.info);
        if let Some((computed, rows)) = i.recomputed {
            return format!(
                "{} bands of {} output rows ({:?}) in {} slots; scratch (*) {} KiB per slot, read back at {}; {} KiB live; {} input rows computed for {} (halos recomputed); traffic saved {:.2} MB",
                g.instances,
                g.block,
                i.tile,
                g.slots,
                i.slot_bytes.div_ceil(1024),
                i.level,
                i.footprint.div_ceil(1024),
                computed,
                rows,
                i.saved as f64 / 1e6,
            );
        }
        format!(
            "{} instances of {:?} ({} positions of the leading {} dimensions) in {} slots; scratch (*) {} KiB per slot, read back at {}; {} KiB live; traffic saved {:.2} MB",
            g.instances,
            i.tile,
            g.block,
            g.dims,
            g.slots,
            i.slot_bytes.div_ceil(1024),
            i.level,
            i.footprint.div_ceil(1024),
            i.saved as f64 / 1e6,
        )
    }
}

/// The name of stage `b` of `p` (empty for a buffer that is not a stage).
fn stage_name(p: &crate::te::Program, b: BufId) -> String {
    p.stage(b).map_or_else(String::new, |s| s.name.clone())
}

/// Every row group of a compiled model, for the `target` it was compiled for.
pub fn row_groups(c: &Compiled, target: &Target) -> Vec<RowGroupReport> {
    let p = &c.program;
    let name = |b: BufId| stage_name(p, b);
    p.row_groups
        .iter()
        .map(|g| RowGroupReport {
            group: g.clone(),
            names: g.stages.iter().map(|&b| name(b)).collect(),
            info: crate::schedule::rows::describe(p, g, target),
        })
        .collect()
}

/// The row groups section of `collage explain`: per group its members (scratch marked), then
/// its instances, block, slots, the scratch's level and the traffic it saves.
pub fn render_row_groups(gs: &[RowGroupReport]) -> String {
    let lines: Vec<(String, String, String)> = gs
        .iter()
        .map(|g| (g.name(), g.stages(), g.detail()))
        .collect();
    render_group_lines(
        "row groups",
        "stages split along their shared leading dimensions or an image's rows, run as one loop of instances; a * member's output lives only in per-thread scratch slots",
        &lines,
    )
}

/// The groups section of `collage explain`: per group its stages, the instance tile of the
/// consumer, the region of the producer one instance reads (one scratch slot), the memory level
/// of that edge, and the predicted traffic with and without the group.
pub fn render_groups(gs: &[GroupReport]) -> String {
    let lines: Vec<(String, String, String)> = gs
        .iter()
        .map(|g| (g.name(), g.stages(), g.detail()))
        .collect();
    render_group_lines(
        "groups",
        "stages that run as one loop of instances, the producer's output in a per-thread scratch slot",
        &lines,
    )
}

/// A groups section: `title: N (what)`, then per group its name and stages, and its detail.
fn render_group_lines(title: &str, what: &str, lines: &[(String, String, String)]) -> String {
    let mut out = String::new();
    writeln!(out, "{title}: {} ({what})", lines.len()).unwrap();
    for (name, stages, detail) in lines {
        writeln!(out, "  {name}: {stages}").unwrap();
        writeln!(out, "      {detail}").unwrap();
    }
    out
}

/// The tile graph section of `collage explain` ([`crate::schedule::tiles`]): the level every
/// producer meets its consumer at, for the `target` the model was compiled for.
pub fn render_tile_graph(c: &Compiled, target: &Target) -> String {
    crate::schedule::tile_graph(&c.program, target).render(&c.program)
}

/// Node names of `nodes`, with op types, shortened for a report line.
fn node_list(g: &crate::ir::Graph, nodes: &[usize], max: usize) -> String {
    let mut names: Vec<String> = nodes
        .iter()
        .take(max)
        .map(|&n| format!("{}({})", g.nodes[n].name, g.nodes[n].op.op_type()))
        .collect();
    if nodes.len() > max {
        names.push(format!("+{} more", nodes.len() - max));
    }
    names.join(" ")
}

/// The placement report: the search's statistics, then one line per partition (backend, cost,
/// whether measured, the nodes, and the best alternative with its cost), then the use of each
/// backend.
pub fn render_placement(c: &Compiled) -> String {
    let mut out = String::new();
    let Some(info) = &c.placement else {
        return out;
    };
    let pl = &info.placement;
    writeln!(
        out,
        "placement of {}: {} partitions over {} nodes; backends offered: {}; {}, {} candidates, {:.2} ms; total {:.1} us (kernels + transitions, one thread)",
        c.name,
        pl.parts.len(),
        c.graph.nodes.len(),
        info.backends.join(","),
        pl.stop,
        pl.candidates,
        pl.elapsed.as_secs_f64() * 1e3,
        pl.cost_us
    )
    .unwrap();
    writeln!(
        out,
        "{:>4}  {:<5} {:>10}  {:<8}  {:<40}  best alternative",
        "part", "backend", "cost us", "source", "nodes"
    )
    .unwrap();
    for (i, part) in pl.parts.iter().enumerate() {
        let alt = match info.alternatives.get(i).and_then(|a| a.as_ref()) {
            Some((b, rule, cost)) => format!("{b} {cost:.1} us ({rule})"),
            None => "-".into(),
        };
        let src = if info.measured.get(i).copied().unwrap_or(false) {
            "measured"
        } else {
            "analytic"
        };
        writeln!(
            out,
            "{:>4}  {:<5} {:>10.1}  {:<8}  {:<40}  {alt}",
            i,
            part.backend,
            part.cost_us,
            src,
            node_list(&c.graph, &part.nodes, 4)
        )
        .unwrap();
    }
    let mut per: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for part in &pl.parts {
        let e = per.entry(part.backend.name()).or_default();
        e.0 += 1;
        e.1 += part.nodes.len();
        e.2 += part.cost_us;
    }
    let uses: Vec<String> = per
        .iter()
        .map(|(b, (p, n, cost))| format!("{b}: {p} partitions, {n} nodes, {cost:.1} us"))
        .collect();
    writeln!(out, "backends used: {}", uses.join("; ")).unwrap();
    if info.misses > 0 {
        writeln!(
            out,
            "{} of {} kernel costs are analytic estimates (not in the cache)",
            info.misses,
            info.misses + info.hits
        )
        .unwrap();
    }
    out
}

/// The `explain --html` page: the graph coloured by backend, the partition table and the
/// groups (their nodes outlined).
pub fn html_page(c: &Compiled, ks: &[KernelReport]) -> html::Page {
    let g = &c.graph;
    // A stage is named after its (last) node: `<node>_<k>`.
    let node_of = |stage: &str| {
        let base = stage.rsplit_once('_').map_or(stage, |(b, _)| b);
        g.nodes.iter().position(|n| n.name == base)
    };
    let target = Target::for_build();
    let mut groups: Vec<html::GroupRow> = groups(c, &target)
        .iter()
        .map(|r| {
            let mut nodes: Vec<usize> = [&r.names.0, &r.names.1]
                .into_iter()
                .filter_map(|s| node_of(s))
                .collect();
            nodes.dedup();
            html::GroupRow {
                name: r.name(),
                stages: r.stages(),
                nodes,
                detail: r.detail(),
            }
        })
        .collect();
    groups.extend(row_groups(c, &target).iter().map(|r| {
        let mut nodes: Vec<usize> = r.names.iter().filter_map(|s| node_of(s)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        html::GroupRow {
            name: r.name(),
            stages: r.stages(),
            nodes,
            detail: r.detail(),
        }
    }));
    let mut part_of = vec![0usize; g.nodes.len()];
    let mut backend_of = vec!["c"; g.nodes.len()];
    let mut parts = Vec::new();
    if let Some(info) = &c.placement {
        for (i, part) in info.placement.parts.iter().enumerate() {
            for &n in &part.nodes {
                part_of[n] = i;
                backend_of[n] = part.backend.name();
            }
            let alt = match info.alternatives.get(i).and_then(|a| a.as_ref()) {
                Some((b, rule, cost)) => format!("{b}: {cost:.1} us ({rule})"),
                None => "-".into(),
            };
            let measured = info.measured.get(i).copied().unwrap_or(false);
            parts.push(html::PartRow {
                index: i,
                backend: part.backend.to_string(),
                nodes: node_list(g, &part.nodes, 6),
                kernel: part.rule.clone(),
                estimated_us: part.cost_us,
                measured_us: measured.then_some(part.cost_us),
                alternative: alt,
            });
        }
    }
    let mut producer = std::collections::HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.outputs {
            producer.insert(*v, i);
        }
    }
    let mut edges = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if let Some(&p) = producer.get(v) {
                edges.push((p, i));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let edge_levels = edge_levels(c, &target, &edges);
    let nodes = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| html::Node {
            name: n.name.clone(),
            op: n.op.op_type().to_string(),
            shape: n
                .outputs
                .first()
                .map(|&v| g.ty(v).to_string())
                .unwrap_or_default(),
            part: part_of[i],
            backend: backend_of[i].to_string(),
        })
        .collect();
    let mut summary = vec![("model".to_string(), c.name.clone())];
    if let Some(info) = &c.placement {
        summary.push(("backends offered".into(), info.backends.join(", ")));
        summary.push((
            "search".into(),
            format!(
                "{} ({} candidates, {:.2} ms)",
                info.placement.stop,
                info.placement.candidates,
                info.placement.elapsed.as_secs_f64() * 1e3
            ),
        ));
        summary.push((
            "placement cost".into(),
            format!("{:.1} us (one thread)", info.placement.cost_us),
        ));
        summary.push((
            "cost sources".into(),
            format!("{} measured, {} analytic kernels", info.hits, info.misses),
        ));
    }
    let total: f64 = ks.iter().map(|k| k.estimate_us).sum();
    summary.push((
        "kernels".into(),
        format!(
            "{} generated or library kernels, {total:.1} us estimated",
            ks.len()
        ),
    ));
    html::Page {
        title: format!("collage explain: {}", c.name),
        summary,
        nodes,
        edges,
        edge_levels,
        parts,
        groups,
        ..html::Page::default()
    }
}

/// The tile-graph level of every graph edge of the page: `register` where the producer node has
/// no kernel of its own or shares one with the consumer (fusion computes it in the consumer's
/// loops), else the deepest level of a tile-graph edge from a kernel of the producer's to one
/// of the consumer's, `memory` when there is none. A node's kernels are the stages named after
/// it (`<node>_<k>`) and the kernels that compute its stages fusion removed (a removed stage's
/// buffer keeps that name, or its node's output value's).
fn edge_levels(c: &Compiled, target: &Target, edges: &[(usize, usize)]) -> Vec<String> {
    let p = &c.program;
    let g = &c.graph;
    let tg = &crate::schedule::tile_graph(p, target);
    let of_node = |n: usize, b: BufId| {
        let node = &g.nodes[n];
        let name = p
            .stage(b)
            .map_or(p.bufs[b.index()].name.as_str(), |s| s.name.as_str());
        name.rsplit_once('_')
            .is_some_and(|(base, _)| base == node.name)
            || node
                .outputs
                .iter()
                .any(|&v| g.values[v.0 as usize].name == name)
    };
    let kernels_of = |n: usize| -> Vec<BufId> {
        let mut ks: Vec<BufId> = tg
            .kernels
            .iter()
            .copied()
            .filter(|&k| of_node(n, k))
            .collect();
        ks.extend(
            tg.edges
                .iter()
                .filter(|e| e.level == crate::schedule::Level::Register && of_node(n, e.from))
                .map(|e| e.to),
        );
        ks.sort_unstable();
        ks.dedup();
        ks
    };
    let kernels: Vec<Vec<BufId>> = (0..g.nodes.len()).map(kernels_of).collect();
    edges
        .iter()
        .map(|&(a, b)| {
            let (ka, kb) = (&kernels[a], &kernels[b]);
            let level = if ka.is_empty() || ka.iter().any(|k| kb.contains(k)) {
                crate::schedule::Level::Register
            } else {
                ka.iter()
                    .flat_map(|&x| kb.iter().filter_map(move |&y| tg.level(x, y)))
                    .min()
                    .unwrap_or(crate::schedule::Level::Memory)
            };
            level.name().to_string()
        })
        .collect()
}

/// The text report: one line per kernel, then the totals.
pub fn render_text(model: &str, ks: &[KernelReport]) -> String {
    let mut out = String::new();
    writeln!(out, "model {model}: {} kernels", ks.len()).unwrap();
    writeln!(
        out,
        "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12} {:>12}  plan (AVX-512) [how it was tuned]",
        "id", "kernel (last node)", "plan", "output", "work", "est. us", "measured us"
    )
    .unwrap();
    let (mut est, mut meas, mut missing) = (0.0, 0.0, 0);
    for k in ks {
        let m = match &k.measured {
            Some(e) => {
                meas += e.median_us;
                format!("{:.2}", e.median_us)
            }
            None => {
                missing += 1;
                "-".to_string()
            }
        };
        est += k.estimate_us;
        writeln!(
            out,
            "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12.2} {:>12}  {}",
            format!("k{}", k.id),
            truncate(&k.name, 28),
            if k.backend == "c" {
                k.plan
                    .as_ref()
                    .map_or("-".to_string(), |p| format!("{:?}", p.kind()))
            } else {
                format!("{} call", k.backend)
            },
            truncate(&k.output, 22),
            k.work,
            k.estimate_us,
            m,
            k.plan.as_ref().map_or("-".to_string(), |p| p.to_string())
                + &k.measured
                    .as_ref()
                    .and_then(|e| e.params.get("tuned"))
                    .map_or(String::new(), |t| format!(" [{t}]"))
        )
        .unwrap();
    }
    writeln!(
        out,
        "total: estimated {est:.1} us; measured {meas:.1} us over {} of {} kernels",
        ks.len() - missing,
        ks.len()
    )
    .unwrap();
    if missing > 0 {
        writeln!(
            out,
            "{missing} kernels have no measurement: run `collage tune MODEL --cache FILE`"
        )
        .unwrap();
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}
