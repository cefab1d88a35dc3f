//! The `c` backend: C kernels generated from tensor expressions, compiled with the system C
//! compiler. Supports every registered operator.
use super::Backend;
use crate::ops::OpKind;
use crate::partition::rule::{Combiner, PartitionRule};
use crate::partition::sub_graph::SubGraphConfig;

/// Fill and stroke of the backend's nodes in `collage explain --html`.
pub const COLOUR: (&str, &str) = ("#dbe8f6", "#3b6ea8");

/// The backend (always available).
pub fn open() -> Result<Box<dyn Backend>, super::Unavailable> {
    Ok(Box::new(CBackend))
}

/// The default backend: C kernels generated from tensor expressions, compiled with the system C
/// compiler. Supports every registered operator.
#[derive(Debug, Default)]
pub struct CBackend;

impl Backend for CBackend {
    fn id(&self) -> super::BackendId {
        super::BackendId::C
    }

    fn supports(&self, op_type: &str, _kind: OpKind) -> bool {
        crate::ops::lookup(op_type).is_some() || crate::ops::INTERNAL.contains(&op_type)
    }

    /// Every operator on its own, and the fusions the code generator performs (elementwise
    /// epilogues of contractions, elementwise chains, injective producers), as single-exit
    /// sub-graphs up to 8 nodes deep.
    fn rule(&self) -> PartitionRule {
        let all = PartitionRule::kinds(&OpKind::ALL);
        let fused = PartitionRule::Combine {
            inner: Box::new(all),
            combiners: Combiner::fuse_ops(),
            max_depth: Some(8),
        };
        PartitionRule::only_valid(
            fused,
            SubGraphConfig {
                max_exits: Some(1),
                max_depth: Some(8),
                allow_taps: false,
            },
        )
    }
}
