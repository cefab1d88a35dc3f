//! 3x3 stride-1 convolutions as Winograd F(m x m, 3x3) ([`crate::ops::winograd`]): a `Conv` of
//! f32 with constant weights (and bias), one group, and enough tiles and channels that the
//! product of the transformed operands dominates becomes one `WinogradConv` node whose weight
//! is the transformed kernel `U = G g G^T`, computed here at build time.
//!
//! Where it applies: at least [`MIN_CHANNELS`] input and output channels (the transforms are
//! per channel, the products per pair of channels), and, for the tile chosen ([`choose`]: 4x4
//! outputs, 4x fewer multiplications, else 2x2, 2.25x fewer), at least [`MIN_TILES`] output
//! tiles (below that the transforms' copies cost more than the multiplications save) and a
//! transformed kernel of at most [`MAX_U_BYTES`] (it is `(m + 2)^2 / 9` times the weights, read
//! once per run: larger ones are a stream from memory where the direct plans keep their weights
//! in cache). ResNet-18's 56x56 and 28x28 layers take 4x4 tiles, its 14x14 layers 2x2, its 7x7
//! layers neither.
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{DType, Graph, Node, Tensor};
use crate::ops::nn::winograd_geometry;
use crate::ops::winograd::{transform_kernel, Tables, WinogradConv, F2, F4};

/// The fewest output tiles in one image a convolution is computed on as Winograd.
pub const MIN_TILES: usize = 36;
/// The fewest input and output channels.
pub const MIN_CHANNELS: usize = 16;
/// The largest transformed kernel, in bytes.
pub const MAX_U_BYTES: usize = 8 << 20;

/// Rewrites every eligible `Conv` (module docs), then types the new values.
pub fn run(g: &mut Graph) -> Result<()> {
    super::replace_nodes(g, |g, ni| rewrite(g, ni, MIN_TILES))
}

/// [`run`] whatever the number of tiles: the choice of a model served over a range of sizes
/// (`Build::dim_range`), which must be the same at every size of the range.
pub fn run_any_size(g: &mut Graph) -> Result<()> {
    super::replace_nodes(g, |g, ni| rewrite(g, ni, 0))
}

/// The larger tile that has [`MIN_TILES`] tiles in one image of outputs of size `out` and a
/// transformed kernel of at most [`MAX_U_BYTES`] for `c -> co` channels: F(4x4, 3x3), else
/// F(2x2, 3x3), else none. Per image, not over the batch: the variants of a model built at
/// several batch sizes then transform their weights alike and share them.
fn choose(out: [usize; 2], c: usize, co: usize, min_tiles: usize) -> Option<Tables> {
    [F4, F2].into_iter().find(|f| {
        let tiles = out[0].div_ceil(f.tile) * out[1].div_ceil(f.tile);
        tiles >= min_tiles && f.alpha() * f.alpha() * c * co * 4 <= MAX_U_BYTES
    })
}

fn rewrite(g: &mut Graph, ni: usize, min_tiles: usize) -> Option<Vec<Node>> {
    let super::ConstConv {
        name,
        x,
        xt,
        w,
        bias,
        y,
    } = super::const_conv(g, ni, "Conv")?;
    let node = &g.nodes[ni];
    let (pads, out) = winograd_geometry(node.op.as_ref(), &xt, &w.ty)?;
    let (c, co) = (xt.shape[1], w.ty.shape[0]);
    if c < MIN_CHANNELS || co < MIN_CHANNELS {
        return None;
    }
    let f = choose(out, c, co, min_tiles)?;
    let a = f.alpha();
    let wv: Vec<f64> = (0..w.ty.numel()).map(|k| w.get_f64(k)).collect();
    let u = Tensor::from_f64_as(
        DType::F32,
        &[a * a, c, co],
        &transform_kernel(&f, &wv, co, c),
    );
    let table = |rows: &[&[f64]]| {
        let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter()).copied().collect();
        Tensor::from_f64_as(DType::F32, &[rows.len(), a], &flat)
    };
    let inputs = vec![
        Some(x),
        Some(g.add_const(format!("{name}_winograd_u"), u)),
        bias.map(|b| g.add_const(format!("{name}_winograd_b"), (*b).clone())),
        Some(g.add_const(format!("{name}_winograd_bt"), table(f.bt))),
        Some(g.add_const(format!("{name}_winograd_at"), table(f.at))),
    ];
    Some(vec![Node {
        name: format!("{name}_winograd"),
        op: Arc::new(WinogradConv {
            tile: f.tile,
            pads,
            out,
        }),
        inputs,
        outputs: vec![y],
    }])
}
