//! Loss operators: `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`.
//!
//! Both take scores `[N, C]` or `[N, C, d1, .., dk]`, integer targets `[N]` or `[N, d1, .., dk]`
//! (run-time values, read through a gather along the class axis) and optional class weights
//! `[C]`. A target outside `[0, C)` (other than `ignore_index`) is undefined by ONNX: the
//! lowering clamps it into range so that it never reads out of bounds, and a constant target
//! out of range is rejected at build time.
use std::sync::Arc;

use super::{
    check_dtype, shape_numel, Constructor, InferCx, LowerCx, OpCx, OpResult, Operator, FLOATS,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

/// Integer index types (the targets).
const INDEX: &[DType] = &[DType::I32, DType::I64];

/// The output index variables `Var(0..n)`.
fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// The reduction variables `RVar(0..n)`.
fn rvars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::rvar).collect()
}

/// How the per-element losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    /// The per-element losses, shaped like the target.
    None,
    /// Their sum (a scalar).
    Sum,
    /// Their weighted mean: the sum divided by the sum of the weights of the targets that are
    /// not ignored (their count without weights).
    Mean,
}

impl Reduction {
    /// From the `reduction` attribute.
    fn parse(cx: &OpCx) -> OpResult<Reduction> {
        match cx.attrs.string("reduction", "mean")?.as_str() {
            "none" => Ok(Reduction::None),
            "sum" => Ok(Reduction::Sum),
            "mean" => Ok(Reduction::Mean),
            other => Err(OpError::expected("reduction none, sum or mean", other)),
        }
    }
}

/// What both losses share: attributes and the checks and lowering of the gather-and-reduce.
#[derive(Debug)]
struct Nll {
    reduction: Reduction,
    ignore_index: Option<i64>,
}

impl Nll {
    fn new(cx: &OpCx) -> OpResult<Nll> {
        Ok(Nll {
            reduction: Reduction::parse(cx)?,
            ignore_index: cx.attrs.opt_int("ignore_index")?,
        })
    }

    /// Checks the inputs (scores 0, target 1, optional weight 2); returns the scores' type and
    /// the loss output's type.
    fn infer(&self, cx: &InferCx) -> OpResult<(TensorType, TensorType)> {
        if cx.inputs.len() > 3 {
            return Err(OpError::expected("at most 3 inputs", cx.inputs.len()));
        }
        let d = check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, INDEX)?;
        let x = cx.input(0)?.clone();
        let t = cx.input(1)?;
        if x.rank() < 2 {
            return Err(OpError::expected(
                "scores of shape [N, C] or [N, C, d1, ..]",
                &x,
            ));
        }
        let c = x.shape[1];
        let mut want = vec![x.shape[0]];
        want.extend_from_slice(&x.shape[2..]);
        if t.shape != want {
            return Err(OpError::expected(
                format!("target of shape {want:?} (scores {x})"),
                t,
            ));
        }
        if c == 0 && t.numel() > 0 {
            return Err(OpError::expected("scores with at least one class", &x));
        }
        if cx.has(2) {
            let w = cx.input(2)?;
            if w.dtype != d || w.shape != [c] {
                return Err(OpError::expected(
                    format!("weight of type {d} and shape [{c}]"),
                    w,
                ));
            }
        }
        if let Some(tv) = cx.consts.get(1).and_then(|c| c.as_deref()) {
            for k in 0..tv.numel() {
                let v = tv.get_i64(k);
                if Some(v) != self.ignore_index && (v < 0 || v as u64 >= c as u64) {
                    return Err(OpError::expected(
                        format!("target values in [0, {c}) or ignore_index"),
                        v,
                    ));
                }
            }
        }
        let out = match self.reduction {
            Reduction::None => TensorType::new(d, want),
            Reduction::Sum | Reduction::Mean => TensorType::new(d, vec![]),
        };
        Ok((x, out))
    }

    /// The loss of `-logp[n, target, d..]`, weighted and reduced, where `logp` (of type `xt`) is
    /// read from `src`; the target is input 1 and the weight input 2.
    fn lower(&self, cx: &mut LowerCx, src: Src, xt: &TensorType) -> OpResult<Src> {
        let d = xt.dtype;
        let c = xt.shape[1];
        let tt = cx.input(1).clone();
        let lt = TensorType::new(d, tt.shape.clone());
        let tv = Expr::load(Src::Arg(1), vars(tt.rank())).cast(DType::I64);
        let cls = tv
            .clone()
            .max(Expr::i(0))
            .min(Expr::i((c as i64 - 1).max(0)));
        // Scores index: [n, class, d1..].
        let mut idx = vec![Expr::var(0), cls.clone()];
        idx.extend((1..tt.rank()).map(Expr::var));
        let weighted = cx.has(2);
        let ignored = self.ignore_index.map(|ii| tv.eq(Expr::i(ii)));
        // The weight of this element: its class weight (or 1), 0 where the target is ignored.
        let class_w = if weighted {
            Expr::load(Src::Arg(2), vec![cls])
        } else {
            Expr::c(d, 1.0)
        };
        let neg = Expr::load(src, idx).neg();
        let mut body = if weighted {
            class_w.clone().mul(neg)
        } else {
            neg
        };
        let mut w = class_w;
        if let Some(ig) = ignored {
            body = Expr::select(ig.clone(), Expr::c(d, 0.0), body);
            w = Expr::select(ig, Expr::c(d, 0.0), w);
        }
        let per = cx.stage(lt.clone(), body);
        if self.reduction == Reduction::None {
            return Ok(per);
        }
        let scalar = TensorType::new(d, vec![]);
        let all = rvars(lt.rank());
        let sum = cx.reduce(
            scalar.clone(),
            RedOp::Sum,
            lt.shape.clone(),
            Expr::load(per, all.clone()),
            None,
        );
        if self.reduction == Reduction::Sum {
            return Ok(sum);
        }
        let denom = if weighted || self.ignore_index.is_some() {
            let wsum = cx.reduce(
                scalar.clone(),
                RedOp::Sum,
                lt.shape.clone(),
                w.subst_vars(&all),
                None,
            );
            Expr::load(wsum, vec![])
        } else {
            let n = shape_numel(&lt.shape, "the number of losses")?;
            Expr::c(d, n as f64)
        };
        Ok(cx.stage(scalar, Expr::load(sum, vec![]).div(denom)))
    }
}

// ---------------------------------------------------------------------------------------------
// NegativeLogLikelihoodLoss

/// `NegativeLogLikelihoodLoss`: `loss[n, d..] = -weight[t] * input[n, t, d..]` with
/// `t = target[n, d..]`, reduced by `reduction`.
#[derive(Debug)]
struct NegativeLogLikelihoodLoss {
    nll: Nll,
}

impl Operator for NegativeLogLikelihoodLoss {
    fn op_type(&self) -> &'static str {
        "NegativeLogLikelihoodLoss"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        Ok(vec![self.nll.infer(cx)?.1])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        Ok(vec![self.nll.lower(cx, Src::Arg(0), &xt)?])
    }
}

// ---------------------------------------------------------------------------------------------
// SoftmaxCrossEntropyLoss

/// `SoftmaxCrossEntropyLoss`: `NegativeLogLikelihoodLoss` of `LogSoftmax(scores)` over the class
/// axis (1), with that log-probability as an optional second output.
#[derive(Debug)]
struct SoftmaxCrossEntropyLoss {
    nll: Nll,
    /// Whether the node asks for `log_prob`.
    log_prob: bool,
}

impl Operator for SoftmaxCrossEntropyLoss {
    fn op_type(&self) -> &'static str {
        "SoftmaxCrossEntropyLoss"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let (x, loss) = self.nll.infer(cx)?;
        let mut out = vec![loss];
        if self.log_prob {
            out.push(x);
        }
        Ok(out)
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        // Max and log-sum-exp over the class axis, kept as a dimension of 1.
        let mut kshape = xt.shape.clone();
        kshape[1] = 1;
        let kt = TensorType::new(d, kshape);
        let mut at_r = vars(rank);
        at_r[1] = Expr::rvar(0);
        let mut kept = vars(rank);
        kept[1] = Expr::i(0);
        let xr = Expr::load(Src::Arg(0), at_r);
        let m = cx.reduce(kt.clone(), RedOp::Max, vec![xt.shape[1]], xr.clone(), None);
        let mk = Expr::load(m, kept.clone());
        let lse = cx.reduce(
            kt,
            RedOp::Sum,
            vec![xt.shape[1]],
            xr.sub(mk.clone()).exp_nonpos(),
            Some(Expr::Acc.log()),
        );
        let body = Expr::load(Src::Arg(0), vars(rank))
            .sub(mk)
            .sub(Expr::load(lse, kept));
        // Read by the gather at run-time classes: computed once, not inlined per read.
        let logp = cx.materialized_stage(xt.clone(), body);
        let loss = self.nll.lower(cx, logp, &xt)?;
        let mut out = vec![loss];
        if self.log_prob {
            out.push(logp);
        }
        Ok(out)
    }
}

/// The number of outputs a loss node asks for, at most `max`.
fn outputs(cx: &OpCx, max: usize) -> OpResult<usize> {
    if cx.n_outputs == 0 || cx.n_outputs > max {
        return Err(OpError::expected(
            format!("1 to {max} outputs"),
            cx.n_outputs,
        ));
    }
    Ok(cx.n_outputs)
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("NegativeLogLikelihoodLoss", |cx| {
        outputs(cx, 1)?;
        Ok(Arc::new(NegativeLogLikelihoodLoss { nll: Nll::new(cx)? }))
    }),
    ("SoftmaxCrossEntropyLoss", |cx| {
        Ok(Arc::new(SoftmaxCrossEntropyLoss {
            nll: Nll::new(cx)?,
            log_prob: outputs(cx, 2)? == 2,
        }))
    }),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr};
    use crate::tensor::Tensor;

    fn op(op_type: &str, attrs: &[(&str, Attr)], n_outputs: usize) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, 22, 3, n_outputs)
    }

    fn infer(
        op: &dyn Operator,
        args: &[Option<Tensor>],
        consts: &[Option<Arc<Tensor>>],
    ) -> OpResult<Vec<TensorType>> {
        let inputs: Vec<Option<TensorType>> = args
            .iter()
            .map(|a| a.as_ref().map(|t| t.ty.clone()))
            .collect();
        op.infer(&InferCx {
            inputs: &inputs,
            consts,
        })
    }

    /// Infers, lowers and interprets `op` on run-time `args`: each output's values.
    fn run(op: &dyn Operator, args: &[Option<Tensor>]) -> Vec<Vec<f64>> {
        testing::eval(op, args, &[])
            .expect("runs")
            .into_iter()
            .map(|v| v.to_f64())
            .collect()
    }

    #[test]
    fn run_time_targets_out_of_range_are_clamped() {
        let nll = op(
            "NegativeLogLikelihoodLoss",
            &[("reduction", Attr::Str("none".into()))],
            1,
        )
        .unwrap();
        let x = Tensor::from_f64_as(DType::F32, &[3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let t = Tensor::from_i64(&[3], &[5, -2, 1]);
        let got = run(&*nll, &[Some(x), Some(t), None]);
        assert_eq!(got, [vec![-3., -4., -8.]]);
    }

    #[test]
    fn mean_divides_by_the_weights_of_targets_not_ignored() {
        let nll = op(
            "NegativeLogLikelihoodLoss",
            &[("ignore_index", Attr::Int(1))],
            1,
        )
        .unwrap();
        let x = Tensor::from_f64_as(DType::F64, &[3, 2], &[1., 2., 3., 4., 5., 6.]);
        let t = Tensor::from_i64(&[3], &[0, 1, 1]);
        let w = Tensor::from_f64_as(DType::F64, &[2], &[0.5, 2.0]);
        let got = run(&*nll, &[Some(x.clone()), Some(t.clone()), Some(w)]);
        assert_eq!(got, [vec![-1.0]]);
        // Without weights: the count of the targets not ignored.
        let t = Tensor::from_i64(&[3], &[0, 0, 1]);
        let got = run(&*nll, &[Some(x), Some(t), None]);
        assert_eq!(got, [vec![-2.0]]);
    }

    #[test]
    fn softmax_cross_entropy_gives_log_prob() {
        let sce = op(
            "SoftmaxCrossEntropyLoss",
            &[("reduction", Attr::Str("sum".into()))],
            2,
        )
        .unwrap();
        let x = Tensor::from_f64_as(DType::F64, &[2, 2], &[0., 0., 1000., 0.]);
        let t = Tensor::from_i64(&[2], &[1, 0]);
        let got = run(&*sce, &[Some(x), Some(t), None]);
        let l2 = std::f64::consts::LN_2;
        assert!((got[0][0] - l2).abs() < 1e-12, "{got:?}");
        assert_eq!(got[1].len(), 4);
        assert!((got[1][0] + l2).abs() < 1e-12 && got[1][2] == 0.0 && got[1][3] == -1000.0);
    }

    #[test]
    fn bad_inputs_are_rejected() {
        assert!(op(
            "NegativeLogLikelihoodLoss",
            &[("reduction", Attr::Str("max".into()))],
            1
        )
        .is_err());
        assert!(op("NegativeLogLikelihoodLoss", &[], 2).is_err());
        let nll = op(
            "NegativeLogLikelihoodLoss",
            &[("ignore_index", Attr::Int(-1))],
            1,
        )
        .unwrap();
        let x = Tensor::from_f64_as(DType::F32, &[2, 3, 4], &[0.0; 24]);
        let bad_shape = Tensor::from_i64(&[2, 3], &[0; 6]);
        let none = vec![None; 3];
        assert!(infer(&*nll, &[Some(x.clone()), Some(bad_shape), None], &none).is_err());
        let w = Tensor::from_f64_as(DType::F32, &[4], &[1.0; 4]);
        let t = Tensor::from_i64(&[2, 4], &[0; 8]);
        assert!(infer(&*nll, &[Some(x.clone()), Some(t.clone()), Some(w)], &none).is_err());
        // A constant target out of range (ignore_index allowed).
        let args = [Some(x), Some(t), None];
        let mut v = [0i64; 8];
        v[3] = -1;
        let ok = [None, Some(Arc::new(Tensor::from_i64(&[2, 4], &v))), None];
        assert!(infer(&*nll, &args, &ok).is_ok());
        v[5] = 3;
        let bad = [None, Some(Arc::new(Tensor::from_i64(&[2, 4], &v))), None];
        assert!(infer(&*nll, &args, &bad).is_err());
    }
}
