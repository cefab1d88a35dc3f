//! BatchNorm folding: `BatchNormalization(Conv(x, W, b))` with constant parameters becomes
//! `Conv(x, W', b')` with `W' = W * s`, `b' = (b - mean) * s + beta`, `s = gamma / sqrt(var + eps)`.
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{DType, Graph, Tensor};
use crate::ops::nn::{batchnorm_epsilon, is_conv};

/// Folds every foldable BatchNormalization into its producing convolution.
pub fn run(g: &mut Graph) -> Result<()> {
    let consumers = g.consumers();
    let producers = g.producers();
    let mut remove = vec![false; g.nodes.len()];
    #[allow(clippy::needless_range_loop)] // nodes are re-borrowed mutably inside
    for bi in 0..g.nodes.len() {
        let Some(eps) = batchnorm_epsilon(g.nodes[bi].op.as_ref()) else {
            continue;
        };
        let bn = &g.nodes[bi];
        if bn.inputs.len() < 5 || bn.outputs.len() != 1 {
            continue;
        }
        let Some(x) = bn.inputs[0] else { continue };
        let params: Option<Vec<Arc<Tensor>>> = bn.inputs[1..5]
            .iter()
            .map(|v| v.and_then(|v| g.konst(v).cloned()))
            .collect();
        let Some(params) = params else { continue };
        let Some(&ci) = producers.get(&x) else {
            continue;
        };
        let conv = &g.nodes[ci];
        if !is_conv(conv.op.as_ref())
            || consumers.get(&x).map_or(0, |c| c.len()) != 1
            || g.outputs.contains(&x)
        {
            continue;
        }
        let Some(w) = conv
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|v| g.konst(v).cloned())
        else {
            continue;
        };
        if w.ty.dtype != DType::F32 || params.iter().any(|p| p.ty.dtype != DType::F32) {
            continue;
        }
        let cout = w.ty.shape[0];
        if params.iter().any(|p| p.numel() != cout) {
            continue;
        }
        let bias = match conv.inputs.get(2).copied().flatten() {
            Some(b) => match g.konst(b) {
                Some(t) => t.to_f64(),
                None => continue,
            },
            None => vec![0.0; cout],
        };
        let (gamma, beta, mean, var) = (
            params[0].to_f64(),
            params[1].to_f64(),
            params[2].to_f64(),
            params[3].to_f64(),
        );
        let s: Vec<f64> = (0..cout)
            .map(|c| gamma[c] / (var[c] + eps).sqrt())
            .collect();
        let per = w.numel() / cout.max(1);
        let mut nw = (*w).clone();
        for i in 0..w.numel() {
            nw.set_f64(i, (w.get_f64(i) as f32 * s[i / per] as f32) as f64);
        }
        let nb: Vec<f64> = (0..cout)
            .map(|c| (bias[c] - mean[c]) * s[c] + beta[c])
            .collect();
        let wname = format!("{}_bnfolded_w", g.nodes[ci].name);
        let bname = format!("{}_bnfolded_b", g.nodes[ci].name);
        let wv = g.add_const(wname, nw);
        let bv = g.add_const(bname, Tensor::from_f64_as(DType::F32, &[cout], &nb));
        let y = g.nodes[bi].outputs[0];
        let conv = &mut g.nodes[ci];
        conv.inputs.resize(3, None);
        conv.inputs[1] = Some(wv);
        conv.inputs[2] = Some(bv);
        conv.outputs[0] = y;
        remove[bi] = true;
    }
    super::drop_nodes(g, &remove);
    Ok(())
}
