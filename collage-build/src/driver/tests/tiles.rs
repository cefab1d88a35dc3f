//! The tile graph (`schedule::tiles`) of compiled models: which level every producer meets its
//! consumer at, checked against what fusion and grouping did to the program.
use crate::ir::{DType, Graph, Tensor, TensorType};
use crate::schedule::tiles::{tile_graph, Level, Via};
use crate::target::Target;
use crate::te::BufKind;

use super::types::node;

/// A product with a bias and a ReLU, then a softmax and a layer normalisation over its rows:
/// the bias and the product are computed at registers in the ReLU's kernel, and that kernel,
/// the row passes of the softmax and those of the normalisation meet in L1 scratch slots of
/// one row group (a reduction feeding reductions): no edge goes through memory. Every edge
/// between kernels is a read of the program, and every scratch producer is read inside its
/// group only.
#[test]
fn levels_follow_fusion_and_groups() {
    let mut g = Graph::new("tiles");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [64, 48])));
    g.inputs.push(x);
    let ramp = |n: usize, s: f32| (0..n).map(|k| (k as f32 * s).sin()).collect::<Vec<_>>();
    let w = g.add_const("w", Tensor::from_f32(&[48, 96], &ramp(48 * 96, 0.7)));
    let b = g.add_const("b", Tensor::from_f32(&[96], &ramp(96, 1.1)));
    let s = g.add_const("s", Tensor::from_f32(&[96], &ramp(96, 0.3)));
    let t = g.add_const("t", Tensor::from_f32(&[96], &ramp(96, 0.5)));
    let y = node(&mut g, "MatMul", &[x, w]);
    let y = node(&mut g, "Add", &[y, b]);
    let y = node(&mut g, "Relu", &[y]);
    let y = node(&mut g, "Softmax", &[y]);
    let z = node(&mut g, "LayerNormalization", &[y, s, t]);
    g.outputs = vec![z];
    let opts = crate::driver::Options {
        backends: "c".into(),
        ..crate::driver::Options::default()
    };
    let c = crate::driver::compile(g, "tiles", &opts).unwrap();
    let p = &c.program;
    let tg = tile_graph(p, &Target::for_build());
    let text = tg.render(p);

    // The kernel of the product: a stage with a reduction whose epilogue holds the ReLU.
    let relu = tg
        .kernels
        .iter()
        .copied()
        .find(|&k| p.stage(k).is_some_and(|s| s.name.starts_with("n2_")))
        .expect("the ReLU's kernel");
    assert!(p.stage(relu).unwrap().reduce.is_some(), "{text}");
    let inside: Vec<_> = tg
        .edges
        .iter()
        .filter(|e| e.to == relu && e.level == Level::Register)
        .collect();
    assert_eq!(inside.len(), 2, "the product and the bias: {text}");
    for e in &inside {
        assert!(
            matches!(p.bufs[e.from.index()].kind, BufKind::Dead),
            "{text}"
        );
        assert_eq!(tg.kernel_of(e.from), Some(relu));
    }

    // One row group holds the product, the softmax and the normalisation; they meet in L1.
    assert_eq!(p.row_groups.len(), 1, "{text}");
    let rg = &p.row_groups[0];
    let readers = p.readers();
    let mut l1 = 0;
    for e in tg.edges.iter().filter(|e| e.level != Level::Register) {
        assert!(readers[e.from.index()].contains(&e.to), "{text}");
        match e.via {
            Via::RowGroup { last, scratch } => {
                assert_eq!(last, rg.last());
                assert!(rg.stages.contains(&e.from) && rg.stages.contains(&e.to));
                assert_eq!(scratch, rg.scratch.contains(&e.from));
                if scratch {
                    assert!(readers[e.from.index()]
                        .iter()
                        .all(|r| rg.stages.contains(r)));
                }
                assert_eq!(e.level, Level::L1, "64 x 96 rows fit L1: {text}");
                l1 += 1;
            }
            Via::Buffer => assert_eq!(e.level, Level::Memory),
            other => panic!("no group here: {other:?} in {text}"),
        }
    }
    assert_eq!(rg.stages[0], relu, "{text}");
    assert!(rg.scratch.contains(&relu), "{text}");
    assert_eq!(tg.level(relu, rg.stages[1]), Some(Level::L1), "{text}");
    let counts = tg.counts();
    assert_eq!(counts[0], (Level::Register, 2), "{text}");
    assert_eq!(counts[1], (Level::L1, l1), "{text}");
    assert_eq!(counts[4], (Level::Memory, 0), "{text}");
    assert!(text.starts_with(&format!("tile graph: {} kernels;", tg.kernels.len())));
}
