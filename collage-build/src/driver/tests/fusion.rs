//! Fusion (`te::fuse`) on programs lowered from graphs as a ranged build lowers them: every
//! node generated code in one part.
use crate::ir::{DType, Graph, Tensor, TensorType};
use crate::te::{BinOp, BufKind, Expr, Stage};

use super::types::node;

/// A HardSwish written as `y * HardSigmoid(y)` between two convolutions of one partition
/// becomes the first one's epilogue: the second reads its output as it is, instead of
/// computing the activation at every tap.
#[test]
fn an_activation_between_contractions_is_the_first_ones_epilogue() {
    let mut g = Graph::new("conv_hardswish_conv");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 2, 5, 5])));
    g.inputs.push(x);
    let ramp = |n: usize, s: f32| (0..n).map(|k| (k as f32 * s).sin()).collect::<Vec<_>>();
    let w1 = g.add_const("w1", Tensor::from_f32(&[3, 2, 3, 3], &ramp(54, 0.7)));
    let w2 = g.add_const("w2", Tensor::from_f32(&[2, 3, 1, 1], &ramp(6, 1.3)));
    let y = node(&mut g, "Conv", &[x, w1]);
    let hs = node(&mut g, "HardSigmoid", &[y]);
    let a = node(&mut g, "Mul", &[y, hs]);
    let z = node(&mut g, "Conv", &[a, w2]);
    g.outputs = vec![z];
    crate::passes::run(&mut g, &crate::passes::pipeline_ranged(false)).unwrap();
    let p = crate::codegen::lower_graph_as(&g, &|_| (1, None), true).unwrap();
    let mut q = p.clone();
    crate::te::fuse(&mut q);
    let stages: Vec<&Stage> = q
        .bufs
        .iter()
        .filter_map(|b| match &b.kind {
            BufKind::Stage(st) => Some(st),
            _ => None,
        })
        .collect();
    assert_eq!(stages.len(), 2, "{stages:#?}");
    let has_clip = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| found |= matches!(x, Expr::Bin(BinOp::Max | BinOp::Min, ..)));
        found
    };
    let fin = stages[0].reduce.as_ref().and_then(|r| r.finalize.as_ref());
    assert!(fin.is_some_and(has_clip), "{:?}", stages[0]);
    assert!(!has_clip(&stages[1].body), "{:?}", stages[1].body);
    let xt = Tensor::from_f32(&[1, 2, 5, 5], &ramp(50, 0.37));
    let run = |p| crate::te::run_program(p, std::slice::from_ref(&xt))[0].to_f32();
    assert_eq!(run(&p), run(&q));
}

/// A softmax followed by a product (attention's weights times V) in one part: the reciprocal
/// of the row sum, inlined into the product's body by fusion, leaves its inner loop for its
/// epilogue (`te::hoist_invariant_factors`), and the result is the same within rounding.
#[test]
fn a_factor_invariant_along_a_sum_moves_to_its_epilogue() {
    let mut g = Graph::new("softmax_matmul");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 4, 8])));
    g.inputs.push(x);
    let ramp = |n: usize, s: f32| (0..n).map(|k| (k as f32 * s).sin()).collect::<Vec<_>>();
    let v = g.add_const("v", Tensor::from_f32(&[8, 3], &ramp(24, 0.9)));
    let s = node(&mut g, "Softmax", &[x]);
    let y = node(&mut g, "MatMul", &[s, v]);
    g.outputs = vec![y];
    crate::passes::run(&mut g, &crate::passes::pipeline_ranged(false)).unwrap();
    let p = crate::codegen::lower_graph_as(&g, &|_| (1, None), true).unwrap();
    let mut q = p.clone();
    crate::te::fuse(&mut q);
    let before = q.clone();
    crate::te::hoist_invariant_factors(&mut q);
    let out = q.stage(q.outputs[0]).expect("a stage");
    let reads_rvar = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| found |= matches!(x, Expr::RVar(_)));
        found
    };
    let mut fs = Vec::new();
    let mut stack = vec![&out.body];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Bin(BinOp::Mul, a, b) => stack.extend([&**a, &**b]),
            x => fs.push(x),
        }
    }
    assert!(fs.iter().all(|f| reads_rvar(f)), "{:?}", out.body);
    assert_ne!(before.stage(q.outputs[0]), Some(out), "nothing was hoisted");
    let fin = out.reduce.as_ref().and_then(|r| r.finalize.as_ref());
    assert!(
        fin.is_some_and(|f| matches!(f, Expr::Bin(BinOp::Mul, ..))),
        "{fin:?}"
    );
    let xt = Tensor::from_f32(&[1, 4, 8], &ramp(32, 0.37));
    let run = |p| crate::te::run_program(p, std::slice::from_ref(&xt))[0].to_f32();
    for (a, b) in run(&p).iter().zip(run(&q)) {
        assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
    }
}
