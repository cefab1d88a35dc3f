//! Differential test of the code generator's schedules (register-blocked, row, plain; packed and
//! transposed weights; im2col convolutions): each model is compiled to C and run, and compared with
//! the tensor-expression interpreter, which evaluates the same model when its input is bound to a
//! constant (constant folding). Shapes are chosen to hit full and partial tiles, jammed and
//! unjammed rows, and every weight layout.
use std::collections::BTreeMap;
use std::path::Path;

use collage_build::driver::Options;
use collage_build::ir::{DType, Graph, Tensor, TensorType, ValueId};
use collage_build::ops::winograd::WinogradConv;
use collage_build::ops::{lookup, Attr, Attrs, OpCx};
use collage_build::te::{Isa, PlanKind};
use collage_build::{passes, tensor};
use collage_runtime::Executor;

mod common;

fn rand(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_f32(shape, &v)
}

fn node(
    g: &mut Graph,
    op: &str,
    attrs: Attrs,
    inputs: Vec<collage_build::ir::ValueId>,
) -> collage_build::ir::ValueId {
    let ctor = lookup(op).unwrap();
    let o = ctor(&OpCx {
        attrs: &attrs,
        opset: 17,
        n_inputs: inputs.len(),
        n_outputs: 1,
    })
    .unwrap();
    let out = g.add_value(format!("{op}_out"), None);
    g.add_node(
        format!("{op}_{}", g.nodes.len()),
        o,
        inputs.into_iter().map(Some).collect(),
        vec![out],
    );
    out
}

fn ints(pairs: &[(&str, Vec<i64>)]) -> Attrs {
    let mut m = BTreeMap::new();
    for (k, v) in pairs {
        m.insert(k.to_string(), Attr::Ints(v.clone()));
    }
    Attrs(m)
}

/// The graph `name` of one f32 input `x` of `shape` and the one output `build(x)`.
fn input_graph(
    name: &str,
    shape: &[usize],
    build: impl FnOnce(&mut Graph, ValueId) -> ValueId,
) -> Graph {
    let mut g = Graph::new(name);
    let x = g.add_value("x", Some(TensorType::new(DType::F32, shape)));
    g.inputs.push(x);
    let y = build(&mut g, x);
    g.outputs.push(y);
    g
}

/// The preprocessor symbols that make a test's generated code run variant `isa` (on a machine
/// that has it; else the baseline): `isa.defines()`, and for the widest variant the AVX2 one
/// left out, so that an `-O1` build (otherwise the baseline alone) compiles it too.
fn variant(isa: Isa) -> &'static [&'static str] {
    match isa {
        Isa::Avx512 => &["CL_NO_AVX2"],
        _ => isa.defines(),
    }
}

/// Compiles `build(x)` with `x` a run-time input and with `x` a constant, and compares.
fn check(
    name: &str,
    x_shape: &[usize],
    build: impl Fn(&mut Graph, collage_build::ir::ValueId) -> collage_build::ir::ValueId,
) {
    check_with(name, x_shape, &Options::default(), &["-O1", "-O2"], build)
}

/// [`check`] with compile options and C optimisation levels.
fn check_with(
    name: &str,
    x_shape: &[usize],
    opts: &Options,
    levels: &[&str],
    build: impl Fn(&mut Graph, collage_build::ir::ValueId) -> collage_build::ir::ValueId,
) {
    check_isa(name, x_shape, opts, levels, Isa::Avx512, build)
}

/// [`check_with`], the generated code made to run instruction-set variant `isa` where this
/// machine has a wider one (`Isa::defines`): so that the AVX2 and baseline variants' plans run
/// on an AVX-512 machine too.
fn check_isa(
    name: &str,
    x_shape: &[usize],
    opts: &Options,
    levels: &[&str],
    isa: Isa,
    build: impl Fn(&mut Graph, collage_build::ir::ValueId) -> collage_build::ir::ValueId,
) {
    let x = rand(x_shape, 7);
    let make = |konst: bool| {
        let mut g = Graph::new(name);
        let xv = if konst {
            g.add_const("x", x.clone())
        } else {
            let v = g.add_value("x", Some(TensorType::new(DType::F32, x_shape)));
            g.inputs.push(v);
            v
        };
        let y = build(&mut g, xv);
        g.outputs.push(y);
        g
    };
    let mut folded = make(true);
    passes::run(&mut folded, passes::PIPELINE).unwrap();
    let want = folded
        .konst(folded.outputs[0])
        .expect("folded to a constant")
        .as_ref()
        .clone();
    let c = collage_build::driver::compile(make(false), "t", opts).unwrap();
    let work = std::env::temp_dir().join(format!("collage-sched-{name}-{}", std::process::id()));
    for &opt in levels {
        let mut m = collage_build::native::NativeModel::build_defines(&c, &work, opt, variant(isa))
            .unwrap();
        for threads in [1, 2] {
            let got = m
                .run(std::slice::from_ref(&x), &Executor::with_threads(threads))
                .unwrap();
            let (ok, err) = tensor::compare(&got[0], &want);
            assert!(
                ok,
                "{name} ({opt}, {threads} threads, schedule seed {:?}, variant {isa}): max error {err}",
                opts.schedule_seed
            );
        }
    }
    let _ = std::fs::remove_dir_all(Path::new(&work));
}

#[test]
fn matmul_with_constant_weights_in_every_layout() {
    for (m, k, n) in [
        (8, 96, 130),
        (1, 64, 64),
        (6, 33, 200),
        (5, 17, 7),
        (12, 128, 1030),
    ] {
        check(&format!("mm_{m}_{k}_{n}"), &[m, k], |g, x| {
            let w = g.add_const("w", rand(&[k, n], 3));
            node(g, "MatMul", Attrs::default(), vec![x, w])
        });
        check(&format!("gemm_tb_{m}_{k}_{n}"), &[m, k], |g, x| {
            let w = g.add_const("w", rand(&[n, k], 5));
            let b = g.add_const("b", rand(&[n], 6));
            let mut a = BTreeMap::new();
            a.insert("transB".to_string(), Attr::Int(1));
            node(g, "Gemm", Attrs(a), vec![x, w, b])
        });
    }
}

/// A `Gather` of constant indices feeding a matrix product (a transformer's class token read by
/// its classifier). Indices that are an arithmetic progression lower to an affine index, the rest
/// to a load of the index; the expected values are gathered here, element by element, from the
/// ONNX definition (negative indices count from the end), not by the interpreter, which lowers
/// the node the same way.
#[test]
fn gathers_of_constant_indices_feed_products() {
    let (a, n, e, f) = (2, 5, 40, 24);
    let cases: [(&str, Vec<usize>, Vec<i64>); 5] = [
        ("scalar", vec![], vec![3]),
        ("negative_step", vec![2], vec![-1, -3]),
        ("repeated", vec![3], vec![1, 1, 1]),
        ("unordered", vec![3], vec![0, 2, 1]),
        ("matrix", vec![2, 2], vec![0, 1, 2, 3]),
    ];
    let x = rand(&[a, n, e], 7).to_f32();
    let w = rand(&[e, f], 3);
    let wv = w.to_f32();
    for (name, ishape, ind) in cases {
        let g_in: usize = ishape.iter().product();
        let g = input_graph("gather", &[a, n, e], |g, xv| {
            let iv = g.add_const("i", Tensor::from_i64(&ishape, &ind));
            let mut at = BTreeMap::new();
            at.insert("axis".to_string(), Attr::Int(1));
            let gv = node(g, "Gather", Attrs(at), vec![xv, iv]);
            let wc = g.add_const("w", w.clone());
            node(g, "MatMul", Attrs::default(), vec![gv, wc])
        });
        let mut want = vec![0f32; a * g_in * f];
        for b in 0..a {
            for (q, &i) in ind.iter().enumerate() {
                let r = if i < 0 { i + n as i64 } else { i } as usize;
                for o in 0..f {
                    let dot: f64 = (0..e)
                        .map(|k| x[(b * n + r) * e + k] as f64 * wv[k * f + o] as f64)
                        .sum();
                    want[(b * g_in + q) * f + o] = dot as f32;
                }
            }
        }
        let mut oshape = vec![a];
        oshape.extend(&ishape);
        oshape.push(f);
        let want = Tensor::from_f32(&oshape, &want);
        let c = collage_build::driver::compile(g, "t", &Options::default()).unwrap();
        let work =
            std::env::temp_dir().join(format!("collage-gather-{name}-{}", std::process::id()));
        let mut m =
            collage_build::native::NativeModel::build_defines(&c, &work, "-O2", &[]).unwrap();
        for threads in [1, 2] {
            let got = m
                .run(
                    &[Tensor::from_f32(&[a, n, e], &x)],
                    &Executor::with_threads(threads),
                )
                .unwrap();
            let (ok, err) = tensor::compare(&got[0], &want);
            assert!(ok, "gather {name}, {threads} threads: max error {err}");
        }
        let _ = std::fs::remove_dir_all(&work);
    }
}

#[test]
fn batched_matmul_of_two_activations() {
    check("bmm", &[2, 3, 16, 40], |g, x| {
        let t = node(g, "Transpose", ints(&[("perm", vec![0, 1, 3, 2])]), vec![x]);
        let y = node(g, "MatMul", Attrs::default(), vec![x, t]);
        node(g, "Relu", Attrs::default(), vec![y])
    });
}

#[test]
fn convolutions_through_im2col_and_direct() {
    // (input shape, weight shape, strides, pads, group)
    let cases: &[(&[usize], &[usize], i64, i64, i64)] = &[
        (&[1, 3, 40, 40], &[12, 3, 3, 3], 1, 1, 1), // large image: packed im2col
        (&[1, 4, 12, 12], &[6, 4, 3, 3], 2, 1, 1),  // small image, strided: natural im2col
        (&[2, 8, 9, 9], &[16, 8, 1, 1], 1, 0, 1),   // pointwise: no im2col
        (&[1, 8, 10, 10], &[8, 1, 3, 3], 1, 1, 8),  // depthwise: direct
        (&[1, 2, 70, 33], &[5, 2, 5, 3], 1, 2, 1),  // odd sizes, partial tiles
        (&[1, 40, 7, 7], &[64, 40, 3, 3], 1, 1, 1), // a 7x7 image: vectorised along channels
        (&[1, 24, 14, 14], &[48, 24, 1, 1], 1, 0, 1), // pointwise on 14x14: channels too
        (&[1, 16, 11, 30], &[24, 16, 3, 3], 1, 1, 1), // 24 channels: three 8-lane vectors
        (&[1, 1, 28, 28], &[8, 1, 5, 5], 1, 2, 1),  // 8 channels: one 8-lane vector
        (&[1, 8, 14, 14], &[16, 8, 5, 5], 1, 2, 1), // 16 channels: one 16-lane vector
        (&[1, 40, 1, 1], &[96, 40, 1, 1], 1, 0, 1), // a 1x1 image (squeeze-excitation)
        (&[1, 96, 1, 1], &[40, 96, 1, 1], 1, 0, 1), // .. and back, 40 channels
    ];
    // The first case's im2col (27 rows of 1600 columns, in panels) and its GEMM form a group:
    // instances of one 64-column panel, each reading all 27 rows of it (one slot), at L2; apart,
    // the im2col buffer would go to memory and back (2 x 27 x 1600 x 4 bytes more traffic).
    let c = padded_conv3x3(&[1, 3, 40, 40], 12);
    let gs = collage_build::report::groups(&c, &collage_build::target::Target::for_build());
    assert_eq!(gs.len(), 1);
    let (grp, info) = (&gs[0].group, &gs[0].info);
    assert_eq!((grp.cols, grp.instances, grp.slots), (64, 25, 25));
    assert_eq!(info.tile, [1, 12, 64]);
    assert_eq!(info.region, [1, 27, 64]);
    assert_eq!(info.level.name(), "L2");
    assert_eq!(info.traffic_apart - info.traffic, 2 * 27 * 1600 * 4);
    for (i, (xs, ws, s, p, group)) in cases.iter().enumerate() {
        check(&format!("conv{i}"), xs, |g, x| {
            let w = g.add_const("w", rand(ws, 11));
            let b = g.add_const("b", rand(&ws[..1], 12));
            let mut a = ints(&[
                ("strides", vec![*s, *s]),
                ("pads", vec![*p, *p, *p, *p]),
                ("kernel_shape", ws[2..].iter().map(|&d| d as i64).collect()),
            ]);
            a.0.insert("group".into(), Attr::Int(*group));
            let y = node(g, "Conv", a, vec![x, w, b]);
            let r = node(g, "Relu", Attrs::default(), vec![y]);
            node(g, "Add", Attrs::default(), vec![r, y])
        });
    }
    // The 24-channel tile in the narrower variants too (three vectors of eight, of four), and
    // the 8-channel one (one vector of eight, two of four).
    for (isa, co) in [Isa::Avx2, Isa::Base]
        .into_iter()
        .flat_map(|isa| [(isa, 24), (isa, 8)])
    {
        let name = format!("conv_narrow_{isa}_{co}");
        check_isa(
            &name,
            &[1, 16, 11, 30],
            &Options::default(),
            &["-O1"],
            isa,
            |g, x| {
                let w = g.add_const("w", rand(&[co, 16, 3, 3], 11));
                let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                let y = node(g, "Conv", a, vec![x, w]);
                node(g, "Relu", Attrs::default(), vec![y])
            },
        );
    }
}

/// 3x3 stride-1 convolutions with enough tiles and channels run as Winograd F(4x4, 3x3)
/// (`passes::winograd`): against the interpreter's direct convolution, over whole and partial
/// tiles, a batch, asymmetric padding, with and without a bias, in every vector variant. Each
/// case first checks that the rewrite happened, so that the comparison is of the Winograd code.
#[test]
fn winograd_convolutions_match_the_direct_convolution() {
    // (input shape, output channels, pads [top, left, bottom, right], bias, output tile)
    let cases: &[(&[usize], usize, [i64; 4], bool, usize)] = &[
        (&[1, 16, 24, 24], 16, [1, 1, 1, 1], true, 4), // 6x6 whole tiles
        (&[2, 20, 23, 30], 24, [1, 1, 1, 1], true, 4), // a batch, partial tiles
        (&[1, 16, 26, 27], 32, [0, 2, 1, 0], false, 4), // asymmetric pads, no bias
        (&[1, 16, 14, 14], 24, [1, 1, 1, 1], true, 2), // 7x7 tiles of 2x2
        (&[1, 24, 13, 15], 16, [0, 1, 2, 0], false, 2), // 2x2, partial, asymmetric
    ];
    for (i, &(xs, co, pads, bias, tile)) in cases.iter().enumerate() {
        let build = |g: &mut Graph, x: ValueId| {
            let w = g.add_const("w", rand(&[co, xs[1], 3, 3], 11));
            let mut inputs = vec![x, w];
            if bias {
                inputs.push(g.add_const("b", rand(&[co], 12)));
            }
            let a = ints(&[("pads", pads.to_vec()), ("kernel_shape", vec![3, 3])]);
            let y = node(g, "Conv", a, inputs);
            node(g, "Relu", Attrs::default(), vec![y])
        };
        let g = input_graph("winograd", xs, build);
        let c = collage_build::driver::compile(g, "t", &Options::default()).unwrap();
        let tiles: Vec<usize> = c
            .graph
            .nodes
            .iter()
            .filter_map(|n| n.op.as_any().downcast_ref::<WinogradConv>())
            .map(|w| w.tile)
            .collect();
        assert_eq!(tiles, [tile], "case {i}: the Winograd tiles");
        check(&format!("winograd{i}"), xs, build);
    }
    for isa in [Isa::Avx2, Isa::Base] {
        let (xs, co) = (&[1, 16, 23, 30], 24);
        check_isa(
            &format!("winograd_{isa}"),
            xs,
            &Options::default(),
            &["-O1"],
            isa,
            |g, x| {
                let w = g.add_const("w", rand(&[co, xs[1], 3, 3], 11));
                let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                node(g, "Conv", a, vec![x, w])
            },
        );
    }
}

#[test]
fn depthwise_convolutions_over_padded_planes() {
    // (input shape, kernel, strides, pads [top, left, bottom, right], dilations, multiplier):
    // unit and strided windows, 5x5, dilation, asymmetric and no padding, a plane taller than
    // one band of the scratch (100x100), a batch of two, and two outputs per input channel
    // (not a plane of its own: the row schedule's path); rows of 5 (a narrow vector overlapping
    // its predecessor) and of 3 (scalar), and a stride of 3 (three phases per padded row); planes
    // tall enough to be cut into parts of rows (a task each): flat narrow rows, a batch of two
    // with a shorter last part, a strided window; channels in blocks of 16 over small planes
    // (the channel-blocked plan: planes whose pixels are and are not a multiple of the lanes,
    // strides 2 and 3, asymmetric padding, dilation, a batch of two, a plane of 2x2).
    let cases: &[(&[usize], usize, i64, [i64; 4], i64, usize)] = &[
        (&[1, 3, 14, 14], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 4, 15, 9], 3, 2, [1, 1, 1, 1], 1, 1),
        (&[1, 2, 7, 7], 5, 1, [2, 2, 2, 2], 1, 1),
        (&[1, 2, 13, 11], 5, 2, [2, 2, 2, 2], 1, 1),
        (&[1, 3, 12, 12], 3, 1, [2, 2, 2, 2], 2, 1),
        (&[1, 2, 9, 10], 3, 1, [0, 1, 2, 0], 1, 1),
        (&[1, 2, 8, 8], 3, 1, [0, 0, 0, 0], 1, 1),
        (&[1, 2, 100, 100], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[2, 3, 10, 10], 3, 2, [1, 1, 1, 1], 1, 1),
        (&[1, 3, 10, 10], 3, 1, [1, 1, 1, 1], 1, 2),
        (&[1, 2, 6, 5], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 2, 3, 3], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 2, 16, 40], 3, 3, [1, 2, 0, 1], 1, 1),
        (&[1, 2, 30, 37], 5, 3, [2, 2, 2, 2], 2, 1),
        (&[1, 2, 60, 9], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[2, 3, 45, 20], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 2, 64, 30], 3, 2, [1, 1, 1, 1], 1, 1),
        (&[1, 32, 7, 7], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 16, 14, 14], 3, 2, [1, 1, 1, 1], 1, 1),
        (&[2, 16, 9, 11], 3, 2, [0, 1, 2, 0], 1, 1),
        (&[1, 16, 12, 12], 3, 2, [2, 2, 2, 2], 2, 1),
        (&[1, 16, 10, 13], 5, 3, [2, 1, 1, 2], 1, 1),
        (&[1, 48, 2, 2], 3, 1, [1, 1, 1, 1], 1, 1),
        (&[1, 16, 8, 8], 3, 1, [0, 0, 0, 0], 1, 2),
    ];
    // The generated code only: a library backend would take the larger planes.
    let c_only = Options {
        backends: "c".into(),
        ..Options::default()
    };
    for (i, (xs, k, s, pads, dil, mult)) in cases.iter().enumerate() {
        check_with(&format!("dw{i}"), xs, &c_only, &["-O1", "-O2"], |g, x| {
            let c = xs[1];
            let w = g.add_const("w", rand(&[c * mult, 1, *k, *k], 11));
            let b = g.add_const("b", rand(&[c * mult], 12));
            let mut a = ints(&[
                ("strides", vec![*s, *s]),
                ("pads", pads.to_vec()),
                ("dilations", vec![*dil, *dil]),
                ("kernel_shape", vec![*k as i64, *k as i64]),
            ]);
            a.0.insert("group".into(), Attr::Int(c as i64));
            let y = node(g, "Conv", a, vec![x, w, b]);
            node(g, "Relu", Attrs::default(), vec![y])
        });
    }
    // Whole planes run flat across rows (column masks, zero margins) in the narrower
    // variants too: 8 and 4 lanes, a 14x14 plane, a 5x5 window over 7x7, a dilated window,
    // rows of 5 (a plane of 30 pixels, the last vector overlapping).
    for isa in [Isa::Avx2, Isa::Base] {
        for (i, &(xs, k, pad, dil)) in [
            (&[1usize, 3, 14, 14][..], 3usize, 1i64, 1i64),
            (&[1, 2, 7, 7], 5, 2, 1),
            (&[1, 3, 12, 12], 3, 2, 2),
            (&[1, 2, 6, 5], 3, 1, 1),
        ]
        .iter()
        .enumerate()
        {
            check_isa(
                &format!("dw_flat{i}_{isa}"),
                xs,
                &c_only,
                &["-O2"],
                isa,
                |g, x| {
                    let c = xs[1];
                    let w = g.add_const("w", rand(&[c, 1, k, k], 11));
                    let mut a = ints(&[
                        ("pads", vec![pad; 4]),
                        ("dilations", vec![dil, dil]),
                        ("kernel_shape", vec![k as i64, k as i64]),
                    ]);
                    a.0.insert("group".into(), Attr::Int(c as i64));
                    let y = node(g, "Conv", a, vec![x, w]);
                    node(g, "Relu", Attrs::default(), vec![y])
                },
            );
        }
    }
    // A residual added in the epilogue (rows of 21: whole vectors and a remainder); 16
    // channels of 7x7, where the residual keeps the stage off the channel-blocked plan.
    for (name, xs) in [
        ("dw_residual", [1, 3, 9, 21]),
        ("dw_residual16", [1, 16, 7, 7]),
    ] {
        let c = xs[1];
        check_with(name, &xs, &c_only, &["-O2"], |g, x| {
            let w = g.add_const("w", rand(&[c, 1, 3, 3], 13));
            let mut a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
            a.0.insert("group".into(), Attr::Int(c as i64));
            let y = node(g, "Conv", a, vec![x, w]);
            node(g, "Add", Attrs::default(), vec![y, x])
        });
    }
}

#[test]
fn reductions_and_pools() {
    check("softmax", &[3, 70], |g, x| {
        node(g, "Softmax", Attrs::default(), vec![x])
    });
    check("maxpool", &[1, 3, 17, 17], |g, x| {
        node(
            g,
            "MaxPool",
            ints(&[
                ("kernel_shape", vec![3, 3]),
                ("strides", vec![2, 2]),
                ("pads", vec![1, 1, 1, 1]),
            ]),
            vec![x],
        )
    });
    check("reduce", &[4, 5, 66], |g, x| {
        node(g, "ReduceMean", ints(&[("axes", vec![1])]), vec![x])
    });
    // Strided windows without padding over rows that fill a vector: the window plan with no
    // bounds (each asserted, so that a change of plan cannot pass unnoticed).
    for (op, k, s, hw) in [("MaxPool", 3, 2, 41), ("AveragePool", 2, 2, 38)] {
        let build = |g: &mut Graph, x| {
            let at = ints(&[("kernel_shape", vec![k, k]), ("strides", vec![s, s])]);
            node(g, op, at, vec![x])
        };
        let shape = [2, 3, hw, hw];
        let g = input_graph("pool", &shape, build);
        let c = collage_build::driver::compile(g, "t", &Options::default()).unwrap();
        let plans = common::printed_plans(&c.c_source);
        assert!(
            plans.values().any(|p| p.starts_with("window")),
            "{op}: {plans:?}"
        );
        check(&format!("unpadded_{op}"), &shape, build);
    }
}

/// Runs `op` (a one-input ONNX operator) on `xs` through the generated C (`-O2`) and checks
/// every output against `want` in f64: within `rel` of it, or `abs` near zero.
fn unary_is_accurate(op: &str, xs: &[f32], want: fn(f64) -> f64, rel: f64, abs: f64) {
    let g = input_graph(op, &[xs.len()], |g, x| {
        node(g, op, Attrs::default(), vec![x])
    });
    let c = collage_build::compile_graph(g, "unary").unwrap();
    let work = std::env::temp_dir().join(format!("collage-{op}-{}", std::process::id()));
    let mut m = collage_build::native::NativeModel::build(&c, &work, "-O2").unwrap();
    let got = m
        .run(&[Tensor::from_f32(&[xs.len()], xs)], &Executor::Serial)
        .unwrap();
    let _ = std::fs::remove_dir_all(&work);
    for (i, &v) in xs.iter().enumerate() {
        let (g, w) = (got[0].get_f64(i), want(v as f64));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= abs + rel * w.abs() && (w != 0.0 || g.to_bits() == w.to_bits())
        };
        assert!(ok, "{op}({v:e}) = {g:e}, want {w:e}");
    }
}

/// Floats spread over the whole range (every 2^20-th bit pattern, both signs), no NaN.
fn every_magnitude() -> impl Iterator<Item = f32> {
    (0..4096u32)
        .map(|i| f32::from_bits(i << 20 | 0x5_4321))
        .filter(|x| x.is_finite())
        .chain([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
        ])
}

#[test]
fn tanh_is_accurate_across_its_range() {
    // The generated code computes f32 tanh without libm (vectorisable), its exponential
    // clamped at |x| = 9; check it against f64 tanh, NaN and the infinities included.
    let xs: Vec<f32> = (-12000..=12000)
        .map(|i| i as f32 / 1000.0)
        .chain([
            0.1249, 0.125, 0.1251, 8.999, 9.0, 9.001, 1e-30, -1e-8, 50.0, -88.8, 1e30,
        ])
        .chain(every_magnitude())
        .chain([f32::NAN])
        .collect();
    unary_is_accurate("Tanh", &xs, libm::tanh, 1e-6, 1e-30);
}

#[test]
fn erf_is_accurate_across_its_range() {
    // The generated code computes f32 erf without libm (vectorisable); check it against f64 erf.
    let xs: Vec<f32> = (-4000..=4000)
        .map(|i| i as f32 / 1000.0)
        .chain([1e-8, -1e-6, 3e-4, 0.4999, 0.5, 0.5001])
        .collect();
    unary_is_accurate("Erf", &xs, libm::erf, 2e-6, 4e-7);
}

/// `exp` over its whole range: the overflow to infinity, the gradual underflow through the
/// subnormals, and exactly 0 below it (a masked attention score, -1e4) — the last selected on the
/// bits rather than computed (`cl_expf`).
#[test]
fn exp_is_accurate_from_underflow_to_overflow() {
    let mut xs: Vec<f32> = vec![
        f32::NEG_INFINITY,
        -1e30,
        -1e4,
        -200.0,
        -104.5,
        -104.0,
        -103.9,
        -103.0,
        -100.0,
        -95.0,
        -88.0,
        -87.3,
        -50.0,
        -1.0,
        -1e-7,
        0.0,
        1e-7,
        1.0,
        50.0,
        88.0,
        88.7,
        89.0,
        100.0,
        f32::INFINITY,
        f32::NAN,
    ];
    xs.extend((0..200).map(|i| -110.0 + i as f32 * 1.01));
    unary_is_accurate("Exp", &xs, |v| libm::expf(v as f32) as f64, 4e-7, 3e-45);
}

/// Softmax and LogSoftmax take `exp` of `x - max` (at most 0) with `cl_expf_nonpos`: no
/// overflow clamp, one exponent scaling, and 0 below -87 (within 2e-38 of the true value;
/// exactly 0 for a masked score, -1e4 or -inf). Rows of 64 (loops GCC vectorises: the
/// elementwise exponential and LogSoftmax's sum), each [0, x...], against f64 arithmetic on
/// the same inputs; a row with a NaN is NaN throughout.
#[test]
fn softmax_exponentials_are_accurate_down_to_underflow() {
    let mut xs: Vec<f32> = vec![
        f32::NEG_INFINITY,
        -1e30,
        -1e4,
        -200.0,
        -104.0,
        -88.0,
        -87.5,
        -87.34,
        -87.3,
        -87.0001,
        -87.0,
        -86.999,
        -86.0,
        -50.0,
        -17.0,
        -1.0,
        -1e-7,
        -0.0,
        0.0,
    ];
    xs.extend((0..400).map(|i| -110.0 + i as f32 * 0.2753));
    xs.extend((0..200).map(|i| -(i as f32) * 0.0173));
    let cols = 64;
    let mut data = Vec::new();
    for chunk in xs.chunks(cols - 1) {
        data.push(0.0f32);
        data.extend(chunk);
        data.extend(std::iter::repeat_n(-1e4f32, cols - 1 - chunk.len()));
    }
    // One row with a NaN.
    data.push(0.0);
    data.extend((1..cols).map(|i| if i == 5 { f32::NAN } else { -(i as f32) }));
    let rows = data.len() / cols;
    for op in ["Softmax", "LogSoftmax"] {
        let g = input_graph(op, &[rows, cols], |g, x| {
            node(g, op, Attrs::default(), vec![x])
        });
        let c = collage_build::compile_graph(g, "softmax_exp").unwrap();
        let work = std::env::temp_dir().join(format!("collage-{op}-exp-{}", std::process::id()));
        let mut m = collage_build::native::NativeModel::build(&c, &work, "-O2").unwrap();
        let got = m
            .run(&[Tensor::from_f32(&[rows, cols], &data)], &Executor::Serial)
            .unwrap();
        let _ = std::fs::remove_dir_all(&work);
        for r in 0..rows {
            let row = &data[r * cols..(r + 1) * cols];
            let nan = row.iter().any(|v| v.is_nan());
            let sum: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
            for (j, &v) in row.iter().enumerate() {
                let g = got[0].get_f64(r * cols + j);
                let (v, ok) = (v as f64, |w: f64, rel: f64, abs: f64| {
                    (g - w).abs() <= abs + rel * w.abs()
                });
                let good = if nan {
                    g.is_nan()
                } else if op == "Softmax" {
                    // Exactly 0 far below the underflow, within 2e-38 near it.
                    if v < -104.0 {
                        g.to_bits() == 0
                    } else {
                        ok(v.exp() / sum, 1e-6, 2e-38)
                    }
                } else if v == f64::NEG_INFINITY {
                    g == v
                } else {
                    ok(v - sum.ln(), 1e-6, 1e-6)
                };
                assert!(
                    good,
                    "{op} row {r} of [0, {:e} ...]: at {v:e} got {g:e}",
                    row[1]
                );
            }
        }
    }
}

/// Pads of short rows zero their rows in vectors, then copy each row's values (`prefill`):
/// 18- and 7-wide rows (whole vectors and an overlapping last one, or fewer than a vector),
/// asymmetric pads, in every vector variant.
#[test]
fn short_pads_fill_then_copy_in_every_variant() {
    let c_only = Options {
        backends: "c".into(),
        ..Options::default()
    };
    for isa in [Isa::Avx512, Isa::Avx2, Isa::Base] {
        for (i, (xs, pads)) in [
            (vec![1usize, 8, 14, 14], vec![0i64, 0, 2, 2, 0, 0, 2, 2]),
            (vec![1, 3, 5, 4], vec![0, 0, 1, 0, 0, 0, 2, 3]),
        ]
        .into_iter()
        .enumerate()
        {
            check_isa(
                &format!("pad{i}_{isa}"),
                &xs,
                &c_only,
                &["-O2"],
                isa,
                |g, x| {
                    let p = g.add_const("pads", Tensor::from_i64(&[8], &pads));
                    node(g, "Pad", Attrs::default(), vec![x, p])
                },
            );
        }
    }
}

/// A 2-D max pool whose rows fill vectors takes each input column's maximum over the window's
/// rows first, then the window's columns over that row (`accw`): padded, strided, dilated,
/// with ceil_mode and an asymmetric kernel, in every vector variant, against the interpreter.
#[test]
fn max_pools_take_rows_then_columns_in_every_variant() {
    let c_only = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let cases: [(Vec<usize>, Vec<(&str, Vec<i64>)>); 3] = [
        (
            vec![1, 4, 40, 40],
            vec![
                ("kernel_shape", vec![3, 3]),
                ("pads", vec![1, 1, 1, 1]),
                ("strides", vec![2, 2]),
            ],
        ),
        (
            vec![1, 2, 37, 45],
            vec![
                ("kernel_shape", vec![2, 3]),
                ("pads", vec![0, 1, 1, 2]),
                ("strides", vec![1, 2]),
                ("dilations", vec![2, 1]),
            ],
        ),
        (
            vec![1, 3, 64, 64],
            vec![
                ("kernel_shape", vec![3, 3]),
                ("pads", vec![1, 1, 1, 1]),
                ("strides", vec![2, 2]),
                ("ceil_mode", vec![1]),
            ],
        ),
    ];
    for (i, (xs, attrs)) in cases.iter().enumerate() {
        let listed: Vec<(&str, Vec<i64>)> = attrs
            .iter()
            .filter(|(k, _)| *k != "ceil_mode")
            .cloned()
            .collect();
        let ceil = attrs
            .iter()
            .find(|(k, _)| *k == "ceil_mode")
            .map(|(_, v)| v[0]);
        let build = |g: &mut Graph, x| {
            let mut a = ints(&listed);
            if let Some(c) = ceil {
                a.0.insert("ceil_mode".into(), Attr::Int(c));
            }
            node(g, "MaxPool", a, vec![x])
        };
        let c =
            collage_build::driver::compile(input_graph("pool", xs, build), "t", &c_only).unwrap();
        let plans: Vec<&str> = c
            .c_source
            .lines()
            .filter(|l| l.contains("/* plan:"))
            .collect();
        assert!(
            c.c_source.contains("accw["),
            "case {i}: the separable window: {plans:?}"
        );
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Base] {
            check_isa(
                &format!("maxpool{i}_{isa}"),
                xs,
                &c_only,
                &["-O2"],
                isa,
                build,
            );
        }
    }
}

#[test]
fn transposes_run_in_blocks_of_a_line_in_every_variant() {
    // A transpose whose rows read more lines than the L1 sets their stride maps to hold runs a
    // line's worth of rows together (`block`); a run ends at a block's end or at a task's end
    // (192 positions at two threads: chunks of 24, so runs of 16 and 8), which the results
    // check, in every variant and at one and two threads.
    let c_only = Options {
        backends: "c".into(),
        ..Options::default()
    };
    // (input shape, the plan's block): a key transpose of six heads of 32 (rows of 512 lines
    // 768 B apart: 16 sets), rows of 12 (a block of 4), and a short one that stays unblocked.
    let cases: [(Vec<usize>, Option<usize>); 3] = [
        (vec![1, 512, 6, 32], Some(16)),
        (vec![1, 400, 16, 12], Some(4)),
        (vec![1, 100, 6, 32], None),
    ];
    for (i, (xs, block)) in cases.iter().enumerate() {
        let build =
            |g: &mut Graph, x| node(g, "Transpose", ints(&[("perm", vec![0, 2, 3, 1])]), vec![x]);
        let c = collage_build::driver::compile(input_graph("transpose", xs, build), "t", &c_only)
            .unwrap();
        let plans: Vec<&str> = c
            .c_source
            .lines()
            .filter(|l| l.contains("/* plan:"))
            .collect();
        let want = block.map(|b| format!(" block {b} */"));
        assert!(
            plans.iter().all(|l| match &want {
                Some(w) => l.ends_with(w.as_str()),
                None => !l.contains(" block "),
            }),
            "case {i}: {plans:?}"
        );
        // The reference: the transpose folded as a constant. Each thread count gets a model
        // of its own, so that no output a run left behind hides a position another run skips.
        let x = rand(xs, 7);
        let mut folded = Graph::new("transpose");
        let xv = folded.add_const("x", x.clone());
        let y = build(&mut folded, xv);
        folded.outputs.push(y);
        passes::run(&mut folded, passes::PIPELINE).unwrap();
        let want = folded.konst(folded.outputs[0]).unwrap().as_ref().clone();
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Base] {
            for threads in [2, 1] {
                let work = std::env::temp_dir().join(format!(
                    "collage-transpose{i}-{isa}-{threads}-{}",
                    std::process::id()
                ));
                let mut m = collage_build::native::NativeModel::build_defines(
                    &c,
                    &work,
                    "-O2",
                    isa.defines(),
                )
                .unwrap();
                let got = m
                    .run(std::slice::from_ref(&x), &Executor::with_threads(threads))
                    .unwrap();
                let (ok, err) = tensor::compare(&got[0], &want);
                assert!(ok, "case {i}, {isa}, {threads} threads: max error {err}");
                let _ = std::fs::remove_dir_all(&work);
            }
        }
    }
}

#[test]
fn log_sin_and_cos_are_accurate_across_the_floats() {
    // f32 log, sin and cos without libm (vectorisable): within 2 ulp of f64 libm everywhere,
    // with the special values (log of 0, of a negative, of inf; sin(-0) = -0; sin of inf).
    let mut xs: Vec<f32> = (-5000..=5000).map(|i| i as f32 / 500.0).collect();
    xs.extend(every_magnitude());
    // The floats nearest multiples of pi/2, small and huge, where the reduction is hardest.
    for k in [
        1.0f64,
        2.0,
        3.0,
        1e3,
        1e5,
        12_345_678.0,
        1e9,
        3e12,
        1e20,
        1e30,
    ] {
        let x = (k * std::f64::consts::FRAC_PI_2) as f32;
        xs.extend([
            x,
            f32::from_bits(x.to_bits() + 1),
            f32::from_bits(x.to_bits() - 1),
        ]);
    }
    let ulp = 2.0 * f32::EPSILON as f64;
    unary_is_accurate("Log", &xs, libm::log, ulp, 1e-45);
    unary_is_accurate("Sin", &xs, libm::sin, ulp, 1e-45);
    unary_is_accurate("Cos", &xs, libm::cos, ulp, 1e-45);
}

/// Einsums that are matrix products run as Transpose, Reshape and MatMul (the `einsum` pass):
/// batch labels, labels of one side, permuted outputs, and a plain product, against the
/// interpreter's Einsum.
#[test]
fn einsums_that_are_products() {
    for (eq, xs, ws) in [
        ("bik,bjk->bij", vec![2, 5, 7], vec![2, 6, 7]),
        ("bhqd,hkd->bqhk", vec![2, 3, 4, 5], vec![3, 6, 5]),
        ("ij,jk->ik", vec![5, 7], vec![7, 9]),
        ("ijk,kj->i", vec![3, 4, 5], vec![5, 4]),
    ] {
        check(eq, &xs, |g, x| {
            let w = g.add_const("w", rand(&ws, 11));
            let mut a = Attrs::default();
            a.0.insert("equation".into(), Attr::Str(eq.into()));
            node(g, "Einsum", a, vec![x, w])
        });
    }
}

/// CumSum runs as a scan: along the last axis (one running sum), along a middle axis (a row
/// of sums), reversed and exclusive, with a fused epilogue, against the interpreter.
#[test]
fn cumulative_sums_scan() {
    for (axis, exclusive, reverse) in [(2, 0, 0), (1, 0, 0), (1, 1, 1), (0, 1, 0), (-1, 0, 1)] {
        check(
            &format!("cumsum{axis}{exclusive}{reverse}"),
            &[3, 5, 19],
            |g, x| {
                let a = g.add_const("axis", Tensor::from_i64(&[], &[axis]));
                let mut at = Attrs::default();
                at.0.insert("exclusive".into(), Attr::Int(exclusive));
                at.0.insert("reverse".into(), Attr::Int(reverse));
                let y = node(g, "CumSum", at, vec![x, a]);
                node(g, "Relu", Attrs::default(), vec![y])
            },
        );
    }
}

#[test]
fn contraction_with_a_vectorised_erf_and_max_epilogue() {
    check("mm_erf", &[8, 64], |g, x| {
        let w = g.add_const("w", rand(&[64, 96], 9));
        let y = node(g, "MatMul", Attrs::default(), vec![x, w]);
        let e = node(g, "Erf", Attrs::default(), vec![y]);
        node(g, "Relu", Attrs::default(), vec![e])
    });
}

/// A small deterministic generator for shapes.
struct Draw(u64);

impl Draw {
    /// A number in `lo..=hi`.
    fn int(&mut self, lo: usize, hi: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (self.0 % (hi - lo + 1) as u64) as usize
    }
}

/// Every point of the plan space is correct, not only the default: each stage kind on small
/// random shapes, compiled on `c` with every generated stage's plan drawn at random
/// (`Options::schedule_seed`: a kind among those that fit the stage, half of the time its
/// default, and every knob of that kind), against the interpreter.
#[test]
fn random_schedules_on_random_shapes() {
    let seeds: u64 = std::env::var("COLLAGE_SCHEDULE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let mut groups = 0;
    let mut row_groups = 0;
    // Groups whose drawn slots differ from the untuned count.
    let mut drawn_knobs = 0;
    let drawn = |slots: usize, instances: usize| {
        usize::from(slots != instances.min(collage_build::schedule::group::MAX_SLOTS))
    };
    for seed in 1..=seeds {
        let opts = Options {
            backends: "c".into(),
            schedule_seed: Some(seed),
            ..Options::default()
        };
        let d = &mut Draw(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let o = &["-O1"];
        // Each seed runs one instruction-set variant: AVX2, baseline, AVX-512, AVX2, ...
        let isa = Isa::ALL[(seed % 3) as usize];
        // Matrix product with a fused bias and ReLU (register-blocked, packed weights).
        let (m, k, n) = (d.int(1, 13), d.int(1, 70), d.int(1, 90));
        check_isa(&format!("r{seed}_mm"), &[m, k], &opts, o, isa, |g, x| {
            let w = g.add_const("w", rand(&[k, n], 3));
            let b = g.add_const("b", rand(&[n], 4));
            let y = node(g, "MatMul", Attrs::default(), vec![x, w]);
            let y = node(g, "Add", Attrs::default(), vec![y, b]);
            node(g, "Relu", Attrs::default(), vec![y])
        });
        // Two activations (no packing), transposed.
        let (b, r, c) = (d.int(1, 3), d.int(1, 12), d.int(2, 40));
        check_isa(
            &format!("r{seed}_bmm"),
            &[b, r, c],
            &opts,
            o,
            isa,
            |g, x| {
                let t = node(g, "Transpose", ints(&[("perm", vec![0, 2, 1])]), vec![x]);
                node(g, "MatMul", Attrs::default(), vec![t, x])
            },
        );
        // Convolution (im2col), then depthwise 3x3 and pointwise 1x1 (a fused group's kinds).
        let (ci, co, h, w) = (d.int(1, 6), d.int(1, 12), d.int(3, 20), d.int(3, 20));
        let (s, p) = (d.int(1, 2) as i64, d.int(0, 1) as i64);
        check_isa(
            &format!("r{seed}_conv"),
            &[1, ci, h, w],
            &opts,
            o,
            isa,
            |g, x| {
                let wt = g.add_const("w", rand(&[co, ci, 3, 3], 11));
                let a = ints(&[
                    ("strides", vec![s, s]),
                    ("pads", vec![p, p, p, p]),
                    ("kernel_shape", vec![3, 3]),
                ]);
                let y = node(g, "Conv", a, vec![x, wt]);
                let y = node(g, "Relu", Attrs::default(), vec![y]);
                let dw = g.add_const("dw", rand(&[co, 1, 3, 3], 12));
                let mut a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                a.0.insert("group".into(), Attr::Int(co as i64));
                let y = node(g, "Conv", a, vec![y, dw]);
                let pw = g.add_const("pw", rand(&[d_out(co), co, 1, 1], 13));
                node(
                    g,
                    "Conv",
                    ints(&[("kernel_shape", vec![1, 1])]),
                    vec![y, pw],
                )
            },
        );
        // A convolution computed as Winograd F(4x4, 3x3): its transforms and its 36 products.
        let (ci, co, h, w) = (d.int(16, 24), d.int(16, 40), d.int(24, 34), d.int(24, 34));
        let pads: Vec<i64> = (0..4).map(|_| d.int(0, 2) as i64).collect();
        check_isa(
            &format!("r{seed}_winograd"),
            &[1, ci, h, w],
            &opts,
            o,
            isa,
            |g, x| {
                let wt = g.add_const("w", rand(&[co, ci, 3, 3], 11));
                let b = g.add_const("b", rand(&[co], 12));
                let a = ints(&[("pads", pads.clone()), ("kernel_shape", vec![3, 3])]);
                let y = node(g, "Conv", a, vec![x, wt, b]);
                node(g, "Relu", Attrs::default(), vec![y])
            },
        );
        // A large image: the im2col in column panels fused into its GEMM (a group whose
        // instances are whole panels and whole register tiles; 3-vector tiles take 3 panels:
        // 54 x 54 outputs or more make at least 16 instances of 192 columns).
        let (ci, co, h, w) = (d.int(1, 4), d.int(1, 12), d.int(56, 72), d.int(56, 72));
        let p = d.int(0, 1) as i64;
        let name = format!("r{seed}_group");
        let conv = |g: &mut Graph, x| {
            let wt = g.add_const("w", rand(&[co, ci, 3, 3], 16));
            let b = g.add_const("b", rand(&[co], 17));
            let a = ints(&[("pads", vec![p, p, p, p]), ("kernel_shape", vec![3, 3])]);
            let y = node(g, "Conv", a, vec![x, wt, b]);
            node(g, "Relu", Attrs::default(), vec![y])
        };
        check_isa(&name, &[1, ci, h, w], &opts, o, isa, conv);
        let g = input_graph(&name, &[1, ci, h, w], conv);
        let c = collage_build::driver::compile(g, "t", &opts).unwrap();
        // The drawn plans may make the GEMM another kind; where it is register-blocked in
        // every variant, the im2col and it form a group.
        let p = &c.program;
        let gemm = p
            .buf_ids()
            .filter(|&b| p.stage(b).is_some_and(|st| st.reduce.is_some()))
            .all(|b| {
                Isa::ALL
                    .iter()
                    .all(|&i| p.plan(b, i).is_some_and(|pl| pl.tile_width().is_some()))
            });
        assert_eq!(
            p.groups.len(),
            usize::from(gemm),
            "{name}: the im2col and its GEMM form a group when it is register-blocked"
        );
        groups += p.groups.len();
        drawn_knobs += p
            .groups
            .iter()
            .map(|g| drawn(g.slots, g.instances))
            .sum::<usize>();
        // Short rows (small images), channels in whole vectors: contractions vectorised along
        // their channels, the reduction in blocks (the schedule's accumulator bytes), a 3x3
        // through im2col with a vectorised epilogue, and pointwise ones (over a short and over
        // a long reduction) whose residual epilogue vectorises along the row instead: their
        // sums are transposed in registers first, blocks of a vector of columns at a time.
        let (ci, co, h) = (d.int(1, 40), 16 * d.int(2, 6), d.int(2, 12));
        check_isa(
            &format!("r{seed}_channels"),
            &[1, ci, h, h],
            &opts,
            o,
            isa,
            |g, x| {
                let wt = g.add_const("w", rand(&[co, ci, 3, 3], 18));
                let b = g.add_const("b", rand(&[co], 19));
                let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                let y = node(g, "Conv", a, vec![x, wt, b]);
                node(g, "Relu", Attrs::default(), vec![y])
            },
        );
        // Convolutions that read their padded input directly (no im2col): channels in whole
        // vectors, any image size, strides, dilations, asymmetric pads, rectangular kernels.
        let (ci, co) = (d.int(1, 12), 16 * d.int(2, 4));
        let (h, w) = (d.int(7, 40), d.int(7, 40));
        let (kh, kw) = (d.int(1, 3) as i64, d.int(1, 3) as i64);
        let (s, dil) = (d.int(1, 2) as i64, d.int(1, 2) as i64);
        let pads: Vec<i64> = (0..4).map(|_| d.int(0, 2) as i64).collect();
        check_isa(
            &format!("r{seed}_direct"),
            &[1, ci, h, w],
            &opts,
            o,
            isa,
            |g, x| {
                let wt = g.add_const("w", rand(&[co, ci, kh as usize, kw as usize], 22));
                let b = g.add_const("b", rand(&[co], 23));
                let a = ints(&[
                    ("pads", pads.clone()),
                    ("kernel_shape", vec![kh, kw]),
                    ("strides", vec![s, s]),
                    ("dilations", vec![dil, dil]),
                ]);
                let y = node(g, "Conv", a, vec![x, wt, b]);
                node(g, "Relu", Attrs::default(), vec![y])
            },
        );
        for (name, ci) in [("short", d.int(1, 64)), ("long", 512 + d.int(0, 90))] {
            let (co, h) = (16 * d.int(2, 4), d.int(1, 9));
            check_isa(
                &format!("r{seed}_channels_{name}"),
                &[1, ci, h, h],
                &opts,
                o,
                isa,
                |g, x| {
                    let wt = g.add_const("w", rand(&[co, ci, 1, 1], 20));
                    let y = node(
                        g,
                        "Conv",
                        ints(&[("kernel_shape", vec![1, 1])]),
                        vec![x, wt],
                    );
                    let r = g.add_const("r", rand(&[1, co, h, h], 21));
                    node(g, "Add", Attrs::default(), vec![y, r])
                },
            );
        }
        // Pooling.
        let (c, h) = (d.int(1, 5), d.int(2, 19));
        let (kk, st) = (d.int(1, 3).min(h) as i64, d.int(1, 2) as i64);
        check_isa(
            &format!("r{seed}_pool"),
            &[1, c, h, h],
            &opts,
            o,
            isa,
            |g, x| {
                let a = ints(&[("kernel_shape", vec![kk, kk]), ("strides", vec![st, st])]);
                let y = node(g, "MaxPool", a, vec![x]);
                let k2 = kk.min((h as i64 - kk) / st + 1);
                let a = ints(&[("kernel_shape", vec![k2, k2]), ("strides", vec![st, st])]);
                node(g, "AveragePool", a, vec![y])
            },
        );
        // Reductions: softmax and layer normalisation (two passes over a row), a mean.
        let (r, c) = (d.int(1, 9), d.int(1, 150));
        check_isa(&format!("r{seed}_norm"), &[r, c], &opts, o, isa, |g, x| {
            let y = node(g, "Softmax", Attrs::default(), vec![x]);
            let scale = g.add_const("scale", rand(&[c], 14));
            let bias = g.add_const("bias", rand(&[c], 15));
            let y = node(
                g,
                "LayerNormalization",
                Attrs::default(),
                vec![y, scale, bias],
            );
            node(g, "ReduceMean", ints(&[("axes", vec![0])]), vec![y])
        });
        // Attention over heads: scores, softmax and the product with V, a row group over
        // (head, query) under drawn plans and drawn blocks.
        let (h, sq, e) = (d.int(1, 4), d.int(2, 40), d.int(1, 20));
        check_isa(
            &format!("r{seed}_attention"),
            &[h, sq, e],
            &opts,
            o,
            isa,
            |g, x| attention(g, x, e),
        );
        let c = collage_build::driver::compile(attention_graph(h, sq, e), "t", &opts).unwrap();
        row_groups += c.program.row_groups.len();
        drawn_knobs += c
            .program
            .row_groups
            .iter()
            .map(|g| drawn(g.slots, g.instances))
            .sum::<usize>();
    }
    // Some seed keeps the GEMM register-blocked, so a group runs under drawn plans too.
    assert!(
        groups > 0 || seeds < 4,
        "no seed of 1..={seeds} formed a group"
    );
    assert!(
        row_groups > 0 || seeds < 4,
        "no seed of 1..={seeds} formed a row group"
    );
    // The seeds draw the groups' slots (and instance widths), not only the stages' plans.
    assert!(
        drawn_knobs > 0 || seeds < 4,
        "no seed of 1..={seeds} drew a group's slots"
    );
}

/// Self-attention of `x` (`[heads, seq, e]`): `softmax(q k^T / sqrt(e)) v` with `q`, `k`, `v`
/// products of `x` with constant `[e, e]` weights.
fn attention(g: &mut Graph, x: ValueId, e: usize) -> ValueId {
    let wq = g.add_const("wq", rand(&[e, e], 31));
    let wk = g.add_const("wk", rand(&[e, e], 32));
    let wv = g.add_const("wv", rand(&[e, e], 33));
    let q = node(g, "MatMul", Attrs::default(), vec![x, wq]);
    let k = node(g, "MatMul", Attrs::default(), vec![x, wk]);
    let v = node(g, "MatMul", Attrs::default(), vec![x, wv]);
    let kt = node(g, "Transpose", ints(&[("perm", vec![0, 2, 1])]), vec![k]);
    let s = node(g, "MatMul", Attrs::default(), vec![q, kt]);
    let scale = g.add_const("scale", Tensor::from_f32(&[], &[(e as f32).sqrt()]));
    let s = node(g, "Div", Attrs::default(), vec![s, scale]);
    let p = node(g, "Softmax", Attrs::default(), vec![s]);
    node(g, "MatMul", Attrs::default(), vec![p, v])
}

/// [`attention`] as a graph with a run-time input of `[heads, seq, e]`.
fn attention_graph(h: usize, sq: usize, e: usize) -> Graph {
    let mut g = Graph::new("attention");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [h, sq, e])));
    g.inputs.push(x);
    let y = attention(&mut g, x, e);
    g.outputs.push(y);
    g
}

/// Runs each mutation of `c`'s C source (a tag and the source) on `x` and checks that it does
/// not match `want`: the test sees the `what` broken that way.
fn every_mutation_fails(
    c: &collage_build::codegen::Compiled,
    mutations: &[(&str, String)],
    x: &Tensor,
    want: &Tensor,
    what: &str,
) {
    for (tag, src) in mutations {
        assert_ne!(*src, c.c_source, "mutation {tag} changed nothing");
        let mut m = c.clone();
        m.c_source = src.clone();
        let (ok, err) = runs_to(&m, tag, x, want);
        assert!(!ok, "mutation {tag} of the {what} passed (max error {err})");
    }
}

/// The output of `build(x)`, `x` a constant: what the interpreter folds it to.
fn folded(name: &str, x: &Tensor, build: impl FnOnce(&mut Graph, ValueId) -> ValueId) -> Tensor {
    let mut g = Graph::new(name);
    let xv = g.add_const("x", x.clone());
    let y = build(&mut g, xv);
    g.outputs.push(y);
    passes::run(&mut g, passes::PIPELINE).unwrap();
    g.konst(g.outputs[0]).expect("folded").as_ref().clone()
}

/// Runs `c` (whose C source may have been changed) on `x` with 2 threads and compares with
/// `want`: whether it matches, and the largest error.
fn runs_to(
    c: &collage_build::codegen::Compiled,
    tag: &str,
    x: &Tensor,
    want: &Tensor,
) -> (bool, f64) {
    let work = std::env::temp_dir().join(format!("collage-rowgroup-{tag}-{}", std::process::id()));
    let mut m = collage_build::native::NativeModel::build_defines(c, &work, "-O1", &[]).unwrap();
    let got = m
        .run(std::slice::from_ref(x), &Executor::with_threads(2))
        .unwrap();
    let _ = std::fs::remove_dir_all(&work);
    let (ok, err) = tensor::compare(&got[0], want);
    (ok, err)
}

/// An attention over 4 heads of 128 queries and a LayerNorm run as row groups: the scores, the
/// softmax's passes and the product with V as one loop of instances over blocks of query rows,
/// the scores only in per-thread scratch; the LayerNorm's mean, variance and normalisation as
/// one. Both match the interpreter, and the tests see a broken group: an instance that leaves
/// the last position of its block out, and a member run out of order, give wrong outputs.
#[test]
fn row_groups_of_attention_and_layernorm() {
    let (h, sq, e) = (4, 128, 24);
    let x = rand(&[h, sq, e], 7);
    let want = folded("attention", &x, |g, x| attention(g, x, e));
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let c = collage_build::driver::compile(attention_graph(h, sq, e), "t", &opts).unwrap();
    let p = &c.program;
    assert_eq!(p.row_groups.len(), 1, "{:?}", p.row_groups);
    let g = &p.row_groups[0];
    // The scores, the softmax's max, exponentials, sum and quotient, then the product with V;
    // all but the last in scratch.
    let names: Vec<&str> = g
        .stages
        .iter()
        .map(|&b| p.stage(b).unwrap().name.as_str())
        .collect();
    assert!(names.len() >= 6, "{names:?}");
    assert!(names.last().unwrap().starts_with("MatMul"), "{names:?}");
    assert!(
        names.iter().filter(|n| n.starts_with("Softmax")).count() >= 3,
        "{names:?}"
    );
    assert_eq!(g.scratch.len(), g.stages.len() - 1);
    assert_eq!((g.dims, g.rows, g.row), (2, h * sq, sq));
    assert!(g.instances >= 16, "{g:?}");
    let scores = g.scratch[..]
        .iter()
        .find(|&&b| p.bufs[b.index()].ty.shape == [h, sq, sq])
        .expect("the scores are scratch");
    assert!(
        p.arena_bytes(*scores) < h * sq * sq * 4,
        "scores in a full-size buffer: {g:?}"
    );
    let (ok, err) = runs_to(&c, "ok", &x, &want);
    assert!(ok, "the grouped build: max error {err}");
    // Mutations of the generated C.
    let first = g.stages[0];
    let mutations: Vec<(&str, String)> = vec![
        // Every instance leaves its last position out.
        (
            "short",
            c.c_source
                .replace(
                    "const int64_t p0 = r0 + c0, p1 = r0 + c1;",
                    "const int64_t p0 = r0 + c0, p1 = r0 + c1 - 1;",
                )
                .replace(
                    &format!("? p0 + {b} : {r};", b = g.block, r = g.rows),
                    &format!("? p0 + {b} - 1 : {r} - 1;", b = g.block, r = g.rows),
                ),
        ),
        // The first member (the scores) runs last.
        (
            "order",
            mutate_order(&c.c_source, &format!("k{first}"), &format!("k{}", g.last())),
        ),
    ];
    every_mutation_fails(&c, &mutations, &x, &want, "row group");

    // LayerNormalization: mean, variance and normalisation, the first two in scratch.
    let mut g = Graph::new("ln");
    let xv = g.add_value("x", Some(TensorType::new(DType::F32, [96, 80])));
    g.inputs.push(xv);
    let scale = g.add_const("scale", rand(&[80], 14));
    let bias = g.add_const("bias", rand(&[80], 15));
    let y = node(
        &mut g,
        "LayerNormalization",
        Attrs::default(),
        vec![xv, scale, bias],
    );
    g.outputs.push(y);
    let c = collage_build::driver::compile(g, "t", &opts).unwrap();
    let p = &c.program;
    assert_eq!(p.row_groups.len(), 1, "{:?}", p.row_groups);
    assert_eq!(p.row_groups[0].stages.len(), 3);
    assert_eq!(p.row_groups[0].scratch.len(), 2);
    check("ln_grouped", &[96, 80], |g, x| {
        let scale = g.add_const("scale", rand(&[80], 14));
        let bias = g.add_const("bias", rand(&[80], 15));
        node(
            g,
            "LayerNormalization",
            Attrs::default(),
            vec![x, scale, bias],
        )
    });
}

/// The same expansion and window at 112x112 (MobileNetV2's first block): the expanded tensor
/// (4.8 MB) fits in the default target's 32 MB last-level cache, where it meets its reader
/// apart, so no group joins the two (a group of channel blocks would read the 800 KB input
/// again per block, 19 MB, to save a 9.6 MB round trip through that cache); on a target whose
/// last-level cache is 4 MB the round trip goes through memory and the channel row group pays.
#[test]
fn an_expansion_joins_its_window_when_its_round_trip_leaves_the_cache() {
    let (c0, c1, hw) = (16, 96, 112);
    let build = |g: &mut Graph, x: ValueId| -> ValueId {
        let we = g.add_const("we", rand(&[c1, c0, 1, 1], 21));
        let e = node(
            g,
            "Conv",
            ints(&[("kernel_shape", vec![1, 1])]),
            vec![x, we],
        );
        let e = node(g, "Relu", Attrs::default(), vec![e]);
        let wd = g.add_const("wd", rand(&[c1, 1, 3, 3], 23));
        let mut a = ints(&[
            ("kernel_shape", vec![3, 3]),
            ("pads", vec![1, 1, 1, 1]),
            ("strides", vec![2, 2]),
        ]);
        a.0.insert("group".into(), Attr::Int(c1 as i64));
        node(g, "Conv", a, vec![e, wd])
    };
    let shape = [1, c0, hw, hw];
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let c = collage_build::driver::compile(input_graph("pair", &shape, build), "t", &opts).unwrap();
    let p = &c.program;
    let joined = |l3: usize| {
        let collage_build::target::Target::Cpu(mut cpu) =
            collage_build::target::Target::for_build()
        else {
            unreachable!("a CPU target")
        };
        cpu.l3 = l3;
        let t = collage_build::target::Target::Cpu(cpu);
        collage_build::schedule::rows::plan_row_groups(p, &t, None)
            .iter()
            .any(|g| g.stages.len() == 2 && g.band.is_none())
    };
    assert!(!joined(32 << 20), "{:?}", p.row_groups);
    assert!(p.row_groups.is_empty(), "{:?}", p.row_groups);
    assert!(joined(4 << 20));
}

/// An expansion (1x1, 16 -> 96 channels, ReLU) and the strided depthwise window that reads it
/// (3x3, stride 2, padding 1) at 224x224, where the expanded tensor (19 MB) exceeds half of the
/// default target's last-level cache: they run as a band group, the expansion of each band's
/// input rows (halo included) in a per-thread scratch slot, never in a full-size buffer. The
/// group, and those a schedule seed draws, match the interpreter; the tests see a broken group:
/// a band whose last input row (its halo below) or first tile is left out, and the window run
/// before the expansion, give wrong outputs (each reading only inside the slot: the sanitizer
/// job runs these too).
#[test]
fn band_groups_of_an_expansion_and_its_window() {
    let (c0, c1, hw) = (16, 96, 224);
    let build = |g: &mut Graph, x: ValueId| -> ValueId {
        let we = g.add_const("we", rand(&[c1, c0, 1, 1], 21));
        let be = g.add_const("be", rand(&[c1], 22));
        let e = node(
            g,
            "Conv",
            ints(&[("kernel_shape", vec![1, 1])]),
            vec![x, we, be],
        );
        let e = node(g, "Relu", Attrs::default(), vec![e]);
        let wd = g.add_const("wd", rand(&[c1, 1, 3, 3], 23));
        let bd = g.add_const("bd", rand(&[c1], 24));
        let mut a = ints(&[
            ("kernel_shape", vec![3, 3]),
            ("pads", vec![1, 1, 1, 1]),
            ("strides", vec![2, 2]),
        ]);
        a.0.insert("group".into(), Attr::Int(c1 as i64));
        let d = node(g, "Conv", a, vec![e, wd, bd]);
        node(g, "Relu", Attrs::default(), vec![d])
    };
    let shape = [1, c0, hw, hw];
    let x = rand(&shape, 7);
    let want = folded("band", &x, build);
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let c = collage_build::driver::compile(input_graph("band", &shape, build), "t", &opts).unwrap();
    let p = &c.program;
    assert_eq!(p.row_groups.len(), 1, "{:?}", p.row_groups);
    let g = &p.row_groups[0];
    let band = g.band.as_ref().expect("a band group");
    assert_eq!(g.stages.len(), 2);
    assert_eq!(g.scratch, vec![g.stages[0]]);
    assert!(g.instances >= 8, "{g:?}");
    // Every band reads its rows' halo: one more input row than twice its output rows, at most.
    assert_eq!(band.pixels, (2 * g.block + 1) * hw, "{band:?}");
    let wide = g.stages[0];
    assert!(
        p.arena_bytes(wide) < p.bufs[wide.index()].ty.bytes() / 4,
        "the expansion in a full-size buffer: {g:?}"
    );
    let (ok, err) = runs_to(&c, "band", &x, &want);
    assert!(ok, "the band group: max error {err}");
    // The AVX2 and baseline variants' band groups, on this machine too.
    for isa in [Isa::Avx2, Isa::Base] {
        let work = std::env::temp_dir().join(format!("collage-band-{isa}-{}", std::process::id()));
        let mut m =
            collage_build::native::NativeModel::build_defines(&c, &work, "-O1", variant(isa))
                .unwrap();
        let got = m
            .run(std::slice::from_ref(&x), &Executor::with_threads(2))
            .unwrap();
        let _ = std::fs::remove_dir_all(&work);
        let (ok, err) = tensor::compare(&got[0], &want);
        assert!(ok, "the band group, variant {isa}: max error {err}");
    }
    // Bands and slots a seed draws (and plans: the window may leave the plane plan).
    for seed in [1, 2] {
        let opts = Options {
            schedule_seed: Some(seed),
            ..opts.clone()
        };
        let c =
            collage_build::driver::compile(input_graph("band", &shape, build), "t", &opts).unwrap();
        let (ok, err) = runs_to(&c, &format!("band-seed{seed}"), &x, &want);
        assert!(ok, "schedule seed {seed}: max error {err}");
    }
    // Mutations of the generated C.
    let a = &band.axis;
    let hi = format!("(y1 - 1) * {} + ({}) + {});", a.stride, a.offset, a.span(1));
    let mutations: Vec<(&str, String)> = vec![
        // Each band's last input row is not computed.
        (
            "halo-end",
            c.c_source.replace(
                &hi,
                &format!(
                    "(y1 - 1) * {} + ({}) + {});",
                    a.stride,
                    a.offset,
                    a.span(1) - 1
                ),
            ),
        ),
        // The expansion leaves its band's first outer iteration out (the first tile of its
        // first channels: the halo above, for every band but the first).
        (
            "first-tile",
            c.c_source
                .replace("plo, phi, t_lo, t_hi);", "plo, phi, t_lo + 1, t_hi);"),
        ),
        // The window runs before the expansion of its band.
        (
            "order",
            mutate_order(
                &c.c_source,
                &format!("k{}", g.stages[0]),
                &format!("k{}", g.last()),
            ),
        ),
    ];
    every_mutation_fails(&c, &mutations, &x, &want, "band group");
}

/// `src` with the calls of `a`'s row kernel moved after those of `b`'s in every row group task
/// (`k<a>_<variant>_row(...)` lines, a band group's `k<a>_<variant>_band(...)`).
fn mutate_order(src: &str, a: &str, b: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut held: Vec<String> = Vec::new();
    for line in src.lines() {
        let t = line.trim_start();
        let call = |k: &str| {
            t.contains(&format!("{k}_"))
                && (t.contains("_row(ctx, s, p0") || t.contains("_band(ctx, s, plo"))
        };
        if call(a) {
            held.push(line.to_string());
            continue;
        }
        out.push(line.to_string());
        if call(b) {
            out.append(&mut held);
        }
    }
    out.join("\n")
}

/// Pointwise output channels for a depthwise input of `c` channels.
fn d_out(c: usize) -> usize {
    c + 3
}

/// The drawn schedules reach the code generator: different seeds give different kernels for
/// one matrix product and one row reduction.
#[test]
fn schedule_seeds_change_the_generated_code() {
    let build = || {
        let mut g = Graph::new("mm");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [12, 64])));
        g.inputs.push(x);
        let w = g.add_const("w", rand(&[64, 96], 3));
        let y = node(&mut g, "MatMul", Attrs::default(), vec![x, w]);
        let y = node(&mut g, "Softmax", Attrs::default(), vec![y]);
        g.outputs.push(y);
        g
    };
    let mut sources = std::collections::BTreeSet::new();
    for seed in [None, Some(1), Some(2), Some(3), Some(4), Some(5)] {
        let opts = Options {
            backends: "c".into(),
            schedule_seed: seed,
            ..Options::default()
        };
        let c = collage_build::driver::compile(build(), "t", &opts).unwrap();
        sources.insert(c.c_source);
    }
    assert!(sources.len() >= 4, "{} distinct kernels", sources.len());
}

/// A 3x3 convolution with 64 output channels vectorises along its channels and reads its padded
/// input in place of an im2col buffer (codegen/c/direct.rs), over a 7x7 image (49 columns fill
/// whole vectors poorly) as over a 28x28 one, with 24 (three 8-lane vectors) and with 8 (one);
/// with 12 output channels (no whole vector) it vectorises along its row, through an im2col.
#[test]
fn channel_convolutions_read_their_padded_input() {
    let plans = |h: usize, co: usize| -> (Vec<String>, Vec<(String, Vec<usize>)>) {
        let c = padded_conv3x3(&[1, 40, h, h], co);
        let p = &c.program;
        let stages: Vec<_> = p.buf_ids().filter_map(|b| Some((b, p.stage(b)?))).collect();
        (
            stages
                .iter()
                .filter(|(_, st)| st.reduce.is_some())
                .map(|&(b, _)| p.plan(b, Isa::Avx512).unwrap().to_string())
                .collect(),
            stages
                .iter()
                .filter(|(_, st)| st.reduce.is_none())
                .map(|(_, st)| (st.name.clone(), st.ty.shape.clone()))
                .collect(),
        )
    };
    for h in [7, 28] {
        let (texts, injective) = plans(h, 64);
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with("channel-vectorised vecs=4 rows=6")
                    && t.contains("| vector i1 lanes 4x16 jam i2x6")),
            "{h}x{h}: {texts:?}"
        );
        assert!(
            injective
                .iter()
                .any(|(n, s)| n.ends_with("_padded") && *s == [1, 40, h + 2, h + 2]),
            "{h}x{h}: {injective:?}"
        );
    }
    // 24 channels are one and a half 16-lane vectors: the widest variant takes three vectors
    // of eight; 8 channels are half a vector: it takes one vector of eight, over tiles of 14
    // columns (half an image row, not the 24 the registers allow: each column's input is then
    // a constant offset from the tile's first).
    for (co, plan, tile) in [
        (24, "vecs=3 rows=8", "lanes 3x8 jam i2x8"),
        (8, "vecs=1 rows=14", "lanes 1x8 jam i2x14"),
    ] {
        let (texts, injective) = plans(28, co);
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with(&format!("channel-vectorised {plan}"))
                    && t.contains(&format!("| vector i1 {tile}"))),
            "{co} channels: {texts:?}"
        );
        assert!(
            injective.iter().any(|(n, _)| n.ends_with("_padded")),
            "{co} channels: {injective:?}"
        );
    }
    // 12 channels are no whole vector of any width the plan takes: im2col and a product.
    let (texts, injective) = plans(28, 12);
    assert!(
        texts.iter().all(|t| !t.starts_with("channel-vectorised")),
        "{texts:?}"
    );
    assert!(
        injective.iter().all(|(n, _)| !n.ends_with("_padded")),
        "{injective:?}"
    );
}

/// A padded 3x3 convolution of an input of `x_shape` to `co` channels, compiled on `c` alone.
fn padded_conv3x3(x_shape: &[usize], co: usize) -> collage_build::codegen::Compiled {
    let mut g = Graph::new("conv3x3");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, x_shape)));
    g.inputs.push(x);
    let w = g.add_const("w", rand(&[co, x_shape[1], 3, 3], 11));
    let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
    let y = node(&mut g, "Conv", a, vec![x, w]);
    g.outputs.push(y);
    // The direct convolution's plans are under test: no Winograd.
    let opts = Options {
        backends: "c".into(),
        no_winograd: true,
        ..Options::default()
    };
    collage_build::driver::compile(g, "t", &opts).unwrap()
}

/// The AVX-512 plan of every reduction of `build(x)` (`x` of `shape`) compiled with `opts`.
fn reduction_plans(
    name: &str,
    shape: &[usize],
    opts: &Options,
    build: impl Fn(&mut Graph, ValueId) -> ValueId,
) -> Vec<String> {
    let c = collage_build::driver::compile(input_graph(name, shape, build), "t", opts).unwrap();
    let p = &c.program;
    p.buf_ids()
        .filter(|&b| p.stage(b).is_some_and(|st| st.reduce.is_some()))
        .map(|b| p.plan(b, Isa::Avx512).unwrap().to_string())
        .collect()
}

/// Small convolutions of one vector of channels whose output pixels are one flattened row:
/// register tiles of whole image rows (7x7: 21 columns, three rows) or of part of one (14x14,
/// 28x28: 14 columns) read each column's input at a constant offset from the tile's first
/// (`aligned_columns` in the channel printer). Their plans are those, and they compute what
/// the interpreter does in every variant (8 channels: one 8-lane vector; 16: one 16-lane or
/// four narrower); a printer that drops a tile's row step or its offset inside a row fails.
/// Eight channels take the AVX-512 variant's sixteen lanes as two columns a vector (`paired`):
/// a printer that broadcasts a pair from the wrong column, or unpairs the sums into the
/// wrong columns, fails.
#[test]
fn channel_tiles_align_to_image_rows() {
    for (h, co, rows, paired) in [
        (7, 16, 21, false),
        (14, 16, 14, false),
        (28, 8, 14, true),
        (28, 16, 14, false),
    ] {
        let build = |g: &mut Graph, x: ValueId| {
            let wt = g.add_const("w", rand(&[co, 3, 5, 5], 31));
            let b = g.add_const("b", rand(&[co], 32));
            let a = ints(&[("pads", vec![2, 2, 2, 2]), ("kernel_shape", vec![5, 5])]);
            let y = node(g, "Conv", a, vec![x, wt, b]);
            node(g, "Relu", Attrs::default(), vec![y])
        };
        let name = format!("aligned_{h}_{co}");
        let opts = Options {
            backends: "c".into(),
            ..Options::default()
        };
        let texts = reduction_plans(&name, &[1, 3, h, h], &opts, build);
        assert!(
            texts.iter().any(
                |t| t.starts_with(&format!("channel-vectorised vecs=1 rows={rows} "))
                    && t.ends_with(" paired") == paired
            ),
            "{name}: {texts:?}"
        );
        for isa in Isa::ALL {
            check_isa(&name, &[1, 3, h, h], &opts, &["-O1"], isa, build);
        }
    }
}

/// Max pools whose columns are a stride-2 pair on rows narrower than a vector (2x2 and 3x2
/// windows of stride 2 along the row: 14, 12 and 8 outputs a row): the window plan combines
/// a vector of inputs over the window's rows, then its even and odd lanes, and stores half a
/// vector of outputs, the last half overlapping. Each variant against the interpreter; a
/// printer that reads the pair at the wrong column fails.
#[test]
fn narrow_stride_two_pools_pair_lanes() {
    for (h, kernel, strides) in [
        (28, [2, 2], [2, 2]),
        (24, [3, 2], [1, 2]),
        (17, [2, 2], [2, 2]),
    ] {
        let build = |g: &mut Graph, x: ValueId| {
            let a = ints(&[
                ("kernel_shape", kernel.to_vec()),
                ("strides", strides.to_vec()),
            ]);
            node(g, "MaxPool", a, vec![x])
        };
        let name = format!("pairs_{h}_{}x{}", kernel[0], kernel[1]);
        let opts = Options {
            backends: "c".into(),
            ..Options::default()
        };
        let texts = reduction_plans(&name, &[1, 8, h, h], &opts, build);
        assert!(
            texts.iter().any(|t| t.starts_with("window ")),
            "{name}: {texts:?}"
        );
        for isa in Isa::ALL {
            check_isa(&name, &[1, 8, h, h], &opts, &["-O1"], isa, build);
        }
    }
}

/// The seeds reach every kind of plan: over a few small graphs (a matrix product and a
/// softmax, a padded max pool, a depthwise and a channel-wide convolution), some seed gives
/// some stage each kind, so the random-schedule tests above run every kind's code.
#[test]
fn seeds_draw_every_plan_kind() {
    let graphs: Vec<(
        &str,
        Vec<usize>,
        Box<dyn Fn(&mut Graph, ValueId) -> ValueId>,
    )> = vec![
        (
            "mm",
            vec![12, 64],
            Box::new(|g, x| {
                let w = g.add_const("w", rand(&[64, 96], 3));
                let y = node(g, "MatMul", Attrs::default(), vec![x, w]);
                node(g, "Softmax", Attrs::default(), vec![y])
            }),
        ),
        (
            "pool",
            vec![1, 4, 20, 20],
            Box::new(|g, x| {
                let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                node(g, "MaxPool", a, vec![x])
            }),
        ),
        (
            "dw",
            vec![1, 16, 14, 14],
            Box::new(|g, x| {
                let w = g.add_const("w", rand(&[16, 1, 3, 3], 4));
                let mut a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                a.0.insert("group".into(), Attr::Int(16));
                node(g, "Conv", a, vec![x, w])
            }),
        ),
        (
            "channels",
            vec![1, 40, 7, 7],
            Box::new(|g, x| {
                let w = g.add_const("w", rand(&[64, 40, 3, 3], 5));
                let a = ints(&[("pads", vec![1, 1, 1, 1]), ("kernel_shape", vec![3, 3])]);
                node(g, "Conv", a, vec![x, w])
            }),
        ),
        (
            "cumsum",
            vec![2, 5, 6],
            Box::new(|g, x| {
                let axis = g.add_const("axis", Tensor::from_i64(&[], &[1]));
                node(g, "CumSum", Attrs::default(), vec![x, axis])
            }),
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for seed in (1..=12).map(Some).chain([None]) {
        for (name, shape, build) in &graphs {
            let g = input_graph(name, shape, build);
            let opts = Options {
                backends: "c".into(),
                schedule_seed: seed,
                ..Options::default()
            };
            let c = collage_build::driver::compile(g, "t", &opts).unwrap();
            let p = &c.program;
            for b in p.buf_ids() {
                if let Some(plan) = p.plan(b, Isa::Avx512) {
                    seen.insert(format!("{:?}", plan.kind()));
                }
            }
        }
    }
    assert_eq!(seen.len(), PlanKind::ALL.len(), "kinds drawn: {seen:?}");
}
