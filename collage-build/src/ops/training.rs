//! The optimizers of `ai.onnx.preview.training` (`Adagrad`, `Adam`, `Momentum`: one update step
//! of several tensors at once) and two small `ai.onnx.ml` operators (`Binarizer`,
//! `ArrayFeatureExtractor`).
//!
//! An optimizer's inputs are the learning rate `R` (a scalar), the update count `T` (an int64
//! scalar) and then, for `n` optimized tensors, all their `X`s, all their `G`s (gradients) and
//! all of each state (`V`, `H`); its outputs are all the new `X`s, then all of each new state.
//! `R` and `T` are run-time values.
use std::sync::Arc;

use super::{check_dtype, Constructor, InferCx, LowerCx, OpCx, OpKind, OpResult, Operator, FLOATS};
use crate::error::OpError;
use crate::te::{Expr, Src};
use crate::tensor::{DType, TensorType};

/// The output index variables `Var(0..n)`.
fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// A required float attribute.
fn required_float(cx: &OpCx, name: &str) -> OpResult<f32> {
    cx.attrs
        .opt_float(name)?
        .ok_or_else(|| OpError::expected(format!("attribute {name}"), "none"))
}

/// Which optimizer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Optim {
    /// `Adagrad`.
    Adagrad {
        decay_factor: f32,
        epsilon: f32,
        norm_coefficient: f32,
    },
    /// `Adam`.
    Adam {
        alpha: f32,
        beta: f32,
        epsilon: f32,
        norm_coefficient: f32,
        norm_coefficient_post: f32,
    },
    /// `Momentum`, standard or Nesterov.
    Momentum {
        alpha: f32,
        beta: f32,
        norm_coefficient: f32,
        nesterov: bool,
    },
}

impl Optim {
    /// Tensors per optimized variable (`X`, `G` and the states).
    fn per_var(self) -> usize {
        match self {
            Optim::Adagrad { .. } | Optim::Momentum { .. } => 3,
            Optim::Adam { .. } => 4,
        }
    }
}

/// An optimizer node updating `n` tensors.
#[derive(Debug)]
struct Optimizer {
    optim: Optim,
    /// The number of optimized tensors.
    n: usize,
}

impl Optimizer {
    /// Checks the node's input and output counts; `n` from them.
    fn build(cx: &OpCx, optim: Optim) -> OpResult<Arc<dyn Operator>> {
        let k = optim.per_var();
        let rest = cx.n_inputs.saturating_sub(2);
        let n = rest / k;
        if cx.n_inputs < 2 + k || !rest.is_multiple_of(k) {
            return Err(OpError::expected(
                format!("R, T and {k} inputs per optimized tensor"),
                format!("{} inputs", cx.n_inputs),
            ));
        }
        if cx.n_outputs != n * (k - 1) {
            return Err(OpError::expected(
                format!("{} outputs for {n} optimized tensors", n * (k - 1)),
                cx.n_outputs,
            ));
        }
        Ok(Arc::new(Optimizer { optim, n }))
    }

    /// Input index of tensor `role` (0: X, 1: G, 2..: states) of variable `i`.
    fn at(&self, role: usize, i: usize) -> usize {
        2 + role * self.n + i
    }
}

impl Operator for Optimizer {
    fn op_type(&self) -> &'static str {
        match self.optim {
            Optim::Adagrad { .. } => "Adagrad",
            Optim::Adam { .. } => "Adam",
            Optim::Momentum { .. } => "Momentum",
        }
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, &[DType::I64])?;
        for i in 0..2 {
            let t = cx.input(i)?;
            if t.numel() != 1 {
                return Err(OpError::expected(
                    format!("input {i} ({}) a scalar", ["R", "T"][i]),
                    t,
                ));
            }
        }
        let k = self.optim.per_var();
        if cx.inputs.len() != 2 + k * self.n {
            return Err(OpError::expected(
                format!("{} inputs", 2 + k * self.n),
                cx.inputs.len(),
            ));
        }
        let d = check_dtype(cx, 2, FLOATS)?;
        let mut xs = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let x = cx.input(self.at(0, i))?;
            for role in 1..k {
                let j = self.at(role, i);
                let t = cx.input(j)?;
                if t.dtype != d || t.shape != x.shape {
                    return Err(OpError::expected(
                        format!("input {j} of the type of input {} ({x})", self.at(0, i)),
                        t,
                    ));
                }
            }
            xs.push(x.clone());
        }
        Ok((1..k).flat_map(|_| xs.iter().cloned()).collect())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let d = cx.input(2).dtype;
        let f = |v: f32| Expr::c(d, v as f64);
        // R in the tensors' type; T as an f64 for the powers.
        let r = Expr::load(Src::Arg(0), vec![Expr::i(0); cx.input(0).rank()]).cast(d);
        let t = Expr::load(Src::Arg(1), vec![Expr::i(0); cx.input(1).rank()]);
        let t_pos = t.clone().gt(Expr::i(0));
        let tf = t.cast(DType::F64);
        let scalar = TensorType::new(d, vec![]);
        // The step's learning rate (a scalar computed once).
        let rate = match self.optim {
            Optim::Adagrad { decay_factor, .. } => {
                let den =
                    Expr::c(DType::F64, 1.0).add(tf.mul(Expr::c(DType::F64, decay_factor as f64)));
                r.clone().cast(DType::F64).div(den).cast(d)
            }
            Optim::Adam { alpha, beta, .. } => {
                let one = || Expr::c(DType::F64, 1.0);
                let bp = Expr::c(DType::F64, beta as f64).pow(tf.clone());
                let ap = Expr::c(DType::F64, alpha as f64).pow(tf);
                let adj = r
                    .clone()
                    .cast(DType::F64)
                    .mul(one().sub(bp).sqrt())
                    .div(one().sub(ap))
                    .cast(d);
                Expr::select(t_pos, adj, r.clone())
            }
            Optim::Momentum { beta, .. } => {
                // Not a rate: the gradient's coefficient, 1 at the first step.
                Expr::select(t_pos, f(beta), f(1.0))
            }
        };
        let coef = Expr::load(cx.materialized_stage(scalar, rate), vec![]);
        let mut outs: Vec<Vec<Src>> = vec![Vec::new(); self.optim.per_var() - 1];
        for i in 0..self.n {
            let xt = cx.input(self.at(0, i)).clone();
            let load = |role: usize| Expr::load(Src::Arg(self.at(role, i) as u32), vars(xt.rank()));
            let x = load(0);
            let g = load(1);
            match self.optim {
                Optim::Adagrad {
                    epsilon,
                    norm_coefficient,
                    ..
                } => {
                    let gr = f(norm_coefficient).mul(x.clone()).add(g);
                    let h_new = cx.stage(xt.clone(), load(2).add(gr.clone().mul(gr.clone())));
                    let hs = Expr::load(h_new, vars(xt.rank())).sqrt().add(f(epsilon));
                    let x_new = cx.stage(xt.clone(), x.sub(coef.clone().mul(gr).div(hs)));
                    outs[0].push(x_new);
                    outs[1].push(h_new);
                }
                Optim::Adam {
                    alpha,
                    beta,
                    epsilon,
                    norm_coefficient,
                    norm_coefficient_post,
                } => {
                    let gr = f(norm_coefficient).mul(x.clone()).add(g);
                    let v_new = cx.stage(
                        xt.clone(),
                        f(alpha).mul(load(2)).add(f(1.0 - alpha).mul(gr.clone())),
                    );
                    let h_new = cx.stage(
                        xt.clone(),
                        f(beta)
                            .mul(load(3))
                            .add(f(1.0 - beta).mul(gr.clone().mul(gr))),
                    );
                    let hs = Expr::load(h_new, vars(xt.rank())).sqrt().add(f(epsilon));
                    let vn = Expr::load(v_new, vars(xt.rank()));
                    let x_new = cx.stage(
                        xt.clone(),
                        f(1.0 - norm_coefficient_post).mul(x.sub(coef.clone().mul(vn.div(hs)))),
                    );
                    outs[0].push(x_new);
                    outs[1].push(v_new);
                    outs[2].push(h_new);
                }
                Optim::Momentum {
                    alpha,
                    norm_coefficient,
                    nesterov,
                    ..
                } => {
                    let gr = f(norm_coefficient).mul(x.clone()).add(g);
                    let v_new = cx.stage(
                        xt.clone(),
                        f(alpha).mul(load(2)).add(coef.clone().mul(gr.clone())),
                    );
                    let vn = Expr::load(v_new, vars(xt.rank()));
                    let step = if nesterov {
                        gr.add(f(alpha).mul(vn))
                    } else {
                        vn
                    };
                    let x_new = cx.stage(xt.clone(), x.sub(r.clone().mul(step)));
                    outs[0].push(x_new);
                    outs[1].push(v_new);
                }
            }
        }
        Ok(outs.into_iter().flatten().collect())
    }
}

// ---------------------------------------------------------------------------------------------
// ai.onnx.ml: Binarizer, ArrayFeatureExtractor

/// The element types of the two `ai.onnx.ml` operators here (their `string` is not supported).
const ML_TYPES: &[DType] = &[DType::F32, DType::F64, DType::I64, DType::I32];

/// `Binarizer`: `x > threshold ? 1 : 0`, in the input's type (compared in f64).
#[derive(Debug)]
struct Binarizer {
    threshold: f32,
}

impl Operator for Binarizer {
    fn op_type(&self) -> &'static str {
        "Binarizer"
    }

    fn kind(&self) -> OpKind {
        OpKind::Elementwise
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        if cx.inputs.len() != 1 {
            return Err(OpError::expected("1 input", cx.inputs.len()));
        }
        check_dtype(cx, 0, ML_TYPES)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let x = Expr::load(Src::Arg(0), vars(xt.rank())).cast(DType::F64);
        let body = Expr::select(
            x.gt(Expr::c(DType::F64, self.threshold as f64)),
            Expr::c(d, 1.0),
            Expr::c(d, 0.0),
        );
        Ok(vec![cx.stage(xt, body)])
    }
}

/// `ArrayFeatureExtractor`: `out[.., j] = x[.., indices.flat[j]]` along the last axis; a 1-D
/// input gives a `[1, k]` output (as onnxruntime and the reference do). Run-time indices are
/// wrapped when negative and clamped into range; constant ones out of range are an error.
#[derive(Debug)]
struct ArrayFeatureExtractor;

impl Operator for ArrayFeatureExtractor {
    fn op_type(&self) -> &'static str {
        "ArrayFeatureExtractor"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        if cx.inputs.len() != 2 {
            return Err(OpError::expected("2 inputs", cx.inputs.len()));
        }
        let d = check_dtype(cx, 0, ML_TYPES)?;
        check_dtype(cx, 1, &[DType::I64])?;
        let x = cx.input(0)?;
        if x.rank() == 0 {
            return Err(OpError::expected("input 0 of rank >= 1", x));
        }
        let f = x.shape[x.rank() - 1];
        if let Some(t) = cx.consts.get(1).and_then(|c| c.as_deref()) {
            for k in 0..t.numel() {
                let v = t.get_i64(k);
                if v < -(f as i64) || v >= f as i64 {
                    return Err(OpError::expected(format!("indices in [-{f}, {f})"), v));
                }
            }
        }
        let k = cx.input(1)?.numel();
        if f == 0 && k > 0 {
            return Err(OpError::expected(
                "a non-empty last dimension to select from",
                x,
            ));
        }
        let mut shape = if x.rank() == 1 {
            vec![1]
        } else {
            x.shape[..x.rank() - 1].to_vec()
        };
        shape.push(k);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let out = cx.output(0).clone();
        let r = xt.rank();
        let f = xt.shape[r - 1] as i64;
        let j = Expr::var(out.rank() - 1);
        let i = Expr::load_flat(Src::Arg(1), j);
        let wrapped = Expr::select(i.clone().lt(Expr::i(0)), i.clone().add(Expr::i(f)), i);
        let mut idx = if r == 1 { vec![] } else { vars(r - 1) };
        idx.push(wrapped.max(Expr::i(0)).min(Expr::i((f - 1).max(0))));
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("ai.onnx.preview.training:Adagrad", |cx| {
        Optimizer::build(
            cx,
            Optim::Adagrad {
                decay_factor: cx.attrs.float("decay_factor", 0.0)?,
                epsilon: cx.attrs.float("epsilon", 1e-6)?,
                norm_coefficient: cx.attrs.float("norm_coefficient", 0.0)?,
            },
        )
    }),
    ("ai.onnx.preview.training:Adam", |cx| {
        Optimizer::build(
            cx,
            Optim::Adam {
                alpha: cx.attrs.float("alpha", 0.9)?,
                beta: cx.attrs.float("beta", 0.999)?,
                epsilon: cx.attrs.float("epsilon", 1e-6)?,
                norm_coefficient: cx.attrs.float("norm_coefficient", 0.0)?,
                norm_coefficient_post: cx.attrs.float("norm_coefficient_post", 0.0)?,
            },
        )
    }),
    ("ai.onnx.preview.training:Momentum", |cx| {
        let nesterov = match cx.attrs.string("mode", "")?.as_str() {
            "standard" => false,
            "nesterov" => true,
            other => {
                return Err(OpError::expected(
                    "attribute mode standard or nesterov",
                    format!("{other:?}"),
                ))
            }
        };
        Optimizer::build(
            cx,
            Optim::Momentum {
                alpha: required_float(cx, "alpha")?,
                beta: required_float(cx, "beta")?,
                norm_coefficient: required_float(cx, "norm_coefficient")?,
                nesterov,
            },
        )
    }),
    ("ai.onnx.ml:Binarizer", |cx| {
        Ok(Arc::new(Binarizer {
            threshold: cx.attrs.float("threshold", 0.0)?,
        }))
    }),
    ("ai.onnx.ml:ArrayFeatureExtractor", |_| {
        Ok(Arc::new(ArrayFeatureExtractor))
    }),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr};
    use crate::tensor::Tensor;

    fn op(
        op_type: &str,
        attrs: &[(&str, Attr)],
        n_inputs: usize,
        n_outputs: usize,
    ) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, 1, n_inputs, n_outputs)
    }

    /// Infers, lowers and interprets `op` on run-time `args`: each output's shape and values.
    fn run(op: &dyn Operator, args: &[Tensor]) -> Vec<(Vec<usize>, Vec<f64>)> {
        let args: Vec<Option<Tensor>> = args.iter().cloned().map(Some).collect();
        testing::eval(op, &args, &[])
            .expect("runs")
            .into_iter()
            .map(|v| (v.ty.shape.clone(), v.to_f64()))
            .collect()
    }

    fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_f64_as(DType::F64, shape, v)
    }

    #[test]
    fn adam_corrects_bias_only_after_the_first_step() {
        let adam = op("ai.onnx.preview.training:Adam", &[], 6, 3).unwrap();
        let (a, b, eps) = (0.9f32 as f64, 0.999f32 as f64, 1e-6f32 as f64);
        for t in [0i64, 3] {
            let args = [
                f64s(&[], &[0.1]),
                Tensor::from_i64(&[], &[t]),
                f64s(&[1], &[1.0]),
                f64s(&[1], &[1.0]),
                f64s(&[1], &[0.0]),
                f64s(&[1], &[0.0]),
            ];
            let got = run(&*adam, &args);
            let (v, h) = (1.0 - a, 1.0 - b);
            let r = if t > 0 {
                0.1 * (1.0 - b.powi(t as i32)).sqrt() / (1.0 - a.powi(t as i32))
            } else {
                0.1
            };
            let x = 1.0 - r * (v / (h.sqrt() + eps));
            assert!((got[0].1[0] - x).abs() < 1e-12, "T={t}: {got:?} {x}");
            assert!((got[1].1[0] - v).abs() < 1e-12 && (got[2].1[0] - h).abs() < 1e-12);
        }
    }

    #[test]
    fn optimizer_nodes_are_checked() {
        let m = [("alpha", Attr::Float(0.9)), ("beta", Attr::Float(1.0))];
        let mut full = m.to_vec();
        full.push(("norm_coefficient", Attr::Float(0.0)));
        // `mode` is required, and one of two values.
        assert!(op("ai.onnx.preview.training:Momentum", &full, 5, 2).is_err());
        full.push(("mode", Attr::Str("heavy".into())));
        assert!(op("ai.onnx.preview.training:Momentum", &full, 5, 2).is_err());
        full.pop();
        full.push(("mode", Attr::Str("standard".into())));
        assert!(op("ai.onnx.preview.training:Momentum", &full, 5, 2).is_ok());
        assert!(op("ai.onnx.preview.training:Momentum", &full, 6, 2).is_err());
        assert!(op("ai.onnx.preview.training:Momentum", &full, 8, 3).is_err());
        // Shapes of one tensor's state must match it.
        let adagrad = op("ai.onnx.preview.training:Adagrad", &[], 5, 2).unwrap();
        let ty = |d, s: &[usize]| Some(TensorType::new(d, s.to_vec()));
        let inputs = [
            ty(DType::F32, &[]),
            ty(DType::I64, &[]),
            ty(DType::F32, &[2]),
            ty(DType::F32, &[2]),
            ty(DType::F32, &[3]),
        ];
        let consts = vec![None; 5];
        let cx = InferCx {
            inputs: &inputs,
            consts: &consts,
        };
        assert!(adagrad.infer(&cx).is_err());
    }

    #[test]
    fn array_feature_extractor_of_a_vector_and_negative_indices() {
        let afe = op("ai.onnx.ml:ArrayFeatureExtractor", &[], 2, 1).unwrap();
        let x = f64s(&[4], &[10., 11., 12., 13.]);
        let got = run(&*afe, &[x, Tensor::from_i64(&[3], &[-1, 0, 9])]);
        assert_eq!(got, [(vec![1, 3], vec![13., 10., 13.])]);
    }

    #[test]
    fn binarizer_of_integers() {
        let b = op(
            "ai.onnx.ml:Binarizer",
            &[("threshold", Attr::Float(1.5))],
            1,
            1,
        )
        .unwrap();
        let got = run(&*b, &[Tensor::from_i64(&[4], &[-3, 1, 2, 7])]);
        assert_eq!(got, [(vec![4], vec![0., 0., 1., 1.])]);
    }
}
