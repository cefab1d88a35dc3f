//! Einsums that are matrix products, as matrix products. An `Einsum` lowered as written is one
//! loop nest whose reduction reads its operands with whatever strides the equation gives
//! (`bik,bjk->bij` walks `B` across rows); as `Transpose`, `Reshape` and `MatMul` it is the
//! product every backend runs fast (library GEMMs, the register-blocked plan, which packs a
//! strided operand itself), with the permutations as copies or fused into their neighbours.
//! Equations that are not a product of two operands ([`einsum_as_matmul`]) stay as they are.

use crate::error::Result;
use crate::ir::{Graph, Node, Tensor, ValueId};
use crate::ops::misc::einsum_as_matmul;
use crate::ops::Attr;

use super::op;

/// Rewrites every two-operand `Einsum` that is a matrix product, then types the new values.
pub fn run(g: &mut Graph) -> Result<()> {
    super::replace_nodes(g, rewrite)
}

/// The nodes computing Einsum node `ni` as a matrix product (their values and constants added
/// to `g`); `None`, with nothing added, where it is not one.
fn rewrite(g: &mut Graph, ni: usize) -> Option<Vec<Node>> {
    let node = &g.nodes[ni];
    if node.op.op_type() != "Einsum" || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (a, b) = (node.inputs[0]?, node.inputs[1]?);
    let (ta, tb) = (g.value(a).ty.clone()?, g.value(b).ty.clone()?);
    let mm = einsum_as_matmul(node.op.as_ref(), &ta.shape, &tb.shape)?;
    let (name, y) = (node.name.clone(), node.outputs[0]);
    let matmul = op("MatMul", vec![], 2)?;
    let prod = |v: &[usize]| v.iter().product::<usize>();
    let bsz = prod(&mm.batch);
    let mut nodes = Vec::new();
    let mut n_values = 0;
    // `x` permuted by `perm` then reshaped to `shape`, skipping the steps that change nothing.
    let mut arrange = |g: &mut Graph,
                       nodes: &mut Vec<Node>,
                       x: ValueId,
                       from: &[usize],
                       perm: &[usize],
                       shape: Vec<usize>|
     -> Option<ValueId> {
        let mut x = x;
        if perm.iter().enumerate().any(|(i, &p)| i != p) {
            let t = op(
                "Transpose",
                vec![("perm", Attr::Ints(perm.iter().map(|&p| p as i64).collect()))],
                1,
            )?;
            n_values += 1;
            let v = g.add_value(format!("{name}_einsum_{n_values}"), None);
            nodes.push(Node {
                name: format!("{name}_transpose_{n_values}"),
                op: t,
                inputs: vec![Some(x)],
                outputs: vec![v],
            });
            x = v;
        }
        let permuted: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
        if permuted != shape {
            let r = op("Reshape", vec![], 2)?;
            n_values += 1;
            let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            let s = g.add_const(
                format!("{name}_einsum_shape_{n_values}"),
                Tensor::from_i64(&[dims.len()], &dims),
            );
            let v = g.add_value(format!("{name}_einsum_{n_values}"), None);
            nodes.push(Node {
                name: format!("{name}_reshape_{n_values}"),
                op: r,
                inputs: vec![Some(x), Some(s)],
                outputs: vec![v],
            });
            x = v;
        }
        Some(x)
    };
    let (m, n, k) = (prod(&mm.m), prod(&mm.n), prod(&mm.k));
    // Without batch labels the product is of matrices.
    let three = |x: usize, z: usize| -> Vec<usize> {
        if mm.batch.is_empty() {
            vec![x, z]
        } else {
            vec![bsz, x, z]
        }
    };
    let a2 = arrange(g, &mut nodes, a, &ta.shape, &mm.perm_a, three(m, k))?;
    let b2 = arrange(g, &mut nodes, b, &tb.shape, &mm.perm_b, three(k, n))?;
    let c = g.add_value(format!("{name}_einsum_product"), None);
    nodes.push(Node {
        name: format!("{name}_matmul"),
        op: matmul,
        inputs: vec![Some(a2), Some(b2)],
        outputs: vec![c],
    });
    let mid: Vec<usize> = mm.batch.iter().chain(&mm.m).chain(&mm.n).copied().collect();
    let out: Vec<usize> = mm.out_perm.iter().map(|&p| mid[p]).collect();
    let product = three(m, n);
    let identity: Vec<usize> = (0..product.len()).collect();
    let c2 = arrange(g, &mut nodes, c, &product, &identity, mid.clone())?;
    let c3 = arrange(g, &mut nodes, c2, &mid, &mm.out_perm, out)?;
    // The last node writes the Einsum's own output.
    match nodes.last_mut() {
        Some(last) if last.outputs[0] == c3 => last.outputs[0] = y,
        _ => return None,
    }
    Some(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::misc::EinsumMatMul;
    use crate::ops::{lookup, Attrs, OpCx};

    fn einsum(eq: &str, a: &[usize], b: &[usize]) -> Option<EinsumMatMul> {
        let attrs = Attrs(
            [("equation".to_string(), Attr::Str(eq.into()))]
                .into_iter()
                .collect(),
        );
        let op = lookup("Einsum").unwrap()(&OpCx {
            attrs: &attrs,
            opset: 18,
            n_inputs: 2,
            n_outputs: 1,
        })
        .unwrap();
        einsum_as_matmul(op.as_ref(), a, b)
    }

    #[test]
    fn products_are_found_and_the_rest_left_alone() {
        let mm = einsum("bhqd,hkd->bqhk", &[2, 3, 4, 5], &[3, 6, 5]).unwrap();
        // Batch h; m: b, q (the output's order); n: k; contracted d.
        assert_eq!(mm.batch, vec![3]);
        assert_eq!(mm.m, vec![2, 4]);
        assert_eq!(mm.n, vec![6]);
        assert_eq!(mm.k, vec![5]);
        assert_eq!(mm.perm_a, vec![1, 0, 2, 3]);
        assert_eq!(mm.perm_b, vec![0, 2, 1]);
        // [h, b, q, k] to [b, q, h, k].
        assert_eq!(mm.out_perm, vec![1, 2, 0, 3]);
        let plain = einsum("ij,jk->ik", &[5, 7], &[7, 9]).unwrap();
        assert_eq!((plain.perm_a, plain.perm_b), (vec![0, 1], vec![0, 1]));
        // A diagonal, a sum within one operand, a dot product, an outer product, a broadcast.
        assert_eq!(einsum("ii,ij->ij", &[3, 3], &[3, 4]), None);
        assert_eq!(einsum("ij,jk->k", &[3, 4], &[4, 5]), None);
        assert_eq!(einsum("i,i->", &[3], &[3]), None);
        assert_eq!(einsum("i,j->ij", &[3], &[4]), None);
        assert_eq!(einsum("bij,bjk->bik", &[1, 3, 4], &[2, 4, 5]), None);
    }
}
