//! Target descriptions: what the schedulers (`fusion`, `schedule`) and the tuner need to know
//! about a machine, and nothing else. A CPU is its vector ISA and width, its FMA throughput, its
//! caches and its cores; a GPU is its streaming multiprocessors, registers and shared memory.
//!
//! A description is either named ([`Target::named`]: `x86-64-v3`, `x86-64-v4`, `aarch64`,
//! `sm_90`, ...), which is what a build without tuning uses, so that it never reads the build
//! machine, or read from the host ([`Target::host`]: cpuid through `std::arch`, cache sizes and
//! core count from Linux's sysfs), which is what `collage tune` measures on. Its
//! [`text`](Target::text) is one line that names every field, so that it can be part of a
//! fingerprint and printed by `explain`.
use std::fmt;

/// A machine the generated code runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A CPU (generated C).
    Cpu(Cpu),
    /// An NVIDIA GPU (generated CUDA and its libraries).
    Gpu(Gpu),
}

/// The vector instruction set the schedules are shaped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VectorIsa {
    /// No SIMD beyond what the compiler finds (SSE2 on x86-64).
    Baseline,
    /// AVX2 + FMA (256-bit).
    Avx2,
    /// AVX-512F (512-bit).
    Avx512,
    /// Arm NEON / ASIMD (128-bit, FMA).
    Neon,
}

impl VectorIsa {
    /// The vector register width in bits.
    pub fn bits(self) -> usize {
        match self {
            VectorIsa::Baseline | VectorIsa::Neon => 128,
            VectorIsa::Avx2 => 256,
            VectorIsa::Avx512 => 512,
        }
    }

    /// f32 lanes per vector register.
    pub fn f32_lanes(self) -> usize {
        self.bits() / 32
    }

    /// Architectural vector registers (what a register tile of accumulators must fit in,
    /// besides the operands it loads).
    pub fn vector_registers(self) -> usize {
        match self {
            VectorIsa::Baseline | VectorIsa::Avx2 => 16,
            VectorIsa::Avx512 | VectorIsa::Neon => 32,
        }
    }

    /// The name in target texts.
    pub fn name(self) -> &'static str {
        match self {
            VectorIsa::Baseline => "baseline",
            VectorIsa::Avx2 => "avx2",
            VectorIsa::Avx512 => "avx512",
            VectorIsa::Neon => "neon",
        }
    }
}

/// A CPU: one core's vector unit and private caches, the shared last-level cache, the cores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// Where the description comes from: a target name, or `host`.
    pub name: String,
    /// `x86_64` or `aarch64` (as `std::env::consts::ARCH` spells it).
    pub arch: &'static str,
    /// The widest vector ISA the schedules may use.
    pub isa: VectorIsa,
    /// Vector FMA instructions issued per cycle per core.
    pub fma_per_cycle: usize,
    /// Cache line, bytes.
    pub line: usize,
    /// L1 data cache per core, bytes.
    pub l1d: usize,
    /// L2 per core, bytes.
    pub l2: usize,
    /// Shared last-level cache, bytes (0: none).
    pub l3: usize,
    /// Cores the generated code may use.
    pub cores: usize,
}

/// An NVIDIA GPU, for the CUDA backend: what bounds a thread block's tile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Where the description comes from (`sm_90`, ...).
    pub name: String,
    /// Compute capability, major * 10 + minor (90 for Hopper).
    pub sm: u32,
    /// Streaming multiprocessors.
    pub sms: usize,
    /// 32-bit registers per multiprocessor.
    pub registers_per_sm: usize,
    /// Registers one thread may use.
    pub registers_per_thread: usize,
    /// Shared memory one thread block may use, bytes.
    pub shared_per_block: usize,
    /// Shared memory per multiprocessor, bytes.
    pub shared_per_sm: usize,
    /// Threads per warp.
    pub warp: usize,
    /// Threads per block at most.
    pub max_threads_per_block: usize,
    /// L2, bytes.
    pub l2: usize,
}

/// The names [`Target::named`] knows.
pub const NAMED: &[&str] = &[
    "x86-64",
    "x86-64-v3",
    "x86-64-v4",
    "aarch64",
    "sm_80",
    "sm_90",
];

impl Target {
    /// A named target: `x86-64` (SSE2 baseline), `x86-64-v3` (AVX2 + FMA), `x86-64-v4`
    /// (AVX-512), `aarch64` (NEON), `sm_80` (A100), `sm_90` (H100). CPU cache sizes and core
    /// counts are those of a typical server core (32 KiB L1d, 1 MiB L2, 32 MiB L3, 8 cores;
    /// aarch64: 64 KiB L1d, 1 MiB L2, 32 MiB L3); `None` for an unknown name.
    pub fn named(name: &str) -> Option<Target> {
        let cpu = |arch, isa, fma_per_cycle, l1d| {
            Target::Cpu(Cpu {
                name: name.to_string(),
                arch,
                isa,
                fma_per_cycle,
                line: 64,
                l1d,
                l2: 1 << 20,
                l3: 32 << 20,
                cores: 8,
            })
        };
        Some(match name {
            "x86-64" => cpu("x86_64", VectorIsa::Baseline, 2, 32 << 10),
            "x86-64-v3" => cpu("x86_64", VectorIsa::Avx2, 2, 32 << 10),
            "x86-64-v4" => cpu("x86_64", VectorIsa::Avx512, 2, 32 << 10),
            "aarch64" => cpu("aarch64", VectorIsa::Neon, 4, 64 << 10),
            "sm_80" => Target::Gpu(Gpu {
                name: name.to_string(),
                sm: 80,
                sms: 108,
                registers_per_sm: 65536,
                registers_per_thread: 255,
                shared_per_block: 163 << 10,
                shared_per_sm: 164 << 10,
                warp: 32,
                max_threads_per_block: 1024,
                l2: 40 << 20,
            }),
            "sm_90" => Target::Gpu(Gpu {
                name: name.to_string(),
                sm: 90,
                sms: 132,
                registers_per_sm: 65536,
                registers_per_thread: 255,
                shared_per_block: 227 << 10,
                shared_per_sm: 228 << 10,
                warp: 32,
                max_threads_per_block: 1024,
                l2: 50 << 20,
            }),
            _ => return None,
        })
    }

    /// The default named target for a CPU architecture when nothing is measured: the ISA level
    /// every machine of the architecture that users run has (AVX2 + FMA on x86-64: schedules are
    /// shaped for it, and the generated code still dispatches AVX-512 at run time).
    pub fn default_for(arch: &str) -> Target {
        match arch {
            "aarch64" => Target::named("aarch64"),
            _ => Target::named("x86-64-v3"),
        }
        .expect("a known name")
    }

    /// The default named target of the architecture being built for: Cargo's
    /// `CARGO_CFG_TARGET_ARCH` in a build script, else this compiler's own architecture. What a
    /// build without tuning schedules for.
    pub fn for_build() -> Target {
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH")
            .unwrap_or_else(|_| std::env::consts::ARCH.to_string());
        Target::default_for(&arch)
    }

    /// The machine this process runs on: vector ISA from cpuid, caches and cores from sysfs
    /// (falling back to the named target of the architecture for what cannot be read). Only the
    /// tuner calls this.
    pub fn host() -> Target {
        let Target::Cpu(mut cpu) = Target::default_for(std::env::consts::ARCH) else {
            unreachable!("a CPU default")
        };
        cpu.name = "host".to_string();
        cpu.arch = match std::env::consts::ARCH {
            "aarch64" => "aarch64",
            _ => "x86_64",
        };
        cpu.isa = host_isa();
        cpu.cores = std::thread::available_parallelism().map_or(cpu.cores, |n| n.get());
        let caches = sysfs_caches(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache"));
        if let Some(c) = caches {
            cpu.line = c.line.unwrap_or(cpu.line);
            cpu.l1d = c.l1d.unwrap_or(cpu.l1d);
            cpu.l2 = c.l2.unwrap_or(cpu.l2);
            cpu.l3 = c.l3.unwrap_or(0);
        }
        Target::Cpu(cpu)
    }

    /// The CPU description, if this is a CPU.
    pub fn cpu(&self) -> Option<&Cpu> {
        match self {
            Target::Cpu(c) => Some(c),
            Target::Gpu(_) => None,
        }
    }

    /// The CPU the host-side kernels (the C emitter's) are planned for: this target's, or for a
    /// GPU target the default CPU of the compiler's own architecture.
    pub fn host_cpu(&self) -> std::borrow::Cow<'_, Cpu> {
        match self.cpu() {
            Some(c) => std::borrow::Cow::Borrowed(c),
            None => match Target::default_for(std::env::consts::ARCH) {
                Target::Cpu(c) => std::borrow::Cow::Owned(c),
                Target::Gpu(_) => unreachable!("a CPU default"),
            },
        }
    }

    /// The GPU description, if this is a GPU.
    pub fn gpu(&self) -> Option<&Gpu> {
        match self {
            Target::Gpu(g) => Some(g),
            Target::Cpu(_) => None,
        }
    }

    /// One line naming every field (fingerprints, `explain`): `cpu x86-64-v3 arch=x86_64
    /// isa=avx2 fma=2 line=64 l1d=32K l2=1024K l3=32768K cores=8`.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cpu(c) => write!(
                f,
                "cpu {} arch={} isa={} fma={} line={} l1d={}K l2={}K l3={}K cores={}",
                c.name,
                c.arch,
                c.isa.name(),
                c.fma_per_cycle,
                c.line,
                c.l1d >> 10,
                c.l2 >> 10,
                c.l3 >> 10,
                c.cores
            ),
            Target::Gpu(g) => write!(
                f,
                "gpu {} sm={} sms={} regs={}/{} smem={}K/{}K warp={} threads={} l2={}K",
                g.name,
                g.sm,
                g.sms,
                g.registers_per_thread,
                g.registers_per_sm,
                g.shared_per_block >> 10,
                g.shared_per_sm >> 10,
                g.warp,
                g.max_threads_per_block,
                g.l2 >> 10
            ),
        }
    }
}

impl Cpu {
    /// Peak f32 multiply-adds per cycle per core (vector lanes times FMA issue).
    pub fn f32_fma_per_cycle(&self) -> usize {
        self.isa.f32_lanes() * self.fma_per_cycle
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub(crate) fn host_isa() -> VectorIsa {
    // What the generated code's dispatch asks for before it runs the AVX-512 variant.
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        VectorIsa::Avx512
    } else if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        VectorIsa::Avx2
    } else {
        VectorIsa::Baseline
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) fn host_isa() -> VectorIsa {
    VectorIsa::Neon
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn host_isa() -> VectorIsa {
    VectorIsa::Baseline
}

/// The vendor of the machine this process runs on, from `cpuid` (`GenuineIntel`,
/// `AuthenticAMD`); empty elsewhere. The pricer's calibration differs by vendor: the same
/// libraries and generated code rank differently on Intel and AMD cores.
pub fn host_vendor() -> &'static str {
    static VENDOR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VENDOR.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: cpuid leaf 0 exists on every x86-64 processor (the intrinsic is safe
            // from Rust 1.87; the project supports 1.85).
            #[allow(unused_unsafe)]
            let r = unsafe { std::arch::x86_64::__cpuid(0) };
            let bytes: Vec<u8> = [r.ebx, r.edx, r.ecx]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            String::from_utf8_lossy(&bytes)
                .trim_end_matches('\0')
                .to_string()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            String::new()
        }
    })
}

/// Cache sizes read from one CPU's sysfs cache directory.
#[derive(Debug, Default, PartialEq, Eq)]
struct Caches {
    line: Option<usize>,
    l1d: Option<usize>,
    l2: Option<usize>,
    l3: Option<usize>,
}

/// Reads `index*/{level,type,size,coherency_line_size}` under `dir` (Linux); `None` where the
/// directory is missing.
fn sysfs_caches(dir: &std::path::Path) -> Option<Caches> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    let mut out = Caches::default();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .collect();
    entries.sort();
    for e in entries {
        let (Some(level), Some(kind), Some(size)) = (
            read(e.join("level")),
            read(e.join("type")),
            read(e.join("size")),
        ) else {
            continue;
        };
        let Some(bytes) = parse_size(size.trim()) else {
            continue;
        };
        let kind = kind.trim();
        match (level.trim(), kind) {
            ("1", "Data" | "Unified") => out.l1d = Some(bytes),
            ("2", "Unified" | "Data") => out.l2 = Some(bytes),
            ("3", "Unified" | "Data") => out.l3 = Some(bytes),
            _ => {}
        }
        if out.line.is_none() {
            out.line = read(e.join("coherency_line_size")).and_then(|s| s.trim().parse().ok());
        }
    }
    Some(out)
}

/// `32K`, `1024K`, `32M`, `512` (bytes) as sysfs writes cache sizes.
fn parse_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_targets() {
        for &n in NAMED {
            let t = Target::named(n).unwrap();
            assert!(t.text().contains(n), "{t}");
        }
        assert_eq!(Target::named("pentium"), None);
        let v3 = Target::named("x86-64-v3").unwrap();
        let c = v3.cpu().unwrap();
        assert_eq!((c.isa.f32_lanes(), c.f32_fma_per_cycle()), (8, 16));
        assert_eq!(
            v3.text(),
            "cpu x86-64-v3 arch=x86_64 isa=avx2 fma=2 line=64 l1d=32K l2=1024K l3=32768K cores=8"
        );
        let v4 = Target::named("x86-64-v4").unwrap();
        assert_eq!(v4.cpu().unwrap().isa.f32_lanes(), 16);
        assert_eq!(v4.cpu().unwrap().isa.vector_registers(), 32);
        let arm = Target::named("aarch64").unwrap();
        assert_eq!(arm.cpu().unwrap().isa, VectorIsa::Neon);
        assert_eq!(arm.cpu().unwrap().f32_fma_per_cycle(), 16);
        let h100 = Target::named("sm_90").unwrap();
        let g = h100.gpu().unwrap();
        assert_eq!((g.sm, g.sms, g.warp), (90, 132, 32));
        assert!(h100.cpu().is_none());
        assert_eq!(Target::default_for("aarch64"), arm);
        assert_eq!(Target::default_for("x86_64"), v3);
    }

    #[test]
    fn sysfs_cache_sizes() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        let dir = std::env::temp_dir().join(format!("collage-sysfs-{}", std::process::id()));
        let entry = |i: usize, level: &str, kind: &str, size: &str| {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
            std::fs::write(d.join("coherency_line_size"), "64\n").unwrap();
        };
        entry(0, "1", "Data", "48K");
        entry(1, "1", "Instruction", "32K");
        entry(2, "2", "Unified", "2048K");
        entry(3, "3", "Unified", "105M");
        let c = sysfs_caches(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            c,
            Caches {
                line: Some(64),
                l1d: Some(48 << 10),
                l2: Some(2 << 20),
                l3: Some(105 << 20),
            }
        );
        assert_eq!(sysfs_caches(std::path::Path::new("/nonexistent")), None);
    }

    #[test]
    fn host_is_a_cpu_with_sane_caches() {
        let t = Target::host();
        let c = t.cpu().unwrap();
        assert!(c.cores >= 1 && c.l1d >= 4 << 10 && c.l2 >= c.l1d, "{t}");
        assert!(c.line.is_power_of_two(), "{t}");
    }
}
