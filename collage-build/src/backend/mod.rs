//! Backends: who can run which sub-graph. Each backend lives in its own folder and states its
//! capability only as a [`PartitionRule`] (plus whether it is usable on this machine); the
//! placement search (`partition::place`) chooses among the candidates of all of them.
//!
//! - `c`: C kernels generated from tensor expressions (always available);
//! - `gemm`: matrix products by the pure-Rust `gemm` crate, called back through the runtime;
//! - `blas`: matrix products by a system CBLAS (OpenBLAS), feature `blas`, detected at build time;
//! - `dnnl`: oneDNN, feature `dnnl`, detected at build time.
use crate::error::{Error, Result};
use crate::ops::OpKind;
use crate::partition::rule::PartitionRule;
use crate::schedule::Location;
pub use crate::te::BackendId;
use crate::te::{BufId, Expr, Program, Stage};

pub use c::CBackend;
pub use gemm::GemmLibrary;

/// A code-generation or library backend.
pub trait Backend: std::fmt::Debug + Send + Sync {
    /// The backend's id (its name on the command line: `c`, `gemm`, ...).
    fn id(&self) -> BackendId;
    /// The backend's name (its id's).
    fn name(&self) -> &'static str {
        self.id().name()
    }
    /// Whether the backend can run an operator of this type and kind (for `--greedy`).
    fn supports(&self, op_type: &str, kind: OpKind) -> bool;
    /// The sub-graphs the backend can run as one kernel, as a partition rule.
    fn rule(&self) -> PartitionRule;
    /// Whether the backend's contraction stages are library calls (`Exec::Library`).
    fn library(&self) -> bool {
        false
    }
    /// The C helpers generated code calls on this backend (behind an include guard), emitted
    /// once per translation unit that has one of its calls.
    fn c_prelude(&self) -> &'static str {
        ""
    }
    /// The libraries generated code with one of its calls links (`-l<name>`).
    fn links(&self) -> &'static [&'static str] {
        &[]
    }
    /// For GEMM libraries: the C function computing one block of a product, with the signature
    /// of `collage_rt::sgemm` (`m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc`).
    fn gemm_fn(&self) -> Option<&'static str> {
        None
    }
    /// For GEMM libraries: whether the block GEMM function takes any operand strides (else, as
    /// BLAS interfaces, one unit stride per operand and a leading dimension).
    fn any_strides(&self) -> bool {
        false
    }
    /// The analytic single-thread cost of a library call computing `st`, microseconds, besides
    /// the call's fixed cost and the in-place epilogue; `None`: a GEMM library's rate
    /// (`tune::price::estimate_us`).
    fn call_estimate_us(&self, _st: &Stage) -> Option<f64> {
        None
    }
    /// Whether a node with a window form ([`crate::ops::Operator::window`]: convolution,
    /// pooling) is lowered to one window call on this backend.
    fn takes_windows(&self) -> bool {
        false
    }
    /// The C of `p`'s window calls on this backend (`symbol`: the model's C symbol), for
    /// backends that [take windows](Backend::takes_windows).
    fn window_calls<'a>(
        &self,
        _p: &'a Program,
        _symbol: &'a str,
    ) -> Option<Box<dyn WindowCalls + 'a>> {
        None
    }
}

/// The C of one program's window calls on a library backend (primitives created once per model
/// instance). A program has them on one backend at most: its instance state is that backend's.
pub trait WindowCalls {
    /// The unit's C after the preludes: the backend's helpers and the program's primitive table.
    fn emit_unit(&self, out: &mut String);
    /// Defines `static void {fname}(const collage_rt *rt, collage_ctx *ctx)` computing window
    /// stage `id`; returns what of its finalize the call does not take (run in place after it).
    fn emit_call(
        &self,
        out: &mut String,
        locs: &[Location],
        id: BufId,
        fname: &str,
    ) -> Option<Expr>;
    /// What of window stage `id`'s finalize its call does not take (what
    /// [`emit_call`](WindowCalls::emit_call) returns), for the plan of its in-place epilogue.
    fn epilogue(&self, id: BufId) -> Option<Expr>;
    /// Statements at the start of the entry point `collage_<symbol>_run`.
    fn emit_entry(&self, out: &mut String);
}

impl dyn WindowCalls + '_ {
    /// [`WindowCalls::epilogue`] of every window stage of `p`, by buffer.
    pub fn epilogues(&self, p: &Program) -> std::collections::HashMap<BufId, Option<Expr>> {
        p.buf_ids()
            .filter(|&b| p.stage(b).is_some_and(|st| st.exec.window().is_some()))
            .map(|b| (b, self.epilogue(b)))
            .collect()
    }
}

/// Declares the backend folders of [`te::backend_list`](crate::te): one module per line of the
/// list, and [`BackendId`]'s arms that need the folder (`colour`, `lookup`).
macro_rules! backend_folders {
    ($($(#[$doc:meta])* $id:ident => $folder:ident,)*) => {
        $(pub mod $folder;)*

        impl BackendId {
            /// Fill and stroke of the backend's nodes in `collage explain --html`.
            pub fn colour(self) -> (&'static str, &'static str) {
                match self {
                    $(BackendId::$id => $folder::COLOUR,)*
                }
            }

            /// The backend, or why it cannot be used: compiled out (its Cargo feature is off) or
            /// not available on this machine (its library does not link here). An exhaustive
            /// match, so a new id cannot be forgotten.
            pub fn lookup(self) -> std::result::Result<Box<dyn Backend>, Unavailable> {
                match self {
                    $(BackendId::$id => $folder::open(),)*
                }
            }
        }
    };
}

crate::te::backend_list!(backend_folders);

/// An optional backend's `open`: compiled in (`compiled`: its Cargo feature, named like the
/// backend), then usable here (`available`), then made.
pub(crate) fn optional(
    backend: BackendId,
    compiled: bool,
    available: fn() -> bool,
    make: fn() -> Box<dyn Backend>,
    needs: &'static str,
) -> std::result::Result<Box<dyn Backend>, Unavailable> {
    if !compiled {
        Err(Unavailable::Disabled {
            backend,
            feature: backend.name(),
        })
    } else if available() {
        Ok(make())
    } else {
        Err(Unavailable::NotHere { backend, needs })
    }
}

/// Why a known backend cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Compiled out: `collage-build` was built without the backend's Cargo feature.
    Disabled {
        /// The backend.
        backend: BackendId,
        /// The feature that enables it.
        feature: &'static str,
    },
    /// Compiled in, but its library does not work on this machine (or it was turned off with
    /// its `COLLAGE_NO_*` variable).
    NotHere {
        /// The backend.
        backend: BackendId,
        /// What it needs, for the message.
        needs: &'static str,
    },
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Disabled { backend, feature } => write!(
                f,
                "backend `{backend}` is disabled at build time (build collage-build with its `{feature}` feature)"
            ),
            Unavailable::NotHere { backend, needs } => write!(
                f,
                "backend `{backend}` is not available on this machine (it needs {needs})"
            ),
        }
    }
}

/// The backends available in this build and on this machine.
pub fn available() -> Vec<Box<dyn Backend>> {
    BackendId::ALL
        .iter()
        .filter_map(|b| b.lookup().ok())
        .collect()
}

/// The backends named in `list` (comma-separated, in priority order), or every available one for
/// an empty list. Unknown or unavailable names are an error naming what is available.
pub fn select(list: &str) -> Result<Vec<Box<dyn Backend>>> {
    let names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(available());
    }
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    let mut bad = Vec::new();
    for n in names {
        match BackendId::from_name(n).map(BackendId::lookup) {
            Some(Ok(b)) if !out.iter().any(|x| x.name() == n) => out.push(b),
            Some(Ok(_)) => {}
            Some(Err(why)) => bad.push(why.to_string()),
            None => {
                let known: Vec<&str> = BackendId::ALL.iter().map(|b| b.name()).collect();
                bad.push(format!(
                    "unknown backend `{n}` (known: {})",
                    known.join(", ")
                ))
            }
        }
    }
    if !bad.is_empty() {
        let have: Vec<&str> = available().iter().map(|b| b.name()).collect();
        return Err(Error::Usage(format!(
            "{}; available here: {}",
            bad.join("; "),
            have.join(", ")
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_disabled_and_missing_backends_are_distinct_errors() {
        let e = select("c,cuda").unwrap_err().to_string();
        let known: Vec<&str> = BackendId::ALL.iter().map(|b| b.name()).collect();
        assert!(
            e.contains(&format!(
                "unknown backend `cuda` (known: {})",
                known.join(", ")
            )),
            "{e}"
        );
        for &id in BackendId::ALL {
            assert_eq!(BackendId::from_name(id.name()), Some(id));
            // Every registered backend opens, or says which of the two reasons stops it; a
            // disabled one names its feature, which is named like the backend.
            match id.lookup() {
                Ok(b) => assert_eq!(b.id(), id),
                Err(why @ Unavailable::Disabled { backend, feature }) => {
                    assert_eq!((backend, feature), (id, id.name()));
                    assert_eq!(
                        why.to_string(),
                        format!(
                            "backend `{id}` is disabled at build time (build collage-build with its `{id}` feature)"
                        )
                    );
                    let e = select(id.name()).unwrap_err().to_string();
                    assert!(e.contains("disabled at build time"), "{e}");
                }
                Err(why @ Unavailable::NotHere { backend, .. }) => {
                    assert_eq!(backend, id);
                    assert!(why.to_string().starts_with(&format!(
                        "backend `{id}` is not available on this machine (it needs "
                    )));
                }
            }
        }
        assert!(BackendId::C.lookup().is_ok());
    }
}
