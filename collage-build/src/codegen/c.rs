//! C99 code generation from a fused [`Program`].
//!
//! Every stage becomes one loop nest in a `static` function over a range of its outer iterations,
//! so that the runtime can split it across threads (`parallel_for`). The entry point
//! `collage_<symbol>_run(rt, arena, weights, inputs)` runs the stages in order.
use crate::ir::{strides, DType};
use crate::schedule::analysis::{flat_inner, is_vector, merge_body, split_body, vectorizable};
use crate::schedule::plan::{separable_window, CACHE_LINE};
pub use crate::schedule::Location;
use crate::te::{
    Band, BinOp, Bound, BufId, BufKind, Exec, Expr, GemmPlan, Group, Isa, KernelPlan, LibraryCall,
    PlainPlan, Program, RedOp, RowGroup, RowPlan, Scalar, ScanPlan, Src, Stage, UnOp, Window,
    PANEL,
};

mod channel;
mod plane;
mod ranged;

pub use ranged::emit_ranged;

use super::writer::CWriter;

/// The C every translation unit starts with: the runtime's ABI, scalar helpers, the narrow
/// float conversions, the vector types (`codegen/c/prelude.h`).
const PRELUDE: &str = include_str!("c/prelude.h");

/// Integer types narrower than C's int, which C's arithmetic promotes.
fn narrow(d: DType) -> bool {
    matches!(d, DType::I8 | DType::U8 | DType::I16 | DType::U16)
}

/// The suffix of the prelude's helpers for `d` (`cl_max_u8`, ...): its Rust name.
/// `x`, a C value of type `from`, with its bits reinterpreted as `to` (of the same size). The
/// integers and the 16-bit floats (stored as their bits) convert by a C cast; a Bool is whether
/// any bit is set, as the interpreter has it.
fn bitcast(from: DType, to: DType, x: &str) -> String {
    let bits = match from {
        DType::F32 => format!("cl_bits_f32({x})"),
        DType::F64 => format!("cl_bits_f64({x})"),
        _ => x.to_string(),
    };
    match to {
        DType::F32 => format!("cl_f32_of_bits((uint32_t){bits})"),
        DType::F64 => format!("cl_f64_of_bits((uint64_t){bits})"),
        DType::Bool => format!("((uint8_t)({bits} != 0))"),
        _ => format!("(({}){bits})", to.c_type()),
    }
}

fn suffix(d: DType) -> &'static str {
    d.rust_type()
}

fn scalar(s: Scalar) -> String {
    match s {
        Scalar::F32(v) if v.is_nan() => "NAN".into(),
        Scalar::F32(v) if v.is_infinite() => {
            if v > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
        }
        Scalar::F32(v) => format!("{:?}f", v).replace("inff", "INFINITY"),
        Scalar::F64(v) if v.is_nan() => "((double)NAN)".into(),
        Scalar::F64(v) if v.is_infinite() => if v > 0.0 {
            "((double)INFINITY)"
        } else {
            "((double)-INFINITY)"
        }
        .into(),
        Scalar::F64(v) => format!("{:?}", v),
        Scalar::I64(i64::MIN) => "INT64_MIN".into(),
        Scalar::I64(v) => format!("INT64_C({v})"),
        Scalar::I32(i32::MIN) => "INT32_MIN".into(),
        Scalar::I32(v) => format!("((int32_t){v})"),
        Scalar::Bool(v) => format!("((uint8_t){})", v as u8),
        Scalar::U64(v) => format!("UINT64_C({v})"),
        Scalar::U32(v) => format!("UINT32_C({v})"),
        // The 16-bit floats are their bits in C.
        Scalar::F16(b) | Scalar::BF16(b) => format!("((uint16_t)0x{b:04x})"),
        Scalar::F8(_, b) => format!("((uint8_t)0x{b:02x})"),
        // The other integers fit an int: a cast of the literal (the minimum of each is
        // representable as a negative int literal).
        i => format!("(({}){})", i.dtype().c_type(), i.as_int()),
    }
}

struct Emitter<'a> {
    p: &'a Program,
    acc: DType,
    /// A group's producer, whose panels are addressed from the instance's first panel (the C
    /// variable `pb`): its buffer is the instance's scratch slot.
    rebase: Option<BufId>,
    /// A band group's scratch and its pixels per plane: its planes lie that many floats apart
    /// (a band's input rows), not a whole image's.
    band: Option<(BufId, usize)>,
}

impl Emitter<'_> {
    /// The strides of stage `id`'s output of `shape`: row-major, but for a band group's scratch
    /// the planes (the first two dimensions) its slot's pixels apart.
    fn out_strides(&self, id: BufId, shape: &[usize]) -> Vec<usize> {
        let mut st = strides(shape);
        if let Some((_, pixels)) = self.band.filter(|(b, _)| *b == id) {
            st[1] = pixels;
            st[0] = shape[1] * pixels;
        }
        st
    }

    /// The panel of column `c` (a C expression) of packed buffer `b`, as C.
    fn panel(&self, b: BufId, c: &str) -> String {
        if self.rebase == Some(b) {
            format!("(({c}) / {PANEL} - pb)")
        } else {
            format!("(({c}) / {PANEL})")
        }
    }

    fn dtype(&self, e: &Expr) -> DType {
        e.dtype(&|s| self.p.dtype(s), self.acc)
    }

    fn buf(s: &Src) -> BufId {
        match s {
            Src::Buf(b) => *b,
            other => panic!("unresolved source {other:?}"),
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Var(k) => format!("i{k}"),
            Expr::RVar(k) => format!("r{k}"),
            Expr::Acc => "acc".into(),
            Expr::Const(s) => scalar(*s),
            Expr::Load(s, idx) => {
                let b = Self::buf(s);
                let buf = &self.p.bufs[b.index()];
                if buf.packed {
                    let (rowflat, rows) = packed_row(idx, &buf.ty.shape);
                    let c = self.expr(idx.last().expect("packed buffers have rank >= 2"));
                    return format!(
                        "b{b}[{} * {} + ({}) * {PANEL} + (({c}) % {PANEL})]",
                        self.panel(b, &c),
                        rows * PANEL,
                        self.expr(&rowflat)
                    );
                }
                let flat = Expr::flatten(idx, &buf.ty.shape);
                format!("b{b}[{}]", self.expr(&flat))
            }
            Expr::LoadFlat(s, f) => format!("b{}[{}]", Self::buf(s), self.expr(f)),
            Expr::Un(op, a) => self.unary(*op, a),
            Expr::Bin(op, a, b) => self.binary(*op, a, b),
            Expr::Select(c, a, b) => {
                format!("({} ? {} : {})", self.expr(c), self.expr(a), self.expr(b))
            }
            Expr::Cast(d, a) => {
                let from = self.dtype(a);
                let mut x = self.expr(a);
                if from == *d && d.is_narrow_float() {
                    return x;
                }
                // A narrow float's bits become a float first.
                if from.is_narrow_float() {
                    x = format!("cl_{}_to_f32({x})", from.name());
                }
                if d.is_narrow_float() {
                    format!("cl_f32_to_{}((float){x})", d.name())
                } else if d.is_sub_byte_int() && from.is_float() {
                    format!("cl_wrap_{}(cl_f2i64((double){x}))", d.name())
                } else if d.is_sub_byte_int() {
                    format!("cl_wrap_{}((int64_t){x})", d.name())
                } else if *d == DType::Bool {
                    format!("((uint8_t)({x} != 0))")
                } else {
                    format!("(({}){x})", d.c_type())
                }
            }
        }
    }

    fn unary(&self, op: UnOp, a: &Expr) -> String {
        let d = self.dtype(a);
        let x = self.expr(a);
        let f = |name: &str| -> String {
            match d {
                DType::F32 => format!("{name}f({x})"),
                DType::F64 => format!("{name}({x})"),
                _ => format!("(({}){name}((double){x}))", d.c_type()),
            }
        };
        match op {
            // C computes on 8- and 16-bit integers as int: the result is wrapped to the type
            // (as a stage's store would), so that a fused consumer sees the same value.
            UnOp::Neg if narrow(d) => format!("(({})(-{x}))", d.c_type()),
            UnOp::Neg => format!("(-{x})"),
            UnOp::Abs if d.is_float() => f("fabs"),
            UnOp::Abs => format!("cl_abs_{}({x})", suffix(d)),
            UnOp::Sign => format!("cl_sign_{}({x})", suffix(d)),
            UnOp::Not => format!("((uint8_t)!{x})"),
            UnOp::BitNot => format!("(({})~{x})", d.c_type()),
            UnOp::BitCast(to) => bitcast(d, to, &x),
            UnOp::IsNaN => format!("((uint8_t)isnan({x}))"),
            UnOp::IsPosInf => format!("((uint8_t)(isinf({x}) && {x} > 0))"),
            UnOp::IsNegInf => format!("((uint8_t)(isinf({x}) && {x} < 0))"),
            UnOp::Floor | UnOp::Ceil | UnOp::Round if !d.is_float() => x,
            UnOp::Round => f("nearbyint"),
            UnOp::Erf if d == DType::F32 => format!("cl_erff({x})"),
            UnOp::Exp if d == DType::F32 => format!("cl_expf({x})"),
            UnOp::ExpNonPos if d == DType::F32 => format!("cl_expf_nonpos({x})"),
            UnOp::ExpNonPos => f("exp"),
            UnOp::Tanh if d == DType::F32 => format!("cl_tanhf({x})"),
            UnOp::Log if d == DType::F32 => format!("cl_logf({x})"),
            UnOp::Sin if d == DType::F32 => format!("cl_sinf({x})"),
            UnOp::Cos if d == DType::F32 => format!("cl_cosf({x})"),
            // The rest are C's libm functions of the same name as the text form's.
            other => f(other.name()),
        }
    }

    /// Whether `e` is a floating-point literal, or reads a one-element floating-point constant,
    /// that is not NaN.
    fn scalar_bound(&self, e: &Expr) -> bool {
        if let Expr::Const(c) = e {
            return c.dtype().is_float() && !c.as_f64().is_nan();
        }
        let (Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _)) = e else {
            return false;
        };
        matches!(&self.p.bufs[k.index()].kind,
            BufKind::Const(t) if t.numel() == 1 && t.ty.dtype.is_float() && !t.get_f64(0).is_nan())
    }

    fn binary(&self, op: BinOp, a: &Expr, b: &Expr) -> String {
        let d = self.dtype(a);
        let (x, y) = (self.expr(a), self.expr(b));
        let s = suffix(d);
        let infix = |o: &str| {
            if narrow(d) && !op.is_compare() {
                format!("(({})({x} {o} {y}))", d.c_type())
            } else {
                format!("({x} {o} {y})")
            }
        };
        match op {
            BinOp::Add => infix("+"),
            BinOp::Sub => infix("-"),
            BinOp::Mul => infix("*"),
            BinOp::Div if d.is_float() => infix("/"),
            BinOp::Div => match b {
                Expr::Const(c) if !c.is_zero() && c.as_i64() > 0 => infix("/"),
                _ => format!("cl_div_{s}({x}, {y})"),
            },
            BinOp::Pow if d == DType::F32 => format!("powf({x}, {y})"),
            BinOp::Pow if d == DType::F64 => format!("pow({x}, {y})"),
            BinOp::Pow => format!("cl_pow_{s}({x}, {y})"),
            // Against a one-element constant that is not NaN (a Clip's bound, as exporters
            // store it), NaN propagates from `x` alone: one comparison and one select.
            BinOp::Max | BinOp::Min if d.is_float() && self.scalar_bound(b) => {
                let f = if op == BinOp::Max { "maxc" } else { "minc" };
                format!("cl_{f}_{s}({x}, {y})")
            }
            BinOp::Max => format!("cl_max_{s}({x}, {y})"),
            BinOp::Min => format!("cl_min_{s}({x}, {y})"),
            BinOp::FMod if d == DType::F32 => format!("fmodf({x}, {y})"),
            BinOp::FMod if d == DType::F64 => format!("fmod({x}, {y})"),
            BinOp::FMod => match b {
                Expr::Const(c) if c.as_i64() > 0 => infix("%"),
                _ => format!("cl_fmod_{s}({x}, {y})"),
            },
            BinOp::Mod if d == DType::F32 => format!("cl_mod_f32({x}, {y}, fmodf({x}, {y}))"),
            BinOp::Mod if d == DType::F64 => format!("cl_mod_f64({x}, {y}, fmod({x}, {y}))"),
            BinOp::Mod => format!("cl_mod_{s}({x}, {y})"),
            BinOp::And => format!("((uint8_t)({x} && {y}))"),
            BinOp::Or => format!("((uint8_t)({x} || {y}))"),
            BinOp::Xor => format!("((uint8_t)((!!{x}) ^ (!!{y})))"),
            BinOp::BitAnd => infix("&"),
            BinOp::BitOr => infix("|"),
            BinOp::BitXor => infix("^"),
            BinOp::Shl => format!("cl_shl_{s}({x}, {y})"),
            BinOp::Shr => format!("cl_shr_{s}({x}, {y})"),
            BinOp::Eq => infix("=="),
            BinOp::Ne => infix("!="),
            BinOp::Lt => infix("<"),
            BinOp::Le => infix("<="),
            BinOp::Gt => infix(">"),
            BinOp::Ge => infix(">="),
        }
    }
}

/// x86-64 instruction-set variants compiled next to the baseline and chosen at run time with
/// `__builtin_cpu_supports` (GCC only; other compilers get the baseline).
const VARIANTS: &[(Isa, &str, &str)] = &[
    (Isa::Avx512, "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512", "__builtin_cpu_supports(\"avx512f\") && __builtin_cpu_supports(\"avx512vl\") && __builtin_cpu_supports(\"avx512bw\") && __builtin_cpu_supports(\"avx512dq\")"),
    (Isa::Avx2, "avx2,fma", "__builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\")"),
];

/// Emits the C translation unit for `p`; `locs` gives every buffer's location.
///
/// Define `COLLAGE_NO_DISPATCH` when compiling to build only the baseline variant.
pub fn emit(p: &Program, locs: &[Location], symbol: &str, header: &str) -> String {
    let mut out = CWriter::new();
    out.line(format!("/* {} */", comment(header)));
    out.raw(PRELUDE);
    out.line("");
    out.line("#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COLLAGE_NO_DISPATCH)");
    out.line("#define CL_DISPATCH 1");
    out.line("#endif");
    // Library helpers come after the shared prelude, each behind an include guard, so that
    // translation units joined for measurement define them once.
    let backends = library_backends(p);
    if !backends.is_empty() {
        out.raw(super::library::PRELUDE);
    }
    let backends: Vec<Box<dyn crate::backend::Backend>> = backends
        .into_iter()
        .map(|id| {
            id.lookup()
                .unwrap_or_else(|why| panic!("a program calls backend {id}: {why}"))
        })
        .collect();
    for b in &backends {
        for lib in b.links() {
            out.line(format!("/* collage-link: {lib} */"));
        }
        out.raw(b.c_prelude());
    }
    // Window calls (convolution and pooling primitives), on the one backend that has them.
    let windows = backends
        .iter()
        .find_map(|b| b.window_calls(p, symbol).map(|w| (b.id(), w)));
    if let Some((_, w)) = &windows {
        w.emit_unit(out.text_mut());
    }
    profile_counters(&mut out, p, symbol);
    out.line("");
    out.line("#ifdef CL_DISPATCH");
    for (isa, target, _) in VARIANTS {
        out.line(format!("#ifndef CL_NO_{}", isa.name().to_uppercase()));
        out.line("#pragma GCC push_options");
        out.line(format!("#pragma GCC target(\"{target}\")"));
        emit_variant(&mut out, p, locs, *isa, &windows, symbol);
        out.line("#pragma GCC pop_options");
        out.line("#endif");
    }
    out.line("#endif");
    // `CL_NO_BASE` leaves the baseline out where a variant is compiled: measurements on this
    // machine run its widest variant only (`Isa::only`), and compile a third less C.
    out.line("#if !defined(CL_DISPATCH) || !defined(CL_NO_BASE)");
    emit_variant(&mut out, p, locs, Isa::Base, &windows, symbol);
    out.line("#endif");
    out.line("");
    out.open(format!("void collage_{symbol}_run(const collage_rt *rt, uint8_t *A, const uint8_t *W, const void *const *I) {{"));
    if let Some((_, w)) = &windows {
        w.emit_entry(out.text_mut());
    }
    dispatch(&mut out);
    out.close("}");
    out.into_string()
}

/// The body of the entry point: runs the widest variant this machine has (`run_<isa>`), or
/// the baseline `run`.
fn dispatch(out: &mut CWriter) {
    // Preprocessor lines start their line, inside the function too.
    // `CL_NO_AVX512` (`CL_NO_AVX2`) leaves a variant out: a test or a tuning run forces a
    // narrower one on a wider machine (`Isa::defines`), and measurements compile only the
    // variant the machine runs (`Isa::only`).
    out.raw("#ifdef CL_DISPATCH\n");
    for (isa, _, cond) in VARIANTS {
        out.raw(&format!("#ifndef CL_NO_{}\n", isa.name().to_uppercase()));
        out.open(format!("if ({cond}) {{"));
        out.line(format!("run{}(rt, A, W, I);", isa.suffix()));
        out.line("return;");
        out.close("}");
        out.raw("#endif\n");
    }
    out.raw("#endif\n");
    out.raw("#if defined(CL_DISPATCH) && defined(CL_NO_BASE)\n");
    out.line("__builtin_trap(); /* built for a variant this machine lacks */");
    out.raw("#else\n");
    out.line("run(rt, A, W, I);");
    out.raw("#endif\n");
}

/// A profiled build's counters: nanoseconds per kernel, indexed by stage id.
fn profile_counters(out: &mut CWriter, p: &Program, symbol: &str) {
    out.line("");
    out.line("#ifdef CL_PROFILE");
    out.line(format!(
        "uint64_t collage_{symbol}_profile_ns[{}];",
        p.bufs.len().max(1)
    ));
    out.line("#endif");
}

/// The library backends whose calls `p` contains, sorted.
pub fn library_backends(p: &Program) -> Vec<crate::backend::BackendId> {
    let mut v: Vec<crate::backend::BackendId> = p
        .bufs
        .iter()
        .filter_map(|b| match &b.kind {
            BufKind::Stage(st) if st.exec != Exec::Generated => Some(st.exec.backend_id()),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A stage's name and type for a C comment.
fn stage_title(st: &Stage) -> String {
    format!("{}: {}", comment(&st.name), st.ty)
}

/// `s` made safe inside one line of a C block comment: control characters (a newline in an
/// ONNX name) are written as Rust escapes and `*/` cannot end the comment.
fn comment(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            o.extend(c.escape_default());
        } else {
            o.push(c);
        }
    }
    o.replace("*/", "* /")
}

/// A program's window calls and the backend that has them.
type Windows<'a> = Option<(
    crate::backend::BackendId,
    Box<dyn crate::backend::WindowCalls + 'a>,
)>;

/// The arena ranges (offset, bytes) stage `id` reads and writes, sorted: its own buffer and the
/// arena buffers its body and finalize load, with a group's producer's for its consumer (one task
/// runs both). What `CL_LIVE` leaves unpoisoned in a sanitised build.
fn live_ranges(p: &Program, locs: &[Location], id: BufId) -> Vec<(usize, usize)> {
    let reads = |b: BufId| p.stage(b).expect("a stage").reads();
    let mut bufs: Vec<BufId> = std::iter::once(id).chain(reads(id)).collect();
    if let Some(g) = p.groups.iter().find(|g| g.consumer == id) {
        bufs.push(g.producer);
        bufs.extend(reads(g.producer));
    }
    let mut ranges: Vec<(usize, usize)> = bufs
        .into_iter()
        .filter_map(|b| match locs[b.index()] {
            Location::Arena(o) => Some((o, p.arena_bytes(b))),
            _ => None,
        })
        .collect();
    ranges.sort_unstable();
    ranges.dedup();
    ranges
}

/// The bytes of the arena `locs` use (the end of its last buffer).
fn arena_end(p: &Program, locs: &[Location]) -> usize {
    locs.iter()
        .enumerate()
        .filter_map(|(b, pl)| match pl {
            Location::Arena(o) => Some(o + p.arena_bytes(BufId::new(b))),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The `CL_LIVE` statement of row group `g`'s task: every member's buffers.
fn group_live_line(p: &Program, locs: &[Location], end: usize, g: &RowGroup) -> String {
    let mut ranges: Vec<(usize, usize)> = g
        .stages
        .iter()
        .flat_map(|&m| live_ranges(p, locs, m))
        .collect();
    ranges.sort_unstable();
    ranges.dedup();
    live_line(end, &ranges)
}

/// The `CL_LIVE` statement of `ranges` in an arena of `end` bytes.
fn live_line(end: usize, ranges: &[(usize, usize)]) -> String {
    let ranges: String = ranges.iter().map(|(o, n)| format!(", {o}, {n}")).collect();
    format!("CL_LIVE({end}{ranges});")
}

fn emit_variant(
    out: &mut CWriter,
    p: &Program,
    locs: &[Location],
    isa: Isa,
    windows: &Windows,
    symbol: &str,
) {
    let suffix = isa.suffix();
    // The statements of the variant's `run`.
    let mut calls = Vec::new();
    // After a kernel's calls: its time in a profiled build.
    let tick = |calls: &mut Vec<String>, id: BufId| {
        calls.push(format!("CL_TICK(collage_{symbol}_profile_ns, {id});"))
    };
    let end = arena_end(p, locs);
    for (id, b) in p.buf_ids().zip(&p.bufs) {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        // A group's producer runs inside its consumer's task; a row group's members in the
        // task of the last.
        if end > 0 && !p.groups.iter().any(|g| g.producer == id) && p.row_group_of(id).is_none() {
            calls.push(live_line(end, &live_ranges(p, locs, id)));
        }
        // A library call computes the stage; what remains of its finalize (the fused
        // consumers) runs afterwards as an in-place loop.
        let rest = match &st.exec {
            Exec::Generated => None,
            Exec::Library {
                call: LibraryCall::Window(_),
                ..
            } => {
                let Some((name, w)) = windows else {
                    panic!(
                        "stage {} is a window call, but no backend emits them",
                        st.name
                    )
                };
                let fname = format!("k{id}{suffix}_win");
                out.line("");
                out.line(format!("/* {} on {name} */", stage_title(st)));
                let epilogue = w.emit_call(out.text_mut(), locs, id, &fname);
                calls.push(format!("{fname}(rt, &ctx);"));
                tick(&mut calls, id);
                Some(epilogue)
            }
            Exec::Library {
                backend,
                call: LibraryCall::Gemm,
            } => {
                let g = super::library::gemm_call(p, st).unwrap_or_else(|| {
                    panic!(
                        "stage {} on {backend} is not a GEMM (placement bug)",
                        st.name
                    )
                });
                let fname = format!("k{id}{suffix}_lib");
                out.line("");
                out.line(format!("/* {} on {backend} */", stage_title(st)));
                let parallel = p.parallel_calls.contains(&id);
                super::library::emit_gemm(out, locs, id, &g, *backend, &fname, parallel);
                calls.push(format!("{fname}(rt, &ctx);"));
                tick(&mut calls, id);
                Some(st.gemm_epilogue())
            }
        };
        if let Some(g) = p
            .groups
            .iter()
            .find(|g| g.producer == id || g.consumer == id)
        {
            let Location::Arena(slots_at) = locs[g.producer.index()] else {
                panic!("group producer {} is not in the arena", g.producer)
            };
            let m = Member {
                group: g,
                slots_at,
                slot_bytes: g.slot_bytes(&p.bufs[g.producer.index()]),
                fill: g.producer == id,
            };
            let plan = stage_plan(p, id, st, isa);
            let (fname, n_outer, _) = emit_stage(out, p, locs, id, st, plan, isa, Part::Panel(&m));
            if !m.fill {
                let task = emit_group_task(out, p, g, &fname, n_outer, isa);
                calls.push(shares_call(&task, g.slots, true));
                tick(&mut calls, id);
            }
            continue;
        }
        let epilogue;
        let st = match rest {
            None => st,
            Some(None) => continue,
            Some(Some(fin)) => {
                epilogue = st.epilogue_stage(id, &fin);
                &epilogue
            }
        };
        if let Some((g, b)) = p
            .row_group_of(id)
            .and_then(|g| g.band.as_ref().map(|b| (g, b)))
        {
            let x = g.stages[0];
            let Location::Arena(at) = locs[x.index()] else {
                panic!("band group scratch {x} is not in the arena")
            };
            let bm = BandMember {
                scratch: x,
                at,
                slot_bytes: g.slot_bytes(&p.bufs[x.index()]),
                pixels: b.pixels,
            };
            let plan = stage_plan(p, id, st, isa);
            emit_stage(out, p, locs, id, st, plan, isa, Part::Band(&bm));
            if id == g.last() {
                if end > 0 {
                    calls.push(group_live_line(p, locs, end, g));
                }
                let task = emit_band_task(out, p, g, b, isa);
                calls.push(shares_call(&task, g.slots, true));
                tick(&mut calls, id);
            }
            continue;
        }
        if let Some(g) = p.row_group_of(id) {
            let r = RowMember {
                scratch: g
                    .scratch
                    .iter()
                    .map(|&b| {
                        let Location::Arena(at) = locs[b.index()] else {
                            panic!("row group scratch {b} is not in the arena")
                        };
                        let buf = &p.bufs[b.index()];
                        let per = buf.ty.numel() / g.rows * buf.ty.dtype.size();
                        (b, at, g.slot_bytes(buf), per)
                    })
                    .collect(),
            };
            let plan = stage_plan(p, id, st, isa);
            emit_stage(out, p, locs, id, st, plan, isa, Part::Row(&r));
            if id == g.last() {
                if end > 0 {
                    calls.push(group_live_line(p, locs, end, g));
                }
                let task = emit_row_task(out, p, g, isa);
                // Members too small to fork for alone run on the calling thread together too.
                let parallel = g
                    .stages
                    .iter()
                    .any(|&m| p.plan(m, isa).is_some_and(KernelPlan::parallel));
                if parallel {
                    calls.push(shares_call(&task, g.slots, true));
                } else {
                    calls.push(shares_call(&task, g.slots, false));
                }
                tick(&mut calls, id);
            }
            continue;
        }
        let plan = stage_plan(p, id, st, isa);
        let (fname, n_outer, parallel) = emit_stage(out, p, locs, id, st, plan, isa, Part::Alone);
        if n_outer == 0 {
            continue;
        }
        if parallel {
            calls.push(format!(
                "rt->parallel_for(rt->pool, {n_outer}, {fname}, &ctx);"
            ));
        } else {
            calls.push(format!("{fname}(&ctx, 0, {n_outer});"));
        }
        tick(&mut calls, id);
    }
    out.line("");
    out.open(format!("static void run{suffix}(const collage_rt *rt, uint8_t *A, const uint8_t *W, const void *const *I) {{"));
    out.line("collage_ctx ctx = {A, W, I, 1};");
    out.line("(void)rt;");
    out.line("CL_TICK_START();");
    for c in &calls {
        out.line(c);
    }
    if end > 0 {
        out.line(live_line(end, &[(0, end)]));
    }
    out.close("}");
}

/// A stage's part in a [`Group`], for its emission.
struct Member<'g> {
    group: &'g Group,
    /// Arena offset of the producer's slots, and bytes per slot.
    slots_at: usize,
    slot_bytes: usize,
    /// The producer (its fill of one instance's slot) or the consumer (one instance of it).
    fill: bool,
}

/// How a stage is printed: alone, as a part of a panel [`Group`], or as a member of a
/// [`RowGroup`] (split along leading dimensions or along an image's rows).
#[derive(Clone, Copy)]
enum Part<'a> {
    Alone,
    Panel(&'a Member<'a>),
    Row(&'a RowMember),
    Band(&'a BandMember),
}

/// Where a band group's scratch lives ([`crate::te::Band`]): the buffer, its arena offset,
/// bytes per slot and pixels per plane of a slot. A member's function takes the band's first
/// and last input pixels `[plo, phi)` and a range `[begin, end)`: the pointwise stage's outer
/// iterations (its pixels clamped to the band's), or the window's output rows.
struct BandMember {
    scratch: BufId,
    at: usize,
    slot_bytes: usize,
    pixels: usize,
}

/// Where a row group's scratch lives: per scratch buffer, its arena offset, bytes per slot and
/// bytes per position of the group's leading dimensions.
struct RowMember {
    scratch: Vec<(BufId, usize, usize, usize)>,
}

/// The loop of a row group's instances (`r{last}`), over a range of scratch slots: each slot
/// takes one contiguous share of the instances ([`slot_task`]); an instance runs every member,
/// in order, over the outer iterations of its positions `[p0, p1)` (`k{member}_row`,
/// [`RowTrips`]). Returns the task's name.
fn emit_row_task(out: &mut CWriter, p: &Program, g: &RowGroup, isa: Isa) -> String {
    let variant = isa.suffix();
    let fname = format!("r{}{variant}", g.last());
    let names: Vec<String> = g
        .stages
        .iter()
        .map(|&b| stage_title(p.stage(b).expect("a member is a stage")))
        .collect();
    let (k, s, blk, rows) = (g.instances, g.slots, g.block, g.rows);
    out.line("");
    out.line(format!(
        "/* row group: {}; {k} instances of {blk} positions of {} leading dimensions in {s} slots */",
        names.join(" -> "),
        g.dims
    ));
    slot_task(out, &fname, k, |out| {
        match g.chunks() {
            // A chunk of a row: row `q / chunks`, chunk `q % chunks` of it.
            Some(c) => {
                let n = g.row;
                out.line(format!(
                    "const int64_t r0 = q / {c} * {n}, c0 = q % {c} * {blk}, c1 = c0 + {blk} < {n} ? c0 + {blk} : {n};"
                ));
                out.line("const int64_t p0 = r0 + c0, p1 = r0 + c1;");
            }
            None => out.line(format!(
                "const int64_t p0 = q * {blk}, p1 = p0 + {blk} < {rows} ? p0 + {blk} : {rows};"
            )),
        }
        for &b in &g.stages {
            let st = p.stage(b).expect("a member is a stage");
            let t = p
                .plan(b, isa)
                .and_then(|pl| pl.row_trips(&st.ty.shape, g.dims))
                .expect("a member's plan splits along the group's dimensions");
            let (lo, hi) = (t.trip_c("p0"), t.trip_c("p1"));
            if t.repeats == 1 {
                out.line(format!("k{b}{variant}_row(ctx, s, p0, {lo}, {hi});"));
            } else {
                out.line(format!(
                    "for (int64_t t = 0; t < {}; ++t) k{b}{variant}_row(ctx, s, p0, {lo} + t * {}, {hi} + t * {});",
                    t.repeats, t.stride, t.stride
                ));
            }
        }
    });
    fname
}

/// The loop of a band group's instances (`r{last}`), over a range of scratch slots: each slot
/// takes one contiguous share of the bands ([`slot_task`]); band `q` is the window's output rows
/// `[y0, y1)`, which read input rows `[lo, hi)` ([`Band::input_rows`]), pixels `[plo, phi)`: the
/// pointwise member computes the outer iterations of the tiles over those pixels (clamped to
/// them) into the slot, then the window its rows of every plane. Returns the task's name.
fn emit_band_task(out: &mut CWriter, p: &Program, g: &RowGroup, b: &Band, isa: Isa) -> String {
    let variant = isa.suffix();
    let fname = format!("r{}{variant}", g.last());
    let (x, d) = (g.stages[0], g.last());
    let names: Vec<String> = g
        .stages
        .iter()
        .map(|&m| stage_title(p.stage(m).expect("a member is a stage")))
        .collect();
    let (k, s, blk) = (g.instances, g.slots, g.block);
    let Some(KernelPlan::Gemm(gp)) = p.plan(x, isa) else {
        panic!("band group member {x} is not register-blocked")
    };
    let shape = &p.stage(x).expect("a member is a stage").ty.shape;
    let tw = gp.lanes * gp.vecs;
    let per = gp.n_outer / shape[2].div_ceil(tw);
    let a = &b.axis;
    out.line("");
    out.line(format!(
        "/* band group: {}; {k} bands of {blk} output rows in {s} slots, {} pixels per plane and slot */",
        names.join(" -> "),
        b.pixels
    ));
    slot_task(out, &fname, k, |out| {
        out.line(format!(
            "const int64_t y0 = q * {blk}, y1 = y0 + {blk} < {} ? y0 + {blk} : {};",
            a.out, a.out
        ));
        out.line(format!(
            "const int64_t lo = cl_max_i64(INT64_C(0), y0 * {} + ({}));",
            a.stride, a.offset
        ));
        out.line(format!(
            "const int64_t hi = cl_min_i64(INT64_C({}), (y1 - 1) * {} + ({}) + {});",
            a.input,
            a.stride,
            a.offset,
            a.span(1)
        ));
        let w = b.width;
        out.line(format!("const int64_t plo = lo * {w}, phi = hi * {w};"));
        out.line(format!(
            "const int64_t t_lo = plo / {tw} * {per}, t_hi = (phi + {}) / {tw} * {per};",
            tw - 1
        ));
        out.line(format!("k{x}{variant}_band(ctx, s, plo, phi, t_lo, t_hi);"));
        out.line(format!("k{d}{variant}_band(ctx, s, plo, phi, y0, y1);"));
    });
    fname
}

/// The call of group task `task` with `slots` scratch slots: one share of the instances per
/// thread (at most `slots`), each share run on its own slot, so that a thread's instances reuse
/// one slot from its caches; on the calling thread alone (`parallel` false), one share.
fn shares_call(task: &str, slots: usize, parallel: bool) -> String {
    if parallel {
        format!(
            "ctx.shares = rt->threads < {slots} ? rt->threads : {slots}; rt->parallel_for(rt->pool, ctx.shares, {task}, &ctx);"
        )
    } else {
        format!("ctx.shares = 1; {task}(&ctx, 0, 1);")
    }
}

/// The task `fname` of a group's instances over a range of its shares (`ctx->shares` of them,
/// at most its scratch slots; [`shares_call`]): share `s` takes one contiguous run of the `k`
/// instances (`[s * k / shares, (s + 1) * k / shares)`) on slot `s`, so that the instances a
/// thread runs in turn reuse one slot and share their operands in its caches (an attention's
/// keys and values of one head, a convolution's input rows); `body` prints one instance (`q`,
/// `s`).
fn slot_task(out: &mut CWriter, fname: &str, k: usize, body: impl FnOnce(&mut CWriter)) {
    out.open(format!(
        "static void {fname}(void *vctx, int64_t begin, int64_t end) {{"
    ));
    out.line("collage_ctx *ctx = (collage_ctx *)vctx;");
    out.line("const int64_t n = ctx->shares;");
    out.line("for (int64_t s = begin; s < end; ++s)");
    out.indented(|out| {
        out.open(format!(
            "for (int64_t q = s * {k} / n; q < (s + 1) * {k} / n; ++q) {{"
        ));
        body(out);
        out.close("}");
    });
    out.close("}");
}

/// The loop of a group's instances (`g{consumer}`), over a range of scratch slots: each slot
/// takes one contiguous share of the instances ([`slot_task`]); an instance fills its slot with
/// the producer's columns `[c0, c1)` (`k{producer}_fill`), then runs the consumer's outer
/// iterations of those columns (`inst`, the consumer's `_inst` function of `n_outer`
/// iterations in all). Returns the task's name.
fn emit_group_task(
    out: &mut CWriter,
    p: &Program,
    g: &Group,
    inst: &str,
    n_outer: usize,
    isa: Isa,
) -> String {
    let variant = isa.suffix();
    let st = p.stage(g.consumer).expect("a group's consumer is a stage");
    let n = *st.ty.shape.last().expect("rank >= 1");
    let tw = p
        .plan(g.consumer, isa)
        .and_then(KernelPlan::tile_width)
        .expect("a group's consumer is register-blocked");
    debug_assert_eq!(g.cols % tw, 0, "instances are whole tiles");
    let per_inst = n_outer / n.div_ceil(tw) * (g.cols / tw);
    let (a, b, cols, k, s) = (g.producer, g.consumer, g.cols, g.instances, g.slots);
    let fname = format!("g{b}{variant}");
    out.line("");
    out.line(format!(
        "/* group: {} -> {}, {k} instances of {cols} columns in {s} slots */",
        stage_title(p.stage(a).expect("a group's producer is a stage")),
        stage_title(st),
    ));
    slot_task(out, &fname, k, |out| {
        out.line(format!(
            "const int64_t c0 = q * {cols}, c1 = c0 + {cols} < {n} ? c0 + {cols} : {n};"
        ));
        out.line(format!("const int64_t o0 = q * {per_inst}, o1 = o0 + {per_inst} < {n_outer} ? o0 + {per_inst} : {n_outer};"));
        out.line(format!("k{a}{variant}_fill(ctx, s, c0, c1);"));
        out.line(format!("{inst}(ctx, s, o0, o1, c0 / {PANEL});"));
    });
    fname
}

/// The plan stage `id` (`st`) of `p` is printed from for `isa`: the one the planner stored.
fn stage_plan<'p>(p: &'p Program, id: BufId, st: &Stage, isa: Isa) -> &'p KernelPlan {
    p.plan(id, isa).unwrap_or_else(|| {
        panic!(
            "stage {} (b{id}) has no plan: the program was not planned",
            st.name
        )
    })
}

/// Prints stage `id` (`st`) of `p` for the variant `isa` as `plan` says, as a task over a range
/// of its outer iterations (or, in a group, its fill or its instance); returns the function's
/// name, the outer iterations and whether a `parallel_for` splits them.
fn emit_stage(
    out: &mut CWriter,
    p: &Program,
    locs: &[Location],
    id: BufId,
    st: &Stage,
    plan: &KernelPlan,
    isa: Isa,
    part: Part,
) -> (String, usize, bool) {
    let variant = isa.suffix();
    let lanes = isa.lanes();
    let (member, row, band) = match part {
        Part::Alone => (None, None, None),
        Part::Panel(m) => (Some(m), None, None),
        Part::Row(r) => (None, Some(r), None),
        Part::Band(b) => (None, None, Some(b)),
    };
    let fname = match member {
        Some(m) if m.fill => format!("k{id}{variant}_fill"),
        Some(_) => format!("k{id}{variant}_inst"),
        None if row.is_some() => format!("k{id}{variant}_row"),
        None if band.is_some() => format!("k{id}{variant}_band"),
        None => format!("k{id}{variant}"),
    };
    let shape = &st.ty.shape;
    let rank = shape.len();
    let n_outer = plan.n_outer();
    let parallel = plan.parallel();
    let em = Emitter {
        p,
        acc: st.ty.dtype,
        rebase: member.map(|m| m.group.producer),
        band: band.map(|b| (b.scratch, b.pixels)),
    };
    out.line("");
    out.line(format!("/* {} */", stage_title(st)));
    out.line(format!("/* plan: {plan} */"));
    match member {
        // One instance's slot: every outer iteration, columns [c0, c1).
        Some(m) if m.fill => {
            out.open(format!("static void {fname}(collage_ctx *ctx, int64_t slot, int64_t c0, int64_t c1) {{"));
            out.line(format!("const int64_t begin = 0, end = {n_outer}, pb = c0 / {PANEL};"));
            out.line("(void)c1;");
        }
        Some(_) => out.open(format!(
            "static void {fname}(collage_ctx *ctx, int64_t slot, int64_t begin, int64_t end, int64_t pb) {{"
        )),
        None if row.is_some() => out.open(format!(
            "static void {fname}(collage_ctx *ctx, int64_t slot, int64_t p0, int64_t begin, int64_t end) {{"
        )),
        None if band.is_some() => {
            out.open(format!(
                "static void {fname}(collage_ctx *ctx, int64_t slot, int64_t plo, int64_t phi, int64_t begin, int64_t end) {{"
            ));
            out.line("(void)phi;");
        }
        None => {
            out.open(format!(
                "static void {fname}(void *vctx, int64_t begin, int64_t end) {{"
            ));
            out.line("collage_ctx *ctx = (collage_ctx *)vctx;");
        }
    }
    // Pointers to every buffer the stage touches.
    let mut srcs = st.body.sources();
    if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
        srcs.extend(f.sources());
    }
    srcs.sort();
    srcs.dedup();
    let ptr = |b: BufId, konst: bool| -> String {
        let ty = p.bufs[b.index()].ty.dtype.c_type();
        let q = if konst { "const " } else { "" };
        if let Some(m) = member.filter(|m| m.group.producer == b) {
            return format!(
                "{q}{ty} *restrict b{b} = ({q}{ty} *)(ctx->A + {} + slot * {});",
                m.slots_at, m.slot_bytes
            );
        }
        // A row group's scratch: the slot holds the instance's positions from `p0` on, so the
        // buffer's pointer is the slot's less `p0` positions (as an address, not a pointer
        // past the arena) and the kernel indexes it as the whole buffer.
        if let Some(&(_, at, slot, per)) = row.and_then(|r| r.scratch.iter().find(|s| s.0 == b)) {
            return format!(
                "{q}{ty} *restrict b{b} = ({q}{ty} *)((uintptr_t)(ctx->A + {at} + slot * {slot}) - (uintptr_t)p0 * {per});"
            );
        }
        // A band group's scratch: the slot holds every plane's pixels from the band's first
        // input pixel `plo` on, its planes `pixels` apart.
        if let Some(bm) = band.filter(|bm| bm.scratch == b) {
            let size = p.bufs[b.index()].ty.dtype.size();
            return format!(
                "{q}{ty} *restrict b{b} = ({q}{ty} *)((uintptr_t)(ctx->A + {} + slot * {}) - (uintptr_t)plo * {size});",
                bm.at, bm.slot_bytes
            );
        }
        match locs[b.index()] {
            Location::Input(i) => {
                format!("const {ty} *restrict b{b} = (const {ty} *)ctx->I[{i}];")
            }
            Location::Weight(o) => {
                format!("const {ty} *restrict b{b} = (const {ty} *)(ctx->W + {o});")
            }
            Location::Arena(o) => format!("{q}{ty} *restrict b{b} = ({q}{ty} *)(ctx->A + {o});"),
            Location::None => panic!("stage {id} reads dead buffer {b}"),
        }
    };
    for s in &srcs {
        match s {
            // An in-place epilogue reads its own buffer through the output pointer.
            Src::Buf(b) if *b != id => out.line(ptr(*b, true)),
            _ => {}
        }
    }
    out.line(ptr(id, false));
    // The loop nest over the output: its outer dimensions, the last one split, the guard's
    // ranges of an injective stage, the window of a padded reduction. The other plans write
    // the function's body themselves.
    let (nd, split, guarded, win) = match plan {
        KernelPlan::Plane(pp) => {
            pp.emit(out, &em, id, st, lanes);
            out.close("}");
            return (fname, n_outer, parallel);
        }
        KernelPlan::Channel(cp) => {
            cp.emit(out, &em, id, st);
            out.close("}");
            return (fname, n_outer, parallel);
        }
        KernelPlan::Gemm(gp) => {
            gp.emit(out, &em, id, st);
            out.close("}");
            return (fname, n_outer, parallel);
        }
        KernelPlan::Row(rp) => {
            rp.emit(out, &em, id, st);
            out.close("}");
            return (fname, n_outer, parallel);
        }
        KernelPlan::Scan(sp) => {
            emit_scan(out, &em, id, st, sp);
            out.close("}");
            return (fname, n_outer, parallel);
        }
        KernelPlan::Injective(ip) => (
            ip.outer,
            ip.split,
            ip.guard.as_ref().map(|g| (g, ip.copy)),
            None,
        ),
        KernelPlan::Window(wp) => (wp.outer, None, None, Some(&wp.window)),
        KernelPlan::Plain(pp) => (pp.outer, None, None, None),
    };
    if let KernelPlan::Injective(ip) = plan {
        if let Some(b) = ip.block {
            // A transpose has no guard, split or flat loop, and is never a panel group's
            // producer nor a band group's member (those are an im2col and register-blocked /
            // depthwise stages).
            assert!(
                member.is_none() && band.is_none() && split.is_none() && guarded.is_none(),
                "a blocked transpose runs alone or in a row group"
            );
            emit_transpose(out, &em, id, st, nd, b);
            out.close("}");
            return (fname, n_outer, parallel);
        }
    }
    let simd = matches!(plan, KernelPlan::Plain(PlainPlan { simd: true, .. }));
    debug_assert!(split.is_none() || st.reduce.is_none());
    // The inner dimensions run as one flat loop (a panel-packed output, or a group's slice of
    // the columns, keeps the nest), its variable the innermost non-unit dimension's.
    let flat = match plan {
        KernelPlan::Injective(ip)
            if member.is_none() && row.is_none() && !p.bufs[id.index()].packed =>
        {
            ip.flat.and_then(|m| Some((m, flat_inner(shape, m)?)))
        }
        _ => None,
    };
    let st_strides = strides(shape);
    // A group's fill computes the last dimension's columns [c0, c1) only.
    let fill = member.is_some_and(|m| m.fill);
    // A guarded copy whose loop covers whole short rows of its output (a Pad of a small
    // image) zeroes those rows first, in whole vectors, and then copies the guard's range of
    // each row: the per-row loops over a few zeros before and after it cost more than the
    // copy (40 cycles a row of 18). A longer row than PREFILL_ROW bytes would store its
    // values twice for little. Never for a group's member (bands recompute rows another
    // instance may be reading) nor for a stage that reads its own buffer; the arena gives an
    // output and the inputs of its stage apart.
    let prefill = matches!(guarded, Some((_, true)))
        && shape[rank - 1] * 4 <= PREFILL_ROW
        && split.is_none()
        && flat.is_none()
        && member.is_none()
        && row.is_none()
        && nd + 1 == rank
        && st.ty.dtype == DType::F32
        && !p.bufs[id.index()].packed
        && !srcs.contains(&Src::Buf(id));
    if prefill {
        // Whole vectors and an overlapping last one (a scalar loop after the vector loop makes
        // GCC warn of undefined behaviour where the kernel is inlined with constant bounds).
        let n = shape[rank - 1];
        let scalar = "for (int64_t j = 0; j < m; ++j) d[j] = 0.0f;";
        let zero = if lanes >= 4 {
            let z = |at: &str| format!("*(cl_f32x{lanes} *)(d + {at}) = (cl_f32x{lanes}){{0}};");
            format!(
                "if (m >= {lanes}) {{ int64_t j = 0; for (; j + {lanes} <= m; j += {lanes}) {} if (j < m) {} }} else {{ {scalar} }}",
                z("j"),
                z(&format!("m - {lanes}"))
            )
        } else {
            scalar.to_string()
        };
        out.line(format!(
            "{{ float *restrict d = &b{id}[begin * {n}]; const int64_t m = (end - begin) * {n}; {zero} }}"
        ));
    }
    // A panel-packed output of a plain injective stage: its last dimension runs a panel at a
    // time (a group's member keeps its slice of the columns).
    let panel_rows = p.bufs[id.index()].packed
        && matches!(plan, KernelPlan::Injective(_))
        && rank > nd
        && member.is_none()
        && split.is_none()
        && guarded.is_none()
        && flat.is_none()
        && shape[rank - 1] > 1;
    out.open("for (int64_t o = begin; o < end; ++o) {");
    unravel_outer(out, shape, nd);
    let loop_dims = flat.map_or(rank, |(m, _)| m);
    let mut body = match flat {
        Some((m, _)) => merge_body(&st.body, shape, m),
        None => st.body.clone(),
    };
    assert!(
        !fill || (rank > nd && win.is_none()),
        "a group's producer is injective with an inner last dimension"
    );
    for (k, &d) in shape.iter().enumerate().take(loop_dims).skip(nd) {
        if win.is_some() && k == rank - 1 {
            continue;
        }
        // The outer loop of a split last dimension, over the columns' image rows.
        let split_outer = |out: &mut CWriter, w: usize| {
            let hi = rank as u32;
            let (from, to) = if fill {
                (format!("c0 / {w}"), format!("(c1 + {}) / {w}", w - 1))
            } else {
                ("0".to_string(), format!("{}", d / w))
            };
            out.open(format!(
                "for (int64_t i{hi} = {from}; i{hi} < {to}; ++i{hi}) {{"
            ));
        };
        match split {
            Some(w) if k == rank - 1 && guarded.is_some() => {
                // The outer loop of the split; the inner one is the guarded ranges.
                split_outer(out, w);
                body = split_body(&body, k, w);
            }
            None if k == rank - 1 && guarded.is_some() => {}
            Some(w) if k == rank - 1 => {
                let (hi, lo) = (rank as u32, rank as u32 + 1);
                split_outer(out, w);
                let (from, to) = if fill {
                    (
                        format!("cl_max_i64(INT64_C(0), c0 - i{hi} * {w})"),
                        format!("cl_min_i64(INT64_C({w}), c1 - i{hi} * {w})"),
                    )
                } else {
                    ("0".to_string(), format!("{w}"))
                };
                out.open(format!(
                    "for (int64_t i{lo} = {from}; i{lo} < {to}; ++i{lo}) {{"
                ));
                out.line(format!("const int64_t i{k} = i{hi} * {w} + i{lo};"));
                body = split_body(&body, k, w);
            }
            _ if fill && k == rank - 1 => {
                out.open(format!("for (int64_t i{k} = c0; i{k} < c1; ++i{k}) {{"));
            }
            _ if panel_rows && k == rank - 1 => {
                // A panel-packed output's row, a panel at a time: the store is contiguous
                // along the inner loop (no division per element; the compiler vectorises).
                out.open(format!(
                    "for (int64_t p{k} = 0; p{k} < {d}; p{k} += {PANEL}) {{"
                ));
                out.open(format!(
                    "for (int64_t i{k} = p{k}; i{k} < cl_min_i64(p{k} + {PANEL}, {d}); ++i{k}) {{"
                ));
            }
            _ => {
                out.open(format!("for (int64_t i{k} = 0; i{k} < {d}; ++i{k}) {{"));
            }
        }
    }
    if let Some((m, inner)) = flat {
        let n: usize = shape[m..].iter().product();
        out.open(format!(
            "for (int64_t i{inner} = 0; i{inner} < {n}; ++i{inner}) {{"
        ));
    }
    let flat_out = (0..shape.len())
        .filter(|&k| shape[k] != 1 && flat.is_none_or(|(m, inner)| k < m || k == inner))
        .map(|k| format!("i{k} * {}", st_strides[k]))
        .collect::<Vec<_>>()
        .join(" + ");
    let flat_out = if flat_out.is_empty() {
        "0".to_string()
    } else {
        flat_out
    };
    let cty = st.ty.dtype.c_type();
    let flat_out = if p.bufs[id.index()].packed {
        let l = rank - 1;
        if panel_rows {
            packed_offset(&em, id, shape, &format!("p{l}"), &format!("i{l} - p{l}"))
        } else {
            packed_offset(&em, id, shape, &format!("i{l}"), &format!("i{l} % {PANEL}"))
        }
    } else {
        flat_out
    };
    match &st.reduce {
        Some(r) if win.is_some() => {
            let w = win.expect("checked");
            let (l, n) = (rank - 1, shape[rank - 1]);
            let col = Expr::Var(rank as u32 + 4);
            // A stride-2 pair of columns on a row narrower than a vector: the window's rows
            // combined a vector of inputs at a time, then its two columns as the even and odd
            // lanes of that vector, half a vector of outputs stored (the last such half
            // overlapping the one before where the row is not a whole number of halves).
            let pair = (lanes >= 8 && n >= lanes / 2 && n < lanes && !p.bufs[id.index()].packed)
                .then(|| crate::schedule::plan::window_pairs(p, w, r, l as u32, &col, st.ty.dtype))
                .flatten();
            if let Some((rowload, _)) = pair {
                let h = lanes / 2;
                let vt = format!("cl_f32x{lanes}");
                let c = em.expr(&col);
                let vop = if r.op == RedOp::Max {
                    "cl_vmax"
                } else {
                    "cl_vmin"
                };
                out.open(format!("for (int64_t q = 0; q < {n}; q += {h}) {{"));
                out.line(format!(
                    "const int64_t i{l} = q + {h} <= {n} ? q : {n} - {h}, {c} = 2 * i{l};"
                ));
                out.line(format!("{vt} m;"));
                open_reduction(out, &r.extents[..1]);
                out.line(format!(
                    "const {vt} x = *(const {vt} *)&{};",
                    em.expr(&rowload)
                ));
                out.line(format!("m = r0 == 0 ? x : {vop}({lanes}, m, x);"));
                close_reduction(out, 1);
                let idx = |odd: usize| {
                    (0..lanes)
                        .map(|k| (2 * (k % h) + odd).to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                out.line(format!(
                    "const {vt} y = {vop}({lanes}, cl_vshuf2({lanes}, m, m, {}), cl_vshuf2({lanes}, m, m, {}));",
                    idx(0),
                    idx(1)
                ));
                let half = (0..h).map(|k| format!("y[{k}]")).collect::<Vec<_>>();
                out.line(format!(
                    "*(cl_f32x{h} *)&b{id}[{flat_out}] = (cl_f32x{h}){{{}}};",
                    half.join(", ")
                ));
                out.close("}");
            } else {
                emit_window(out, &em, id, st, r, w, &flat_out);
            }
        }
        None if guarded.is_some() => {
            let (g, copy) = guarded.expect("checked");
            let ranges = if prefill { Ranges::Inside } else { Ranges::All };
            emit_guarded(
                out, &em, g, copy, id, st, split, &flat_out, fill, lanes, ranges,
            );
        }
        None => out.line(format!("b{id}[{flat_out}] = {};", em.expr(&body))),
        Some(r) => {
            out.line(format!("{cty} acc = {};", scalar(r.op.init(st.ty.dtype))));
            let last_r = r.extents.len().saturating_sub(1);
            // A vectorised max / min keeps one accumulator per lane, which OpenMP's combiner
            // may not carry a NaN through: a flag of its own does, and sets the result after.
            let nan_flag = simd && r.op != RedOp::Sum;
            if nan_flag {
                out.line("int anynan = 0;");
            }
            let clause = match r.op {
                RedOp::Sum => "reduction(+:acc)",
                RedOp::Max => "reduction(max:acc) reduction(|:anynan)",
                _ => "reduction(min:acc) reduction(|:anynan)",
            };
            // Max and min are idempotent: a vectorised row whose length is not a whole number
            // of vectors ends with one more whole vector that overlaps the last one, so no
            // scalar remainder (branches on every element, 4x slower on 56-long rows) is left.
            let e_last = r.extents.last().copied().unwrap_or(0);
            let overlap = (nan_flag && e_last > lanes && e_last % lanes != 0)
                .then(|| (e_last - e_last % lanes, e_last - lanes));
            let v = em.expr(&st.body);
            let cmp = if r.op == RedOp::Max { ">" } else { "<" };
            let update = |acc: &str| {
                if nan_flag {
                    // The flag carries NaN, so the select can be the one a vector max is.
                    format!(
                        "const {cty} x = {v}; {acc} = x {cmp} {acc} ? x : {acc}; anynan |= x != x;"
                    )
                } else {
                    accumulate(r.op, st.ty.dtype, acc, &v)
                }
            };
            let body = update("acc");
            // Chains: the innermost reduction in blocks of `chains` vectors, one accumulator a
            // lane of each (`accv`), combined by a tree after the last block; the rest of the
            // row (less than a block) as one vector loop into `acc`.
            let chains = match plan {
                KernelPlan::Plain(pp) if simd => pp.chains,
                _ => 1,
            };
            let block = chains * lanes;
            debug_assert!(block.is_power_of_two(), "the plan legalises chains");
            let main = if chains > 1 {
                e_last / block * block
            } else {
                0
            };
            if main > 0 {
                let init = scalar(r.op.init(st.ty.dtype));
                out.line(format!("{cty} accv[{block}] CL_STACK_ALIGNED;"));
                out.line(format!(
                    "for (int64_t l = 0; l < {block}; ++l) accv[l] = {init};"
                ));
            }
            open_reduction(out, &r.extents[..last_r]);
            if main > 0 {
                out.open(format!(
                    "for (int64_t rb = 0; rb < {main}; rb += {block}) {{"
                ));
                out.line(if nan_flag {
                    "#pragma omp simd reduction(|:anynan)"
                } else {
                    "#pragma omp simd"
                });
                out.open(format!("for (int64_t rl = 0; rl < {block}; ++rl) {{"));
                out.line(format!("const int64_t r{last_r} = rb + rl;"));
                out.line(update("accv[rl]"));
                out.close("}");
                out.close("}");
            }
            if r.extents.is_empty() {
                out.line(&body);
            } else {
                // The rest of the row (all of it without chains): whole vectors from `main`,
                // then (max, min) one more overlapping the row's end, which may reach back
                // into what came before (idempotent).
                let stop = overlap.map_or(e_last, |(m, _)| m);
                if main == 0 || stop > main {
                    if simd {
                        out.line(format!("#pragma omp simd {clause}"));
                    }
                    out.open(format!(
                        "for (int64_t r{last_r} = {main}; r{last_r} < {stop}; ++r{last_r}) {{"
                    ));
                    out.line(&body);
                    out.close("}");
                }
                if let Some((_, from)) = overlap {
                    out.line(format!("#pragma omp simd {clause}"));
                    out.open(format!(
                        "for (int64_t r{last_r} = {from}; r{last_r} < {e_last}; ++r{last_r}) {{"
                    ));
                    out.line(&body);
                    out.close("}");
                }
            }
            close_reduction(out, last_r);
            if main > 0 {
                // The tree: halves of the block, each loop of a constant count (whole vectors
                // while they last, then the lanes of one).
                let mut w = block / 2;
                while w >= 1 {
                    let combine = if r.op == RedOp::Sum {
                        format!("accv[l] += accv[l + {w}];")
                    } else {
                        format!("accv[l] = accv[l + {w}] {cmp} accv[l] ? accv[l + {w}] : accv[l];")
                    };
                    out.line(format!("for (int64_t l = 0; l < {w}; ++l) {combine}"));
                    w /= 2;
                }
                out.line(if r.op == RedOp::Sum {
                    "acc += accv[0];".to_string()
                } else {
                    format!("acc = accv[0] {cmp} acc ? accv[0] : acc;")
                });
            }
            if nan_flag {
                out.line("if (anynan) acc = NAN;");
            }
            let fin = finalize_c(&em, r);
            out.line(format!("b{id}[{flat_out}] = {fin};"));
        }
    }
    let opened =
        loop_dims + split.map_or(0, |_| 1) + usize::from(panel_rows) + usize::from(flat.is_some())
            - usize::from(win.is_some())
            - usize::from(guarded.is_some());
    for _ in nd..opened {
        out.close("}");
    }
    out.close("}"); // the outer loop
    out.close("}"); // the function
    (fname, n_outer, parallel)
}

/// An injective transpose ([`crate::te::InjectivePlan::block`]): the positions `o` of the
/// outer loop in runs of up to `b` that share a block of the last outer dimension `q`; each run
/// walks the last dimension, and the run's positions innermost (`i{q}` redefined there), so
/// that the source's line read at one column of the last dimension is used whole.
fn emit_transpose(out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage, nd: usize, b: usize) {
    let shape = &st.ty.shape;
    let rank = shape.len();
    let (q, l) = (nd - 1, rank - 1);
    // The run's variable: past every name the loop nests use (`i{rank}`..`i{rank + 4}`).
    let t = rank + 5;
    let flat_out = if em.p.bufs[id.index()].packed {
        packed_offset(em, id, shape, &format!("i{l}"), &format!("i{l} % {PANEL}"))
    } else {
        // Row-major, no dimension jammed (`jk` past the last).
        jammed_offset(shape, &strides(shape), rank, 0, None)
    };
    out.open("for (int64_t o = begin; o < end;) {");
    out.line(format!(
        "const int64_t on = cl_min_i64(end, (o / {b} + 1) * {b});"
    ));
    unravel_outer(out, shape, nd);
    out.open(format!(
        "for (int64_t i{l} = 0; i{l} < {}; ++i{l}) {{",
        shape[l]
    ));
    out.open(format!(
        "for (int64_t i{t} = i{q}; i{t} < i{q} + (on - o); ++i{t}) {{"
    ));
    out.line(format!("const int64_t i{q} = i{t};"));
    out.line(format!("b{id}[{flat_out}] = {};", em.expr(&st.body)));
    out.close("}");
    out.close("}");
    out.line("o = on;");
    out.close("}");
}

/// The C offset in panel-packed buffer `id` (of `shape`) of the element of the row `i0 ..
/// i{l-1}` whose panel is that of column `col` and whose place in the panel is `within`.
fn packed_offset(em: &Emitter, id: BufId, shape: &[usize], col: &str, within: &str) -> String {
    let (rowflat, rows) = packed_rows(shape);
    format!(
        "{} * {} + ({rowflat}) * {PANEL} + ({within})",
        em.panel(id, col),
        rows * PANEL
    )
}

/// A panel-packed output's row (`i0 .. i{l-1}` flattened, the last dimension `l` excluded) as C,
/// and its row count.
fn packed_rows(shape: &[usize]) -> (String, usize) {
    let l = shape.len() - 1;
    let st = strides(shape);
    let rowflat = (0..l)
        .filter(|&k| shape[k] != 1)
        .map(|k| format!("i{k} * {}", st[k] / shape[l]))
        .collect::<Vec<_>>()
        .join(" + ");
    let rowflat = if rowflat.is_empty() {
        "0".to_string()
    } else {
        rowflat
    };
    (rowflat, shape[..l].iter().product())
}

/// The longest row, in bytes, of a guarded copy that zeroes its rows before copying into them.
const PREFILL_ROW: usize = 256;

/// Which ranges of a guarded row [`emit_guarded`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ranges {
    /// Zeros, the values, zeros.
    All,
    /// The values only: the row's zeros are written already.
    Inside,
}

/// The innermost loop of a guarded injective stage: zeros below the guard's range, the value
/// inside it, zeros above. The loop variable is `i{l}` (the last dimension), or with a split
/// (`i{l} = i{l+1} * w + i{l+2}`) the inner split variable. A panel-packed output is written a
/// panel segment at a time, so that every segment's stores are contiguous.
#[allow(clippy::too_many_arguments)]
fn emit_guarded(
    out: &mut CWriter,
    em: &Emitter,
    g: &Window,
    copy: bool,
    id: BufId,
    st: &Stage,
    split: Option<usize>,
    flat_out: &str,
    clip: bool,
    lanes: usize,
    which: Ranges,
) {
    let shape = &st.ty.shape;
    let rank = shape.len();
    let l = rank - 1;
    let (v, n, def) = match split {
        Some(w) => (
            format!("i{}", rank + 1),
            w,
            format!("const int64_t i{l} = i{rank} * {w} + i{}; ", rank + 1),
        ),
        None => (format!("i{l}"), shape[l], String::new()),
    };
    let (mut lo, mut hi) = ("INT64_C(0)".to_string(), format!("INT64_C({n})"));
    for b in &g.bounds {
        let q = bound_c(b, &em.expr(&b.num));
        if b.lower {
            lo = format!("cl_max_i64({lo}, {q})");
        } else {
            hi = format!("cl_min_i64({hi}, {q})");
        }
    }
    let cty = st.ty.dtype.c_type();
    let zero = scalar(crate::te::Scalar::from_f64(st.ty.dtype, 0.0));
    let value = em.expr(&g.value);
    // A value that is an f32 load walking its source with stride 1 along the loop (an im2col's
    // shifted row), where the plan says so, is copied in whole vectors: `src` is its element at
    // `s`.
    let copy = copy.then(|| {
        format!("const float *restrict src; {{ const int64_t {v} = s; {def}src = &{value}; }}")
    });
    out.open("{");
    out.line(format!("int64_t lo = {lo}, hi = {hi};"));
    if !g.invariant.is_empty() {
        let h: Vec<String> = g
            .invariant
            .iter()
            .map(|e| format!("({})", em.expr(e)))
            .collect();
        out.line(format!("if (!({})) {{ lo = 0; hi = 0; }}", h.join(" && ")));
    }
    out.line(format!("if (lo > {n}) lo = {n};"));
    out.line("if (hi < lo) hi = lo;");
    let nn = format!("{n}");
    let mut ranges = [
        ("0".to_string(), "lo".to_string(), &zero),
        ("lo".to_string(), "hi".to_string(), &value),
        ("hi".to_string(), nn, &zero),
    ];
    if clip {
        // A group's fill: only columns [c0, c1) of the last dimension.
        let base = match split {
            Some(w) => format!("i{rank} * {w}"),
            None => "0".to_string(),
        };
        out.line(format!(
            "const int64_t cl = cl_max_i64(INT64_C(0), c0 - {base}), ch = cl_min_i64(INT64_C({n}), c1 - {base});"
        ));
        for (a, b, _) in &mut ranges {
            *a = format!("cl_max_i64({a}, cl)");
            *b = format!("cl_min_i64({b}, ch)");
        }
    }
    if em.p.bufs[id.index()].packed {
        // i{l} = base + v; segments end at panel boundaries.
        let base = match split {
            Some(w) => format!("i{rank} * {w}"),
            None => "0".to_string(),
        };
        let (rowflat, rows) = packed_rows(shape);
        for (i, (a, b, val)) in ranges.iter().enumerate() {
            let scalar_loop =
                format!("for (int64_t {v} = s; {v} < e; ++{v}) {{ {def}d[{v} - s] = {val}; }}");
            // The middle range holds the values; the others zeros.
            let copy = copy.as_deref().filter(|_| i == 1);
            out.open(format!("for (int64_t s = {a}; s < {b};) {{"));
            out.line(format!("const int64_t l0 = {base} + s;"));
            out.line(format!("int64_t e = s + ({PANEL} - l0 % {PANEL});"));
            out.line(format!("if (e > {b}) e = {b};"));
            out.line(format!(
                "{cty} *restrict d = b{id} + {} * {} + ({rowflat}) * {PANEL} + (l0 % {PANEL});",
                em.panel(id, "l0"),
                rows * PANEL,
            ));
            out.line(copy.map_or(scalar_loop.clone(), |c| vector_copy(c, &scalar_loop, lanes)));
            out.line("s = e;");
            out.close("}");
        }
    } else {
        for (i, (a, b, val)) in ranges.iter().enumerate() {
            if which == Ranges::Inside && i != 1 {
                continue;
            }
            if let Some(c) = copy.as_deref().filter(|_| i == 1) {
                // The output is contiguous along the loop: `d` is its element at `s`.
                let scalar_loop = format!(
                    "for (int64_t {v} = s; {v} < e; ++{v}) {{ {def}b{id}[{flat_out}] = {val}; }}"
                );
                out.open("{");
                out.line(format!("const int64_t s = {a}, e = {b};"));
                out.line(format!("{cty} *restrict d;"));
                out.line(format!(
                    "{{ const int64_t {v} = s; {def}d = &b{id}[{flat_out}]; }}"
                ));
                out.line(vector_copy(c, &scalar_loop, lanes));
                out.close("}");
                continue;
            }
            out.line(format!(
                "for (int64_t {v} = {a}; {v} < {b}; ++{v}) {{ {def}b{id}[{flat_out}] = {val}; }}"
            ));
        }
    }
    out.close("}");
}

/// A copy of `e - s` f32 elements from `src` to `d` (both defined by `src_def` / the caller) in
/// whole vectors of `lanes`, the last one overlapping the one before it; runs shorter than four
/// elements take `scalar_loop`. A row of an im2col is a few dozen elements between the
/// padding's zeros: a vectorised loop with a scalar remainder spends most of its time in the
/// remainder (ResNet-18's 3x3 im2col fills 0.62 -> 0.47 ms per 56x56 layer, the model 39.5 ->
/// 38.0 ms on one thread).
fn vector_copy(src_def: &str, scalar_loop: &str, lanes: usize) -> String {
    let mut s = format!("{{ const int64_t m = e - s; {src_def} ");
    // Whole vectors of `lanes` with an overlapping last one, else two overlapping half vectors,
    // and so on down to four lanes.
    let mut w = lanes;
    while w >= 4 {
        let vt = format!("cl_f32x{w}");
        let mv = |at: &str| format!("*({vt} *)(d + {at}) = *(const {vt} *)(src + {at});");
        let last = mv(&format!("m - {w}"));
        if w == lanes {
            let step = mv("j");
            s += &format!("if (m >= {w}) {{ int64_t j = 0; for (; j + {w} <= m; j += {w}) {step} if (j < m) {last} }} ");
        } else {
            s += &format!("else if (m >= {w}) {{ {} {last} }} ", mv("0"));
        }
        w /= 2;
    }
    s += &format!("else {{ (void)src; {scalar_loop} }} }}");
    s
}

impl RowPlan {
    fn emit(&self, out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().unwrap();
        let (v, n) = (self.v, shape[self.v]);
        let cty = st.ty.dtype.c_type();
        let (jk, jn) = self.jam.unwrap_or((usize::MAX, 1));
        let t = self.tile;
        let n_tiles = n.div_ceil(t);
        out.open("for (int64_t o = begin; o < end; ++o) {");
        out.line(format!(
            "const int64_t t0 = (o % {n_tiles}) * {t}, t1 = t0 + {t} < {n} ? t0 + {t} : {n};"
        ));
        let mut rem = format!("(o / {n_tiles})");
        for (pos, &k) in self.outer.iter().enumerate().rev() {
            let ext = if k == jk { shape[k] / jn } else { shape[k] };
            let scale = if k == jk {
                format!(" * {jn}")
            } else {
                String::new()
            };
            if pos == 0 {
                out.line(format!("const int64_t i{k} = ({rem}){scale};"));
            } else {
                out.line(format!("const int64_t i{k} = ({rem} % {ext}){scale};"));
                rem = format!("({rem} / {ext})");
            }
        }
        let init = scalar(r.op.init(st.ty.dtype));
        out.line(format!("{cty} accv[{jn}][{t}] CL_STACK_ALIGNED;"));
        out.line(format!("for (int64_t j = 0; j < {jn}; ++j) for (int64_t i{v} = 0; i{v} < {t}; ++i{v}) accv[j][i{v}] = {init};"));
        open_reduction(out, &r.extents);
        let jammed = |e: &Expr, j: usize| jam_expr(e, shape.len(), self.jam, j);
        let (value, lo, hi) = match &self.guard {
            Some(g) => {
                let mut lo = "t0".to_string();
                for e in &g.lo {
                    let x = em.expr(e);
                    lo = format!("cl_max_i64({lo}, {x})");
                }
                let mut hi = "t1".to_string();
                for e in &g.hi {
                    let x = em.expr(e);
                    hi = format!("cl_min_i64({hi}, {x})");
                }
                if !g.hoisted.is_empty() {
                    let c = g
                        .hoisted
                        .iter()
                        .map(|e| em.expr(e))
                        .collect::<Vec<_>>()
                        .join(" && ");
                    out.line(format!("if (!({c})) continue;"));
                }
                (&g.value, lo, hi)
            }
            None => (&st.body, "t0".to_string(), "t1".to_string()),
        };
        out.line(format!("const int64_t lo = {lo}, hi = {hi};"));
        out.open(format!("for (int64_t i{v} = lo; i{v} < hi; ++i{v}) {{"));
        for j in 0..jn {
            let x = em.expr(&jammed(value, j));
            out.line(accumulate(
                r.op,
                st.ty.dtype,
                &format!("accv[{j}][i{v} - t0]"),
                &x,
            ));
        }
        out.close("}");
        close_reduction(out, r.extents.len());
        let st_strides = strides(shape);
        for j in 0..jn {
            let flat = jammed_offset(shape, &st_strides, jk, j, None);
            let fin = r
                .finalize
                .as_ref()
                .map(|f| em.expr(&jammed(f, j)))
                .unwrap_or_else(|| "acc".into());
            out.line(format!("for (int64_t i{v} = t0; i{v} < t1; ++i{v}) {{ const {cty} acc = accv[{j}][i{v} - t0]; b{id}[{flat}] = {fin}; }}"));
        }
        out.close("}");
    }
}

/// A stage's extent as C: a literal, or a run-time value (a ranged program's local).
#[derive(Clone, Debug)]
enum Ext {
    /// Known when the C is written.
    Lit(usize),
    /// The C expression of a run-time extent.
    Run(String),
}

impl Ext {
    /// `ceil(self / k)` as C.
    fn ceil_div(&self, k: usize) -> Ext {
        match self {
            Ext::Lit(n) => Ext::Lit(n.div_ceil(k)),
            Ext::Run(_) if k == 1 => self.clone(),
            Ext::Run(s) => Ext::Run(format!("cl_ceildiv_i64({s}, {k})")),
        }
    }
}

impl std::fmt::Display for Ext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ext::Lit(n) => write!(f, "{n}"),
            Ext::Run(s) => f.write_str(s),
        }
    }
}

/// The extents a register-blocked stage's C is written over: the stage's own (literals), or a
/// ranged program's run-time ones.
struct GemmExtents<'a> {
    /// Every output dimension's extent.
    pub dims: Vec<Ext>,
    /// Every reduction extent.
    pub reduce: Vec<Ext>,
    /// The C offset of the output element of jammed row `j` (the jammed dimension's variable
    /// plus `j`), with the row's dimension left out when the flag is set (the caller adds the
    /// column).
    pub offset: &'a dyn Fn(usize, bool) -> String,
}

impl GemmPlan {
    fn emit(&self, out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().unwrap();
        let st_strides = em.out_strides(id, shape);
        let jk = self.jam.map_or(usize::MAX, |j| j.0);
        let offset =
            |j: usize, skip: bool| jammed_offset(shape, &st_strides, jk, j, skip.then_some(self.v));
        let ext = GemmExtents {
            dims: shape.iter().map(|&n| Ext::Lit(n)).collect(),
            reduce: r.extents.iter().map(|&n| Ext::Lit(n)).collect(),
            offset: &offset,
        };
        self.emit_over(out, em, id, st, &ext);
    }

    /// The stage's C over extents `x`: a tile of jammed rows by `vecs` vectors in registers,
    /// partial tiles at the row's end, and a shorter last block of rows.
    fn emit_over(&self, out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage, x: &GemmExtents) {
        let r = st.reduce.as_ref().unwrap();
        let (v, w, nv) = (self.v, self.lanes, self.vecs);
        let n = &x.dims[v];
        let tw = w * nv;
        let (jk, jn) = self.jam.unwrap_or((usize::MAX, 1));
        let vt = format!("cl_f32x{w}");
        out.open("for (int64_t o = begin; o < end; ++o) {");
        // Unravel: the jammed block index varies fastest, then the outer dims, the tile slowest.
        let mut rem = "o".to_string();
        for &k in self.outer.iter().rev() {
            let ext = if k == jk {
                x.dims[k].ceil_div(jn)
            } else {
                x.dims[k].clone()
            };
            let scale = if k == jk {
                format!(" * {jn}")
            } else {
                String::new()
            };
            out.line(format!("const int64_t i{k} = ({rem} % {ext}){scale};"));
            rem = format!("({rem} / {ext})");
        }
        if em.band.is_some_and(|(b, _)| b == id) {
            // A band group's member computes the band's pixels `[plo, phi)` of its tiles only
            // (a partial tile, where a tile crosses the band's edge).
            out.line(format!(
                "const int64_t tt = {rem} * {tw}, t0 = tt < plo ? plo : tt, t1 = tt + {tw} < phi ? tt + {tw} : phi;"
            ));
        } else {
            out.line(format!(
                "const int64_t t0 = {rem} * {tw}, t1 = t0 + {tw} < {n} ? t0 + {tw} : {n};"
            ));
        }
        let jammed = |e: &Expr, j: usize| jam_expr(e, x.dims.len(), self.jam, j);
        let store = |out: &mut CWriter, j: usize, col: Option<&str>, acc: &str| {
            let flat = (x.offset)(j, false);
            let fin = r
                .finalize
                .as_ref()
                .map(|f| em.expr(&jammed(f, j)))
                .unwrap_or_else(|| "acc".into());
            let decl = col
                .map(|c| format!("const int64_t i{v} = {c}; "))
                .unwrap_or_default();
            out.line(format!(
                "{{ {decl}const float acc = {acc}; b{id}[{flat}] = {fin}; }}"
            ));
        };
        // The tile's code for `jn` rows (all blocks, or every block but a shorter last one).
        let rows_body = |out: &mut CWriter, jn: usize| {
            // Full tile: accumulators in registers.
            out.open(format!("if (t1 - t0 == {tw}) {{"));
            for j in 0..jn {
                for t in 0..nv {
                    out.line(format!("{vt} c{j}_{t} = {{0}};"));
                }
            }
            open_reduction(out, &x.reduce);
            for j in 0..jn {
                let body = jammed(&st.body, j);
                for t in 0..nv {
                    let x = vector_expr(em, &body, v as u32, &format!("t0 + {}", t * w), &vt);
                    out.line(format!("c{j}_{t} += {x};"));
                }
            }
            // The rows of the tile `prefetch_tiles` ahead, a cache line at a time.
            let ahead = tw * self.prefetch_tiles;
            for e in &self.prefetch {
                for c in (0..tw).step_by(CACHE_LINE / 4) {
                    let at = row_address(em, e, v as u32, &format!("t0 + {}", ahead + c));
                    out.line(format!("__builtin_prefetch({at});"));
                }
            }
            close_reduction(out, r.extents.len());
            let vec_fin = r
                .finalize
                .as_ref()
                .is_none_or(|f| vectorizable(em.p, f, v as u32));
            if vec_fin {
                for j in 0..jn {
                    for t in 0..nv {
                        let col = format!("t0 + {}", t * w);
                        let value = match &r.finalize {
                            Some(f) => vector_expr_acc(
                                em,
                                &jammed(f, j),
                                v as u32,
                                &col,
                                &vt,
                                &format!("c{j}_{t}"),
                            ),
                            None => format!("c{j}_{t}"),
                        };
                        let flat = (x.offset)(j, true);
                        out.line(format!("*({vt} *)&b{id}[{flat} + {col}] = {value};"));
                        // The same rows' next tile, to be written: fetched for ownership
                        // ahead, where the loads stream too.
                        if !self.prefetch.is_empty() && (t * w) % (CACHE_LINE / 4) == 0 {
                            out.line(format!(
                                "__builtin_prefetch(&b{id}[{flat} + {col} + {ahead}], 1);"
                            ));
                        }
                    }
                }
            }
            out.line(format!("float tmp[{w}];"));
            for j in 0..jn {
                if vec_fin {
                    break;
                }
                for t in 0..nv {
                    out.line(format!("*({vt} *)tmp = c{j}_{t};"));
                    out.line(format!("for (int64_t l = 0; l < {w}; ++l)"));
                    let col = format!("t0 + {} + l", t * w);
                    out.indented(|out| store(out, j, Some(&col), "tmp[l]"));
                }
            }
            // Partial tile: single vectors of this width, then of 4 lanes, then one column at a
            // time.
            out.reopen("} else {");
            out.line("int64_t c = t0;");
            let mut widths = vec![w];
            if w > 4 {
                widths.push(4);
            }
            // A row whose length is known at run time only (a ranged program, no panels): a
            // vector whose epilogue vectorises is stored whole, and a row of at least a vector
            // ends in one vector ending at its end, stored whole too — its columns the previous
            // vector also computed get the same values (the same operations on the same
            // inputs), unless the epilogue reads the output itself.
            let reads_self = r
                .finalize
                .as_ref()
                .is_some_and(|f| f.sources().contains(&Src::Buf(id)));
            let run_row = matches!(n, Ext::Run(_));
            let whole = run_row
                && !reads_self
                && r.finalize
                    .as_ref()
                    .is_none_or(|f| vectorizable(em.p, f, v as u32));
            // One vector of `vw` lanes starting at column `col`: accumulate every jammed row, then
            // store lanes `first..vw` through a scratch array (or the whole vector).
            let one_vector = |out: &mut CWriter, vw: usize, col: &str, first: &str| {
                let vt = format!("cl_f32x{vw}");
                for j in 0..jn {
                    out.line(format!("{vt} a{j} = {{0}};"));
                }
                open_reduction(out, &x.reduce);
                for j in 0..jn {
                    let x = vector_expr(em, &jammed(&st.body, j), v as u32, col, &vt);
                    out.line(format!("a{j} += {x};"));
                }
                close_reduction(out, r.extents.len());
                if whole && vw == w {
                    for j in 0..jn {
                        let value = match &r.finalize {
                            Some(f) => vector_expr_acc(
                                em,
                                &jammed(f, j),
                                v as u32,
                                col,
                                &vt,
                                &format!("a{j}"),
                            ),
                            None => format!("a{j}"),
                        };
                        let flat = (x.offset)(j, true);
                        out.line(format!("*({vt} *)&b{id}[{flat} + {col}] = {value};"));
                    }
                    return;
                }
                out.line(format!("float tmp[{vw}];"));
                for j in 0..jn {
                    out.line(format!("*({vt} *)tmp = a{j};"));
                    out.line(format!("for (int64_t l = {first}; l < {vw}; ++l)"));
                    let col = format!("{col} + l");
                    out.indented(|out| store(out, j, Some(&col), "tmp[l]"));
                }
            };
            out.open(format!("for (; c + {w} <= t1; c += {w}) {{"));
            one_vector(out, w, "c", "0");
            out.close("}");
            if run_row {
                out.open(format!("if (c < t1 && t1 - t0 >= {w}) {{"));
                out.line(format!("const int64_t cb = t1 - {w};"));
                one_vector(out, w, "cb", "c - cb");
                out.line("c = t1;");
                out.close("}");
            }
            for &vw in &widths[1..] {
                out.open(format!("for (; c + {vw} <= t1; c += {vw}) {{"));
                one_vector(out, vw, "c", "0");
                out.close("}");
            }
            // Fewer columns than a vector left past the full vectors, in a row of at least a
            // vector: one vector ending at the row's end (overlapping columns the previous tile
            // computes; within one panel of packed operands), of which only the new columns are
            // stored. A row of 49 on 16 lanes then takes its last column in a vector, not in a
            // scalar loop.
            if !run_row {
                out.open(format!(
                    "if (c < t1 && t1 >= {w} && (t1 - {w}) % {PANEL} + {w} <= {PANEL}) {{"
                ));
                out.line(format!("const int64_t cb = t1 - {w};"));
                one_vector(out, w, "cb", "c - cb");
                out.line("c = t1;");
                out.close("}");
            }
            out.open(format!("for (int64_t i{v} = c; i{v} < t1; ++i{v}) {{"));
            for j in 0..jn {
                out.line(format!("float s{j} = 0.0f;"));
            }
            open_reduction(out, &x.reduce);
            for j in 0..jn {
                out.line(format!("s{j} += {};", em.expr(&jammed(&st.body, j))));
            }
            close_reduction(out, r.extents.len());
            for j in 0..jn {
                store(out, j, None, &format!("s{j}"));
            }
            out.close("}");
            out.close("}");
        };
        match x.dims.get(jk) {
            None | Some(Ext::Lit(_)) if self.jam_rem == 0 => rows_body(out, jn),
            Some(Ext::Lit(ext)) => {
                // The rows' code is written at this depth, not under the `if`.
                out.line(format!("if (i{jk} + {jn} <= {ext}) {{"));
                rows_body(out, jn);
                out.line("} else {");
                rows_body(out, self.jam_rem);
                out.line("}");
            }
            Some(Ext::Run(ext)) => {
                // A run-time extent: the last block's rows, whichever count they are.
                out.line(format!("if (i{jk} + {jn} <= {ext}) {{"));
                rows_body(out, jn);
                out.line(format!("}} else switch ({ext} - i{jk}) {{"));
                for rows in 1..jn {
                    out.line(format!("case {rows}: {{"));
                    rows_body(out, rows);
                    out.line("} break;");
                }
                out.line("default: break;");
                out.line("}");
            }
            None => unreachable!("a jammed dimension of the stage"),
        }
        out.close("}");
    }
}

/// Transposes the `w` vectors of `w` lanes in the C array `v` (of type `vt`) in registers:
/// log2(w) butterfly stages, in each of which rows `i` and `i + b` exchange blocks of `b` lanes
/// through two-vector shuffles. Row `l` then holds what was lane `l` of every row.
fn transpose_in_registers(out: &mut CWriter, w: usize, vt: &str) {
    let mut b = 1;
    while b < w {
        let mask = |hi: bool| {
            (0..w)
                .map(|k| {
                    let odd = (k / b) % 2 == 1;
                    match (hi, odd) {
                        (false, false) => k,
                        (false, true) => w + k - b,
                        (true, false) => k + b,
                        (true, true) => w + k,
                    }
                    .to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.line(format!(
            "for (int64_t i = 0; i < {w}; ++i) if (!(i & {b})) {{ const {vt} x = v[i], y = v[i + {b}]; v[i] = cl_vshuf2({w}, x, y, {}); v[i + {b}] = cl_vshuf2({w}, x, y, {}); }}",
            mask(false),
            mask(true)
        ));
        b *= 2;
    }
}

/// The address (a C expression) of row load `e` at column `col` of dimension `v`: `e` is an
/// unpacked load of stride 1 along `v`.
fn row_address(em: &Emitter, e: &Expr, v: u32, col: &str) -> String {
    match e {
        Expr::Load(s, idx) => {
            let b = Emitter::buf(s);
            let flat = Expr::flatten(idx, &em.p.bufs[b.index()].ty.shape);
            format!("&b{b}[{} + {col}]", em.expr(&at_zero(&flat, v)))
        }
        Expr::LoadFlat(s, f) => {
            format!("&b{}[{} + {col}]", Emitter::buf(s), em.expr(&at_zero(f, v)))
        }
        other => unreachable!("not a row load: {other:?}"),
    }
}

/// `x` with `Var(v)` at 0.
fn at_zero(x: &Expr, v: u32) -> Expr {
    x.rewrite(&mut |y| match y {
        Expr::Var(k) if *k == v => Some(Expr::i(0)),
        _ => None,
    })
}

/// The C expression of `e` over the vector of columns starting at `col` (a C expression).
fn vector_expr(em: &Emitter, e: &Expr, v: u32, col: &str, vt: &str) -> String {
    vector_expr_acc(em, e, v, col, vt, "acc")
}

/// [`vector_expr`] with the accumulator vector named `acc`.
fn vector_expr_acc(em: &Emitter, e: &Expr, v: u32, col: &str, vt: &str, acc: &str) -> String {
    if !is_vector(e, v) {
        return em.expr(e);
    }
    let sub = |x: &Expr| vector_expr_acc(em, x, v, col, vt, acc);
    let vec = |x: &Expr| {
        if is_vector(x, v) {
            sub(x)
        } else {
            format!("(({vt}){{0}} + {})", em.expr(x))
        }
    };
    match e {
        Expr::Load(s, idx) => {
            let b = Emitter::buf(s);
            let buf = &em.p.bufs[b.index()];
            if buf.packed {
                let (rowflat, rows) = packed_row(idx, &buf.ty.shape);
                return format!(
                    "(*(const {vt} *)&b{b}[{} * {} + ({}) * {PANEL} + (({col}) % {PANEL})])",
                    em.panel(b, col),
                    rows * PANEL,
                    em.expr(&rowflat)
                );
            }
            format!("(*(const {vt} *){})", row_address(em, e, v, col))
        }
        Expr::LoadFlat(..) => format!("(*(const {vt} *){})", row_address(em, e, v, col)),
        Expr::Acc => acc.to_string(),
        // Against a one-element constant that is not NaN (a Clip's bound), as the scalar
        // `cl_maxc` / `cl_minc`.
        Expr::Bin(op @ (BinOp::Max | BinOp::Min), a, b)
            if !is_vector(b, v) && em.scalar_bound(b) =>
        {
            let w = vt.trim_start_matches("cl_f32x");
            let f = if *op == BinOp::Max {
                "cl_vmaxc"
            } else {
                "cl_vminc"
            };
            format!("{f}({w}, {}, {})", vec(a), em.expr(b))
        }
        Expr::Bin(op @ (BinOp::Max | BinOp::Min), a, b) => {
            let w = vt.trim_start_matches("cl_f32x");
            let f = if *op == BinOp::Max {
                "cl_vmax"
            } else {
                "cl_vmin"
            };
            format!("{f}({w}, {}, {})", vec(a), vec(b))
        }
        Expr::Bin(op, a, b) => {
            let o = match op {
                BinOp::Add => "+",
                BinOp::Sub => "-",
                BinOp::Mul => "*",
                _ => "/",
            };
            format!("({} {o} {})", sub(a), sub(b))
        }
        Expr::Un(UnOp::Erf, a) => {
            format!("cl_verf({}, {})", vt.trim_start_matches("cl_f32x"), sub(a))
        }
        Expr::Un(UnOp::Exp, a) => {
            format!("cl_vexp({}, {})", vt.trim_start_matches("cl_f32x"), sub(a))
        }
        Expr::Un(_, a) => format!("(-{})", sub(a)),
        _ => unreachable!("checked by vectorizable"),
    }
}

/// The flat row index (all dimensions but the last) of a load from a packed buffer, and the number
/// of rows.
fn packed_row(idx: &[Expr], shape: &[usize]) -> (Expr, usize) {
    let k = shape.len() - 1;
    (
        Expr::flatten(&idx[..k], &shape[..k]),
        shape[..k].iter().product(),
    )
}

/// `const int64_t lo, hi`: the window row's valid range of the output column, `[0, n)` cut by
/// the window's bounds.
fn window_bounds(out: &mut CWriter, em: &Emitter, w: &Window, n: usize) {
    let (mut lo, mut hi) = ("INT64_C(0)".to_string(), format!("INT64_C({n})"));
    for b in &w.bounds {
        let q = bound_c(b, &em.expr(&b.num));
        if b.lower {
            lo = format!("cl_max_i64({lo}, {q})");
        } else {
            hi = format!("cl_min_i64({hi}, {q})");
        }
    }
    out.line(format!("const int64_t lo = {lo}, hi = {hi};"));
}

/// Opens one loop per reduction variable (`r0`, `r1`, ...).
fn open_reduction<T: std::fmt::Display>(out: &mut CWriter, extents: &[T]) {
    for (k, e) in extents.iter().enumerate() {
        out.open(format!("for (int64_t r{k} = 0; r{k} < {e}; ++r{k}) {{"));
    }
}

/// The C expression of a reduction's result from its accumulator `acc`.
fn finalize_c(em: &Emitter, r: &crate::te::Reduce) -> String {
    r.finalize
        .as_ref()
        .map(|f| em.expr(f))
        .unwrap_or_else(|| "acc".into())
}

/// A padded (or unpadded) window's loops over one output row of `st` (a [`WindowPlan`]'s):
/// a row of accumulators, the window's points outside and the row inside over the interval
/// each point is valid for; separable max and min windows through a row of their rows'
/// maxima first. `flat_out` is the C offset of the output element at the loop variables.
fn emit_window(
    out: &mut CWriter,
    em: &Emitter,
    id: BufId,
    st: &Stage,
    r: &crate::te::Reduce,
    w: &Window,
    flat_out: &str,
) {
    let p = em.p;
    let shape = &st.ty.shape;
    let rank = shape.len();
    let cty = st.ty.dtype.c_type();
    let (l, n) = (rank - 1, shape[rank - 1]);
    let col = Expr::Var(rank as u32 + 4);
    let init = scalar(r.op.init(st.ty.dtype));
    out.line(format!("{cty} accr[{n}] CL_STACK_ALIGNED;"));
    out.line(format!(
        "for (int64_t i{l} = 0; i{l} < {n}; ++i{l}) accr[i{l}] = {init};"
    ));
    let invariant = |out: &mut CWriter| {
        if !w.invariant.is_empty() {
            let inv: Vec<String> = w
                .invariant
                .iter()
                .map(|e| format!("({})", em.expr(e)))
                .collect();
            out.line(format!("if (!({})) continue;", inv.join(" && ")));
        }
    };
    if let Some((rowload, at, width)) = separable_window(p, w, r, l as u32, &col) {
        // Max and min are separable: each input column's maximum over the window's
        // rows first (contiguous loads), then the window's columns over that row.
        let c = em.expr(&col);
        out.line(format!("{cty} accw[{width}] CL_STACK_ALIGNED;"));
        out.line(format!(
            "for (int64_t {c} = 0; {c} < {width}; ++{c}) accw[{c}] = {init};"
        ));
        open_reduction(out, &r.extents[..1]);
        invariant(out);
        let v = em.expr(&rowload);
        let upd = accumulate(r.op, st.ty.dtype, &format!("accw[{c}]"), &v);
        out.line(format!("for (int64_t {c} = 0; {c} < {width}; ++{c}) {upd}"));
        close_reduction(out, 1);
        out.open(format!(
            "for (int64_t r1 = 0; r1 < {}; ++r1) {{",
            r.extents[1]
        ));
        let at = format!("accw[{}]", em.expr(&at));
        window_bounds(out, em, w, n);
        let upd = accumulate(r.op, st.ty.dtype, &format!("accr[i{l}]"), &at);
        out.line(format!("for (int64_t i{l} = lo; i{l} < hi; ++i{l}) {upd}"));
        close_reduction(out, 1);
    } else {
        open_reduction(out, &r.extents);
        invariant(out);
        window_bounds(out, em, w, n);
        let v = em.expr(&w.value);
        let upd = accumulate(r.op, st.ty.dtype, &format!("accr[i{l}]"), &v);
        out.line(format!("for (int64_t i{l} = lo; i{l} < hi; ++i{l}) {upd}"));
        close_reduction(out, r.extents.len());
    }
    let fin = finalize_c(em, r);
    out.line(format!(
        "for (int64_t i{l} = 0; i{l} < {n}; ++i{l}) {{ const {cty} acc = accr[i{l}]; b{id}[{flat_out}] = {fin}; }}"
    ));
}

/// The C statement that combines `v` into the accumulator `acc` with `op`.
fn accumulate(op: RedOp, dtype: DType, acc: &str, v: &str) -> String {
    let s = suffix(dtype);
    match op {
        RedOp::Sum => format!("{acc} += {v};"),
        RedOp::Prod => format!("{acc} *= {v};"),
        RedOp::Max => format!("{acc} = cl_max_{s}({acc}, {v});"),
        RedOp::Min => format!("{acc} = cl_min_{s}({acc}, {v});"),
    }
}

/// The variables `i0..i{nd-1}` of the flattened outer index `o` over the leading `nd`
/// dimensions of `shape`.
fn unravel_outer(out: &mut CWriter, shape: &[usize], nd: usize) {
    let mut rem = "o".to_string();
    for k in (0..nd).rev() {
        if k == 0 {
            out.line(format!("const int64_t i{k} = {rem};"));
        } else {
            out.line(format!("const int64_t i{k} = {rem} % {};", shape[k]));
            rem = format!("({rem} / {})", shape[k]);
        }
    }
}

/// A cumulative reduction as running accumulators ([`ScanPlan`]): the dimensions before the
/// scanned one are the outer loop, one accumulator per position of those after it (a row the
/// compiler vectorises), and the scanned dimension is walked in order between them.
fn emit_scan(out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage, sp: &ScanPlan) {
    let shape = &st.ty.shape;
    let rank = shape.len();
    let r = st.reduce.as_ref().expect("a scan reduces");
    let cty = st.ty.dtype.c_type();
    let a = sp.axis;
    let inner: usize = shape[a + 1..].iter().product();
    let st_strides = strides(shape);
    out.open("for (int64_t o = begin; o < end; ++o) {");
    unravel_outer(out, shape, a);
    let init = scalar(r.op.init(st.ty.dtype));
    out.line(format!("{cty} accs[{inner}];"));
    out.line(format!(
        "for (int64_t j = 0; j < {inner}; ++j) accs[j] = {init};"
    ));
    out.open(format!("for (int64_t s = 0; s < {}; ++s) {{", shape[a]));
    let pos = if sp.reverse {
        format!("{} - s", shape[a] - 1)
    } else {
        "s".to_string()
    };
    out.line(format!("const int64_t i{a} = {pos};"));
    for (k, n) in shape.iter().enumerate().skip(a + 1) {
        out.open(format!("for (int64_t i{k} = 0; i{k} < {n}; ++i{k}) {{"));
    }
    let inner_strides = strides(&shape[a + 1..]);
    let ji = (a + 1..rank)
        .map(|k| format!("i{k} * {}", inner_strides[k - a - 1]))
        .chain(std::iter::once("0".to_string()))
        .collect::<Vec<_>>()
        .join(" + ");
    let flat_out = (0..rank)
        .map(|k| format!("i{k} * {}", st_strides[k]))
        .collect::<Vec<_>>()
        .join(" + ");
    out.line(format!("{cty} acc = accs[{ji}];"));
    let upd = accumulate(r.op, st.ty.dtype, "acc", &em.expr(&sp.value));
    let store = format!("b{id}[{flat_out}] = {};", finalize_c(em, r));
    if sp.exclusive {
        out.line(store);
        out.line(upd);
    } else {
        out.line(upd);
        out.line(store);
    }
    out.line(format!("accs[{ji}] = acc;"));
    for _ in a + 1..rank {
        out.close("}");
    }
    out.close("}");
    out.close("}");
}

/// Closes the loops of [`open_reduction`].
fn close_reduction(out: &mut CWriter, n: usize) {
    for _ in 0..n {
        out.close("}");
    }
}

/// `e` for jammed row `j`: `Var(k)` becomes `Var(k) + j` for the jammed dimension `k`.
fn jam_expr(e: &Expr, rank: usize, jam: Option<(usize, usize)>, j: usize) -> Expr {
    let Some((jk, _)) = jam else { return e.clone() };
    let vars: Vec<Expr> = (0..rank)
        .map(|k| {
            if k == jk {
                Expr::var(k).add(Expr::i(j as i64))
            } else {
                Expr::var(k)
            }
        })
        .collect();
    e.subst_vars(&vars)
}

/// The C offset of output element `i0.., (ijk + j), ..` in row-major `strides`, leaving out
/// dimension `skip` (added by the caller as a column expression).
fn jammed_offset(
    shape: &[usize],
    strides: &[usize],
    jk: usize,
    j: usize,
    skip: Option<usize>,
) -> String {
    let terms: Vec<String> = (0..shape.len())
        .filter(|&k| shape[k] != 1 && Some(k) != skip)
        .map(|k| {
            if k == jk {
                format!("(i{k} + {j}) * {}", strides[k])
            } else {
                format!("i{k} * {}", strides[k])
            }
        })
        .collect();
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}

/// A window bound as C, given the C text of its `num`: `ceil(num / s)` or `floor(num / s) + 1`.
fn bound_c(b: &Bound, num: &str) -> String {
    let s = b.s;
    if b.ceil {
        format!("cl_ceildiv_i64({num}, INT64_C({s}))")
    } else {
        format!("(cl_floordiv_i64({num}, INT64_C({s})) + 1)")
    }
}
