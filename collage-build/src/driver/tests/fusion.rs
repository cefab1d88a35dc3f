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
