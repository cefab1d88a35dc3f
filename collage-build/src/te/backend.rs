//! The backends this compiler knows, by id: how the tensor-expression IR (`Exec::Library`),
//! placements and the generated code name them. The list is here, below everything that names a
//! backend; each backend's code lives in its folder `backend/<name>/`, which the backend room
//! declares from the same list.

/// The backend list: one line per backend folder, `Id => folder`, in the default priority order.
/// Calls `$then!` with the list; `te` makes [`BackendId`] of it and the backend room its modules
/// (each folder defines `COLOUR` and `open()`). The backend's name on the command line and in
/// caches is the folder's name.
macro_rules! backend_list {
    ($then:ident) => {
        $then! {
            /// Generated C kernels.
            C => c,
            /// The pure-Rust `gemm` crate.
            Gemm => gemm,
            /// A system CBLAS (OpenBLAS).
            Blas => blas,
            /// oneDNN.
            Dnnl => dnnl,
        }
    };
}
pub(crate) use backend_list;

macro_rules! backend_ids {
    ($($(#[$doc:meta])* $id:ident => $folder:ident,)*) => {
        /// A backend this compiler knows, whether or not it is compiled in or usable here: how
        /// the tensor-expression IR (`te::Exec::Library`), placements and the generated code
        /// name backends.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BackendId {
            $($(#[$doc])* $id,)*
        }

        impl BackendId {
            /// Every backend, in the default priority order.
            pub const ALL: &'static [BackendId] = &[$(BackendId::$id,)*];

            /// The short name used on the command line and in caches (the folder's name).
            pub fn name(self) -> &'static str {
                match self {
                    $(BackendId::$id => stringify!($folder),)*
                }
            }
        }
    };
}

backend_list!(backend_ids);

impl BackendId {
    /// The backend named `name`, if this compiler knows it.
    pub fn from_name(name: &str) -> Option<BackendId> {
        BackendId::ALL.iter().copied().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}
