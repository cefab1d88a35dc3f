//! Exporters' idioms in the forms the later passes and the fusion recognise.
//!
//! paddle2onnx writes a convolution as `Conv` without bias, `Add` of a `[1, C, 1, 1]` bias and an
//! `Identity`, then the `BatchNormalization`; its LayerNorm squares with `Pow(x, 2)`. As written,
//! the `Identity` and the `Add` stand between the convolution and its BatchNorm (which
//! `fold_batchnorm` then cannot fold, so it runs as a kernel of its own), and `Pow` is the C
//! library's `powf` per element. So:
//!
//! - an `Identity` whose output is not a graph output is removed (its readers read its input);
//! - `Add(Conv(x, W[, b]), c)`, with `c` a constant per-channel bias and the convolution read by
//!   the `Add` alone, becomes `Conv(x, W, b + c)`;
//! - `Pow(x, c)` of a float `x` with every element of the constant `c` equal to 2, 3 or 0.5 becomes
//!   `x * x`, `x * x * x` or `Sqrt(x)` (what NumPy, the node tests' reference, computes for those
//!   exponents; `x * x` is `pow(x, 2)` exactly);
//! - `Div(x, c)` of f32 or f64 with `c` a constant whose every reciprocal is a normal number
//!   becomes `Mul(x, 1 / c)`: one multiplication per element instead of a division (GELU's
//!   `x / sqrt 2`, an attention's scale), at most an ulp or so from the quotient (ONNX
//!   Runtime's own GELU multiplies by `1 / sqrt 2`); a zero, infinite or subnormal divisor
//!   keeps the division.
use std::collections::HashMap;

use crate::error::Result;
use crate::ir::{DType, Graph, Node, Tensor, ValueId};
use crate::ops::nn::is_conv;

use super::op;

/// Applies the three rewrites, then types the new values.
pub fn run(g: &mut Graph) -> Result<()> {
    remove_identities(g);
    fold_conv_bias(g);
    super::replace_nodes(g, |g, ni| {
        strength_reduce_pow(g, ni).or_else(|| reciprocal_divisor(g, ni))
    })
}

/// `Div(x, c)` by a constant as `Mul(x, 1 / c)` (see the module's text).
fn reciprocal_divisor(g: &mut Graph, ni: usize) -> Option<Vec<Node>> {
    let node = &g.nodes[ni];
    if node.op.op_type() != "Div" || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (x, c) = (node.inputs[0]?, node.inputs[1]?);
    let t = g.konst(c)?;
    let dtype = t.ty.dtype;
    let normal = |r: f64| match dtype {
        DType::F32 => (r as f32).is_normal(),
        DType::F64 => r.is_normal(),
        _ => false,
    };
    let recip: Vec<f64> = t.to_f64().iter().map(|&v| 1.0 / v).collect();
    if g.value(x).ty.as_ref().map(|ty| ty.dtype) != Some(dtype) || !recip.iter().all(|&r| normal(r))
    {
        return None;
    }
    let shape = t.ty.shape.clone();
    let (name, y) = (node.name.clone(), node.outputs[0]);
    let r = g.add_const(
        format!("{name}_reciprocal"),
        Tensor::from_f64_as(dtype, &shape, &recip),
    );
    Some(vec![Node {
        name: format!("{name}_mul"),
        op: op("Mul", vec![], 2)?,
        inputs: vec![Some(x), Some(r)],
        outputs: vec![y],
    }])
}

/// Removes every `Identity` whose output is not a graph output, its readers reading its input.
fn remove_identities(g: &mut Graph) {
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    g.nodes.retain(|n| {
        let keep = n.op.op_type() != "Identity"
            || n.inputs.len() != 1
            || n.outputs.len() != 1
            || n.inputs[0].is_none()
            || g.outputs.contains(&n.outputs[0]);
        if !keep {
            let x = n.inputs[0].expect("checked");
            alias.insert(n.outputs[0], *alias.get(&x).unwrap_or(&x));
        }
        keep
    });
    if alias.is_empty() {
        return;
    }
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().flatten() {
            if let Some(&x) = alias.get(v) {
                *v = x;
            }
        }
    }
}

/// The per-channel values of `c` added to a convolution output of shape `out`: `c` broadcasts
/// along the channel axis (1) only, one value per channel, or is one value for all.
fn channel_bias(c: &Tensor, out: &[usize]) -> Option<Vec<f64>> {
    let (rank, channels) = (out.len(), *out.get(1)?);
    let shape = &c.ty.shape;
    if shape.len() > rank {
        return None;
    }
    if c.numel() == 1 {
        return Some(vec![c.get_f64(0); channels]);
    }
    // Right-aligned, every dimension but the channels' is 1.
    let offset = rank - shape.len();
    let ok = c.numel() == channels
        && shape
            .iter()
            .enumerate()
            .all(|(i, &d)| d == 1 || i + offset == 1);
    ok.then(|| c.to_f64())
}

/// Folds `Add(Conv(..), bias)` into the convolution's bias.
fn fold_conv_bias(g: &mut Graph) {
    let producers = g.producers();
    let consumers = g.consumers();
    let mut remove = vec![false; g.nodes.len()];
    for ai in 0..g.nodes.len() {
        let add = &g.nodes[ai];
        if add.op.op_type() != "Add" || add.inputs.len() != 2 || add.outputs.len() != 1 {
            continue;
        }
        let (Some(a), Some(b)) = (add.inputs[0], add.inputs[1]) else {
            continue;
        };
        // Which side is the convolution and which the constant.
        let Some((y, c)) = [(a, b), (b, a)]
            .into_iter()
            .find(|&(y, c)| g.konst(c).is_some() && producers.get(&y).is_some_and(|&p| !remove[p]))
        else {
            continue;
        };
        let ci = producers[&y];
        let conv = &g.nodes[ci];
        let single = consumers.get(&y).is_some_and(|r| r.len() == 1);
        if !is_conv(conv.op.as_ref()) || !single || g.outputs.contains(&y) {
            continue;
        }
        let Some(ty) = g.value(y).ty.clone() else {
            continue;
        };
        let c = g.konst(c).expect("checked").clone();
        if c.ty.dtype != ty.dtype
            || !ty.dtype.is_float()
            || g.value(add.outputs[0]).ty.as_ref() != Some(&ty)
        {
            continue;
        }
        let Some(extra) = channel_bias(&c, &ty.shape) else {
            continue;
        };
        let bias = match conv.inputs.get(2).copied().flatten() {
            Some(b) => match g.konst(b) {
                Some(t) if t.numel() == extra.len() => t.to_f64(),
                _ => continue,
            },
            None => vec![0.0; extra.len()],
        };
        // Each sum rounded to the element type, as the Add would round it.
        let sum: Vec<f64> = bias.iter().zip(&extra).map(|(b, e)| b + e).collect();
        let name = format!("{}_bias", g.nodes[ci].name);
        let bv = g.add_const(name, Tensor::from_f64_as(ty.dtype, &[extra.len()], &sum));
        let out = g.nodes[ai].outputs[0];
        let conv = &mut g.nodes[ci];
        conv.inputs.resize(3, None);
        conv.inputs[2] = Some(bv);
        conv.outputs[0] = out;
        remove[ai] = true;
    }
    super::drop_nodes(g, &remove);
}

/// `Pow(x, 2 | 3 | 0.5)` as products or a square root.
fn strength_reduce_pow(g: &mut Graph, ni: usize) -> Option<Vec<Node>> {
    let node = &g.nodes[ni];
    if node.op.op_type() != "Pow" || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (x, e) = (node.inputs[0]?, node.inputs[1]?);
    let (tx, ty) = (g.value(x).ty.clone()?, g.value(node.outputs[0]).ty.clone()?);
    if !tx.dtype.is_float() || tx != ty {
        return None;
    }
    let e = g.konst(e)?;
    let first = e.to_f64().first().copied()?;
    if e.to_f64().iter().any(|&v| v != first) {
        return None;
    }
    let (name, y) = (node.name.clone(), node.outputs[0]);
    let mul = |a: ValueId, b: ValueId, out: ValueId, k: usize| -> Option<Node> {
        Some(Node {
            name: format!("{name}_mul{k}"),
            op: op("Mul", vec![], 2)?,
            inputs: vec![Some(a), Some(b)],
            outputs: vec![out],
        })
    };
    Some(match first {
        2.0 => vec![mul(x, x, y, 0)?],
        3.0 => {
            let sq = g.add_value(format!("{name}_square"), None);
            vec![mul(x, x, sq, 0)?, mul(sq, x, y, 1)?]
        }
        0.5 => vec![Node {
            name: format!("{name}_sqrt"),
            op: op("Sqrt", vec![], 1)?,
            inputs: vec![Some(x)],
            outputs: vec![y],
        }],
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, TensorType};
    use crate::ops::Attr;

    fn add_node(
        g: &mut Graph,
        op_type: &str,
        attrs: Vec<(&str, Attr)>,
        ins: &[ValueId],
    ) -> ValueId {
        let y = g.add_value(format!("{op_type}_{}", g.nodes.len()), None);
        g.nodes.push(Node {
            name: format!("{op_type}_{}", g.nodes.len()),
            op: op(op_type, attrs, ins.len()).unwrap(),
            inputs: ins.iter().map(|&v| Some(v)).collect(),
            outputs: vec![y],
        });
        y
    }

    /// x -> Conv (no bias) -> Add(bias) -> Identity -> BatchNormalization -> Relu, as
    /// paddle2onnx writes it; `bias_shape` is the added constant's shape.
    fn paddle_conv(bias_shape: &[usize]) -> Graph {
        let mut g = Graph::new("t");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 2, 5, 5])));
        g.inputs.push(x);
        let w = g.add_const("w", Tensor::from_f32(&[3, 2, 3, 3], &[0.1; 54]));
        let n: usize = bias_shape.iter().product();
        let b = g.add_const("b", Tensor::from_f32(bias_shape, &vec![0.5; n]));
        let bn: Vec<ValueId> = (0..4)
            .map(|i| g.add_const(format!("bn{i}"), Tensor::from_f32(&[3], &[1.0, 0.5, 2.0])))
            .collect();
        let c = add_node(
            &mut g,
            "Conv",
            vec![("kernel_shape", Attr::Ints(vec![3, 3]))],
            &[x, w],
        );
        let a = add_node(&mut g, "Add", vec![], &[c, b]);
        let i = add_node(&mut g, "Identity", vec![], &[a]);
        let y = add_node(
            &mut g,
            "BatchNormalization",
            vec![],
            &[i, bn[0], bn[1], bn[2], bn[3]],
        );
        let r = add_node(&mut g, "Relu", vec![], &[y]);
        g.outputs.push(r);
        super::super::run(&mut g, super::super::PIPELINE).unwrap();
        g
    }

    fn ops(g: &Graph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.op.op_type()).collect()
    }

    #[test]
    fn a_paddle_convolution_folds_to_one_conv() {
        for shape in [&[1, 3, 1, 1][..], &[3, 1, 1], &[1]] {
            let g = paddle_conv(shape);
            assert_eq!(ops(&g), ["Conv", "Relu"], "bias {shape:?}");
            assert_eq!(g.nodes[0].inputs.len(), 3);
        }
        // A bias along the width is not a channel bias: the Add stays (and so does the
        // BatchNorm, which then has no convolution to fold into).
        let g = paddle_conv(&[3]);
        assert_eq!(ops(&g), ["Conv", "Add", "BatchNormalization", "Relu"]);
    }

    #[test]
    fn pow_by_two_three_and_a_half_are_products_and_a_root() {
        for (e, want) in [
            (2.0, &["Mul"][..]),
            (3.0, &["Mul", "Mul"]),
            (0.5, &["Sqrt"]),
            (2.5, &["Pow"]),
        ] {
            let mut g = Graph::new("t");
            let x = g.add_value("x", Some(TensorType::new(DType::F32, [4, 8])));
            g.inputs.push(x);
            let c = g.add_const("e", Tensor::from_f32(&[1], &[e]));
            let y = add_node(&mut g, "Pow", vec![], &[x, c]);
            g.outputs.push(y);
            super::super::run(&mut g, super::super::PIPELINE).unwrap();
            assert_eq!(ops(&g), want, "exponent {e}");
            assert_eq!(g.ty(g.outputs[0]).shape, [4, 8]);
        }
    }

    #[test]
    fn division_by_a_constant_is_a_product_by_its_reciprocal() {
        // (divisor, ops after the pipeline): a scalar and a per-column vector become products;
        // a zero, an infinity and a divisor whose reciprocal overflows f32 keep the division.
        for (c, want) in [
            (&[1.5f32][..], "Mul"),
            (&[2.0, -4.0, 0.3, 8.0, 1.0, 3.0, 7.0, 0.1][..], "Mul"),
            (&[0.0][..], "Div"),
            (&[f32::INFINITY][..], "Div"),
            (&[1e-39][..], "Div"),
        ] {
            let mut g = Graph::new("t");
            let x = g.add_value("x", Some(TensorType::new(DType::F32, [4, 8])));
            g.inputs.push(x);
            let cv = g.add_const("c", Tensor::from_f32(&[c.len()], c));
            let y = add_node(&mut g, "Div", vec![], &[x, cv]);
            g.outputs.push(y);
            super::super::run(&mut g, super::super::PIPELINE).unwrap();
            assert_eq!(ops(&g), [want], "divisor {c:?}");
            if want == "Mul" {
                let r = g.konst(g.nodes[0].inputs[1].unwrap()).unwrap().to_f64();
                let exact: Vec<f64> = c.iter().map(|&v| (1.0 / v as f64) as f32 as f64).collect();
                assert_eq!(r, exact, "divisor {c:?}");
            }
        }
        // A divisor read as a variable stays a division.
        let mut g = Graph::new("t");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [4])));
        let d = g.add_value("d", Some(TensorType::new(DType::F32, [4])));
        g.inputs.extend([x, d]);
        let y = add_node(&mut g, "Div", vec![], &[x, d]);
        g.outputs.push(y);
        super::super::run(&mut g, super::super::PIPELINE).unwrap();
        assert_eq!(ops(&g), ["Div"]);
    }

    #[test]
    fn an_identity_that_is_a_graph_output_stays() {
        let mut g = Graph::new("t");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [3])));
        g.inputs.push(x);
        let i = add_node(&mut g, "Identity", vec![], &[x]);
        let r = add_node(&mut g, "Relu", vec![], &[i]);
        let j = add_node(&mut g, "Identity", vec![], &[r]);
        g.outputs.push(j);
        super::super::run(&mut g, super::super::PIPELINE).unwrap();
        assert_eq!(ops(&g), ["Relu", "Identity"]);
        assert_eq!(g.nodes[0].inputs[0], Some(x));
    }
}
