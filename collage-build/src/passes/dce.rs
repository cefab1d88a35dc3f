//! Dead-code elimination: drops nodes none of whose outputs reach a graph output.
use std::collections::HashSet;

use crate::error::Result;
use crate::ir::Graph;

/// Removes dead nodes.
pub fn run(g: &mut Graph) -> Result<()> {
    let mut live: HashSet<_> = g.outputs.iter().copied().collect();
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if n.outputs.iter().any(|o| live.contains(o)) {
            keep[i] = true;
            live.extend(n.inputs.iter().flatten().copied());
        }
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    Ok(())
}
