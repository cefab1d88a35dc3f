//! The `dnnl` backend: oneDNN (`-ldnnl`, OpenMP runtime `-lgomp`), called from the generated C
//! through its C API header (`dnnl.h`).
//!
//! - 2-D convolutions (grouped, strided, dilated, padded) run on oneDNN's convolution primitive,
//!   with the bias and the fused consumers as its post-ops where they have that form: a residual
//!   `Add` as the sum post-op, `Relu` as an eltwise post-op; other consumers run in place after
//!   the call;
//! - 2-D `MaxPool` / `AveragePool` run on its pooling primitive;
//! - MatMul, Gemm and the other convolutions run as GEMMs by `dnnl_sgemm` (over an im2col
//!   buffer for convolutions), with the consumers as an in-place epilogue.
//!
//! Primitives are created when a model instance is ([`codegen`]), never in `run`. Compiled
//! in with the `dnnl` feature (default); offered only when a test program including `dnnl.h`
//! compiles and links here, so a machine without oneDNN simply does not get the backend.
use std::sync::OnceLock;

pub mod codegen;

use super::gemm::{gemm_rule, CONTRACTIONS};
use super::Backend;
use crate::ops::OpKind;
use crate::partition::rule::PartitionRule;
use crate::te::{Program, Stage, WindowKind};

/// The pooling operators with a oneDNN primitive.
pub const POOLS: &[&str] = &["MaxPool", "AveragePool"];

/// Fill and stroke of the backend's nodes in `collage explain --html`.
pub const COLOUR: (&str, &str) = ("#ead7f2", "#8a4aa8");

/// The backend if the `dnnl` feature is on and oneDNN links here.
pub fn open() -> Result<Box<dyn super::Backend>, super::Unavailable> {
    super::optional(
        super::BackendId::Dnnl,
        cfg!(feature = "dnnl"),
        available,
        || Box::new(backend()),
        NEEDS,
    )
}

/// The `dnnl` backend.
#[derive(Debug)]
pub struct DnnlBackend;

impl Backend for DnnlBackend {
    fn id(&self) -> super::BackendId {
        super::BackendId::Dnnl
    }

    fn supports(&self, op_type: &str, _kind: OpKind) -> bool {
        CONTRACTIONS.contains(&op_type) || POOLS.contains(&op_type)
    }

    /// The GEMM libraries' rule (a contraction and its elementwise consumers), and every
    /// pooling node on its own. Whether a node's geometry fits a primitive (2-D, f32, no
    /// window wholly in the padding, ...) is decided when it is lowered: a candidate computing
    /// nothing on oneDNN is dropped.
    fn rule(&self) -> PartitionRule {
        PartitionRule::Union(vec![gemm_rule(), PartitionRule::ops(POOLS)])
    }

    fn library(&self) -> bool {
        true
    }

    fn c_prelude(&self) -> &'static str {
        SGEMM_PRELUDE
    }

    fn links(&self) -> &'static [&'static str] {
        &["dnnl", "gomp"]
    }

    fn gemm_fn(&self) -> Option<&'static str> {
        Some("cl_dnnl_sgemm")
    }

    fn takes_windows(&self) -> bool {
        true
    }

    /// Window calls by their geometry (products and window points at measured rates, a
    /// convolution's output channels rounded up to whole blocks of the host's vector, plus the
    /// layout conversions of input and output); GEMMs (`dnnl_sgemm`) at the GEMM libraries'
    /// rate. Measured on dbnet's 3x3 96 -> 24 layers at 80x120 (AMD EPYC Zen 4, AVX-512, one
    /// thread): 5.4 ms, 37k multiply-adds per microsecond, three quarters of `CONV_RATE`, as
    /// 24 of 32 channels.
    fn call_estimate_us(&self, st: &Stage) -> Option<f64> {
        let d = st.exec.window()?;
        let elems = (d.n * d.ic * d.ih * d.iw + d.n * d.oc * d.oh * d.ow) as f64;
        let (rate, padded) = if d.kind != WindowKind::Conv {
            (POOL_RATE, 1.0)
        } else if d.groups > 1 && d.groups == d.ic {
            (DEPTHWISE_RATE, 1.0)
        } else {
            // The blocked layout computes whole blocks of output channels.
            let block = crate::target::host_isa().f32_lanes().max(1);
            let oc = (d.oc / d.groups).max(1) as usize;
            let rate = if d.kh * d.kw == 1 {
                CONV_RATE * oc as f64 / (oc + POINTWISE_HALF) as f64
            } else {
                CONV_RATE
            };
            (rate, (oc.div_ceil(block) * block) as f64 / oc as f64)
        };
        Some(st.work() as f64 * padded / rate + elems / REORDER_RATE)
    }

    fn window_calls<'a>(
        &self,
        p: &'a Program,
        symbol: &'a str,
    ) -> Option<Box<dyn super::WindowCalls + 'a>> {
        codegen::Primitives::new(p, symbol).map(|w| Box::new(w) as Box<dyn super::WindowCalls>)
    }
}

/// The `dnnl` backend.
pub fn backend() -> DnnlBackend {
    DnnlBackend
}

const PROBE: &str = "#include <stdint.h>\n#include <dnnl.h>\nint main(void) { float a = 1, b = 2, \
c = 0; dnnl_engine_t e; if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return 1; \
dnnl_engine_destroy(e); return dnnl_sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) \
== dnnl_success && c == 2.0f ? 0 : 1; }\n";

/// The oneDNN adapter (`dnnl_sgemm`, row-major, from oneDNN's C API header), compiled in when a
/// program uses `dnnl`. oneDNN threads with OpenMP; every call here is one block of a parallel
/// loop, so the calling thread's OpenMP team is set to one thread.
pub const SGEMM_PRELUDE: &str = r#"
#ifndef CL_DNNL_PRELUDE
#define CL_DNNL_PRELUDE
#include <dnnl.h>
void omp_set_num_threads(int) __attribute__((weak));
static inline void cl_dnnl_sgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
                                 const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc) {
    if (omp_set_num_threads) omp_set_num_threads(1);
    cl_blas_layout l = cl_blas_layout_of(m, n, k, a_rs, a_cs, b_rs, b_cs);
    dnnl_sgemm(l.na ? 'N' : 'T', l.nb ? 'N' : 'T', m, n, k, 1.0f, a, l.lda, b, l.ldb, 0.0f, c, ldc);
}
#endif
"#;

/// oneDNN's direct convolutions, multiply-adds per microsecond, besides the layout conversions
/// ([`REORDER_RATE`]): 50k-62k measured on the 3x3 convolutions of ResNet-18, where the
/// conversions are negligible.
const CONV_RATE: f64 = 55_000.0;

/// oneDNN's pointwise (1x1) convolutions run at `CONV_RATE * oc / (oc + POINTWISE_HALF)` for
/// `oc` output channels: their few products per byte leave the fixed work of each block of
/// channels exposed. Fitted on dbnet's 1x1 layers at 20x30 and 10x15 and SqueezeNet's
/// classifier (AMD EPYC Zen 4, AVX-512, one thread): 35k multiply-adds per microsecond with 64
/// output channels, 37k-43k with 96, 49k with 320, 51k with 1000; where the generated kernels
/// reach 51k-54k on the first three (on an Intel Xeon, Sapphire Rapids class, dbnet's seven
/// ran faster generated too, at one thread and at two).
const POINTWISE_HALF: usize = 32;

/// oneDNN's depthwise convolutions (one input channel per group) on plain NCHW tensors,
/// multiply-adds per microsecond besides the conversions: 1.7k-11k measured on MobileNetV2's
/// 3x3 layers (AMD EPYC Zen 4, AVX-512, one thread), memory-bound, far below `CONV_RATE`.
const DEPTHWISE_RATE: f64 = 4_000.0;

/// oneDNN's pooling, window points per microsecond, besides the layout conversions: 4.2k-7.2k
/// measured on the max pools of ResNet-18 and SqueezeNet (Intel Xeon, Sapphire Rapids class,
/// AVX-512, one thread; the conversions as [`REORDER_RATE`] prices them).
const POOL_RATE: f64 = 5_000.0;

/// A oneDNN primitive converts its input to a blocked layout and its output back on every call
/// (measured alone, as the cache does): elements (input plus output) per microsecond, fitted on
/// the pointwise convolutions of MobileNetV3, where the conversions weigh most.
const REORDER_RATE: f64 = 8_000.0;

/// What the backend needs on the build machine, for the "not available" error.
pub const NEEDS: &str =
    "oneDNN 2.x (`dnnl.h`, `-ldnnl -lgomp`; Debian: libdnnl-dev) and `COLLAGE_NO_DNNL` unset";

/// Whether oneDNN (header and library) works on this machine (probed once per process;
/// `COLLAGE_NO_DNNL` disables).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(feature = "dnnl")
            && std::env::var_os("COLLAGE_NO_DNNL").is_none()
            && crate::toolchain::probe_link(PROBE, &["dnnl", "gomp"])
    })
}
