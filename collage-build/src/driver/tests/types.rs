//! The element types of fewer than 8 bits (INT4, UINT4, INT2, UINT2) and the one-byte floats
//! FLOAT4E2M1 and FLOAT8E8M0: conversions to and from them in the generated C agree, byte for
//! byte, with the tensor-expression interpreter (constant folding), on every code of each type
//! and on the values between codes (ties, saturation, NaN, infinities, out-of-range integers).
use std::collections::BTreeMap;

use collage_runtime::Executor;

use crate::driver::{self, Options};
use crate::ir::{DType, Graph, Tensor, TensorType, ValueId};
use crate::native::NativeModel;
use crate::ops::{lookup, Attr, Attrs, OpCx};
use crate::tensor::{e8m0_encode, E8M0Round};

/// A `Cast` of `x` to `to` with extra attributes (`saturate`, `round_mode`).
fn cast(g: &mut Graph, x: ValueId, to: DType, extra: &[(&str, Attr)]) -> ValueId {
    let mut a = BTreeMap::new();
    a.insert("to".to_string(), Attr::Int(to.onnx_code() as i64));
    for (k, v) in extra {
        a.insert(k.to_string(), v.clone());
    }
    let op = lookup("Cast").unwrap()(&OpCx {
        attrs: &Attrs(a),
        opset: 25,
        n_inputs: 1,
        n_outputs: 1,
    })
    .unwrap();
    let out = g.add_value(format!("y{}", g.values.len()), None);
    g.add_node(
        format!("cast{}", g.nodes.len()),
        op,
        vec![Some(x)],
        vec![out],
    );
    out
}

/// An `Identity` of `x`.
fn identity(g: &mut Graph, x: ValueId) -> ValueId {
    node(g, "Identity", &[x])
}

/// Compiles `build(x)` with `x` a run-time input and with `x` a constant, runs the first, and
/// checks that every output has the bytes the folded graph computed; returns the outputs.
fn check(
    name: &str,
    x: &Tensor,
    build: impl Fn(&mut Graph, ValueId) -> Vec<ValueId>,
) -> Vec<Tensor> {
    let make = |konst: bool| {
        let mut g = Graph::new(name);
        let xv = if konst {
            g.add_const("x", x.clone())
        } else {
            let v = g.add_value("x", Some(x.ty.clone()));
            g.inputs.push(v);
            v
        };
        g.outputs = build(&mut g, xv);
        g
    };
    let mut folded = make(true);
    crate::passes::run(&mut folded, crate::passes::PIPELINE).unwrap();
    let c = driver::compile(make(false), "t", &Options::default()).unwrap();
    let work = std::env::temp_dir().join(format!("collage-types-{name}-{}", std::process::id()));
    let mut m = NativeModel::build(&c, &work, "-O2").unwrap();
    let got = m
        .run(std::slice::from_ref(x), &Executor::with_threads(1))
        .unwrap();
    for (k, (&o, got)) in folded.outputs.iter().zip(&got).enumerate() {
        let want = folded.konst(o).expect("folded to a constant");
        assert_eq!(got.ty, want.ty, "{name} output {k}");
        for i in 0..got.numel() {
            let n = got.ty.dtype.size();
            let (g, w) = (&got.data[i * n..][..n], &want.data[i * n..][..n]);
            // NaN is NaN, whatever its bits.
            let both_nan = got.get_f64(i).is_nan() && want.get_f64(i).is_nan();
            assert!(
                g == w || both_nan,
                "{name} output {k} ({}) element {i} (x = {}): C {g:?}, interpreter {w:?}",
                got.ty,
                if i < x.numel() {
                    x.get_f64(i)
                } else {
                    f64::NAN
                }
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    got
}

/// Every f32 a conversion may treat specially: each FLOAT4E2M1 and integer value and the points
/// half-way between (ties) and just beside them, each power of two of FLOAT8E8M0 and values
/// between, both zeros, NaN of either sign, the infinities, f32 subnormals and integers beyond
/// i64.
fn probes() -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        1e-45,
        3e38,
        1e30,
        1e19,
    ];
    for b in 0..16u8 {
        let c = DType::F4E2M1.decode_byte(b).unwrap() as f32;
        v.extend([c, c + 0.25, c + 0.26, c + 0.24]);
    }
    for i in -20..20 {
        let i = i as f32;
        v.extend([i, i + 0.5, i + 0.7, i - 0.2]);
    }
    for e in (-127..128).step_by(7) {
        let p = 2f32.powi(e);
        v.extend([p, p * 1.5, p * 1.25, p * 1.75]);
    }
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

#[test]
fn casts_to_the_small_types_agree_with_the_interpreter() {
    let v = probes();
    let x = Tensor::from_f32(&[v.len()], &v);
    let got = check("to_small", &x, |g, x| {
        let mut outs: Vec<ValueId> = [
            DType::I4,
            DType::U4,
            DType::I2,
            DType::U2,
            DType::F4E2M1,
            DType::F8E8M0,
        ]
        .into_iter()
        .map(|d| cast(g, x, d, &[]))
        .collect();
        for round in ["up", "down", "nearest"] {
            for saturate in [0, 1] {
                let extra = [
                    ("round_mode", Attr::Str(round.into())),
                    ("saturate", Attr::Int(saturate)),
                ];
                outs.push(cast(g, x, DType::F8E8M0, &extra));
            }
        }
        // From f16 (narrowed first), as the node tests do.
        let h = cast(g, x, DType::F16, &[]);
        outs.push(cast(g, h, DType::F4E2M1, &[]));
        outs.push(cast(g, h, DType::I4, &[]));
        outs
    });
    // And with the reference conversions of `tensor` (tested against ONNX's results there):
    // FLOAT4E2M1, then FLOAT8E8M0 by Cast's default and in each mode.
    let want = |f: &dyn Fn(f64) -> u8| -> Vec<u8> { v.iter().map(|&x| f(x as f64)).collect() };
    assert_eq!(
        got[4].data,
        want(&|x| DType::F4E2M1.encode_byte(x).unwrap())
    );
    assert_eq!(got[5].data, want(&|x| e8m0_encode(x, E8M0Round::Up, true)));
    let mut k = 6;
    for round in [E8M0Round::Up, E8M0Round::Down, E8M0Round::Nearest] {
        for saturate in [false, true] {
            let w = want(&|x| e8m0_encode(x, round, saturate));
            assert_eq!(got[k].data, w, "{round:?} saturate {saturate}");
            k += 1;
        }
    }
    // The integers wrap (NaN and beyond i64: INT64_MIN, as x86 converts them, so 0).
    let wrap = |x: f32, d: DType| {
        let i = if x.is_nan() || x.abs() >= 9.2e18 {
            0
        } else {
            x as i64 as i128
        };
        d.wrap_int(i) as u8
    };
    for (k, d) in [DType::I4, DType::U4, DType::I2, DType::U2]
        .into_iter()
        .enumerate()
    {
        let w: Vec<u8> = v.iter().map(|&x| wrap(x, d)).collect();
        assert_eq!(got[k].data, w, "{d}");
    }
}

#[test]
fn casts_from_the_small_types_agree_with_the_interpreter() {
    for d in [
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
        DType::F4E2M1,
        DType::F8E8M0,
    ] {
        // Every code of the type.
        let n = if d == DType::F8E8M0 {
            256
        } else {
            1 << d.bits()
        };
        let mut x = Tensor::zeros(TensorType::new(d, [n]));
        for i in 0..n {
            if d.is_int() {
                x.set_int(i, i as i128);
            } else {
                x.data[i] = i as u8;
            }
        }
        let got = check(&format!("from_{d}"), &x, |g, x| {
            let mut outs: Vec<ValueId> = [
                DType::F32,
                DType::F16,
                DType::BF16,
                DType::I8,
                DType::U8,
                DType::I4,
            ]
            .into_iter()
            .map(|to| cast(g, x, to, &[]))
            .collect();
            // To its own type, and through an operator that computes on f32 (inference
            // widens the narrow floats around it): every code comes back.
            outs.push(cast(g, x, d, &[]));
            outs.push(identity(g, x));
            outs
        });
        for t in &got[got.len() - 2..] {
            assert_eq!(t.data, x.data, "{d}: {}", t.ty);
        }
    }
}

/// A node `op` of `inputs` (opset 25, no attributes).
pub(super) fn node(g: &mut Graph, op: &str, inputs: &[ValueId]) -> ValueId {
    let f = lookup(op).unwrap()(&OpCx {
        attrs: &Attrs::default(),
        opset: 25,
        n_inputs: inputs.len(),
        n_outputs: 1,
    })
    .unwrap();
    let out = g.add_value(format!("y{}", g.values.len()), None);
    let name = format!("n{}", g.nodes.len());
    g.add_node(
        name,
        f,
        inputs.iter().map(|&v| Some(v)).collect(),
        vec![out],
    );
    out
}

/// The same bounds as epilogues of a vectorised kernel (`cl_vmaxc` / `cl_vminc`, one
/// comparison and one select per vector): a 1x1 convolution whose weights are zero gives every
/// probe, as its bias, across 16 pixels; then Clip, Max, Min and Relu, each on its own
/// convolution so that each is fused as its epilogue.
#[test]
fn vector_epilogues_against_constant_bounds_agree_with_the_interpreter() {
    let v = probes();
    let n = v.len();
    let x = Tensor::from_f32(&[1, 1, 4, 4], &[1.0; 16]);
    let build = |g: &mut Graph, x: ValueId| {
        let mut outs = Vec::new();
        let conv = |g: &mut Graph| {
            let w = g.add_const("w", Tensor::from_f32(&[n, 1, 1, 1], &vec![0.0; n]));
            let b = g.add_const("b", Tensor::from_f32(&[n], &v));
            node(g, "Conv", &[x, w, b])
        };
        for (lo, hi) in [(0.0f32, 6.0f32), (-0.0, 0.0), (-1.5, 1e30)] {
            let l = g.add_const("lo", Tensor::from_f32(&[], &[lo]));
            let h = g.add_const("hi", Tensor::from_f32(&[], &[hi]));
            let y = conv(g);
            outs.push(node(g, "Clip", &[y, l, h]));
            let y = conv(g);
            outs.push(node(g, "Max", &[y, l]));
            let y = conv(g);
            outs.push(node(g, "Min", &[y, h]));
        }
        let y = conv(g);
        outs.push(node(g, "Relu", &[y]));
        outs
    };
    let mut g = Graph::new("vector_bounds");
    let xv = g.add_value("x", Some(x.ty.clone()));
    g.inputs.push(xv);
    g.outputs = build(&mut g, xv);
    let c = driver::compile(g, "t", &Options::default()).unwrap();
    for f in ["cl_vmaxc(", "cl_vminc("] {
        assert!(c.c_source.contains(f), "no {f} in the generated C");
    }
    check("vector_bounds", &x, build);
}

/// Max and min against one-element constants (a Clip's initialisers, printed as `cl_maxc_f32`
/// / `cl_minc_f32`) agree bit for bit with the interpreter: NaN of either sign propagates, ties
/// and both zeros give what `cl_max_f32` / `cl_min_f32` give.
#[test]
fn max_and_min_against_constant_bounds_agree_with_the_interpreter() {
    let v = probes();
    let x = Tensor::from_f32(&[v.len()], &v);
    check("const_bounds", &x, |g, x| {
        let mut outs = Vec::new();
        for (lo, hi) in [(0.0f32, 6.0f32), (-0.0, 0.0), (-1.5, 1e30)] {
            let l = g.add_const("lo", Tensor::from_f32(&[], &[lo]));
            let h = g.add_const("hi", Tensor::from_f32(&[], &[hi]));
            outs.push(node(g, "Clip", &[x, l, h]));
            outs.push(node(g, "Max", &[x, l]));
            outs.push(node(g, "Min", &[x, h]));
        }
        outs
    });
}
