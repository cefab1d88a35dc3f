//! The IR verifier: run after every pass.
use std::collections::HashSet;

use super::Graph;
use crate::error::{Error, Result};

/// Checks that every node reads values that are inputs, constants or outputs of earlier nodes, that
/// every value is defined once, and that every defined value has a type.
pub fn verify(g: &Graph, pass: &'static str) -> Result<()> {
    let bad = |detail: String| Err(Error::Verify { pass, detail });
    let mut defined: HashSet<_> = g.inputs.iter().copied().collect();
    for (i, v) in g.values.iter().enumerate() {
        if v.konst.is_some() {
            defined.insert(super::ValueId(i as u32));
        }
    }
    for n in &g.nodes {
        for v in n.inputs.iter().flatten() {
            if !defined.contains(v) {
                return bad(format!("node {:?} reads {v} before it is defined", n.name));
            }
        }
        for &o in &n.outputs {
            if !defined.insert(o) {
                return bad(format!("node {:?} redefines {o}", n.name));
            }
            if pass != "import" && g.value(o).ty.is_none() {
                return bad(format!("node {:?}: output {o} has no type", n.name));
            }
        }
    }
    for &o in &g.outputs {
        if !defined.contains(&o) {
            return bad(format!("graph output {o} is never defined"));
        }
    }
    Ok(())
}
