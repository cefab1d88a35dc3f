//! The self-contained HTML page of `collage explain --html`: the model graph drawn as an inline SVG
//! with every node coloured by the backend its partition runs on, a legend, the summary on top and
//! the table of partitions below.
//!
//! The page loads nothing: no network, no external scripts, fonts or style sheets. Its only script
//! is a small inline one that highlights a partition's nodes and table row together on hover.
//! [`render`] is deterministic: the same [`Page`] always gives byte-identical output.
//!
//! Layout, done here in Rust: a node's layer is the longest path to it from a source, layers go top
//! to bottom, nodes within a layer start in index order and are then reordered by a few barycentre
//! sweeps (the ordering with the fewest edge crossings is kept). Layers wider than
//! [`MAX_PER_ROW`] nodes wrap onto several rows, so the drawing stays narrow and scrolls vertically.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Everything the page shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// Page title and heading (usually the model name).
    pub title: String,
    /// Key/value lines shown above the graph, in this order.
    pub summary: Vec<(String, String)>,
    /// Graph nodes, in topological order.
    pub nodes: Vec<Node>,
    /// Edges as (producer node index, consumer node index). Indices out of range and self loops
    /// are ignored; duplicates are drawn once.
    pub edges: Vec<(usize, usize)>,
    /// The tile-graph level of each of [`Page::edges`] (`register`, `L1`, `L2`, `L3`,
    /// `memory`): the edge's tooltip, its width deeper levels wider. Missing: no level drawn.
    pub edge_levels: Vec<String>,
    /// One row per partition, for the table below the graph.
    pub parts: Vec<PartRow>,
    /// Groups of stages that run as one loop of instances; their nodes get a dashed outline.
    pub groups: Vec<GroupRow>,
    /// A profile's kernels, slowest first (`collage explain --profile`): drawn as a bar chart
    /// above the graph. Empty: no chart.
    pub profile: Vec<ProfileBar>,
    /// The line above the chart (end-to-end time, the kernels' sum, the roofs).
    pub profile_note: String,
}

/// One kernel of a profile: a bar of the chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileBar {
    /// The kernel (`k<id> <name>`).
    pub kernel: String,
    /// Its backend; picks the colour.
    pub backend: String,
    /// Microseconds per run.
    pub us: f64,
    /// Its fraction of the roof that bounds it.
    pub roof_fraction: f64,
    /// Its plan, for the tooltip.
    pub plan: String,
}

/// One group of stages (GraphTurbo): what the table under the partitions shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupRow {
    /// Its name (`g<consumer>`, the task in the generated C).
    pub name: String,
    /// Its stages, producer first, as display text.
    pub stages: String,
    /// Graph nodes whose stages it holds ([`Page::nodes`] indices).
    pub nodes: Vec<usize>,
    /// Instances, tiles, memory level and traffic, as display text.
    pub detail: String,
}

/// One graph node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// Node name (the full name goes into the tooltip; the box shows its last `/` segment).
    pub name: String,
    /// Operator type, e.g. `MatMul`.
    pub op: String,
    /// Output shape as text, e.g. `f32[1, 128]`.
    pub shape: String,
    /// Index of the partition the node belongs to ([`PartRow::index`]).
    pub part: usize,
    /// Backend the node's partition runs on (`c`, `gemm`, ...); picks the colour.
    pub backend: String,
}

/// One partition (a sub-graph placed on one backend) in the table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartRow {
    /// Partition index, matched by [`Node::part`].
    pub index: usize,
    /// Backend it runs on.
    pub backend: String,
    /// Its nodes, as display text.
    pub nodes: String,
    /// Kernel (or library call) that implements it.
    pub kernel: String,
    /// Analytic estimate, in microseconds.
    pub estimated_us: f64,
    /// Measured latency, in microseconds, when the cost cache has one.
    pub measured_us: Option<f64>,
    /// The best alternative placement, as display text (empty when there is none).
    pub alternative: String,
}

/// Most nodes drawn side by side; wider layers wrap onto further rows.
pub const MAX_PER_ROW: usize = 8;

const NODE_W: i64 = 168;
const NODE_H: i64 = 40;
const GAP_X: i64 = 24;
const GAP_Y: i64 = 44;
const MARGIN: i64 = 16;
/// An edge's stroke width for its tile-graph level (deeper, wider).
fn level_width(level: &str) -> f64 {
    match level {
        "register" => 3.4,
        "L1" => 2.8,
        "L2" => 2.2,
        "L3" => 1.7,
        _ => 1.1,
    }
}

/// Spacing of the vertical lanes that edges spanning several rows take beside the nodes.
const LANE_GAP: i64 = 12;
/// Characters of op type / short name that fit in a node box.
const OP_CHARS: usize = 19;
const NAME_CHARS: usize = 24;

/// Most kernels the profile chart draws; the rest are summed into one last bar.
pub const MAX_BARS: usize = 40;

/// The profile as a horizontal bar chart (inline SVG): one bar per kernel, slowest first, its
/// length its time, its colour its backend, its label the kernel, time, share and roof fraction.
fn profile_chart(o: &mut String, page: &Page) {
    const LABEL_W: i64 = 300;
    const BAR_W: i64 = 520;
    const ROW_H: i64 = 18;
    let total: f64 = page.profile.iter().map(|b| b.us).sum::<f64>().max(1e-12);
    let mut bars: Vec<ProfileBar> = page.profile.iter().take(MAX_BARS).cloned().collect();
    if page.profile.len() > MAX_BARS {
        let rest = &page.profile[MAX_BARS..];
        bars.push(ProfileBar {
            kernel: format!("{} more kernels", rest.len()),
            backend: String::new(),
            us: rest.iter().map(|b| b.us).sum(),
            roof_fraction: f64::NAN,
            plan: String::new(),
        });
    }
    let longest = bars.iter().map(|b| b.us).fold(0.0, f64::max).max(1e-12);
    let h = ROW_H * bars.len() as i64 + 8;
    let w = LABEL_W + BAR_W + 200;
    let _ = writeln!(o, "<h2>Profile ({} kernels)</h2>", page.profile.len());
    let _ = writeln!(o, "<p class=\"note\">{}</p>", escape(&page.profile_note));
    let _ = writeln!(
        o,
        "<div class=\"profile\">\n<svg id=\"profile\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"kernel profile\">"
    );
    for (i, b) in bars.iter().enumerate() {
        let y = 4 + ROW_H * i as i64;
        let len = ((b.us / longest) * BAR_W as f64).round().max(1.0) as i64;
        let (fill, stroke) = colours(&b.backend);
        let roof = if b.roof_fraction.is_finite() {
            format!(", {:.0}% of roof", 100.0 * b.roof_fraction)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "<g class=\"bar\"><title>{kernel}&#10;backend: {backend}&#10;{us:.1} us per run&#10;plan: {plan}</title>\
<text x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{kernel_s}</text>\
<rect x=\"{LABEL_W}\" y=\"{y}\" width=\"{len}\" height=\"{bh}\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
<text x=\"{vx}\" y=\"{ty}\">{us:.1} us ({share:.1}%{roof})</text></g>",
            kernel = escape(&b.kernel),
            kernel_s = escape(&truncate_end(&b.kernel, 40)),
            backend = escape(&b.backend),
            plan = escape(&b.plan),
            us = b.us,
            share = 100.0 * b.us / total,
            lx = LABEL_W - 6,
            ty = y + ROW_H - 5,
            bh = ROW_H - 4,
            vx = LABEL_W + len + 6,
        );
    }
    o.push_str("</svg>\n</div>\n");
}

/// Escapes `&<>"'` for HTML text and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// (fill, stroke) for a backend: fixed for the known backends, otherwise picked from a fixed
/// list by a hash of the name, so the same name always gets the same colour.
fn colours(backend: &str) -> (&'static str, &'static str) {
    const MORE: [(&str, &str); 6] = [
        ("#fbf1c0", "#9c8210"),
        ("#d2eeec", "#2a817b"),
        ("#f7d5d5", "#b03a3a"),
        ("#e3e3e3", "#5e5e5e"),
        ("#e6eccb", "#6b7a1f"),
        ("#eddccf", "#8a5a3a"),
    ];
    crate::backend::BackendId::from_name(backend)
        .map(crate::backend::BackendId::colour)
        .unwrap_or_else(|| MORE[(crate::te::fnv64(backend) % MORE.len() as u64) as usize])
}

/// At most `max` characters of `s`, ending in `…` when cut.
fn truncate_end(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('\u{2026}');
    t
}

/// The trailing `/`-separated segments of a node name that fit in `max` characters (at least
/// the last one, cut at the front with `…` when it alone is too long): the tail tells nodes apart
/// better than the head.
fn short_name(s: &str, max: usize) -> String {
    let t = s.trim_matches('/');
    let mut segs = t.rsplit('/');
    let last = segs.next().unwrap_or(t);
    let n = last.chars().count();
    if n > max {
        let mut out = String::from('\u{2026}');
        out.extend(last.chars().skip(n - (max - 1)));
        return out;
    }
    let (mut start, mut len) = (t.len() - last.len(), n);
    for seg in segs {
        len += 1 + seg.chars().count();
        if len > max {
            break;
        }
        start -= 1 + seg.len();
    }
    t[start..].to_string()
}

fn fmt_us(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "n/a".to_string()
    }
}

/// Node positions (top-left corners) and the drawing's size.
#[derive(Debug)]
struct Layout {
    pos: Vec<(i64, i64)>,
    /// SVG path data of each edge, in the order of the edges given.
    paths: Vec<String>,
    width: i64,
    height: i64,
}

/// The edges that can be drawn: in range, not self loops, each once, sorted.
fn valid_edges(n: usize, edges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let set: BTreeSet<(usize, usize)> = edges
        .iter()
        .copied()
        .filter(|&(p, c)| p < n && c < n && p != c)
        .collect();
    set.into_iter().collect()
}

/// Longest path from a source to each node. Nodes on a cycle (the input should have none) are
/// released in index order with the layer their already placed producers give them.
fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut succs = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    for &(p, c) in edges {
        succs[p].push(c);
        indeg[c] += 1;
    }
    let mut layer = vec![0usize; n];
    let mut done = vec![false; n];
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    loop {
        while let Some(v) = ready.pop_first() {
            done[v] = true;
            for &c in &succs[v] {
                if done[c] {
                    continue;
                }
                layer[c] = layer[c].max(layer[v] + 1);
                indeg[c] -= 1;
                if indeg[c] == 0 {
                    ready.insert(c);
                }
            }
        }
        match (0..n).find(|&i| !done[i]) {
            Some(v) => {
                indeg[v] = 0;
                ready.insert(v);
            }
            None => break,
        }
    }
    layer
}

/// Centred position of every node within its layer.
fn slots(rows: &[Vec<usize>], slot: &mut [f64]) {
    for r in rows {
        let c = (r.len() as f64 - 1.0) / 2.0;
        for (k, &v) in r.iter().enumerate() {
            slot[v] = k as f64 - c;
        }
    }
}

/// Edge crossings between edges joining the same pair of layers.
fn crossings(edges: &[(usize, usize)], layer: &[usize], slot: &[f64]) -> usize {
    let mut groups: BTreeMap<(usize, usize), Vec<(f64, f64)>> = BTreeMap::new();
    for &(p, c) in edges {
        groups
            .entry((layer[p], layer[c]))
            .or_default()
            .push((slot[p], slot[c]));
    }
    let mut n = 0;
    for g in groups.values() {
        for (i, a) in g.iter().enumerate() {
            for b in &g[i + 1..] {
                if (a.0 - b.0) * (a.1 - b.1) < 0.0 {
                    n += 1;
                }
            }
        }
    }
    n
}

fn layout(n: usize, edges: &[(usize, usize)]) -> Layout {
    let layer = layers(n, edges);
    let nl = layer.iter().copied().max().map_or(0, |m| m + 1);
    let mut preds = vec![Vec::new(); n];
    let mut succs = vec![Vec::new(); n];
    for &(p, c) in edges {
        succs[p].push(c);
        preds[c].push(p);
    }
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); nl];
    for (i, &l) in layer.iter().enumerate() {
        rows[l].push(i);
    }
    let mut slot = vec![0.0f64; n];
    slots(&rows, &mut slot);
    let mut best = rows.clone();
    let mut best_x = crossings(edges, &layer, &slot);
    for sweep in 0..6 {
        if best_x == 0 {
            break;
        }
        let down = sweep % 2 == 0;
        let order: Vec<usize> = if down {
            (1..nl).collect()
        } else {
            (0..nl.saturating_sub(1)).rev().collect()
        };
        for l in order {
            let nb = if down { &preds } else { &succs };
            let mut keyed: Vec<(f64, usize, usize)> = rows[l]
                .iter()
                .enumerate()
                .map(|(k, &v)| {
                    let ns = &nb[v];
                    let b = if ns.is_empty() {
                        slot[v]
                    } else {
                        ns.iter().map(|&u| slot[u]).sum::<f64>() / ns.len() as f64
                    };
                    (b, k, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            rows[l] = keyed.into_iter().map(|t| t.2).collect();
            slots(std::slice::from_ref(&rows[l]), &mut slot);
        }
        let x = crossings(edges, &layer, &slot);
        if x < best_x {
            best_x = x;
            best = rows.clone();
        }
    }

    // Wrap wide layers onto several rows and place the rows, centred, top to bottom.
    let visual: Vec<&[usize]> = best.iter().flat_map(|r| r.chunks(MAX_PER_ROW)).collect();
    let cols = visual.iter().map(|r| r.len()).max().unwrap_or(0) as i64;
    let pitch = NODE_W + GAP_X;
    let mut pos = vec![(0i64, 0i64); n];
    let mut row = vec![0usize; n];
    // Per row: leftmost and rightmost x taken (by nodes, then by edge lanes).
    let mut extent = Vec::with_capacity(visual.len());
    for (ri, r) in visual.iter().enumerate() {
        let x0 = MARGIN + (cols - r.len() as i64) * pitch / 2;
        let y = MARGIN + ri as i64 * (NODE_H + GAP_Y);
        for (k, &v) in r.iter().enumerate() {
            pos[v] = (x0 + k as i64 * pitch, y);
            row[v] = ri;
        }
        extent.push((x0, x0 + r.len() as i64 * pitch - GAP_X));
    }
    let mut width = 2 * MARGIN + (cols * pitch - GAP_X).max(NODE_W);
    let height = 2 * MARGIN + (visual.len() as i64 * (NODE_H + GAP_Y) - GAP_Y).max(NODE_H);

    // Edges to the next row are one curve. Longer ones would run through the rows in between,
    // so they take a vertical lane beside those rows (right or left, whichever side of the
    // drawing's centre the edge is on); shorter spans are routed first and get the inner lanes.
    let centre = width / 2;
    let mut lanes: Vec<Option<i64>> = vec![None; edges.len()];
    let mut long: Vec<usize> = (0..edges.len())
        .filter(|&i| row[edges[i].1] > row[edges[i].0] + 1)
        .collect();
    long.sort_by_key(|&i| (row[edges[i].1] - row[edges[i].0], i));
    for i in long {
        let (p, c) = edges[i];
        let between = row[p] + 1..row[c];
        let mid = (pos[p].0 + pos[c].0 + NODE_W) / 2;
        let lane = if mid >= centre {
            let x = extent[between.clone()]
                .iter()
                .map(|e| e.1)
                .max()
                .unwrap_or(0)
                + LANE_GAP;
            extent[between].iter_mut().for_each(|e| e.1 = x);
            x
        } else {
            let x = extent[between.clone()]
                .iter()
                .map(|e| e.0)
                .min()
                .unwrap_or(0)
                - LANE_GAP;
            extent[between].iter_mut().for_each(|e| e.0 = x);
            x
        };
        lanes[i] = Some(lane);
    }
    // Make room for lanes outside the node columns.
    let left = lanes.iter().flatten().copied().min().unwrap_or(MARGIN);
    let dx = (MARGIN - left).max(0);
    let right = lanes.iter().flatten().copied().max().unwrap_or(0) + dx + MARGIN;
    width = (width + dx).max(right);
    for p in &mut pos {
        p.0 += dx;
    }
    let paths = edges
        .iter()
        .zip(&lanes)
        .map(|(&(p, c), lane)| {
            let (x1, y1) = (pos[p].0 + NODE_W / 2, pos[p].1 + NODE_H);
            let (x2, y2) = (pos[c].0 + NODE_W / 2, pos[c].1);
            let h = GAP_Y / 2;
            match lane {
                Some(l) => {
                    let l = l + dx;
                    let (ya, yb) = (y1 + GAP_Y, y2 - GAP_Y);
                    format!(
                        "M{x1},{y1} C{x1},{} {l},{} {l},{ya} L{l},{yb} C{l},{} {x2},{} {x2},{y2}",
                        y1 + h,
                        ya - h,
                        yb + h,
                        y2 - h
                    )
                }
                None => {
                    let d = ((y2 - y1).abs() / 2).clamp(h, 80);
                    format!("M{x1},{y1} C{x1},{} {x2},{} {x2},{y2}", y1 + d, y2 - d)
                }
            }
        })
        .collect();
    Layout {
        pos,
        paths,
        width,
        height,
    }
}

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px}
h2{font-size:16px;margin:20px 0 8px}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:0 0 12px}
dl.summary dt{font-weight:600}
dl.summary dd{margin:0}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:8px 0}
.legend .lg{cursor:default;padding:1px 4px;border-radius:4px}
.sw{display:inline-block;width:12px;height:12px;border:1.5px solid;border-radius:3px;vertical-align:-1px;margin-right:5px}
.graph{overflow:auto;max-height:80vh;border:1px solid #ddd;border-radius:6px;background:#fcfcfc}
.graph svg{display:block}
.profile{overflow:auto;border:1px solid #ddd;border-radius:6px;background:#fcfcfc;margin:0 0 12px}
.profile svg{display:block}
p.note{margin:0 0 8px;color:#444}
svg text{font:11px system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;fill:#222}
svg text.op{font-weight:600}
svg text.pt{fill:#555}
svg path.e{fill:none;stroke-width:1.6;opacity:.8}
svg path.e.x{stroke:#999;stroke-width:1.1;stroke-dasharray:4 3}
svg g.node{cursor:pointer}
svg.dim g.node{opacity:.3}
svg.dim g.node.hl{opacity:1}
svg g.node.hl rect{stroke:#000;stroke-width:2.5}
table.parts{border-collapse:collapse;margin-top:4px}
table.parts th,table.parts td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
table.parts th{background:#f3f3f3}
table.parts td.num{text-align:right;font-variant-numeric:tabular-nums}
table.parts tr.hl td,.legend .lg.hl{background:#fff1b8}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
";

/// Hover on a node, a table row or a legend entry highlights everything that shares its first
/// `data-k` token (`p<partition>` or `b<backend>`). Written without `<` so that the page needs no
/// CDATA; run once at load so that an error in it shows up at load time, not first on hover.
const SCRIPT: &str = "\
(function () {
  var svg = document.getElementById('graph');
  var on = null;
  function mark(key, yes) {
    var els = document.querySelectorAll('[data-k~=\"' + key + '\"]');
    for (var i = 0; i !== els.length; i++) {
      if (yes) { els[i].classList.add('hl'); } else { els[i].classList.remove('hl'); }
    }
  }
  function hl(key) {
    if (on === key) { return; }
    if (on !== null) { mark(on, false); }
    on = key;
    if (on !== null) { mark(on, true); }
    if (svg) { if (on === null) { svg.classList.remove('dim'); } else { svg.classList.add('dim'); } }
  }
  var items = document.querySelectorAll('[data-k]');
  for (var i = 0; i !== items.length; i++) {
    (function (el) {
      var key = el.getAttribute('data-k').split(' ')[0];
      el.addEventListener('mouseenter', function () { hl(key); });
      el.addEventListener('mouseleave', function () { hl(null); });
    })(items[i]);
  }
  if (items.length !== 0) { hl(items[0].getAttribute('data-k').split(' ')[0]); hl(null); }
})();
";

/// The whole page: a standalone HTML document with inline CSS, SVG and script only.
pub fn render(page: &Page) -> String {
    let n = page.nodes.len();
    let edges = valid_edges(n, &page.edges);
    let lay = layout(n, &edges);

    // Backends in name order, with their node and partition counts.
    let mut backends: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for nd in &page.nodes {
        backends.entry(nd.backend.as_str()).or_default().0 += 1;
    }
    for p in &page.parts {
        backends.entry(p.backend.as_str()).or_default().1 += 1;
    }
    let bidx: BTreeMap<&str, usize> = backends.keys().enumerate().map(|(i, &b)| (b, i)).collect();

    let mut o = String::with_capacity(4096 + n * 700 + edges.len() * 160 + page.parts.len() * 300);
    let title = escape(&page.title);
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    o.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(o, "<title>{title}</title>");
    let _ = write!(
        o,
        "<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    );

    if !page.summary.is_empty() {
        o.push_str("<dl class=\"summary\">\n");
        for (k, v) in &page.summary {
            let _ = writeln!(o, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
        }
        o.push_str("</dl>\n");
    }

    o.push_str("<div class=\"legend\">\n");
    for (b, &(nodes, parts)) in &backends {
        let (fill, stroke) = colours(b);
        let _ = writeln!(
            o,
            "<span class=\"lg\" data-k=\"b{}\"><span class=\"sw\" style=\"background:{fill};border-color:{stroke}\"></span><b>{}</b>: {nodes} node{}, {parts} partition{}</span>",
            bidx[b],
            escape(b),
            if nodes == 1 { "" } else { "s" },
            if parts == 1 { "" } else { "s" },
        );
    }
    if !page.edge_levels.is_empty() {
        o.push_str("<span class=\"lg\">edges: the level producer and consumer meet at, wider deeper: register, L1, L2, L3, memory</span>\n");
    }
    o.push_str("</div>\n");

    if !page.profile.is_empty() {
        profile_chart(&mut o, page);
    }

    // The graph.
    let _ = writeln!(
        o,
        "<div class=\"graph\">\n<svg id=\"graph\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"model graph\">",
        w = lay.width,
        h = lay.height
    );
    o.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"8\" refY=\"4\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#777\"/></marker></defs>\n");
    o.push_str("<g class=\"edges\">\n");
    for (&(p, c), d) in edges.iter().zip(&lay.paths) {
        // Edges inside a partition take its backend's colour; edges between partitions are grey.
        let (a, b) = (&page.nodes[p], &page.nodes[c]);
        let class = if a.part == b.part && a.backend == b.backend {
            format!("e\" stroke=\"{}", colours(&a.backend).1)
        } else {
            "e x".to_string()
        };
        // The tile-graph level: in the tooltip, and deeper levels drawn wider.
        let level = page
            .edges
            .iter()
            .position(|&e| e == (p, c))
            .and_then(|i| page.edge_levels.get(i));
        let (width, title) = match level {
            Some(l) => (
                format!(" style=\"stroke-width:{}\"", level_width(l)),
                format!(
                    "<title>{} -&gt; {}: {}</title>",
                    escape(&a.name),
                    escape(&b.name),
                    escape(l)
                ),
            ),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            o,
            "<path class=\"{class}\"{width} d=\"{d}\" marker-end=\"url(#arrow)\">{title}</path>"
        );
    }
    o.push_str("</g>\n<g class=\"nodes\">\n");
    for (i, nd) in page.nodes.iter().enumerate() {
        let (x, y) = lay.pos[i];
        let (fill, stroke) = colours(&nd.backend);
        // A node in a group: dashed outline, the group named in its tooltip.
        let group = page.groups.iter().find(|g| g.nodes.contains(&i));
        let (dash, gline) = match group {
            Some(g) => (
                " stroke-dasharray=\"5 3\"",
                format!("&#10;group: {}", escape(&g.name)),
            ),
            None => ("", String::new()),
        };
        let _ = writeln!(
            o,
            "<a href=\"#part-{part}\"><g class=\"node\" data-node=\"{i}\" data-k=\"p{part} b{b}\" transform=\"translate({x},{y})\">\
<title>{name}&#10;op: {op}&#10;shape: {shape}&#10;partition: #{part}&#10;backend: {backend}{gline}</title>\
<rect width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"7\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.5\"{dash}/>\
<text class=\"op\" x=\"8\" y=\"16\">{op_s}</text>\
<text class=\"nm\" x=\"8\" y=\"32\">{name_s}</text>\
<text class=\"pt\" x=\"{px}\" y=\"16\" text-anchor=\"end\">#{part}</text></g></a>",
            part = nd.part,
            b = bidx[nd.backend.as_str()],
            name = escape(&nd.name),
            op = escape(&nd.op),
            shape = escape(&nd.shape),
            backend = escape(&nd.backend),
            op_s = escape(&truncate_end(&nd.op, OP_CHARS)),
            name_s = escape(&short_name(&nd.name, NAME_CHARS)),
            px = NODE_W - 7,
        );
    }
    o.push_str("</g>\n");
    if n == 0 {
        let _ = writeln!(
            o,
            "<text x=\"{MARGIN}\" y=\"{}\">no nodes</text>",
            MARGIN + 24
        );
    }
    o.push_str("</svg>\n</div>\n");

    // The partitions.
    let _ = writeln!(o, "<h2>Partitions ({})</h2>", page.parts.len());
    o.push_str("<table class=\"parts\">\n<thead><tr><th>#</th><th>backend</th><th>nodes</th><th>kernel</th><th>estimated &#181;s</th><th>measured &#181;s</th><th>alternative</th></tr></thead>\n<tbody>\n");
    for p in &page.parts {
        let (fill, stroke) = colours(&p.backend);
        let measured = p.measured_us.map_or_else(|| "&#8212;".to_string(), fmt_us);
        let _ = writeln!(
            o,
            "<tr id=\"part-{i}\" data-k=\"p{i}\"><td class=\"num\">{i}</td><td><span class=\"sw\" style=\"background:{fill};border-color:{stroke}\"></span>{b}</td><td>{nodes}</td><td><code>{kernel}</code></td><td class=\"num\">{est}</td><td class=\"num\">{measured}</td><td>{alt}</td></tr>",
            i = p.index,
            b = escape(&p.backend),
            nodes = escape(&p.nodes),
            kernel = escape(&p.kernel),
            est = fmt_us(p.estimated_us),
            alt = escape(&p.alternative),
        );
    }
    o.push_str("</tbody>\n</table>\n");
    if !page.groups.is_empty() {
        let _ = writeln!(o, "<h2>Groups ({})</h2>", page.groups.len());
        o.push_str("<table class=\"parts\">\n<thead><tr><th>group</th><th>stages</th><th>instances, tiles, memory level, traffic</th></tr></thead>\n<tbody>\n");
        for g in &page.groups {
            let _ = writeln!(
                o,
                "<tr id=\"group-{n}\"><td><code>{n}</code></td><td>{s}</td><td>{d}</td></tr>",
                n = escape(&g.name),
                s = escape(&g.stages),
                d = escape(&g.detail),
            );
        }
        o.push_str("</tbody>\n</table>\n");
    }
    let _ = write!(o, "<script>\n{SCRIPT}</script>\n</body>\n</html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op: &str, part: usize, backend: &str) -> Node {
        Node {
            name: name.into(),
            op: op.into(),
            shape: "f32[1, 64]".into(),
            part,
            backend: backend.into(),
        }
    }

    fn part(index: usize, backend: &str, nodes: &str) -> PartRow {
        PartRow {
            index,
            backend: backend.into(),
            nodes: nodes.into(),
            kernel: format!("k{index}"),
            estimated_us: 1.5 * index as f64 + 0.25,
            measured_us: index.is_multiple_of(2).then_some(index as f64 + 0.125),
            alternative: if index.is_multiple_of(3) {
                String::new()
            } else {
                format!("c: {index}.0 us")
            },
        }
    }

    /// A residual-style network of `blocks` blocks (10 nodes each) on three backends (c, gemm, blas).
    fn sample(blocks: usize) -> Page {
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        let mut parts = Vec::new();
        let mut prev = None;
        for b in 0..blocks {
            let base = nodes.len();
            let p0 = parts.len();
            let pre = format!("/model/block.{b}");
            let spec: [(&str, &str, usize, &str); 10] = [
                ("norm/ReduceMean", "ReduceMean", 0, "c"),
                ("norm/Sub", "Sub", 0, "c"),
                ("norm/Mul", "Mul", 0, "c"),
                ("attn/q/MatMul", "MatMul", 1, "gemm"),
                ("attn/k/MatMul", "MatMul", 2, "blas"),
                ("attn/v/MatMul", "MatMul", 3, "blas"),
                ("attn/scores/MatMul", "MatMul", 4, "gemm"),
                ("attn/Softmax", "Softmax", 5, "c"),
                ("attn/out/MatMul", "MatMul", 6, "gemm"),
                ("Add", "Add", 7, "c"),
            ];
            for (name, op, pi, be) in spec {
                nodes.push(node(&format!("{pre}/{name}"), op, p0 + pi, be));
            }
            let local = [
                (0, 1),
                (1, 2),
                (2, 3),
                (2, 4),
                (2, 5),
                (3, 6),
                (4, 6),
                (6, 7),
                (7, 8),
                (5, 8),
                (8, 9),
            ];
            edges.extend(local.iter().map(|&(p, c)| (base + p, base + c)));
            if let Some(pv) = prev {
                edges.push((pv, base));
                edges.push((pv, base + 9));
            }
            prev = Some(base + 9);
            for pi in 0..8 {
                let members: Vec<&str> = nodes[base..]
                    .iter()
                    .filter(|n| n.part == p0 + pi)
                    .map(|n| n.name.as_str())
                    .collect();
                let be = nodes[base..]
                    .iter()
                    .find(|n| n.part == p0 + pi)
                    .map(|n| n.backend.clone())
                    .unwrap();
                parts.push(part(p0 + pi, &be, &members.join(", ")));
            }
        }
        Page {
            title: format!("sample model ({} nodes)", nodes.len()),
            summary: vec![
                ("model".into(), "sample.onnx".into()),
                ("nodes".into(), nodes.len().to_string()),
                ("partitions".into(), parts.len().to_string()),
                ("estimated total".into(), "123.45 us".into()),
            ],
            groups: vec![GroupRow {
                name: "g7".into(),
                stages: "k3 im2col -> k7 conv".into(),
                nodes: vec![0, 1],
                detail: "49 instances".into(),
            }],
            nodes,
            edge_levels: (0..edges.len())
                .map(|i| ["register", "L1", "L2", "L3", "memory"][i % 5].into())
                .collect(),
            edges,
            parts,
            // More kernels than the chart draws: the rest in one bar.
            profile: (0..MAX_BARS + 3)
                .map(|i| ProfileBar {
                    kernel: format!("k{i} Conv_{i}"),
                    backend: ["c", "dnnl"][i % 2].into(),
                    us: 1000.0 / (i + 1) as f64,
                    roof_fraction: 0.5,
                    plan: "register-blocked vecs=4 rows=4 prefetch=0".into(),
                })
                .collect(),
            profile_note: "median 1.000 ms".into(),
        }
    }

    /// Checks that tags nest: every opened element is closed in order (void elements and `/>`
    /// aside; script and style contents skipped). Returns the element names seen.
    fn check_nesting(html: &str) -> Vec<String> {
        const VOID: [&str; 6] = ["meta", "br", "hr", "img", "input", "link"];
        let mut stack: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find('<') {
            rest = &rest[i..];
            if rest.starts_with("<!") {
                let e = rest.find('>').expect("unterminated <!");
                rest = &rest[e + 1..];
                continue;
            }
            let e = rest.find('>').expect("unterminated tag");
            let tag = &rest[1..e];
            rest = &rest[e + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack.pop().unwrap_or_else(|| panic!("stray </{name}>"));
                assert_eq!(top, name, "</{name}> closes <{top}>");
                continue;
            }
            let name: String = tag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            assert!(!name.is_empty(), "bad tag <{tag}>");
            seen.push(name.clone());
            if tag.ends_with('/') || VOID.contains(&name.as_str()) {
                continue;
            }
            if name == "script" || name == "style" {
                let close = format!("</{name}>");
                let e = rest.find(&close).expect("unclosed raw text element");
                rest = &rest[e + close.len()..];
                continue;
            }
            stack.push(name);
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        seen
    }

    #[test]
    fn escapes_all_five() {
        assert_eq!(escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
        assert_eq!(escape("plain µs"), "plain µs");
    }

    #[test]
    fn escapes_every_field() {
        let evil = "<script>alert('x')</script>&\"";
        let page = Page {
            title: evil.into(),
            summary: vec![(evil.into(), evil.into())],
            nodes: vec![
                Node {
                    name: evil.into(),
                    op: evil.into(),
                    shape: evil.into(),
                    part: 0,
                    backend: evil.into(),
                },
                node("b", "Relu", 1, "c"),
            ],
            edges: vec![(0, 1)],
            edge_levels: vec![evil.into()],
            parts: vec![PartRow {
                index: 0,
                backend: evil.into(),
                nodes: evil.into(),
                kernel: evil.into(),
                estimated_us: 1.0,
                measured_us: None,
                alternative: evil.into(),
            }],
            groups: vec![GroupRow {
                name: evil.into(),
                stages: evil.into(),
                nodes: vec![0],
                detail: evil.into(),
            }],
            profile: vec![ProfileBar {
                kernel: evil.into(),
                backend: evil.into(),
                us: 1.0,
                roof_fraction: 0.1,
                plan: evil.into(),
            }],
            profile_note: evil.into(),
        };
        let html = render(&page);
        assert!(!html.contains("alert('x')"), "raw text leaked");
        assert!(!html.contains("<script>alert"), "raw tag leaked");
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
        assert_eq!(
            html.matches("<script").count(),
            1,
            "only the page's own script"
        );
        check_nesting(&html);
    }

    #[test]
    fn deterministic() {
        let page = sample(5);
        let a = render(&page);
        let b = render(&page.clone());
        assert_eq!(a, b);
        // Different backend names keep their colours whatever else is on the page.
        assert_eq!(colours("tvm"), colours("tvm"));
        assert_ne!(colours("c"), colours("gemm"));
    }

    #[test]
    fn every_node_and_part_appears() {
        let page = sample(3);
        let html = render(&page);
        assert_eq!(html.matches("<g class=\"node\"").count(), page.nodes.len());
        for (i, n) in page.nodes.iter().enumerate() {
            assert!(html.contains(&format!("data-node=\"{i}\"")));
            assert!(html.contains(&format!("<title>{}&#10;op: {}", escape(&n.name), n.op)));
        }
        assert_eq!(html.matches("<tr id=\"part-").count(), page.parts.len());
        for p in &page.parts {
            assert!(html.contains(&format!("<tr id=\"part-{0}\" data-k=\"p{0}\">", p.index)));
            assert!(html.contains(&format!("<code>{}</code>", p.kernel)));
        }
        for (k, v) in &page.summary {
            assert!(html.contains(&format!("<dt>{k}</dt><dd>{v}</dd>")));
        }
        // Groups: a row each, their nodes outlined dashed and named in the tooltip.
        assert!(html.contains(
            "<tr id=\"group-g7\"><td><code>g7</code></td><td>k3 im2col -&gt; k7 conv</td>"
        ));
        assert_eq!(html.matches("stroke-dasharray=\"5 3\"").count(), 2);
        assert_eq!(html.matches("&#10;group: g7</title>").count(), 2);
        // Legend: one entry per backend with its node count.
        assert!(html.contains("<b>gemm</b>: 9 nodes, 9 partitions"));
        assert!(html.contains("<b>blas</b>: 6 nodes, 6 partitions"));
        assert!(html.contains("<b>c</b>: 15 nodes, 9 partitions"));
        let edges = valid_edges(page.nodes.len(), &page.edges);
        assert_eq!(html.matches("<path class=\"e").count(), edges.len());
        // Every edge names its tile-graph level in its tooltip and is drawn at its width.
        for &(a, b) in &edges {
            let i = page.edges.iter().position(|&e| e == (a, b)).unwrap();
            let level = &page.edge_levels[i];
            let (a, b) = (escape(&page.nodes[a].name), escape(&page.nodes[b].name));
            assert!(html.contains(&format!("<title>{a} -&gt; {b}: {level}</title>")));
        }
        assert!(html.contains("style=\"stroke-width:3.4\""));
        assert!(html.contains("style=\"stroke-width:1.1\""));
    }

    #[test]
    fn nesting_and_self_contained() {
        let html = render(&sample(2));
        let seen = check_nesting(&html);
        for t in ["html", "head", "body", "script", "style"] {
            assert_eq!(seen.iter().filter(|s| *s == t).count(), 1, "<{t}> once");
        }
        // The graph and the profile chart: its first MAX_BARS kernels and one bar for the rest.
        assert_eq!(seen.iter().filter(|s| *s == "svg").count(), 2);
        assert_eq!(html.matches("<g class=\"bar\">").count(), MAX_BARS + 1);
        assert!(html.contains("3 more kernels"));
        // The partitions' table and the groups'.
        assert_eq!(seen.iter().filter(|s| *s == "table").count(), 2);
        assert!(html.starts_with("<!DOCTYPE html>\n"));
        assert!(!html.contains("http:") && !html.contains("https:"));
        assert!(!html.contains("src=") && !html.contains("<link"));
        assert!(!SCRIPT.contains('<'));
    }

    #[test]
    fn layers_are_longest_paths() {
        // 0 -> 1 -> 2 -> 3 and a skip 0 -> 3; 4 is isolated; 5 consumes 0 and 3.
        let e = valid_edges(6, &[(0, 1), (1, 2), (2, 3), (0, 3), (0, 5), (3, 5)]);
        assert_eq!(layers(6, &e), vec![0, 1, 2, 3, 0, 4]);
        let lay = layout(6, &e);
        assert_eq!(lay.pos[0].1, lay.pos[4].1);
        assert!(lay.pos[0].1 < lay.pos[1].1 && lay.pos[3].1 < lay.pos[5].1);
    }

    #[test]
    fn long_edges_go_around_the_rows_between() {
        // 0 -> 1 -> 2 -> 3 plus skips 0 -> 3 and 1 -> 3.
        let e = valid_edges(4, &[(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)]);
        let lay = layout(4, &e);
        let lane = |d: &str| -> i64 {
            let l = d.split(" L").nth(1).expect("a lane");
            l.split(',').next().unwrap().parse().unwrap()
        };
        let i03 = e.iter().position(|&x| x == (0, 3)).unwrap();
        let i13 = e.iter().position(|&x| x == (1, 3)).unwrap();
        let right = |v: usize| lay.pos[v].0 + NODE_W;
        // 1 -> 3 passes row 2 only, on the inner lane; 0 -> 3 passes rows 1 and 2, further out.
        assert!(lane(&lay.paths[i13]) > right(2));
        assert!(lane(&lay.paths[i03]) > lane(&lay.paths[i13]));
        assert!(lane(&lay.paths[i03]) < lay.width);
        assert!(!lay.paths[e.iter().position(|&x| x == (0, 1)).unwrap()].contains(" L"));
    }

    #[test]
    fn barycentre_removes_crossings() {
        // Two chains whose second layer starts crossed: 0->3, 1->2.
        let e = valid_edges(4, &[(0, 3), (1, 2)]);
        let lay = layout(4, &e);
        assert!(lay.pos[0].0 < lay.pos[1].0);
        assert!(lay.pos[3].0 < lay.pos[2].0, "{:?}", lay.pos);
    }

    #[test]
    fn no_overlaps_and_wide_layers_wrap() {
        // One source feeding 30 consumers: the consumer layer wraps.
        let n = 31;
        let edges: Vec<_> = (1..n).map(|c| (0, c)).collect();
        let lay = layout(n, &edges);
        let mut seen = BTreeSet::new();
        for &(x, y) in &lay.pos {
            assert!(seen.insert((x, y)), "two nodes at {x},{y}");
        }
        // Edges to the wrapped rows take lanes beside the rows they pass.
        assert!(lay.width <= 2 * MARGIN + MAX_PER_ROW as i64 * (NODE_W + GAP_X) + 30 * LANE_GAP);
        let rows: BTreeSet<i64> = lay.pos.iter().map(|p| p.1).collect();
        assert_eq!(rows.len(), 1 + 30_usize.div_ceil(MAX_PER_ROW));
    }

    #[test]
    fn bad_edges_and_cycles_do_not_panic() {
        let page = Page {
            title: "t".into(),
            nodes: vec![
                node("a", "A", 0, "c"),
                node("b", "B", 0, "c"),
                node("c", "C", 1, "x"),
            ],
            edges: vec![(0, 1), (1, 0), (1, 2), (2, 2), (7, 0), (0, 9), (0, 1)],
            ..Page::default()
        };
        let html = render(&page);
        check_nesting(&html);
        assert_eq!(html.matches("<path class=\"e").count(), 3);
        let empty = render(&Page::default());
        check_nesting(&empty);
        assert!(empty.contains("<svg"));
    }

    #[test]
    fn size_for_200_nodes() {
        let page = sample(20);
        assert_eq!(page.nodes.len(), 200);
        let html = render(&page);
        assert!(html.len() < 400_000, "{} bytes", html.len());
        let lay = layout(200, &valid_edges(200, &page.edges));
        assert!(
            lay.width <= 2 * MARGIN + 4 * (NODE_W + GAP_X),
            "{}",
            lay.width
        );
    }

    #[test]
    fn truncation() {
        assert_eq!(
            short_name("/model/layers.0/attn/MatMul_1", 24),
            "layers.0/attn/MatMul_1"
        );
        assert_eq!(short_name("/model/layers.0/attn/MatMul_1", 12), "MatMul_1");
        assert_eq!(short_name("a/bb/cc", 5), "bb/cc");
        assert_eq!(short_name("abcdef", 4), "\u{2026}def");
        assert_eq!(short_name("dir/", 24), "dir");
        assert_eq!(short_name("", 24), "");
        assert_eq!(truncate_end("ConvTranspose", 5), "Conv\u{2026}");
        assert_eq!(fmt_us(f64::NAN), "n/a");
    }

    /// Writes `target/html-sample.html` (30 nodes in 3 blocks, backends c/gemm/blas) for
    /// `tests/support/check_html.sh`.
    #[test]
    fn write_sample_page() {
        let page = sample(3);
        assert_eq!(page.nodes.len(), 30);
        let dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("html-sample.html"), render(&page)).unwrap();
    }
}
