//! Recurrent operators: RNN, GRU and LSTM.
//!
//! The sequence length is static (the first or second dimension of `X`), so the recurrence is
//! unrolled inside the lowering. Per direction, one reduction stage computes the input products
//! of every time step at once (`X·Wᵀ` plus the biases that do not depend on the state); then,
//! per time step, a reduction stage computes the recurrent product `H_{t-1}·Rᵀ` and an
//! elementwise stage the gate math, reading the previous step's state stages. The outputs
//! gather the per-step states (`Y`) and the final ones (`Y_h`, `Y_c`).
//!
//! `sequence_lens`, when given and not a constant equal to the sequence length everywhere, masks
//! the steps: a batch entry's state stops changing after its length, its `Y` rows past it are
//! zero, the reverse direction starts at its last valid step, and the final states of a sequence
//! of length 0 are zero (ONNX Runtime's semantics; the reference evaluator ignores
//! `sequence_lens`). Run-time lengths are clamped to
//! `[0, seq_length]`; constant ones outside that range are an error.
use std::sync::Arc;

use super::{
    check_dtype, dim_mul, Attr, Constructor, InferCx, LowerCx, OpCx, OpResult, Operator, FLOATS,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

/// The kind of cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// `Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)`.
    Rnn,
    /// Gates z, r, h.
    Gru,
    /// Gates i, o, f, c and a cell state.
    Lstm,
}

impl Cell {
    fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru => "GRU",
            Cell::Lstm => "LSTM",
        }
    }

    /// Gates stacked in W and R.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// Activation functions per direction.
    fn n_acts(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 2,
            Cell::Lstm => 3,
        }
    }

    fn default_acts(self) -> &'static [Act] {
        match self {
            Cell::Rnn => &[Act::Tanh],
            Cell::Gru => &[Act::Sigmoid, Act::Tanh],
            Cell::Lstm => &[Act::Sigmoid, Act::Tanh, Act::Tanh],
        }
    }

    /// Number of inputs the operator takes at most.
    fn max_inputs(self) -> usize {
        match self {
            Cell::Lstm => 8,
            _ => 6,
        }
    }

    /// Number of outputs the operator has at most.
    fn max_outputs(self) -> usize {
        match self {
            Cell::Lstm => 3,
            _ => 2,
        }
    }
}

/// An activation function of the recurrent operators (the list in their specification).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    /// Parses a name (case-insensitively), consuming its alpha / beta from the iterators (the
    /// specification's "consumed in the order of activation functions"; a missing value takes
    /// the default of the corresponding ONNX operator).
    fn parse(
        name: &str,
        alphas: &mut std::slice::Iter<f32>,
        betas: &mut std::slice::Iter<f32>,
    ) -> OpResult<Act> {
        let mut a = |def: f64| alphas.next().map_or(def, |&v| v as f64);
        let lower = name.to_ascii_lowercase();
        let act = match lower.as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => {
                let al = a(1.0);
                Act::Affine(al, betas.next().map_or(0.0, |&v| v as f64))
            }
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => {
                let al = a(1.0);
                Act::ScaledTanh(al, betas.next().map_or(1.0, |&v| v as f64))
            }
            "hardsigmoid" => {
                let al = a(0.2);
                Act::HardSigmoid(al, betas.next().map_or(0.5, |&v| v as f64))
            }
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            _ => {
                return Err(OpError::expected(
                    "an activation among Relu, Tanh, Sigmoid, Affine, LeakyRelu, \
                     ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus",
                    format!("`{name}`"),
                ))
            }
        };
        Ok(act)
    }

    /// The function applied to `x` of float type `d`.
    fn apply(self, x: Expr, d: DType) -> Expr {
        let c = |v: f64| Expr::c(d, v);
        match self {
            Act::Relu => x.max(c(0.0)),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => sigmoid(x, d),
            Act::Affine(a, b) => x.mul(c(a)).add(c(b)),
            Act::LeakyRelu(a) => Expr::select(x.clone().ge(c(0.0)), x.clone(), x.mul(c(a))),
            Act::ThresholdedRelu(a) => Expr::select(x.clone().ge(c(a)), x, c(0.0)),
            Act::ScaledTanh(a, b) => x.mul(c(b)).tanh().mul(c(a)),
            Act::HardSigmoid(a, b) => x.mul(c(a)).add(c(b)).max(c(0.0)).min(c(1.0)),
            Act::Elu(a) => Expr::select(
                x.clone().ge(c(0.0)),
                x.clone(),
                c(a).mul(x.exp().sub(c(1.0))),
            ),
            Act::Softsign => x.clone().div(c(1.0).add(x.abs())),
            // log(1 + e^x), without overflow for large x.
            Act::Softplus => {
                Expr::select(x.clone().gt(c(20.0)), x.clone(), c(1.0).add(x.exp()).log())
            }
        }
    }
}

fn sigmoid(x: Expr, d: DType) -> Expr {
    Expr::c(d, 1.0).div(Expr::c(d, 1.0).add(x.neg().exp()))
}

/// Which way(s) the sequence is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }

    /// True if direction `d` (0 or 1) reads the sequence from its end.
    fn reversed(self, d: usize) -> bool {
        match self {
            Direction::Forward => false,
            Direction::Reverse => true,
            Direction::Bidirectional => d == 1,
        }
    }
}

/// `RNN`, `GRU` or `LSTM` with its attributes.
#[derive(Debug)]
struct Recurrent {
    cell: Cell,
    hidden_size: Option<usize>,
    direction: Direction,
    /// Batch-major shapes (`layout` = 1).
    batch_major: bool,
    /// Activation functions of each direction.
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    linear_before_reset: bool,
    input_forget: bool,
    n_outputs: usize,
}

/// The dimensions of one instance.
struct Dims {
    dtype: DType,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
}

/// Input positions.
const X: usize = 0;
const W: usize = 1;
const R: usize = 2;
const B: usize = 3;
const SEQ_LENS: usize = 4;
const INITIAL_H: usize = 5;
const INITIAL_C: usize = 6;
const P: usize = 7;

impl Recurrent {
    fn check_shape(&self, cx: &InferCx, i: usize, what: &str, want: &[usize]) -> OpResult<()> {
        let got = &cx.input(i)?.shape;
        if got != want {
            return Err(OpError::expected(
                format!("{} {what} of shape {want:?}", self.cell.name()),
                format!("{got:?}"),
            ));
        }
        Ok(())
    }

    /// The dimensions, after checking every input's type and shape.
    fn dims(&self, cx: &InferCx) -> OpResult<Dims> {
        let name = self.cell.name();
        if cx.inputs.len() > self.cell.max_inputs() {
            return Err(OpError::expected(
                format!("{name} with at most {} inputs", self.cell.max_inputs()),
                cx.inputs.len(),
            ));
        }
        let dtype = check_dtype(cx, X, FLOATS)?;
        check_dtype(cx, W, &[dtype])?;
        check_dtype(cx, R, &[dtype])?;
        let x = &cx.input(X)?.shape;
        if x.len() != 3 {
            return Err(OpError::expected(
                format!("{name} input X of rank 3"),
                format!("{x:?}"),
            ));
        }
        let (seq, batch, input) = if self.batch_major {
            (x[1], x[0], x[2])
        } else {
            (x[0], x[1], x[2])
        };
        let r = &cx.input(R)?.shape;
        if r.len() != 3 {
            return Err(OpError::expected(
                format!("{name} input R of rank 3"),
                format!("{r:?}"),
            ));
        }
        let hidden = self.hidden_size.unwrap_or(r[2]);
        let dirs = self.direction.count();
        let gh = dim_mul(self.cell.gates(), hidden, "gates times hidden_size")?;
        self.check_shape(cx, W, "input W", &[dirs, gh, input])?;
        self.check_shape(cx, R, "input R", &[dirs, gh, hidden])?;
        if cx.has(B) {
            check_dtype(cx, B, &[dtype])?;
            self.check_shape(cx, B, "input B", &[dirs, dim_mul(2, gh, "bias size")?])?;
        }
        if cx.has(SEQ_LENS) {
            check_dtype(cx, SEQ_LENS, &[DType::I32, DType::I64])?;
            self.check_shape(cx, SEQ_LENS, "input sequence_lens", &[batch])?;
            if let Some(Some(c)) = cx.consts.get(SEQ_LENS) {
                if let Some(&v) = c.to_i64().iter().find(|&&v| v < 0 || v as u64 > seq as u64) {
                    return Err(OpError::expected(
                        format!("{name} sequence_lens in [0, {seq}]"),
                        v,
                    ));
                }
            }
        }
        let state = self.state_shape(dirs, batch, hidden);
        for (i, what) in [
            (INITIAL_H, "input initial_h"),
            (INITIAL_C, "input initial_c"),
        ] {
            if cx.has(i) {
                check_dtype(cx, i, &[dtype])?;
                self.check_shape(cx, i, what, &state)?;
            }
        }
        if cx.has(P) {
            check_dtype(cx, P, &[dtype])?;
            self.check_shape(cx, P, "input P", &[dirs, dim_mul(3, hidden, "P size")?])?;
        }
        Ok(Dims {
            dtype,
            seq,
            batch,
            input,
            hidden,
            dirs,
        })
    }

    /// The shape of `initial_h`, `initial_c`, `Y_h` and `Y_c`.
    fn state_shape(&self, dirs: usize, batch: usize, hidden: usize) -> Vec<usize> {
        if self.batch_major {
            vec![batch, dirs, hidden]
        } else {
            vec![dirs, batch, hidden]
        }
    }
}

/// A state (hidden or cell) before a step: zero, an initial-state input, or a stage `[B, H]`.
#[derive(Clone, Copy)]
enum State {
    Zero,
    Input(usize),
    Stage(Src),
}

/// What a step's expressions need to know (output variables: batch `Var(0)`, unit `Var(1)`).
struct Step<'a> {
    dm: &'a Dims,
    d: usize,
    /// Time step (0-based, in the direction's own order).
    k: usize,
    reversed: bool,
    batch_major: bool,
    /// Sequence lengths `[B]` (I64, clamped), if the steps are masked.
    lens: Option<Src>,
    /// The input products `[T, B, G*H]` of this direction.
    xw: Src,
    clip: Option<f64>,
}

impl Step<'_> {
    fn b() -> Expr {
        Expr::var(0)
    }

    fn c(&self, v: f64) -> Expr {
        Expr::c(self.dm.dtype, v)
    }

    /// The time index this step reads, for batch entry `Var(0)`.
    fn time(&self) -> Expr {
        let t = self.dm.seq as i64;
        let k = self.k as i64;
        match (self.reversed, self.lens) {
            (false, _) => Expr::i(k),
            (true, None) => Expr::i(t - 1 - k),
            (true, Some(l)) => Expr::load(l, vec![Self::b()])
                .sub(Expr::i(k + 1))
                .max(Expr::i(0)),
        }
    }

    /// The input product (with its biases) of gate row `g`.
    fn xw(&self, g: Expr) -> Expr {
        Expr::load(self.xw, vec![self.time(), Self::b(), g])
    }

    /// `state[b, j]`.
    fn load(&self, s: State, b: Expr, j: Expr) -> Expr {
        load_state(s, self.d, self.batch_major, self.dm.dtype, b, j)
    }

    fn clip(&self, x: Expr) -> Expr {
        match self.clip {
            Some(c) => x.max(self.c(-c)).min(self.c(c)),
            None => x,
        }
    }

    /// `new` where this step is within the batch entry's sequence, `old` past it.
    fn mask(&self, new: Expr, old: Expr) -> Expr {
        match self.lens {
            Some(l) => Expr::select(
                Expr::i(self.k as i64).lt(Expr::load(l, vec![Self::b()])),
                new,
                old,
            ),
            None => new,
        }
    }
}

/// `state[b, j]` of direction `d`.
fn load_state(s: State, d: usize, batch_major: bool, dt: DType, b: Expr, j: Expr) -> Expr {
    match s {
        State::Zero => Expr::c(dt, 0.0),
        State::Input(i) => {
            let d = Expr::i(d as i64);
            let idx = if batch_major {
                vec![b, d, j]
            } else {
                vec![d, b, j]
            };
            Expr::load(Src::Arg(i as u32), idx)
        }
        State::Stage(s) => Expr::load(s, vec![b, j]),
    }
}

/// The recurrent product `h·R[d, 0..rows]ᵀ` as a stage `[B, rows]`, `None` for a zero state.
fn recurrent_product(cx: &mut LowerCx, st: &Step, h: State, rows: usize) -> Option<Src> {
    if matches!(h, State::Zero) {
        return None;
    }
    let body = st.load(h, Expr::var(0), Expr::rvar(0)).mul(Expr::load(
        Src::Arg(R as u32),
        vec![Expr::i(st.d as i64), Expr::var(1), Expr::rvar(0)],
    ));
    let ty = TensorType::new(st.dm.dtype, vec![st.dm.batch, rows]);
    Some(cx.reduce(ty, RedOp::Sum, vec![st.dm.hidden], body, None))
}

/// Element `[b, g]` of a recurrent product (zero when there is none).
fn rec(st: &Step, prod: Option<Src>, g: Expr) -> Expr {
    match prod {
        Some(p) => Expr::load(p, vec![Step::b(), g]),
        None => st.c(0.0),
    }
}

/// A bias element `B[d, off + g]`, or `None` without `B`.
fn bias(cx: &LowerCx, d: usize, off: usize, g: Expr) -> Option<Expr> {
    cx.has(B).then(|| {
        Expr::load(
            Src::Arg(B as u32),
            vec![Expr::i(d as i64), g.add(Expr::i(off as i64))],
        )
    })
}

impl Recurrent {
    /// The input products of direction `d`: a stage `[T, B, G*H]` with `X·W[d]ᵀ + Wb + Rb`
    /// (without GRU's `Rbh` when `linear_before_reset`: it goes inside the reset product).
    fn input_products(&self, cx: &mut LowerCx, dm: &Dims, d: usize) -> Src {
        let gh = self.cell.gates() * dm.hidden;
        let (t, b, g, r) = (Expr::var(0), Expr::var(1), Expr::var(2), Expr::rvar(0));
        let xi = if self.batch_major {
            vec![b, t, r.clone()]
        } else {
            vec![t, b, r.clone()]
        };
        let body = Expr::load(Src::Arg(X as u32), xi).mul(Expr::load(
            Src::Arg(W as u32),
            vec![Expr::i(d as i64), g.clone(), r],
        ));
        let fin = match (bias(cx, d, 0, g.clone()), bias(cx, d, gh, g.clone())) {
            (Some(wb), Some(rb)) => {
                let both = wb.clone().add(rb);
                Some(
                    Expr::Acc.add(if self.cell == Cell::Gru && self.linear_before_reset {
                        let zr = g.lt(Expr::i(2 * dm.hidden as i64));
                        Expr::select(zr, both, wb)
                    } else {
                        both
                    }),
                )
            }
            _ => None,
        };
        let ty = TensorType::new(dm.dtype, vec![dm.seq, dm.batch, gh]);
        cx.reduce(ty, RedOp::Sum, vec![dm.input], body, fin)
    }

    fn rnn_step(&self, cx: &mut LowerCx, st: &Step, h: State) -> State {
        let f = self.acts[st.d][0];
        let hv = Expr::var(1);
        let prod = recurrent_product(cx, st, h, st.dm.hidden);
        let pre = st.xw(hv.clone()).add(rec(st, prod, hv.clone()));
        let new = f.apply(st.clip(pre), st.dm.dtype);
        let body = st.mask(new, st.load(h, Step::b(), hv));
        let ty = TensorType::new(st.dm.dtype, vec![st.dm.batch, st.dm.hidden]);
        State::Stage(cx.materialized_stage(ty, body))
    }

    fn gru_step(&self, cx: &mut LowerCx, st: &Step, h: State) -> State {
        let (f, g) = (self.acts[st.d][0], self.acts[st.d][1]);
        let dt = st.dm.dtype;
        let hs = st.dm.hidden;
        let ty = TensorType::new(dt, vec![st.dm.batch, hs]);
        let hv = Expr::var(1);
        let hprev = st.load(h, Step::b(), hv.clone());
        let rows = if self.linear_before_reset {
            3 * hs
        } else {
            2 * hs
        };
        let prod = recurrent_product(cx, st, h, rows);
        // Gate pre-activations of rows `off + j`.
        let pre = |off: usize, j: Expr| {
            let g = j.add(Expr::i(off as i64));
            st.xw(g.clone()).add(rec(st, prod, g))
        };
        let z = f.apply(st.clip(pre(0, hv.clone())), dt);
        let r = f.apply(st.clip(pre(hs, hv.clone())), dt);
        let gate_h = Expr::i(2 * hs as i64);
        let h_pre = if self.linear_before_reset {
            // Xt·Whᵀ + Wbh + r ⊙ (Ht-1·Rhᵀ + Rbh)
            let g_h = hv.clone().add(gate_h.clone());
            let mut lin = rec(st, prod, g_h.clone());
            if let Some(rbh) = bias(cx, st.d, 3 * hs, g_h.clone()) {
                lin = lin.add(rbh);
            }
            st.xw(g_h).add(r.mul(lin))
        } else if matches!(h, State::Zero) {
            st.xw(hv.clone().add(gate_h))
        } else {
            // Xt·Whᵀ + (r ⊙ Ht-1)·Rhᵀ + Wbh + Rbh
            let reset = cx.materialized_stage(ty.clone(), r.mul(hprev.clone()));
            let body = Expr::load(reset, vec![Expr::var(0), Expr::rvar(0)]).mul(Expr::load(
                Src::Arg(R as u32),
                vec![
                    Expr::i(st.d as i64),
                    Expr::var(1).add(gate_h.clone()),
                    Expr::rvar(0),
                ],
            ));
            let p = cx.reduce(ty.clone(), RedOp::Sum, vec![hs], body, None);
            st.xw(hv.clone().add(gate_h))
                .add(Expr::load(p, vec![Step::b(), hv.clone()]))
        };
        let hh = g.apply(st.clip(h_pre), dt);
        let new = st.c(1.0).sub(z.clone()).mul(hh).add(z.mul(hprev.clone()));
        State::Stage(cx.materialized_stage(ty, st.mask(new, hprev)))
    }

    fn lstm_step(&self, cx: &mut LowerCx, st: &Step, h: State, c: State) -> (State, State) {
        let (f, g, hact) = (self.acts[st.d][0], self.acts[st.d][1], self.acts[st.d][2]);
        let dt = st.dm.dtype;
        let hs = st.dm.hidden;
        let ty = TensorType::new(dt, vec![st.dm.batch, hs]);
        let hv = Expr::var(1);
        let prod = recurrent_product(cx, st, h, 4 * hs);
        // Gate `k` (i, o, f, c) pre-activation.
        let pre = |k: usize| {
            let g = hv.clone().add(Expr::i((k * hs) as i64));
            st.xw(g.clone()).add(rec(st, prod, g))
        };
        // Peephole `k` (i, o, f) times `state`.
        let has_p = cx.has(P);
        let peep = |k: usize, x: Expr, state: Expr| {
            if has_p {
                let p = Expr::load(
                    Src::Arg(P as u32),
                    vec![
                        Expr::i(st.d as i64),
                        hv.clone().add(Expr::i((k * hs) as i64)),
                    ],
                );
                x.add(p.mul(state))
            } else {
                x
            }
        };
        let cprev = st.load(c, Step::b(), hv.clone());
        let i = f.apply(st.clip(peep(0, pre(0), cprev.clone())), dt);
        let fg = if self.input_forget {
            st.c(1.0).sub(i.clone())
        } else {
            f.apply(st.clip(peep(2, pre(2), cprev.clone())), dt)
        };
        let cc = g.apply(st.clip(pre(3)), dt);
        let cnew = fg.mul(cprev.clone()).add(i.mul(cc));
        let cs = cx.materialized_stage(ty.clone(), st.mask(cnew, cprev));
        let cnow = Expr::load(cs, vec![Step::b(), hv.clone()]);
        let o = f.apply(st.clip(peep(1, pre(1), cnow.clone())), dt);
        let hnew = o.mul(hact.apply(cnow, dt));
        let hprev = st.load(h, Step::b(), hv);
        let hsrc = cx.materialized_stage(ty, st.mask(hnew, hprev));
        (State::Stage(hsrc), State::Stage(cs))
    }

    /// The sequence lengths as a stage `[B]` of I64 clamped to `[0, T]`, or `None` when every
    /// sequence has the full length.
    fn lens(&self, cx: &mut LowerCx, dm: &Dims) -> Option<Src> {
        if !cx.has(SEQ_LENS) {
            return None;
        }
        if let Some(Some(c)) = cx.consts.get(SEQ_LENS) {
            if c.to_i64().iter().all(|&v| v as u64 == dm.seq as u64) {
                return None;
            }
        }
        let l = Expr::load(Src::Arg(SEQ_LENS as u32), vec![Expr::var(0)])
            .cast(DType::I64)
            .max(Expr::i(0))
            .min(Expr::i(dm.seq as i64));
        Some(cx.materialized_stage(TensorType::new(DType::I64, vec![dm.batch]), l))
    }
}

/// `srcs[k][b, h]` for a run-time `k` in `lo..lo + srcs.len()` (a balanced tree of selects).
fn pick(k: &Expr, srcs: &[Src], lo: usize, idx: &[Expr]) -> Expr {
    if srcs.len() == 1 {
        return Expr::load(srcs[0], idx.to_vec());
    }
    let mid = srcs.len() / 2;
    Expr::select(
        k.clone().lt(Expr::i((lo + mid) as i64)),
        pick(k, &srcs[..mid], lo, idx),
        pick(k, &srcs[mid..], lo + mid, idx),
    )
}

/// `per_dir(d)` for the direction variable `dv` (a select when there are two).
fn by_direction(dirs: usize, dv: Expr, per_dir: impl Fn(usize) -> Expr) -> Expr {
    if dirs == 1 {
        per_dir(0)
    } else {
        Expr::select(dv.eq(Expr::i(0)), per_dir(0), per_dir(1))
    }
}

impl Operator for Recurrent {
    fn op_type(&self) -> &'static str {
        self.cell.name()
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let dm = self.dims(cx)?;
        let y = if self.batch_major {
            vec![dm.batch, dm.seq, dm.dirs, dm.hidden]
        } else {
            vec![dm.seq, dm.dirs, dm.batch, dm.hidden]
        };
        let state = self.state_shape(dm.dirs, dm.batch, dm.hidden);
        let all = [
            TensorType::new(dm.dtype, y),
            TensorType::new(dm.dtype, state.clone()),
            TensorType::new(dm.dtype, state),
        ];
        Ok(all[..self.n_outputs].to_vec())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let dm = self.dims(&InferCx {
            inputs: cx.inputs,
            consts: cx.consts,
        })?;
        if self.n_outputs == 0 {
            return Ok(vec![]);
        }
        let lens = self.lens(cx, &dm);
        let initial = |i: usize| {
            if cx.has(i) {
                State::Input(i)
            } else {
                State::Zero
            }
        };
        let (h0, c0) = (initial(INITIAL_H), initial(INITIAL_C));
        // Per direction: the hidden state after each step, and the final states.
        let mut steps: Vec<Vec<Src>> = Vec::new();
        let mut finals: Vec<(State, State)> = Vec::new();
        for d in 0..dm.dirs {
            let xw = self.input_products(cx, &dm, d);
            let (mut h, mut c) = (h0, c0);
            let mut hs = Vec::new();
            for k in 0..dm.seq {
                let st = Step {
                    dm: &dm,
                    d,
                    k,
                    reversed: self.direction.reversed(d),
                    batch_major: self.batch_major,
                    lens,
                    xw,
                    clip: self.clip,
                };
                h = match self.cell {
                    Cell::Rnn => self.rnn_step(cx, &st, h),
                    Cell::Gru => self.gru_step(cx, &st, h),
                    Cell::Lstm => {
                        let (hn, cn) = self.lstm_step(cx, &st, h, c);
                        c = cn;
                        hn
                    }
                };
                if let State::Stage(s) = h {
                    hs.push(s);
                }
            }
            steps.push(hs);
            finals.push((h, c));
        }
        let dt = dm.dtype;
        let mut outs = Vec::new();
        // Y: the hidden state of each time step.
        let y_ty = cx.output(0).clone();
        let y = if dm.seq == 0 || y_ty.numel() == 0 {
            Expr::c(dt, 0.0)
        } else {
            let (b, t, dv, hv) = if self.batch_major {
                (Expr::var(0), Expr::var(1), Expr::var(2), Expr::var(3))
            } else {
                (Expr::var(2), Expr::var(0), Expr::var(1), Expr::var(3))
            };
            let len = lens.map(|l| Expr::load(l, vec![b.clone()]));
            by_direction(dm.dirs, dv, |d| {
                let k = match (self.direction.reversed(d), &len) {
                    (false, _) => t.clone(),
                    (true, None) => Expr::i(dm.seq as i64 - 1).sub(t.clone()),
                    (true, Some(l)) => l.clone().sub(Expr::i(1)).sub(t.clone()),
                };
                let v = pick(&k, &steps[d], 0, &[b.clone(), hv.clone()]);
                match &len {
                    Some(l) => Expr::select(t.clone().lt(l.clone()), v, Expr::c(dt, 0.0)),
                    None => v,
                }
            })
        };
        outs.push(cx.stage(y_ty, y));
        // Y_h and Y_c: the final states.
        for (o, which) in [(1, 0), (2, 1)] {
            if o >= self.n_outputs {
                break;
            }
            let ty = cx.output(o).clone();
            let (b, dv, hv) = if self.batch_major {
                (Expr::var(0), Expr::var(1), Expr::var(2))
            } else {
                (Expr::var(1), Expr::var(0), Expr::var(2))
            };
            let mut body = by_direction(dm.dirs, dv, |d| {
                let s = if which == 0 { finals[d].0 } else { finals[d].1 };
                load_state(s, d, self.batch_major, dt, b.clone(), hv.clone())
            });
            if let Some(l) = lens {
                // A sequence of length 0 has zero final states (as in ONNX Runtime).
                let empty = Expr::load(l, vec![b]).eq(Expr::i(0));
                body = Expr::select(empty, Expr::c(dt, 0.0), body);
            }
            outs.push(cx.stage(ty, body));
        }
        Ok(outs)
    }
}

/// The `activations` attribute (with its alphas and betas) as functions per direction.
fn activations(cx: &OpCx, cell: Cell, dirs: usize) -> OpResult<Vec<Vec<Act>>> {
    let per = cell.n_acts();
    let names = match cx.attrs.0.get("activations") {
        None => return Ok(vec![cell.default_acts().to_vec(); dirs]),
        Some(Attr::Strs(v)) => v.clone(),
        Some(Attr::Str(s)) => vec![s.clone()],
        Some(a) => {
            return Err(OpError::expected(
                "attribute `activations` to be a list of strings",
                format!("{a:?}"),
            ))
        }
    };
    let alphas = cx.attrs.floats("activation_alpha")?.unwrap_or_default();
    let betas = cx.attrs.floats("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    let acts = names
        .iter()
        .map(|n| Act::parse(n, &mut ai, &mut bi))
        .collect::<OpResult<Vec<_>>>()?;
    if ai.next().is_some() || bi.next().is_some() {
        return Err(OpError::expected(
            "activation_alpha / activation_beta with one value per activation that takes one",
            format!("{} alphas and {} betas", alphas.len(), betas.len()),
        ));
    }
    // A bidirectional node may list one direction's functions for both; a one-direction node
    // may list two directions' (the RNN schema's default has two), of which the first apply.
    if acts.len() == per * dirs {
        Ok(acts.chunks(per).map(|c| c.to_vec()).collect())
    } else if dirs == 2 && acts.len() == per {
        Ok(vec![acts; 2])
    } else if dirs == 1 && acts.len() == 2 * per {
        Ok(vec![acts[..per].to_vec()])
    } else {
        Err(OpError::expected(
            format!(
                "{} with {} activations ({per} per direction)",
                cell.name(),
                per * dirs
            ),
            names.len(),
        ))
    }
}

fn make(cx: &OpCx, cell: Cell) -> OpResult<Arc<dyn Operator>> {
    let a = cx.attrs;
    let direction = match a.string("direction", "forward")?.as_str() {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Bidirectional,
        other => {
            return Err(OpError::expected(
                "direction forward, reverse or bidirectional",
                format!("`{other}`"),
            ))
        }
    };
    let hidden_size = match a.opt_int("hidden_size")? {
        None => None,
        Some(v) if v > 0 && v <= super::MAX_DIM as i64 => Some(v as usize),
        Some(v) => return Err(OpError::expected("hidden_size >= 1", v)),
    };
    let batch_major = match a.int("layout", 0)? {
        0 => false,
        1 => true,
        v => return Err(OpError::expected("layout 0 or 1", v)),
    };
    let clip = match a.opt_float("clip")? {
        None => None,
        Some(c) if c > 0.0 => Some(c as f64),
        Some(c) => return Err(OpError::expected("a positive clip threshold", c)),
    };
    let linear_before_reset = match a.int("linear_before_reset", 0)? {
        0 => false,
        1 if cell == Cell::Gru => true,
        v => return Err(OpError::expected("linear_before_reset 0 (or 1 for GRU)", v)),
    };
    let input_forget = match a.int("input_forget", 0)? {
        0 => false,
        1 if cell == Cell::Lstm => true,
        v => return Err(OpError::expected("input_forget 0 (or 1 for LSTM)", v)),
    };
    if cx.n_outputs > cell.max_outputs() {
        return Err(OpError::expected(
            format!(
                "{} with at most {} outputs",
                cell.name(),
                cell.max_outputs()
            ),
            cx.n_outputs,
        ));
    }
    Ok(Arc::new(Recurrent {
        cell,
        hidden_size,
        direction,
        batch_major,
        acts: activations(cx, cell, direction.count())?,
        clip,
        linear_before_reset,
        input_forget,
        n_outputs: cx.n_outputs,
    }))
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("RNN", |cx| make(cx, Cell::Rnn)),
    ("GRU", |cx| make(cx, Cell::Gru)),
    ("LSTM", |cx| make(cx, Cell::Lstm)),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr};
    use crate::tensor::Tensor;

    fn op(op_type: &str, attrs: &[(&str, Attr)], n_outputs: usize) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, 22, 6, n_outputs)
    }

    fn strs(v: &[&str]) -> Attr {
        Attr::Strs(v.iter().map(|s| s.to_string()).collect())
    }

    fn t(d: DType, shape: &[usize], v: &[f64]) -> Option<Tensor> {
        Some(Tensor::from_f64_as(d, shape, v))
    }

    /// Infers, lowers and interprets `op` on `args` (`consts`: which are compile-time constants).
    fn run(
        op: &dyn Operator,
        args: &[Option<Tensor>],
        consts: &[usize],
    ) -> OpResult<Vec<Vec<f64>>> {
        Ok(testing::eval(op, args, consts)?
            .into_iter()
            .map(|v| v.to_f64())
            .collect())
    }

    #[test]
    fn attributes_are_checked() {
        let bad = [
            ("RNN", vec![("activations", strs(&["Gelu"]))]),
            (
                "RNN",
                vec![("activations", strs(&["Tanh", "Tanh", "Tanh"]))],
            ),
            ("GRU", vec![("activations", strs(&["Sigmoid"]))]),
            (
                "RNN",
                vec![
                    ("activations", strs(&["Tanh"])),
                    ("activation_alpha", Attr::Floats(vec![0.5])),
                ],
            ),
            ("LSTM", vec![("direction", Attr::Str("both".into()))]),
            ("LSTM", vec![("linear_before_reset", Attr::Int(1))]),
            ("GRU", vec![("input_forget", Attr::Int(1))]),
            ("RNN", vec![("layout", Attr::Int(2))]),
            ("RNN", vec![("clip", Attr::Float(-1.0))]),
            ("RNN", vec![("hidden_size", Attr::Int(0))]),
        ];
        for (ty, attrs) in bad {
            assert!(op(ty, &attrs, 2).is_err(), "{ty} {attrs:?}");
        }
        assert!(op("RNN", &[], 3).is_err(), "RNN has two outputs");
        // Accepted: one direction's list for both directions, the RNN schema's default list of
        // two for one direction, an alpha consumed by the activation that takes one.
        let bidi = ("direction", Attr::Str("bidirectional".into()));
        assert!(op(
            "LSTM",
            &[
                bidi.clone(),
                ("activations", strs(&["Sigmoid", "Tanh", "Relu"]))
            ],
            3
        )
        .is_ok());
        assert!(op("RNN", &[("activations", strs(&["Tanh", "Tanh"]))], 2).is_ok());
        let rnn = op(
            "RNN",
            &[
                ("activations", strs(&["tanh", "LeakyRelu"])),
                ("activation_alpha", Attr::Floats(vec![0.5])),
                bidi,
            ],
            2,
        )
        .unwrap();
        let r = rnn.as_any().downcast_ref::<Recurrent>().unwrap();
        assert_eq!(r.acts, vec![vec![Act::Tanh], vec![Act::LeakyRelu(0.5)]]);
    }

    #[test]
    fn shapes_and_constant_lengths_are_checked() {
        let rnn = op("RNN", &[("hidden_size", Attr::Int(1))], 2).unwrap();
        let f = DType::F32;
        let x = t(f, &[3, 2, 1], &[0.0; 6]);
        let w = t(f, &[1, 1, 1], &[1.0]);
        // R of the wrong hidden size; W of two directions for one.
        assert!(run(
            &*rnn,
            &[x.clone(), w.clone(), t(f, &[1, 2, 2], &[0.0; 4])],
            &[]
        )
        .is_err());
        let w2 = t(f, &[2, 1, 1], &[1.0, 1.0]);
        assert!(run(&*rnn, &[x.clone(), w2, w.clone()], &[]).is_err());
        // A constant length past the sequence.
        let lens = t(DType::I32, &[2], &[3.0, 4.0]);
        assert!(run(&*rnn, &[x, w.clone(), w, None, lens], &[4]).is_err());
    }

    /// With identity activations and unit weights, an RNN computes prefix sums of its input:
    /// shows the masking by `sequence_lens` in both directions.
    #[test]
    fn sequence_lengths_mask_steps() {
        let f = DType::F32;
        let affine = strs(&["Affine", "Affine"]);
        let rnn = op(
            "RNN",
            &[
                ("hidden_size", Attr::Int(1)),
                ("direction", Attr::Str("bidirectional".into())),
                ("activations", affine),
            ],
            2,
        )
        .unwrap();
        // X [T=3, B=3, 1]: batch 0 is 1, 2, 3; batch 1 is 10, 20, 30; batch 2 is 100, 200, 300.
        let x = t(
            f,
            &[3, 3, 1],
            &[1., 10., 100., 2., 20., 200., 3., 30., 300.],
        );
        let w = t(f, &[2, 1, 1], &[1.0, 1.0]);
        let h0 = t(f, &[2, 3, 1], &[0.5; 6]);
        // Y [T, D, B, 1] and Y_h [D, B, 1] for lengths 3, 1, 0.
        let y_short = [
            1.5, 10.5, 0., 6.5, 10.5, 0., // t = 0
            3.5, 0., 0., 5.5, 0., 0., // t = 1
            6.5, 0., 0., 3.5, 0., 0., // t = 2
        ];
        let yh_short = [6.5, 10.5, 0., 6.5, 10.5, 0.];
        // ... and for lengths 3, 3, 0.
        let y_full = [
            1.5, 10.5, 0., 6.5, 60.5, 0., // t = 0
            3.5, 30.5, 0., 5.5, 50.5, 0., // t = 1
            6.5, 60.5, 0., 3.5, 30.5, 0., // t = 2
        ];
        let yh_full = [6.5, 60.5, 0., 6.5, 60.5, 0.];
        // Run-time lengths, the same as a constant, and a run-time length past the sequence
        // (clamped to it).
        let cases = [
            ([3., 1., 0.], vec![], (&y_short, &yh_short)),
            ([3., 1., 0.], vec![4], (&y_short, &yh_short)),
            ([3., 9., 0.], vec![], (&y_full, &yh_full)),
        ];
        for (lens, consts, (y, yh)) in cases {
            let lens = t(DType::I32, &[3], &lens);
            let args = [x.clone(), w.clone(), w.clone(), None, lens, h0.clone()];
            let got = run(&*rnn, &args, &consts).unwrap();
            assert_eq!(got[0], y.to_vec(), "{consts:?}");
            assert_eq!(got[1], yh.to_vec(), "{consts:?}");
        }
        // Constant lengths equal to the sequence length: no masking, same as without them.
        let lens = t(DType::I32, &[3], &[3., 3., 3.]);
        let with = run(
            &*rnn,
            &[x.clone(), w.clone(), w.clone(), None, lens, h0.clone()],
            &[4],
        )
        .unwrap();
        let without = run(&*rnn, &[x, w.clone(), w, None, None, h0], &[]).unwrap();
        assert_eq!(with, without);
        assert_eq!(with[1], vec![6.5, 60.5, 600.5, 6.5, 60.5, 600.5]);
    }
}
