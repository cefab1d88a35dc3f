//! Kernel reports for `collage explain` and `collage tune`: every generated kernel with the nodes it
//! came from, its schedule, an analytic cost estimate and, when the cost cache has it, its measured
//! latency. Kernels are keyed in the cache by a canonical signature of their tensor expression, so
//! the same kernel in another model (same computation, shapes and weight layouts) shares an entry.
//!
//! Today every kernel runs on the `c` backend; the placement search over several backends
//! (`partition`) will use the same keys.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use collage_runtime::Executor;

use crate::codegen::c::{schedule_of, Schedule};
use crate::codegen::Compiled;
use crate::error::{Error, Result};
use crate::measure::{self, kernel_program, MeasureBudget};
use crate::te::{BufKind, Program, Stage};
use crate::tune::{CostCache, Entry, Key, TargetFingerprint};

/// The backend every kernel currently runs on.
pub const BACKEND: &str = "c";

/// One generated kernel.
#[derive(Clone, Debug)]
pub struct KernelReport {
    /// Stage buffer id in the program (`k<id>` in the generated C).
    pub id: u32,
    /// The stage name (the node it came from; fused stages keep their last node's name).
    pub name: String,
    /// The loop schedule.
    pub schedule: Schedule,
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

fn fnv64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The cache key of stage `id` of `p`: the stage's tensor expression with its operands renumbered
/// (via [`kernel_program`]), the operands' layouts, and its input and output types.
pub fn kernel_key(p: &Program, id: u32, target: &TargetFingerprint) -> Key {
    let k = kernel_program(p, id);
    let mut inputs = Vec::new();
    let mut layout = String::new();
    let mut stage_text = String::new();
    for b in &k.bufs {
        match &b.kind {
            BufKind::Stage(st) => {
                let canonical = Stage {
                    name: String::new(),
                    ..st.clone()
                };
                stage_text = format!("{canonical:?}");
            }
            BufKind::Dead => {}
            _ => {
                inputs.push(b.ty.to_string());
                layout.push(if b.packed { 'p' } else { 'r' });
            }
        }
    }
    let op = p
        .stage(id)
        .map(|s| {
            s.name
                .rsplit_once('_')
                .map_or(s.name.as_str(), |(a, _)| a)
                .trim_end_matches(|c: char| c.is_ascii_digit() || c == '_')
                .to_string()
        })
        .unwrap_or_default();
    let signature = format!("{op} {layout} #{:016x}", fnv64(&stage_text));
    let output = p.bufs[id as usize].ty.to_string();
    Key::new(target.clone(), BACKEND, signature, inputs, [output])
}

/// Rough single-thread throughput per schedule, in body evaluations per microsecond: the analytic
/// model used when the cache has no measurement.
fn rate(s: Schedule) -> f64 {
    match s {
        Schedule::RegisterBlocked => 40_000.0,
        Schedule::Row => 6_000.0,
        Schedule::Plain => 3_000.0,
        Schedule::Elementwise => 5_000.0,
    }
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
            let schedule = schedule_of(p, st, 16);
            let key = kernel_key(p, id, target);
            let measured = cache.and_then(|c| c.get(&key)).cloned();
            KernelReport {
                id,
                name: st.name.clone(),
                schedule,
                output: p.bufs[id as usize].ty.to_string(),
                work: st.work(),
                estimate_us: st.work() as f64 / rate(schedule) + 0.05,
                key,
                measured,
            }
        })
        .collect()
}

/// The text report: one line per kernel, then the totals.
pub fn render_text(model: &str, ks: &[KernelReport]) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "model {model}: {} kernels, all on backend `{BACKEND}` (the only backend in this build)",
        ks.len()
    )
    .unwrap();
    writeln!(
        out,
        "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12} {:>12}",
        "id", "kernel (last node)", "schedule", "output", "work", "est. us", "measured us"
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
            "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12.2} {:>12}",
            format!("k{}", k.id),
            truncate(&k.name, 28),
            format!("{:?}", k.schedule),
            truncate(&k.output, 22),
            k.work,
            k.estimate_us,
            m
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

/// Measures every kernel of `c` missing from `cache` (one shared library for all of them), adds
/// the results, and calls `progress(done, total)` after each. Returns how many were measured.
pub fn tune(
    c: &Compiled,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    budget: MeasureBudget,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let p = &c.program;
    let todo: Vec<(u32, Key)> = measure::stages(p)
        .into_iter()
        .map(|id| (id, kernel_key(p, id, target)))
        .filter(|(_, k)| cache.get(k).is_none())
        .collect();
    let total = todo.len();
    progress(0, total);
    if todo.is_empty() {
        return Ok(0);
    }
    let ids: Vec<u32> = todo.iter().map(|(id, _)| *id).collect();
    let mut harnesses = measure::build_kernels(p, &ids, work, "-O3")?;
    let exec = Executor::Serial;
    for (i, ((id, key), h)) in todo.into_iter().zip(harnesses.iter_mut()).enumerate() {
        let m = h.time(&exec, &budget);
        let mut params = BTreeMap::new();
        params.insert(
            "schedule".to_string(),
            format!("{:?}", schedule_of(p, p.stage(id).unwrap(), 16)),
        );
        let entry =
            Entry::new(m.median_us, m.p90_us, m.samples, params).map_err(|e| Error::Model {
                model: c.name.clone(),
                detail: format!("kernel k{id}: {e}"),
            })?;
        cache.insert(key, entry).map_err(|e| Error::Model {
            model: c.name.clone(),
            detail: format!("kernel k{id}: {e}"),
        })?;
        save(cache)?;
        progress(i + 1, total);
    }
    Ok(total)
}

/// The default measurement budget of `collage tune`.
pub fn default_budget() -> MeasureBudget {
    MeasureBudget {
        warmup: 5,
        min_runs: 20,
        min_time: Duration::from_millis(50),
    }
}
