//! Where the time goes (`collage bench --profile`): every kernel of a compiled model timed inside
//! the model run, not alone. The model is built with `CL_PROFILE`, whose run function adds each
//! kernel's wall time (from the end of the kernel before it) to a counter per kernel; the timed
//! runs are those of [`super::run::bench`], so the kernel times add up to the end-to-end time but
//! for the clock reads and the run's own entry and exit.
//!
//! Each kernel is set against the target's roofline ([`Roofs`]): its floating-point work and the
//! bytes it must move at least (every buffer it reads, once, and its output), so that a kernel
//! far below the roof that bounds it (compute or memory, whichever is lower at its arithmetic
//! intensity) stands out. The roofs are measured where the profile runs, before and after the
//! timed runs (the higher kept): the FMA throughput of one core on independent vector chains, the
//! read bandwidth of one core over a buffer larger than the caches, and over half its L2 (the
//! roof of a kernel whose bytes fit there), all times the thread count. On a machine busy with
//! other work a kernel can show more than 100% of its roof.
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::driver::Options;
use crate::error::{io_err, Error, Result};
use crate::ir::Tensor;
use crate::target::{Target, VectorIsa};
use crate::te::BufId;

use super::run::{load_model_with, timed_runs, BenchResult};

/// The machine's roofs for a profile, measured where it runs.
#[derive(Clone, Copy, Debug)]
pub struct Roofs {
    /// Floating-point operations per second, in billions (an FMA is two): one core's measured
    /// peak times the thread count.
    pub gflops: f64,
    /// Bytes read per second from memory, in billions: one core's measured read bandwidth over
    /// a buffer larger than the caches, times the thread count.
    pub gbps: f64,
    /// The same from the cache of [`Roofs::cache_bytes`] (half the L2 read over and over).
    pub cache_gbps: f64,
    /// The working set, in bytes, up to which a kernel's bytes are taken to come from the cache
    /// (the L2 of the cores that run it).
    pub cache_bytes: f64,
}

impl Roofs {
    /// The bandwidth roof for a kernel that moves `bytes`: the cache's when they fit in it.
    pub fn bandwidth(&self, bytes: f64) -> f64 {
        if bytes <= self.cache_bytes {
            self.cache_gbps
        } else {
            self.gbps
        }
    }

    /// Each rate the higher of the two measurements.
    pub fn max(self, o: Roofs) -> Roofs {
        Roofs {
            gflops: self.gflops.max(o.gflops),
            gbps: self.gbps.max(o.gbps),
            cache_gbps: self.cache_gbps.max(o.cache_gbps),
            cache_bytes: self.cache_bytes,
        }
    }

    /// The roof at arithmetic intensity `flops / bytes`, GFLOP/s.
    pub fn at(&self, flops: f64, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return self.gflops;
        }
        self.gflops.min(self.bandwidth(bytes) * flops / bytes)
    }
}

/// One kernel's share of a profiled run.
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// Stage buffer id (`k<id>` in the generated C and in `collage explain`).
    pub id: BufId,
    /// The stage name (its last node's).
    pub name: String,
    /// The backend that computes it.
    pub backend: &'static str,
    /// Its plan as the cache records it (`<backend> call` for a library call).
    pub plan: String,
    /// Mean microseconds per run.
    pub us: f64,
    /// Floating-point operations per run (a multiply-add is two).
    pub flops: f64,
    /// Bytes it moves at least per run: every buffer it reads, once, and its output.
    pub bytes: f64,
}

impl KernelTime {
    /// Achieved GFLOP/s.
    pub fn gflops(&self) -> f64 {
        self.flops / self.us / 1e3
    }

    /// Achieved GB/s (of the compulsory bytes).
    pub fn gbps(&self) -> f64 {
        self.bytes / self.us / 1e3
    }

    /// Whether memory bounds it on `roofs` (its intensity is below the ridge).
    pub fn memory_bound(&self, roofs: &Roofs) -> bool {
        roofs.at(self.flops, self.bytes) < roofs.gflops
    }

    /// The fraction of its roof it reaches: achieved over the roof at its intensity.
    pub fn roof_fraction(&self, roofs: &Roofs) -> f64 {
        if self.memory_bound(roofs) {
            self.gbps() / roofs.bandwidth(self.bytes)
        } else {
            self.gflops() / roofs.gflops
        }
    }
}

/// A profiled benchmark: the end-to-end latency and every kernel's time, slowest first.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The model's name.
    pub model: String,
    /// End-to-end latency of the profiled build.
    pub bench: BenchResult,
    /// Mean end-to-end milliseconds per run (what the kernel times add up to).
    pub mean_ms: f64,
    /// Threads.
    pub threads: usize,
    /// The roofs the kernels are set against.
    pub roofs: Roofs,
    /// Every kernel that ran, slowest first.
    pub kernels: Vec<KernelTime>,
}

impl Profile {
    /// The kernels' mean milliseconds per run, summed.
    pub fn kernel_ms(&self) -> f64 {
        self.kernels.iter().map(|k| k.us).sum::<f64>() / 1e3
    }

    /// The end-to-end figures and the kernels' sum, as one line.
    pub fn summary(&self) -> String {
        format!(
            "median {:.3} ms, mean {:.3} ms over {} runs ({} thread(s)); kernels sum to {:.3} ms ({:.1}% of the mean)",
            self.bench.median_ms,
            self.mean_ms,
            self.bench.runs,
            self.threads,
            self.kernel_ms(),
            100.0 * self.kernel_ms() / self.mean_ms.max(1e-12)
        )
    }

    /// The roofs, as one line.
    pub fn roofs_line(&self) -> String {
        format!(
            "{:.1} GFLOP/s, {:.1} GB/s from memory, {:.1} GB/s from cache (up to {:.0} KiB)",
            self.roofs.gflops,
            self.roofs.gbps,
            self.roofs.cache_gbps,
            self.roofs.cache_bytes / 1024.0
        )
    }
}

/// Compiles `model` with full optimisation and profiling, feeds it `input` (or deterministic
/// pseudo-random data), warms up, then runs for at least `min_time` and 10 runs, timing every
/// kernel inside the runs.
pub fn profile(
    model: &Path,
    input: Option<Vec<Tensor>>,
    threads: usize,
    min_time: Duration,
    work: &Path,
    opts: &Options,
) -> Result<Profile> {
    let mut loaded = load_model_with(model, input.as_deref(), work, "-O3", opts, true)?;
    // Roofs measured before and after the runs, the higher kept: a machine busy with something
    // else for a moment lowers one measurement, not both.
    let probe = RoofProbe::build(work)?;
    let before = probe.measure(threads);
    let mut times = timed_runs(&mut loaded, input, threads, min_time)?;
    let runs = times.len();
    let counters = loaded
        .model
        .take_profile()
        .expect("a profiled build has counters");
    let mean_ms = times.iter().sum::<f64>() / runs as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| times[((runs - 1) as f64 * q).round() as usize];
    let p = &loaded.compiled.program;
    let mut kernels: Vec<KernelTime> = counters
        .iter()
        .enumerate()
        .filter(|&(_, &ns)| ns > 0)
        .filter_map(|(id, &ns)| {
            let id = BufId::new(id);
            let st = p.stage(id)?;
            // A group's kernel runs its producer too; a row group's, every member.
            let row_group = p.row_groups.iter().find(|g| g.last() == id);
            let members: Vec<BufId> = match row_group {
                Some(g) => g.stages.clone(),
                None => std::iter::once(id)
                    .chain(
                        p.groups
                            .iter()
                            .filter(|g| g.consumer == id)
                            .map(|g| g.producer),
                    )
                    .collect(),
            };
            let mut flops = 0.0;
            let mut read: Vec<BufId> = Vec::new();
            for &m in &members {
                let s = p.stage(m)?;
                let per = if s.reduce.is_some() { 2.0 } else { 1.0 };
                flops += per * s.work() as f64;
                read.extend(s.reads().filter(|b| !members.contains(b)));
            }
            read.sort_unstable();
            read.dedup();
            let bytes = p.bufs[id.index()].ty.bytes()
                + read
                    .iter()
                    .map(|&b| p.bufs[b.index()].ty.bytes())
                    .sum::<usize>();
            let name = match row_group {
                Some(g) => format!("{} +{} grouped", st.name, g.stages.len() - 1),
                None => st.name.clone(),
            };
            Some(KernelTime {
                id,
                name,
                backend: st.exec.backend(),
                plan: crate::tune::measure::plan_text(p, id),
                us: ns as f64 / runs as f64 / 1e3,
                flops,
                bytes: bytes as f64,
            })
        })
        .collect();
    kernels.sort_by(|a, b| b.us.total_cmp(&a.us).then(a.id.cmp(&b.id)));
    let roofs = before.max(probe.measure(threads));
    Ok(Profile {
        model: loaded.compiled.name.clone(),
        bench: BenchResult {
            median_ms: pct(0.5),
            p90_ms: pct(0.9),
            runs,
        },
        mean_ms,
        threads,
        roofs,
        kernels,
    })
}

type FmaFn = unsafe extern "C" fn(i64, f32) -> f32;
type ReadFn = unsafe extern "C" fn(*const f32, i64) -> f32;

/// What measures the roofs on this machine: a small C program built with the system compiler
/// for the host's vector ISA (12 independent FMA chains of full vectors; a sum over a buffer),
/// built once and run as often as [`RoofProbe::measure`] is called.
pub struct RoofProbe {
    fma: FmaFn,
    read: ReadFn,
    lanes: usize,
    l2: usize,
    // Last: the functions above live in it.
    _lib: libloading::Library,
}

impl RoofProbe {
    /// Builds the program in `work` and loads it.
    pub fn build(work: &Path) -> Result<RoofProbe> {
        let cpu = Target::host();
        let cpu = cpu.cpu();
        let (pragma, lanes) = match cpu.map_or(VectorIsa::Baseline, |c| c.isa) {
            VectorIsa::Avx512 => ("#pragma GCC target(\"avx512f,fma\")\n", 16),
            VectorIsa::Avx2 => ("#pragma GCC target(\"avx2,fma\")\n", 8),
            _ => ("", 4),
        };
        let l2 = cpu.map_or(1 << 20, |c| c.l2);
        let src = format!(
            "#include <stdint.h>\n{pragma}typedef float vf __attribute__((vector_size({bytes})));\n\
             float cl_fma(int64_t n, float x) {{\n\
             vf a[12], m, c;\n\
             for (int i = 0; i < {lanes}; ++i) {{ m[i] = 0.999999f; c[i] = x; }}\n\
             for (int k = 0; k < 12; ++k) a[k] = c * (float)k;\n\
             for (int64_t i = 0; i < n; ++i) {{\n\
             #pragma GCC unroll 12\n\
             for (int k = 0; k < 12; ++k) a[k] = a[k] * m + c;\n\
             }}\n\
             float s = 0; for (int k = 0; k < 12; ++k) for (int i = 0; i < {lanes}; ++i) s += a[k][i];\n\
             return s;\n}}\n\
             float cl_read(const float *p, int64_t n) {{\n\
             vf s[4] = {{0}};\n\
             for (int64_t i = 0; i + {w4} <= n; i += {w4}) {{\n\
             for (int k = 0; k < 4; ++k) s[k] += *(const vf *)(p + i + k * {lanes});\n\
             }}\n\
             float t = 0; for (int k = 0; k < 4; ++k) for (int i = 0; i < {lanes}; ++i) t += s[k][i];\n\
             return t;\n}}\n",
            bytes = lanes * 4,
            w4 = lanes * 4,
        );
        std::fs::create_dir_all(work).map_err(io_err(work))?;
        let c_path = work.join("roofs.c");
        std::fs::write(&c_path, src).map_err(io_err(&c_path))?;
        let so = work.join("libroofs.so");
        crate::toolchain::build_shared(&c_path, &so, "-O2")?;
        // SAFETY: the library was just built from the source above, which has no constructors.
        let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| Error::Load {
            path: so.clone(),
            detail: e.to_string(),
        })?;
        let load = |name: &str| Error::Load {
            path: so.clone(),
            detail: format!("no symbol `{name}`"),
        };
        // SAFETY: the functions have exactly these signatures.
        let (fma, read) = unsafe {
            (
                *lib.get::<FmaFn>(b"cl_fma").map_err(|_| load("cl_fma"))?,
                *lib.get::<ReadFn>(b"cl_read").map_err(|_| load("cl_read"))?,
            )
        };
        Ok(RoofProbe {
            fma,
            read,
            lanes,
            l2,
            _lib: lib,
        })
    }

    /// The roofs for `threads` threads: each rate the best of five, one core, scaled by the
    /// thread count (memory: a sum over 64 MiB; cache: over half the L2, 64 times).
    pub fn measure(&self, threads: usize) -> Roofs {
        let (fma, read, lanes, l2) = (self.fma, self.read, self.lanes, self.l2);
        let best = |f: &mut dyn FnMut() -> f64| (0..5).map(|_| f()).fold(f64::MAX, f64::min);
        let iters: i64 = 20_000_000;
        let mut sink = 0.0f32;
        let fma_s = best(&mut || {
            let t = Instant::now();
            // SAFETY: `cl_fma` reads and writes nothing but its locals.
            sink += unsafe { fma(iters, 1.0) };
            t.elapsed().as_secs_f64()
        });
        let n: usize = 16 << 20;
        let buf = vec![1.0f32; n];
        let read_s = best(&mut || {
            let t = Instant::now();
            // SAFETY: `buf` holds `n` floats; `cl_read` reads whole vectors below `n` (unaligned
            // vector loads through a `vector_size` pointer are what GCC emits for them).
            sink += unsafe { read(buf.as_ptr(), n as i64) };
            t.elapsed().as_secs_f64()
        });
        // Half the L2 (whole groups of 4 vectors), read 64 times per measurement.
        let m = (l2 / 8 / (lanes * 4) * (lanes * 4)).max(lanes * 4);
        let reps = 64;
        let cache_s = best(&mut || {
            let t = Instant::now();
            for _ in 0..reps {
                // SAFETY: as above, over the first `m` floats of `buf` (`m` < `n`).
                sink += unsafe { read(buf.as_ptr(), m as i64) };
            }
            t.elapsed().as_secs_f64()
        });
        std::hint::black_box(sink);
        let threads = threads.max(1) as f64;
        Roofs {
            gflops: (iters as f64 * 12.0 * lanes as f64 * 2.0) / fma_s / 1e9 * threads,
            gbps: (n as f64 * 4.0) / read_s / 1e9 * threads,
            cache_gbps: (m as f64 * 4.0 * reps as f64) / cache_s / 1e9 * threads,
            cache_bytes: l2 as f64 * threads,
        }
    }
}

/// The profile as a table: the end-to-end time, the kernels' sum, the roofs, then every kernel
/// slowest first with its share, achieved rate and fraction of its roof.
pub fn render(pr: &Profile) -> String {
    let mut out = String::new();
    let total_us: f64 = pr.kernels.iter().map(|k| k.us).sum();
    writeln!(out, "profile of {}: {}", pr.model, pr.summary()).unwrap();
    writeln!(
        out,
        "roofs (measured here, one core x {} thread(s)): {}",
        pr.threads,
        pr.roofs_line()
    )
    .unwrap();
    writeln!(
        out,
        "{:>5}  {:<28} {:<7} {:>10} {:>6} {:>6}  {:>11}  {:>5}  plan",
        "id", "kernel (last node)", "backend", "us/run", "share", "cum", "rate", "roof"
    )
    .unwrap();
    let mut cum = 0.0;
    for k in &pr.kernels {
        cum += k.us;
        let rate = if k.memory_bound(&pr.roofs) {
            format!("{:.1} GB/s", k.gbps())
        } else {
            format!("{:.1} GF/s", k.gflops())
        };
        let name = if k.name.chars().count() > 28 {
            let s: String = k.name.chars().take(27).collect();
            format!("{s}~")
        } else {
            k.name.clone()
        };
        writeln!(
            out,
            "{:>5}  {:<28} {:<7} {:>10.1} {:>5.1}% {:>5.1}%  {:>11}  {:>4.0}%  {}",
            format!("k{}", k.id),
            name,
            k.backend,
            k.us,
            100.0 * k.us / total_us.max(1e-12),
            100.0 * cum / total_us.max(1e-12),
            rate,
            100.0 * k.roof_fraction(&pr.roofs),
            k.plan
        )
        .unwrap();
    }
    out
}

/// Adds `pr`'s kernels to the explain page as its profile chart, with the line above it.
pub fn add_to_page(page: &mut crate::report::html::Page, pr: &Profile) {
    page.profile_note = format!("{}; roofs measured here: {}", pr.summary(), pr.roofs_line());
    page.profile = pr
        .kernels
        .iter()
        .map(|k| crate::report::html::ProfileBar {
            kernel: format!("k{} {}", k.id, k.name),
            backend: k.backend.to_string(),
            us: k.us,
            roof_fraction: k.roof_fraction(&pr.roofs),
            plan: k.plan.clone(),
        })
        .collect();
}

/// A JSON string literal of `s`.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The profile as one JSON object: the end-to-end figures, the roofs and every kernel (slowest
/// first) with its microseconds per run, work and roof fraction.
pub fn to_json(pr: &Profile) -> String {
    let kernels: Vec<String> = pr
        .kernels
        .iter()
        .map(|k| {
            format!(
                "{{\"id\": {}, \"name\": {}, \"backend\": {}, \"plan\": {}, \"us\": {:.3}, \"flops\": {}, \"bytes\": {}, \"memory_bound\": {}, \"roof_fraction\": {:.4}}}",
                k.id,
                json_str(&k.name),
                json_str(k.backend),
                json_str(&k.plan),
                k.us,
                k.flops,
                k.bytes,
                k.memory_bound(&pr.roofs),
                k.roof_fraction(&pr.roofs)
            )
        })
        .collect();
    format!(
        "{{\"model\": {}, \"median_ms\": {}, \"p90_ms\": {}, \"mean_ms\": {}, \"runs\": {}, \"threads\": {}, \"kernel_ms\": {}, \"roof_gflops\": {}, \"roof_gbps\": {}, \"roof_cache_gbps\": {}, \"kernels\": [{}]}}",
        json_str(&pr.model),
        pr.bench.median_ms,
        pr.bench.p90_ms,
        pr.mean_ms,
        pr.bench.runs,
        pr.threads,
        pr.kernel_ms(),
        pr.roofs.gflops,
        pr.roofs.gbps,
        pr.roofs.cache_gbps,
        kernels.join(", ")
    )
}
