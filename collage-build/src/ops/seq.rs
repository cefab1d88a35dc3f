//! Operators of the `seq` family, for sequence models: `CausalConvWithState` (opset 27),
//! `LinearAttention` (opset 27) and `ai.onnx.preview:FlexAttention` (version 1).
//!
//! The first two carry a recurrent state between calls (a convolution's last `k - 1` inputs, a
//! linear attention's `d_k x d_v` matrix per head). Lengths are static, so `LinearAttention`'s
//! recurrence over the sequence is unrolled in the lowering: one group of stages per token, each
//! reading the previous token's state. `FlexAttention`'s modifier graphs (`score_mod`,
//! `prob_mod`) are bodies the frontend keeps encoded: inference expands such a node
//! (`passes/control.rs`) into this module's parts of it ([`FlexPart`]) around the imported bodies
//! and a `Softmax`; a node without them is one operator.
//!
//! Their float16 / bfloat16 forms are computed on f32 (`passes/infer.rs` widens the inputs and
//! narrows the outputs), so the operators see f32 (`FlexAttention` also f64) only.
use std::sync::Arc;

use super::{
    check_arity, check_dtype, dim_add, dim_mul, Constructor, InferCx, LowerCx, OpCx, OpResult,
    Operator, MAX_DIM,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

/// The element types the operators compute on (their 16-bit forms are widened to f32).
const F32: &[DType] = &[DType::F32];

/// The logistic function of an f32 expression.
fn sigmoid(x: Expr) -> Expr {
    let one = Expr::c(DType::F32, 1.0);
    one.clone().div(one.add(x.neg().exp()))
}

/// An [`InferCx`] over a lowering context's inputs.
fn icx<'a>(cx: &'a LowerCx) -> InferCx<'a> {
    InferCx {
        inputs: cx.inputs,
        consts: cx.consts,
    }
}

/// Checks that input `i` (named `what`) has exactly `shape`.
fn check_shape(cx: &InferCx, i: usize, what: &str, shape: &[usize]) -> OpResult<()> {
    let t = cx.input(i)?;
    if t.shape != shape {
        return Err(OpError::expected(
            format!("{what} (input {i}) of shape {shape:?}"),
            t,
        ));
    }
    Ok(())
}

/// Checks that input `i` (named `what`) has rank `rank` and returns its shape.
fn rank_of<'a>(cx: &'a InferCx, i: usize, what: &str, rank: usize) -> OpResult<&'a [usize]> {
    let t = cx.input(i)?;
    if t.rank() != rank {
        return Err(OpError::expected(
            format!("{what} (input {i}) of rank {rank}"),
            t,
        ));
    }
    Ok(&t.shape)
}

// ---------------------------------------------------------------------------------------------
// CausalConvWithState
// ---------------------------------------------------------------------------------------------

/// `CausalConvWithState`'s fused activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Activation {
    /// None.
    None,
    /// SiLU (alias Swish): `x * sigmoid(x)`.
    Silu,
}

/// `CausalConvWithState`: a depthwise 1-D convolution over `past_state ++ input` (the past
/// `k - 1` positions, zeros when absent) with valid padding, so each output position sees only
/// itself and earlier positions; the second output is the last `k - 1` positions of that
/// concatenation (the state for the next call).
#[derive(Debug)]
struct CausalConv {
    activation: Activation,
    n_outputs: usize,
}

/// Resolved sizes of one `CausalConvWithState`.
struct ConvDims {
    b: usize,
    c: usize,
    l: usize,
    k: usize,
}

impl CausalConv {
    fn dims(cx: &InferCx) -> OpResult<ConvDims> {
        check_arity(cx, 2, 4)?;
        check_dtype(cx, 0, F32)?;
        let x = rank_of(cx, 0, "input (batch, channels, length)", 3)?;
        let (b, c, l) = (x[0], x[1], x[2]);
        check_dtype(cx, 1, F32)?;
        let w = rank_of(cx, 1, "weight (channels, 1, k)", 3)?;
        if w[0] != c || w[1] != 1 || w[2] == 0 {
            return Err(OpError::expected(
                format!("weight (input 1) of shape [{c}, 1, k] with k >= 1"),
                format!("{w:?}"),
            ));
        }
        let k = w[2];
        if cx.has(2) {
            check_dtype(cx, 2, F32)?;
            check_shape(cx, 2, "bias", &[c])?;
        }
        if cx.has(3) {
            check_dtype(cx, 3, F32)?;
            check_shape(cx, 3, "past_state", &[b, c, k - 1])?;
        }
        dim_add(l, k - 1, "padded length")?;
        Ok(ConvDims { b, c, l, k })
    }
}

impl Operator for CausalConv {
    fn op_type(&self) -> &'static str {
        "CausalConvWithState"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = Self::dims(cx)?;
        let outs = [
            TensorType::new(DType::F32, vec![d.b, d.c, d.l]),
            TensorType::new(DType::F32, vec![d.b, d.c, d.k - 1]),
        ];
        Ok(outs.into_iter().take(self.n_outputs.clamp(1, 2)).collect())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let d = Self::dims(&icx(cx))?;
        let has_bias = cx.has(2);
        let has_past = cx.has(3);
        let f = DType::F32;
        let pad = d.k - 1;
        // Position `p` of `past_state ++ input` for batch `Var(0)`, channel `Var(1)`.
        let padded = |p: Expr| {
            let (b, c) = (Expr::var(0), Expr::var(1));
            let from_input = Expr::load(
                Src::Arg(0),
                vec![b.clone(), c.clone(), p.clone().sub(Expr::i(pad as i64))],
            );
            if pad == 0 {
                return from_input;
            }
            let from_past = if has_past {
                Expr::load(Src::Arg(3), vec![b, c, p.clone()])
            } else {
                Expr::c(f, 0.0)
            };
            Expr::select(p.lt(Expr::i(pad as i64)), from_past, from_input)
        };
        let w = Expr::load(Src::Arg(1), vec![Expr::var(1), Expr::i(0), Expr::rvar(0)]);
        let body = w.mul(padded(Expr::var(2).add(Expr::rvar(0))));
        let mut y = Expr::Acc;
        if has_bias {
            y = y.add(Expr::load(Src::Arg(2), vec![Expr::var(1)]));
        }
        if self.activation == Activation::Silu {
            y = y.clone().mul(sigmoid(y));
        }
        let fin = (y != Expr::Acc).then_some(y);
        let out = cx.output(0).clone();
        let conv = cx.reduce(out, RedOp::Sum, vec![d.k], body, fin);
        let mut outs = vec![conv];
        if self.n_outputs >= 2 {
            let st = cx.output(1).clone();
            let body = padded(Expr::var(2).add(Expr::i(d.l as i64)));
            outs.push(cx.stage(st, body));
        }
        Ok(outs)
    }
}

fn causal_conv_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let activation = match cx.attrs.string("activation", "none")?.as_str() {
        "none" => Activation::None,
        "silu" | "swish" => Activation::Silu,
        other => {
            return Err(OpError::expected(
                "activation 'none', 'silu' or 'swish'",
                format!("'{other}'"),
            ))
        }
    };
    if cx.n_outputs == 0 || cx.n_outputs > 2 {
        return Err(OpError::expected("1 or 2 outputs", cx.n_outputs));
    }
    Ok(Arc::new(CausalConv {
        activation,
        n_outputs: cx.n_outputs,
    }))
}

// ---------------------------------------------------------------------------------------------
// LinearAttention
// ---------------------------------------------------------------------------------------------

/// Most tokens one `LinearAttention` unrolls (each is up to three stages; 1024 tokens of 4 heads
/// of 16 x 16 are 18 MB of C).
const MAX_STEPS: usize = 1024;

/// `LinearAttention`'s recurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpdateRule {
    /// `S_t = S_{t-1} + k_t v_t^T`.
    Linear,
    /// `S_t = exp(g_t) S_{t-1} + k_t v_t^T`.
    Gated,
    /// `S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T`.
    Delta,
    /// `S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T`.
    GatedDelta,
}

impl UpdateRule {
    fn gated(self) -> bool {
        matches!(self, UpdateRule::Gated | UpdateRule::GatedDelta)
    }

    fn delta(self) -> bool {
        matches!(self, UpdateRule::Delta | UpdateRule::GatedDelta)
    }

    fn name(self) -> &'static str {
        match self {
            UpdateRule::Linear => "linear",
            UpdateRule::Gated => "gated",
            UpdateRule::Delta => "delta",
            UpdateRule::GatedDelta => "gated_delta",
        }
    }
}

/// `LinearAttention` (opset 27): per key/value head a `d_k x d_v` state updated token by token
/// (`update_rule`), read by every query head of its group: `o_t = scale * q_t^T S_t`. Inputs and
/// outputs pack the heads into the last dimension (`[B, T, H * D]`); the state is
/// `[B, H_kv, d_k, d_v]`.
#[derive(Debug)]
struct LinearAttention {
    rule: UpdateRule,
    q_heads: usize,
    kv_heads: usize,
    /// `None`: `1 / sqrt(d_k)`.
    scale: Option<f64>,
    n_outputs: usize,
}

/// Resolved sizes of one `LinearAttention`.
struct LaDims {
    b: usize,
    t: usize,
    dk: usize,
    dv: usize,
    /// The decay holds one value per head (`[B, T, H_kv]`), not one per key dimension.
    decay_per_head: bool,
    /// The update rate holds one value for all heads (`[B, T, 1]`).
    beta_shared: bool,
}

impl LinearAttention {
    fn dims(&self, cx: &InferCx) -> OpResult<LaDims> {
        check_arity(cx, 3, 6)?;
        let (hq, hkv) = (self.q_heads, self.kv_heads);
        for i in 0..6 {
            if cx.has(i) {
                check_dtype(cx, i, F32)?;
            }
        }
        let q = rank_of(cx, 0, "query (B, T, q_num_heads * d_k)", 3)?;
        let (b, t) = (q[0], q[1]);
        if q[2] % hq != 0 {
            return Err(OpError::expected(
                format!("query's last dimension a multiple of q_num_heads ({hq})"),
                q[2],
            ));
        }
        let dk = q[2] / hq;
        let kw = dim_mul(hkv, dk, "kv_num_heads * d_k")?;
        let k = rank_of(cx, 1, "key (B, T, kv_num_heads * d_k)", 3)?;
        if k != [b, t, kw] {
            return Err(OpError::expected(
                format!("key (input 1) of shape [{b}, {t}, {kw}]"),
                format!("{k:?}"),
            ));
        }
        let v = rank_of(cx, 2, "value (B, T, kv_num_heads * d_v)", 3)?;
        if v[0] != b || v[1] != t || v[2] % hkv != 0 {
            return Err(OpError::expected(
                format!("value (input 2) of shape [{b}, {t}, {hkv} * d_v]"),
                format!("{v:?}"),
            ));
        }
        let dv = v[2] / hkv;
        dim_mul(hq, dv, "q_num_heads * d_v")?;
        if t > MAX_STEPS {
            return Err(OpError::Unsupported(format!(
                "LinearAttention over {t} tokens: the recurrence is unrolled at build time, \
                 up to {MAX_STEPS} tokens"
            )));
        }
        if cx.has(3) {
            check_shape(cx, 3, "past_state", &[b, hkv, dk, dv])?;
        }
        let rule = self.rule.name();
        let mut decay_per_head = false;
        match (self.rule.gated(), cx.has(4)) {
            (true, false) => {
                return Err(OpError::expected(
                    format!("a decay (input 4) for update_rule '{rule}'"),
                    "none",
                ))
            }
            (false, true) => {
                return Err(OpError::expected(
                    format!("no decay (input 4) for update_rule '{rule}'"),
                    cx.input(4)?,
                ))
            }
            (true, true) => {
                let g = rank_of(cx, 4, "decay", 3)?;
                if g == [b, t, hkv] {
                    decay_per_head = true;
                } else if g != [b, t, kw] {
                    return Err(OpError::expected(
                        format!("decay (input 4) of shape [{b}, {t}, {kw}] or [{b}, {t}, {hkv}]"),
                        format!("{g:?}"),
                    ));
                }
            }
            (false, false) => {}
        }
        let mut beta_shared = false;
        match (self.rule.delta(), cx.has(5)) {
            (true, false) => {
                return Err(OpError::expected(
                    format!("a beta (input 5) for update_rule '{rule}'"),
                    "none",
                ))
            }
            (false, true) => {
                return Err(OpError::expected(
                    format!("no beta (input 5) for update_rule '{rule}'"),
                    cx.input(5)?,
                ))
            }
            (true, true) => {
                let be = rank_of(cx, 5, "beta", 3)?;
                if be == [b, t, 1] {
                    beta_shared = true;
                } else if be != [b, t, hkv] {
                    return Err(OpError::expected(
                        format!("beta (input 5) of shape [{b}, {t}, {hkv}] or [{b}, {t}, 1]"),
                        format!("{be:?}"),
                    ));
                }
            }
            (false, false) => {}
        }
        Ok(LaDims {
            b,
            t,
            dk,
            dv,
            decay_per_head,
            beta_shared,
        })
    }
}

/// `leaf(lo) .. leaf(hi - 1)` chosen by `t` (known to lie in `[lo, hi)`), as a balanced tree of
/// selects.
fn pick(t: &Expr, lo: usize, hi: usize, leaf: &dyn Fn(usize) -> Expr) -> Expr {
    if hi - lo <= 1 {
        return leaf(lo);
    }
    let mid = lo + (hi - lo) / 2;
    Expr::select(
        t.clone().lt(Expr::i(mid as i64)),
        pick(t, lo, mid, leaf),
        pick(t, mid, hi, leaf),
    )
}

impl Operator for LinearAttention {
    fn op_type(&self) -> &'static str {
        "LinearAttention"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = self.dims(cx)?;
        let outs = [
            TensorType::new(DType::F32, vec![d.b, d.t, self.q_heads * d.dv]),
            TensorType::new(DType::F32, vec![d.b, self.kv_heads, d.dk, d.dv]),
        ];
        Ok(outs.into_iter().take(self.n_outputs.clamp(1, 2)).collect())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let d = self.dims(&icx(cx))?;
        let f = DType::F32;
        let (hq, hkv) = (self.q_heads, self.kv_heads);
        let group = (hq / hkv) as i64;
        let (dk, dv) = (d.dk as i64, d.dv as i64);
        let scale = self.scale.unwrap_or(1.0 / (d.dk as f64).sqrt());
        let state_ty = TensorType::new(f, vec![d.b, hkv, d.dk, d.dv]);
        let head_ty = TensorType::new(f, vec![d.b, hkv, d.dv]);
        let out_ty = TensorType::new(f, vec![d.b, hq, d.dv]);
        // Packed `[B, T, H * D]` input `i` at batch `b`, token `t`, head `h`, feature `x`.
        let packed = |i: u32, b: Expr, t: usize, h: Expr, width: i64, x: Expr| {
            Expr::load(
                Src::Arg(i),
                vec![b, Expr::i(t as i64), h.mul(Expr::i(width)).add(x)],
            )
        };
        let (vb, vh) = (Expr::var(0), Expr::var(1));
        let mut state: Option<Src> = cx.has(3).then_some(Src::Arg(3));
        let mut outs = Vec::with_capacity(d.t);
        for t in 0..d.t {
            // The previous state, decayed, at `[b, h, key, m]`.
            let decayed = |state: Option<Src>, b: Expr, h: Expr, key: Expr, m: Expr| {
                let s = state?;
                let mut e = Expr::load(s, vec![b.clone(), h.clone(), key.clone(), m]);
                if self.rule.gated() {
                    let g = if d.decay_per_head {
                        Expr::load(Src::Arg(4), vec![b, Expr::i(t as i64), h])
                    } else {
                        packed(4, b, t, h, dk, key)
                    };
                    e = e.mul(g.exp());
                }
                Some(e)
            };
            // The value written at `[b, h, m]` (head_ty's variables).
            let written = {
                let v = packed(2, vb.clone(), t, vh.clone(), dv, Expr::var(2));
                if self.rule.delta() {
                    let beta = Expr::load(
                        Src::Arg(5),
                        vec![
                            vb.clone(),
                            Expr::i(t as i64),
                            if d.beta_shared {
                                Expr::i(0)
                            } else {
                                vh.clone()
                            },
                        ],
                    );
                    let r = Expr::rvar(0);
                    match decayed(state, vb.clone(), vh.clone(), r.clone(), Expr::var(2)) {
                        // beta * (v - S^T k), the retrieval a reduction over the key dimension.
                        Some(s) => {
                            let kr = packed(1, vb.clone(), t, vh.clone(), dk, r);
                            let fin = beta.mul(v.sub(Expr::Acc));
                            let w = cx.reduce(
                                head_ty.clone(),
                                RedOp::Sum,
                                vec![d.dk],
                                s.mul(kr),
                                Some(fin),
                            );
                            Some(w)
                        }
                        None => Some(cx.stage(head_ty.clone(), beta.mul(v))),
                    }
                } else {
                    None
                }
            };
            // S_t = decayed S_{t-1} + k_t (x) written.
            let key = Expr::var(2);
            let m = Expr::var(3);
            let kd = packed(1, vb.clone(), t, vh.clone(), dk, key.clone());
            let wv = match written {
                Some(w) => Expr::load(w, vec![vb.clone(), vh.clone(), m.clone()]),
                None => packed(2, vb.clone(), t, vh.clone(), dv, m.clone()),
            };
            let mut body = kd.mul(wv);
            if let Some(prev) = decayed(state, vb.clone(), vh.clone(), key, m) {
                body = prev.add(body);
            }
            let s = cx.materialized_stage(state_ty.clone(), body);
            state = Some(s);
            // o_t = scale * q_t^T S_t, each query head reading its group's state.
            let r = Expr::rvar(0);
            let qr = packed(0, vb.clone(), t, vh.clone(), dk, r.clone());
            let kv_head = if group == 1 {
                vh.clone()
            } else {
                vh.clone().div(Expr::i(group))
            };
            let sr = Expr::load(s, vec![vb.clone(), kv_head, r, Expr::var(2)]);
            let o = cx.reduce(
                out_ty.clone(),
                RedOp::Sum,
                vec![d.dk],
                qr.mul(sr),
                Some(Expr::Acc.mul(Expr::c(f, scale))),
            );
            outs.push(o);
        }
        // The output `[B, T, H_q * d_v]` from the steps' `[B, H_q, d_v]`.
        let y_ty = cx.output(0).clone();
        let (h, m) = (
            Expr::var(2).div(Expr::i(dv)),
            Expr::var(2).fmod(Expr::i(dv)),
        );
        let leaf = |j: usize| Expr::load(outs[j], vec![vb.clone(), h.clone(), m.clone()]);
        let y = if d.t == 0 {
            cx.stage(y_ty, Expr::c(f, 0.0))
        } else {
            cx.stage(y_ty, pick(&Expr::var(1), 0, d.t, &leaf))
        };
        let mut res = vec![y];
        if self.n_outputs >= 2 {
            res.push(match state {
                Some(s) => s,
                None => cx.stage(state_ty, Expr::c(f, 0.0)),
            });
        }
        Ok(res)
    }
}

fn linear_attention_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let rule = match cx.attrs.string("update_rule", "gated_delta")?.as_str() {
        "linear" => UpdateRule::Linear,
        "gated" => UpdateRule::Gated,
        "delta" => UpdateRule::Delta,
        "gated_delta" => UpdateRule::GatedDelta,
        other => {
            return Err(OpError::expected(
                "update_rule 'linear', 'gated', 'delta' or 'gated_delta'",
                format!("'{other}'"),
            ))
        }
    };
    let heads = |name: &str| -> OpResult<usize> {
        let v = cx
            .attrs
            .opt_int(name)?
            .ok_or_else(|| OpError::expected(format!("attribute `{name}`"), "none"))?;
        if v < 1 || v > MAX_DIM as i64 {
            return Err(OpError::expected(format!("{name} in [1, 2^48]"), v));
        }
        Ok(v as usize)
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if q_heads % kv_heads != 0 {
        return Err(OpError::expected(
            format!("q_num_heads a multiple of kv_num_heads ({kv_heads})"),
            q_heads,
        ));
    }
    let scale = cx.attrs.float("scale", 0.0)?;
    if !scale.is_finite() {
        return Err(OpError::expected("a finite scale", scale));
    }
    if cx.n_outputs == 0 || cx.n_outputs > 2 {
        return Err(OpError::expected("1 or 2 outputs", cx.n_outputs));
    }
    Ok(Arc::new(LinearAttention {
        rule,
        q_heads,
        kv_heads,
        scale: (scale != 0.0).then_some(scale as f64),
        n_outputs: cx.n_outputs,
    }))
}

// ---------------------------------------------------------------------------------------------
// FlexAttention
// ---------------------------------------------------------------------------------------------

/// Which part of `FlexAttention` an operator computes. A node without modifier graphs is one
/// [`FlexPart::Whole`]; one with `score_mod` / `prob_mod` is expanded during shape inference
/// (`passes/control.rs`) into [`FlexPart::Scores`], the `score_mod` body, `Softmax`, the
/// `prob_mod` body and [`FlexPart::Values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlexPart {
    /// `(Q, K, V) -> Y`.
    Whole,
    /// `(Q, K) -> scores` (`[B, H_q, L, S]` in the softmax precision).
    Scores,
    /// `(probs, V, Q) -> Y` (`Q` for its shape only: the modifiers' outputs must keep the
    /// scores' shape).
    Values,
}

/// `ai.onnx.preview:FlexAttention` (version 1), or a part of it ([`FlexPart`]):
/// `softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V` over rank-4 `[B, H, L, E]` inputs, query
/// head `h` reading key/value head `h / (H_q / H_kv)`.
#[derive(Debug)]
pub struct FlexAttention {
    part: FlexPart,
    /// `None`: `1 / sqrt(E)`.
    scale: Option<f32>,
    /// `softmax_precision`, when given.
    precision: Option<DType>,
}

/// Resolved sizes of one `FlexAttention` (or part).
struct FlexDims {
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

impl FlexAttention {
    /// The operator computing `part` of a node with these attributes.
    pub fn new(part: FlexPart, attrs: &super::Attrs) -> OpResult<FlexAttention> {
        let precision = match attrs.opt_int("softmax_precision")? {
            None => None,
            Some(code) => {
                let code = i32::try_from(code).unwrap_or(-1);
                match DType::from_onnx(code) {
                    Some(d @ (DType::F16 | DType::BF16 | DType::F32 | DType::F64)) => Some(d),
                    _ => {
                        return Err(OpError::expected(
                            "softmax_precision float, float16, bfloat16 or double",
                            DType::onnx_name(code),
                        ))
                    }
                }
            }
        };
        let scale = attrs.opt_float("scale")?;
        if scale.is_some_and(|s| !s.is_finite() || s < 0.0) {
            return Err(OpError::expected(
                "a finite, non-negative scale",
                scale.unwrap_or(0.0),
            ));
        }
        Ok(FlexAttention {
            part,
            scale,
            precision,
        })
    }

    /// The type the softmax is computed in (16-bit precisions are computed in f32, their values
    /// rounded to the 16-bit type where the softmax reads and writes them).
    fn compute(&self, d: DType) -> DType {
        match self.precision {
            Some(DType::F64) => DType::F64,
            Some(_) => DType::F32,
            None => d,
        }
    }

    /// `e` (of the compute type) rounded to the softmax precision when that is a 16-bit float.
    fn round(&self, e: Expr, cd: DType) -> Expr {
        match self.precision {
            Some(p @ (DType::F16 | DType::BF16)) => e.cast(p).cast(cd),
            _ => e,
        }
    }

    fn dims(&self, cx: &InferCx) -> OpResult<FlexDims> {
        let n = if self.part == FlexPart::Scores { 2 } else { 3 };
        check_arity(cx, n, n)?;
        let floats = &[DType::F32, DType::F64];
        // The input type (the `Values` part's probabilities are of the compute type).
        let first = if self.part == FlexPart::Values {
            check_dtype(cx, 0, floats)?;
            1
        } else {
            0
        };
        let dtype = check_dtype(cx, first, floats)?;
        for i in first + 1..cx.inputs.len() {
            if cx.input(i)?.dtype != dtype {
                return Err(OpError::expected(
                    format!("input {i} of type {dtype} (as input {first})"),
                    cx.input(i)?,
                ));
            }
        }
        let rank4 = |i: usize, what: &str| rank_of(cx, i, what, 4);
        match self.part {
            FlexPart::Whole | FlexPart::Scores => {
                let q = rank4(0, "Q (B, H_q, L, E)")?;
                let k = rank4(1, "K (B, H_kv, S, E)")?;
                let (b, hq, l, e) = (q[0], q[1], q[2], q[3]);
                let (hkv, s) = (k[1], k[2]);
                if k[0] != b || k[3] != e || hkv == 0 || hq % hkv != 0 {
                    return Err(OpError::expected(
                        format!("K (input 1) of shape [{b}, H_kv, S, {e}], H_kv dividing {hq}"),
                        format!("{k:?}"),
                    ));
                }
                let ev = if self.part == FlexPart::Whole {
                    let v = rank4(2, "V (B, H_kv, S, E_v)")?;
                    if v[..3] != [b, hkv, s] {
                        return Err(OpError::expected(
                            format!("V (input 2) of shape [{b}, {hkv}, {s}, E_v]"),
                            format!("{v:?}"),
                        ));
                    }
                    v[3]
                } else {
                    0
                };
                Ok(FlexDims {
                    dtype,
                    b,
                    hq,
                    hkv,
                    l,
                    s,
                    e,
                    ev,
                })
            }
            FlexPart::Values => {
                let p = rank4(0, "probs (B, H_q, L, S)")?;
                let v = rank4(1, "V (B, H_kv, S, E_v)")?;
                let q = rank4(2, "Q (B, H_q, L, E)")?;
                let (b, hq, l, s) = (q[0], q[1], q[2], v[2]);
                let hkv = v[1];
                if v[0] != b || hkv == 0 || hq % hkv != 0 {
                    return Err(OpError::expected(
                        format!("V (input 1) of shape [{b}, H_kv, S, E_v], H_kv dividing {hq}"),
                        format!("{v:?}"),
                    ));
                }
                if p != [b, hq, l, s] {
                    return Err(OpError::expected(
                        format!(
                            "probabilities (the modifiers' outputs) of shape [{b}, {hq}, {l}, {s}]"
                        ),
                        format!("{p:?}"),
                    ));
                }
                Ok(FlexDims {
                    dtype,
                    b,
                    hq,
                    hkv,
                    l,
                    s,
                    e: 0,
                    ev: v[3],
                })
            }
        }
    }

    /// Key/value head of query head `h`.
    fn kv_head(d: &FlexDims, h: Expr) -> Expr {
        let group = d.hq / d.hkv;
        if group == 1 {
            h
        } else {
            h.div(Expr::i(group as i64))
        }
    }

    /// The scores `[B, H_q, L, S]` in the compute type.
    fn scores(&self, cx: &mut LowerCx, d: &FlexDims) -> Src {
        let cd = self.compute(d.dtype);
        let scale = self.scale.map_or(1.0 / (d.e as f64).sqrt(), |s| s as f64);
        // As the reference: sqrt(scale) in f32, applied to both operands in the input type.
        let ss = Expr::c(d.dtype, (scale as f32).sqrt() as f64);
        let v = Expr::var;
        let q = Expr::load(Src::Arg(0), vec![v(0), v(1), v(2), Expr::rvar(0)]);
        let k = Expr::load(
            Src::Arg(1),
            vec![v(0), Self::kv_head(d, v(1)), v(3), Expr::rvar(0)],
        );
        let acc = if cd == d.dtype {
            Expr::Acc
        } else {
            Expr::Acc.cast(cd)
        };
        let fin = self.round(acc, cd);
        let ty = TensorType::new(cd, vec![d.b, d.hq, d.l, d.s]);
        let fin = (fin != Expr::Acc).then_some(fin);
        cx.reduce(
            ty,
            RedOp::Sum,
            vec![d.e],
            q.mul(ss.clone()).mul(k.mul(ss)),
            fin,
        )
    }

    /// Softmax of `x` (`[B, H_q, L, S]`, the compute type) over its last axis.
    fn softmax(&self, cx: &mut LowerCx, d: &FlexDims, x: Src) -> Src {
        let cd = self.compute(d.dtype);
        let v = Expr::var;
        let at = |s: Src| Expr::load(s, vec![v(0), v(1), v(2), v(3)]);
        let at_r = |s: Src| Expr::load(s, vec![v(0), v(1), v(2), Expr::rvar(0)]);
        let row = |s: Src| Expr::load(s, vec![v(0), v(1), v(2)]);
        let row_ty = TensorType::new(cd, vec![d.b, d.hq, d.l]);
        let ty = TensorType::new(cd, vec![d.b, d.hq, d.l, d.s]);
        let mx = cx.reduce(row_ty.clone(), RedOp::Max, vec![d.s], at_r(x), None);
        let ex = cx.stage(ty.clone(), at(x).sub(row(mx)).exp_nonpos());
        let sum = cx.reduce(row_ty, RedOp::Sum, vec![d.s], at_r(ex), None);
        let p = self.round(at(ex).div(row(sum)), cd);
        cx.stage(ty, p)
    }

    /// `probs @ V` (probabilities of the compute type, or input 0 for the `Values` part).
    fn values(&self, cx: &mut LowerCx, d: &FlexDims, probs: Src, vals: Src) -> Src {
        let cd = self.compute(d.dtype);
        let v = Expr::var;
        let mut p = Expr::load(probs, vec![v(0), v(1), v(2), Expr::rvar(0)]);
        let pd = cx.dtype(probs);
        if pd != cd {
            p = p.cast(cd);
        }
        if self.part == FlexPart::Values {
            p = self.round(p, cd);
        }
        let mut x = Expr::load(
            vals,
            vec![v(0), Self::kv_head(d, v(1)), Expr::rvar(0), v(3)],
        );
        if d.dtype != cd {
            x = x.cast(cd);
        }
        let od = d.dtype;
        let fin = (od != cd).then(|| Expr::Acc.cast(od));
        let ty = TensorType::new(od, vec![d.b, d.hq, d.l, d.ev]);
        cx.reduce(ty, RedOp::Sum, vec![d.s], p.mul(x), fin)
    }
}

impl Operator for FlexAttention {
    fn op_type(&self) -> &'static str {
        "FlexAttention"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = self.dims(cx)?;
        Ok(vec![match self.part {
            FlexPart::Scores => TensorType::new(self.compute(d.dtype), vec![d.b, d.hq, d.l, d.s]),
            FlexPart::Whole | FlexPart::Values => {
                TensorType::new(d.dtype, vec![d.b, d.hq, d.l, d.ev])
            }
        }])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let d = self.dims(&icx(cx))?;
        Ok(vec![match self.part {
            FlexPart::Scores => self.scores(cx, &d),
            FlexPart::Values => self.values(cx, &d, Src::Arg(0), Src::Arg(1)),
            FlexPart::Whole => {
                let s = self.scores(cx, &d);
                let p = self.softmax(cx, &d, s);
                self.values(cx, &d, p, Src::Arg(2))
            }
        }])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("CausalConvWithState", causal_conv_ctor),
    ("LinearAttention", linear_attention_ctor),
    ("ai.onnx.preview:FlexAttention", |cx| {
        if cx.n_outputs != 1 {
            return Err(OpError::expected("1 output", cx.n_outputs));
        }
        Ok(Arc::new(FlexAttention::new(FlexPart::Whole, cx.attrs)?))
    }),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr, Attrs};
    use crate::tensor::Tensor;

    fn op(op_type: &str, attrs: &[(&str, Attr)], n_outputs: usize) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, 27, 6, n_outputs)
    }

    fn ty(shape: &[usize]) -> Option<TensorType> {
        Some(TensorType::new(DType::F32, shape))
    }

    fn infer(op: &dyn Operator, inputs: &[Option<TensorType>]) -> OpResult<Vec<TensorType>> {
        let consts = vec![None; inputs.len()];
        op.infer(&InferCx {
            inputs,
            consts: &consts,
        })
    }

    /// Infers, lowers and interprets `op` on run-time `args`: each output's shape and values.
    fn run(op: &dyn Operator, args: &[Option<Tensor>]) -> Vec<(Vec<usize>, Vec<f64>)> {
        testing::eval(op, args, &[])
            .expect("runs")
            .into_iter()
            .map(|t| (t.ty.shape.clone(), t.to_f64()))
            .collect()
    }

    fn t(shape: &[usize], v: &[f64]) -> Option<Tensor> {
        Some(Tensor::from_f64_as(DType::F32, shape, v))
    }

    /// An empty input leaves the past state as the present one.
    #[test]
    fn causal_conv_of_an_empty_input_keeps_the_state() {
        let c = op("CausalConvWithState", &[], 2).unwrap();
        let got = run(
            &*c,
            &[
                t(&[1, 1, 0], &[]),
                t(&[1, 1, 3], &[1.0, 2.0, 3.0]),
                None,
                t(&[1, 1, 2], &[5.0, 6.0]),
            ],
        );
        assert_eq!(got[0], (vec![1, 1, 0], vec![]));
        assert_eq!(got[1], (vec![1, 1, 2], vec![5.0, 6.0]));
    }

    #[test]
    fn causal_conv_rejects_bad_geometry_and_attributes() {
        let act = [("activation", Attr::Str("relu".into()))];
        assert!(op("CausalConvWithState", &act, 2).is_err());
        let c = op("CausalConvWithState", &[], 2).unwrap();
        // An empty kernel, a weight for other channels, a past state of the wrong length.
        assert!(infer(&*c, &[ty(&[1, 2, 4]), ty(&[2, 1, 0])]).is_err());
        assert!(infer(&*c, &[ty(&[1, 2, 4]), ty(&[3, 1, 2])]).is_err());
        assert!(infer(&*c, &[ty(&[1, 2, 4]), ty(&[2, 1, 3]), None, ty(&[1, 2, 3])]).is_err());
        let ok = infer(
            &*c,
            &[ty(&[1, 2, 4]), ty(&[2, 1, 3]), ty(&[2]), ty(&[1, 2, 2])],
        );
        assert_eq!(ok.unwrap()[1].shape, vec![1, 2, 2]);
    }

    fn heads(rule: &str, q: i64, kv: i64) -> Vec<(&'static str, Attr)> {
        vec![
            ("update_rule", Attr::Str(rule.into())),
            ("q_num_heads", Attr::Int(q)),
            ("kv_num_heads", Attr::Int(kv)),
        ]
    }

    #[test]
    fn linear_attention_checks_heads_and_the_inputs_of_its_rule() {
        assert!(op("LinearAttention", &heads("linear", 3, 2), 2).is_err());
        assert!(op("LinearAttention", &heads("linear", 0, 1), 2).is_err());
        assert!(op("LinearAttention", &heads("recurrent", 2, 1), 2).is_err());
        let qkv = [ty(&[1, 3, 8]), ty(&[1, 3, 4]), ty(&[1, 3, 6])];
        let with = |extra: &[Option<TensorType>]| {
            let mut v = qkv.to_vec();
            v.extend_from_slice(extra);
            v
        };
        let linear = op("LinearAttention", &heads("linear", 2, 1), 2).unwrap();
        let out = infer(&*linear, &with(&[])).unwrap();
        assert_eq!(out[0].shape, vec![1, 3, 12]);
        assert_eq!(out[1].shape, vec![1, 1, 4, 6]);
        // 'linear' takes neither decay nor beta; 'gated_delta' needs both.
        assert!(infer(&*linear, &with(&[None, ty(&[1, 3, 1])])).is_err());
        let gd = op("LinearAttention", &heads("gated_delta", 2, 1), 2).unwrap();
        assert!(infer(&*gd, &with(&[None, ty(&[1, 3, 4])])).is_err());
        assert!(infer(&*gd, &with(&[None, ty(&[1, 3, 4]), ty(&[1, 3, 1])])).is_ok());
        // A decay per head or per key dimension, nothing else; the past state's shape.
        assert!(infer(&*gd, &with(&[None, ty(&[1, 3, 1]), ty(&[1, 3, 1])])).is_ok());
        assert!(infer(&*gd, &with(&[None, ty(&[1, 3, 2]), ty(&[1, 3, 1])])).is_err());
        let past = ty(&[1, 1, 6, 4]);
        assert!(infer(&*gd, &with(&[past, ty(&[1, 3, 4]), ty(&[1, 3, 1])])).is_err());
    }

    /// No tokens: an empty output and the past state (or zeros) as the present one.
    #[test]
    fn linear_attention_without_tokens_passes_the_state_on() {
        let la = op("LinearAttention", &heads("linear", 1, 1), 2).unwrap();
        let e = t(&[1, 0, 2], &[]);
        let past = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let got = run(&*la, &[e.clone(), e.clone(), e.clone(), past]);
        assert_eq!(got[0], (vec![1, 0, 2], vec![]));
        assert_eq!(got[1], (vec![1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]));
        let got = run(&*la, &[e.clone(), e.clone(), e]);
        assert_eq!(got[1], (vec![1, 1, 2, 2], vec![0.0; 4]));
    }

    /// One step of 'delta' by hand: S = beta k (v - S0^T k)^T + S0, o = scale q^T S.
    #[test]
    fn linear_attention_delta_step() {
        let mut a = heads("delta", 1, 1);
        a.push(("scale", Attr::Float(0.5)));
        let la = op("LinearAttention", &a, 2).unwrap();
        let (q, k, v) = ([1.0, 2.0], [1.0, 0.0], [3.0, 4.0]);
        let s0 = [1.0, 1.0, 0.0, 2.0];
        let got = run(
            &*la,
            &[
                t(&[1, 1, 2], &q),
                t(&[1, 1, 2], &k),
                t(&[1, 1, 2], &v),
                t(&[1, 1, 2, 2], &s0),
                None,
                t(&[1, 1, 1], &[0.5]),
            ],
        );
        // S0^T k = [1, 1]; written = 0.5 * ([3, 4] - [1, 1]) = [1, 1.5]; S = S0 + k written^T.
        let s = [2.0, 2.5, 0.0, 2.0];
        assert_eq!(got[1].1, s);
        let o = [
            0.5 * (q[0] * s[0] + q[1] * s[2]),
            0.5 * (q[0] * s[1] + q[1] * s[3]),
        ];
        assert_eq!(got[0].1, o);
    }

    /// A `score_mod` / `prob_mod` body that changes the scores' shape is an error.
    #[test]
    fn flex_attention_values_check_the_modified_shape() {
        let values = FlexAttention::new(FlexPart::Values, &Attrs::default()).unwrap();
        let q = ty(&[1, 2, 3, 4]);
        let v = ty(&[1, 1, 5, 6]);
        let out = infer(&values, &[ty(&[1, 2, 3, 5]), v.clone(), q.clone()]).unwrap();
        assert_eq!(out[0].shape, vec![1, 2, 3, 6]);
        assert!(infer(&values, &[ty(&[1, 2, 1, 5]), v, q]).is_err());
        let bad = [("softmax_precision", Attr::Int(6))];
        assert!(op("ai.onnx.preview:FlexAttention", &bad, 1).is_err());
    }
}
