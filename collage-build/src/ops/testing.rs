//! Helpers of the operator families' unit tests: an operator built from the registry, and run
//! through inference, lowering and the tensor-expression interpreter.
use std::sync::Arc;

use super::{lookup, Attr, Attrs, InferCx, LowerCx, OpCx, OpResult, Operator};
use crate::te::eval_stages;
use crate::tensor::{Tensor, TensorType};

/// The registered operator `op_type` (`domain:op_type` for other domains) with `attrs`, as a
/// node of `n_inputs` inputs and `n_outputs` outputs at `opset` would construct it.
pub(crate) fn build(
    op_type: &str,
    attrs: &[(&str, Attr)],
    opset: i64,
    n_inputs: usize,
    n_outputs: usize,
) -> OpResult<Arc<dyn Operator>> {
    let attrs = Attrs(
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    );
    lookup(op_type).expect("a registered operator")(&OpCx {
        attrs: &attrs,
        opset,
        n_inputs,
        n_outputs,
    })
}

/// `op` on `args` (`None`: an omitted input; those at the positions in `konst` are compile-time
/// constants, the others run-time values): inferred, lowered and interpreted. Each output's
/// value, checked against its inferred type.
pub(crate) fn eval(
    op: &dyn Operator,
    args: &[Option<Tensor>],
    konst: &[usize],
) -> OpResult<Vec<Tensor>> {
    let inputs: Vec<Option<TensorType>> = args
        .iter()
        .map(|a| a.as_ref().map(|t| t.ty.clone()))
        .collect();
    let consts: Vec<Option<Arc<Tensor>>> = args
        .iter()
        .enumerate()
        .map(|(i, a)| a.clone().filter(|_| konst.contains(&i)).map(Arc::new))
        .collect();
    let outs = op.infer(&InferCx {
        inputs: &inputs,
        consts: &consts,
    })?;
    let mut cx = LowerCx {
        inputs: &inputs,
        consts: &consts,
        outputs: &outs,
        stages: vec![],
        name: "n".into(),
        direct: false,
        uniform: false,
    };
    let srcs = op.lower(&mut cx)?;
    let refs: Vec<Option<&Tensor>> = args.iter().map(|a| a.as_ref()).collect();
    let vals = eval_stages(&cx.stages, &refs, &srcs);
    for (v, o) in vals.iter().zip(&outs) {
        assert_eq!(&v.ty, o, "an output of the inferred type");
    }
    Ok(vals)
}
