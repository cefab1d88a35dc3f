//! Transposed convolutions as a product and a fold. A `ConvTranspose` lowered as written is a
//! gather: every output position sums over every input channel and kernel offset, of which only
//! one in `stride^2` lands, in a guarded scalar loop. Here `Y = ConvTranspose(X, W, B)` with
//! constant weights and one group becomes
//!
//! ```text
//! P = Conv(X, W')            W'[(m, kh, kw), c, 1, 1] = W[c, m, kh, kw]: a 1x1 convolution,
//!                            every input position times every (output channel, kernel offset)
//! Y = Col2Im(Reshape(P, [N, M*K, H*W]), image, kernel) (+ B): each output position sums the
//!                            few products that land on it
//! ```
//!
//! so that the multiply-adds are the useful ones, in a product every backend runs fast (dnnl's
//! convolutions, the generated register-blocked and channel plans), and the fold is a small
//! reduction over the kernel offsets (GEMM plus col2im, as Caffe and oneDNN's reference
//! deconvolution compute it). With stride 1 it is a convolution with the kernel flipped
//! ([`as_conv`]). Where the output is not Col2Im's image of exactly the input's positions
//! ([`conv_transpose_fold`]), the node stays as it is.

use crate::error::Result;
use crate::ir::{DType, Graph, Node, Tensor, ValueId};
use crate::ops::nn::conv_transpose_fold;
use crate::ops::Attr;

use super::op;

/// Rewrites every foldable `ConvTranspose` (module docs), then types the new values.
pub fn run(g: &mut Graph) -> Result<()> {
    super::replace_nodes(g, rewrite)
}

/// With stride 1 a transposed convolution is a convolution: `Y = Conv(X, W'', B)` with
/// `W''[m, c, i, j] = W[c, m, kh - 1 - i, kw - 1 - j]` (the kernel flipped, its channels
/// swapped) and pads `dilated kernel - 1 - pad` at each end, where those are not negative. One
/// node, no columns; `None` otherwise.
fn as_conv(
    g: &mut Graph,
    name: &str,
    x: ValueId,
    y: ValueId,
    w: &Tensor,
    bias: Option<&Tensor>,
    fold: &crate::ops::nn::DeconvFold,
) -> Option<Vec<Node>> {
    if fold.strides.iter().any(|&s| s != 1) {
        return None;
    }
    let r = fold.kernel.len();
    let mut pads = vec![0i64; 2 * r];
    for j in 0..r {
        let dk = fold.dilations[j] * (fold.kernel[j] as i64 - 1) + 1;
        pads[j] = dk - 1 - fold.pads[j];
        pads[r + j] = dk - 1 - fold.pads[r + j];
    }
    if pads.iter().any(|&p| p < 0) {
        return None;
    }
    let (c, m, kh, kw) = (w.ty.shape[0], w.ty.shape[1], w.ty.shape[2], w.ty.shape[3]);
    let mut wf = Tensor::from_f64_as(DType::F32, &[m, c, kh, kw], &vec![0.0; m * c * kh * kw]);
    for ci in 0..c {
        for mi in 0..m {
            for i in 0..kh {
                for j in 0..kw {
                    let from = ((ci * m + mi) * kh + (kh - 1 - i)) * kw + (kw - 1 - j);
                    wf.set_f64(((mi * c + ci) * kh + i) * kw + j, w.get_f64(from));
                }
            }
        }
    }
    let kernel: Vec<i64> = fold.kernel.iter().map(|&k| k as i64).collect();
    let conv = op(
        "Conv",
        vec![
            ("kernel_shape", Attr::Ints(kernel)),
            ("dilations", Attr::Ints(fold.dilations.clone())),
            ("pads", Attr::Ints(pads)),
        ],
        if bias.is_some() { 3 } else { 2 },
    )?;
    let mut inputs = vec![Some(x), Some(g.add_const(format!("{name}_deconv_w"), wf))];
    if let Some(b) = bias {
        inputs.push(Some(g.add_const(format!("{name}_deconv_b"), b.clone())));
    }
    Some(vec![Node {
        name: format!("{name}_conv"),
        op: conv,
        inputs,
        outputs: vec![y],
    }])
}

/// The nodes that compute node `ni` as a product and a fold, their values and constants added
/// to `g`; `None` (nothing added) where it is not a foldable `ConvTranspose` of f32 with
/// constant weights (and bias).
fn rewrite(g: &mut Graph, ni: usize) -> Option<Vec<Node>> {
    let super::ConstConv {
        name,
        x,
        xt,
        w,
        bias,
        y,
    } = super::const_conv(g, ni, "ConvTranspose")?;
    if xt.rank() != 4 || w.ty.rank() != 4 {
        return None;
    }
    let node_op = g.nodes[ni].op.as_ref();
    let fold = conv_transpose_fold(node_op, &xt.shape[2..], &w.ty.shape[2..])?;
    let (n, c, h, wd) = (xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]);
    let (m, kh, kw) = (w.ty.shape[1], w.ty.shape[2], w.ty.shape[3]);
    let k = kh * kw;
    let ints = |v: &[i64]| Attr::Ints(v.to_vec());
    if let Some(nodes) = as_conv(g, &name, x, y, &w, bias.as_deref(), &fold) {
        return Some(nodes);
    }
    let conv = op("Conv", vec![("kernel_shape", ints(&[1, 1]))], 2)?;
    let reshape = op("Reshape", vec![], 2)?;
    let col2im = op(
        "Col2Im",
        vec![
            ("dilations", ints(&fold.dilations)),
            ("pads", ints(&fold.pads)),
            ("strides", ints(&fold.strides)),
        ],
        3,
    )?;
    let add = op("Add", vec![], 2)?;
    // W'[(m, kh, kw), c] = W[c, (m, kh, kw)].
    let mut wt = Tensor::from_f64_as(DType::F32, &[m * k, c, 1, 1], &vec![0.0; m * k * c]);
    for ci in 0..c {
        for j in 0..m * k {
            wt.set_f64(j * c + ci, w.get_f64(ci * m * k + j));
        }
    }
    let dims = |v: &[usize]| -> Vec<i64> { v.iter().map(|&d| d as i64).collect() };
    let wv = g.add_const(format!("{name}_deconv_w"), wt);
    let shape = g.add_const(
        format!("{name}_deconv_shape"),
        Tensor::from_i64(&[3], &dims(&[n, m * k, h * wd])),
    );
    let image = g.add_const(
        format!("{name}_deconv_image"),
        Tensor::from_i64(&[2], &dims(&fold.image)),
    );
    let block = g.add_const(
        format!("{name}_deconv_block"),
        Tensor::from_i64(&[2], &dims(&fold.kernel)),
    );
    let p = g.add_value(format!("{name}_deconv_product"), None);
    let cols = g.add_value(format!("{name}_deconv_columns"), None);
    let node = |name: String, op, inputs: Vec<ValueId>, out: ValueId| Node {
        name,
        op,
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: vec![out],
    };
    let mut nodes = vec![
        node(format!("{name}_product"), conv, vec![x, wv], p),
        node(format!("{name}_columns"), reshape, vec![p, shape], cols),
    ];
    match bias {
        None => nodes.push(node(
            format!("{name}_fold"),
            col2im,
            vec![cols, image, block],
            y,
        )),
        Some(b) => {
            let folded = g.add_value(format!("{name}_deconv_folded"), None);
            let mut b3 = (*b).clone();
            b3.ty.shape = vec![m, 1, 1];
            let bv = g.add_const(format!("{name}_deconv_bias"), b3);
            nodes.push(node(
                format!("{name}_fold"),
                col2im,
                vec![cols, image, block],
                folded,
            ));
            nodes.push(node(format!("{name}_bias"), add, vec![folded, bv], y));
        }
    }
    Some(nodes)
}
