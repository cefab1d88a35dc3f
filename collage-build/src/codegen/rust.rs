//! The Rust glue of a compiled model: a `Model` type whose `run` takes and returns fixed-size
//! arrays (shapes and dtypes are part of the types), the embedded weights, and the `extern "C"`
//! declaration of the generated entry point.
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::{Compiled, Io};
use crate::ir::TensorType;

/// The nested-array Rust type of a tensor: `f32[1, 10]` → `[[f32; 10]; 1]`; a scalar is `f32`.
pub fn array_type(ty: &TensorType) -> TokenStream {
    let elem = format_ident!("{}", ty.dtype.rust_type());
    let mut t = quote!(#elem);
    for &d in ty.shape.iter().rev() {
        let d = Literal::usize_unsuffixed(d);
        t = quote!([#t; #d]);
    }
    t
}

/// A Rust identifier for an input name (`input_<i>` when the name makes none, e.g. a keyword).
fn ident_for(name: &str, i: usize) -> proc_macro2::Ident {
    let s = crate::ir::sanitize(name);
    match syn::parse_str::<syn::Ident>(&s) {
        Ok(_) => format_ident!("{}", s),
        Err(_) => format_ident!("input_{}", i),
    }
}

/// A distinct Rust identifier for each input.
fn input_idents(inputs: &[Io]) -> Vec<proc_macro2::Ident> {
    let mut seen = std::collections::HashSet::new();
    inputs
        .iter()
        .enumerate()
        .map(|(i, io)| {
            let mut id = ident_for(&io.name, i);
            if !seen.insert(id.to_string()) {
                id = format_ident!("input_{}", i);
            }
            id
        })
        .collect()
}

fn io_doc(ios: &[Io]) -> String {
    ios.iter()
        .map(|io| format!("`{}`: {}", io.name, io.ty))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The glue source. `weights_file` is the weight blob's file name inside `$OUT_DIR/collage/`.
pub fn emit(c: &Compiled, weights_file: &str) -> String {
    emit_variants(&c.name, &[(None, c)], c.weights.len(), weights_file)
}

/// One variant's part of the glue: its entry points, its library state, and its methods.
struct VariantGlue {
    decls: TokenStream,
    field: TokenStream,
    init: TokenStream,
    methods: TokenStream,
    doc: String,
}

/// The glue of one model compiled at several sizes of a dimension (`Build::variants`), or of
/// one model (`suffix` `None`): one `Model` type whose arena holds the largest variant, one weight
/// blob (`weights_len` bytes in `weights_file`) the variants share, and per variant `run_<suffix>`
/// / `run_in_<suffix>` (`run` / `run_in` for the one model).
pub fn emit_variants(
    name: &str,
    variants: &[(Option<&str>, &Compiled)],
    weights_len: usize,
    weights_file: &str,
) -> String {
    let arena_size = variants
        .iter()
        .map(|(_, c)| c.arena_size)
        .max()
        .unwrap_or(0);
    let glue: Vec<VariantGlue> = variants
        .iter()
        .map(|(suffix, c)| variant_glue(*suffix, c))
        .collect();
    let doc = if variants.len() == 1 && variants[0].0.is_none() {
        format!(
            " Model `{name}` compiled ahead of time by collage-build.\n\n{}\n\n `run` performs no heap allocation; the activation arena ({arena_size} bytes) is allocated once by `new`.",
            glue[0].doc
        )
    } else {
        format!(
            " Model `{name}` compiled ahead of time by collage-build, once per size of a dimension: one `run_<size>` method per variant, sharing one activation arena ({arena_size} bytes, the largest variant's, allocated once by `new`) and one copy of the weights.\n\n{}",
            glue.iter().map(|g| g.doc.as_str()).collect::<Vec<_>>().join("\n\n")
        )
    };
    emit_glue(name, &glue, &doc, arena_size, weights_len, weights_file)
}

/// The `Model` type of `glue` (its variants' entry points and methods) over one arena of
/// `arena_size` bytes and one weight blob.
fn emit_glue(
    name: &str,
    glue: &[VariantGlue],
    doc: &str,
    arena_size: usize,
    weights_len: usize,
    weights_file: &str,
) -> String {
    let arena = Literal::usize_unsuffixed(arena_size);
    let wlen = Literal::usize_unsuffixed(weights_len);
    let wpath = format!("/collage/{weights_file}");
    let decls = glue.iter().map(|g| &g.decls);
    let fields = glue.iter().map(|g| &g.field);
    let inits = glue.iter().map(|g| &g.init);
    let methods = glue.iter().map(|g| &g.methods);
    let tokens = quote! {
        #[doc = #doc]
        #[allow(dead_code)]
        pub struct Model {
            arena: ::collage::runtime::Arena,
            exec: ::collage::runtime::Executor,
            #(#fields)*
        }

        /// The activation arena of [`Model`] as a fixed-size buffer, for its `run_in` methods.
        #[allow(dead_code)]
        pub type ArenaBuf = ::collage::runtime::Aligned<[u8; Model::ARENA_SIZE]>;

        static WEIGHTS: ::collage::runtime::Aligned<[u8; #wlen]> =
            ::collage::runtime::Aligned(*include_bytes!(concat!(env!("OUT_DIR"), #wpath)));

        // SAFETY: the declarations match the generated C definitions compiled into this crate.
        unsafe extern "C" {
            #(#decls)*
        }

        // Every public item is optional API: a crate may use `run` or `run_in`, `new` or
        // `with_threads`, and none of them is dead code of the user's. A model's inputs and
        // outputs are its signature, however many and however nested.
        #[allow(dead_code, clippy::too_many_arguments, clippy::type_complexity)]
        impl Model {
            /// Bytes of activation memory one instance uses.
            pub const ARENA_SIZE: usize = #arena;

            /// A model instance whose loops run on the calling thread.
            pub fn new() -> Self {
                Self::with_threads(1)
            }

            /// A model instance whose loops run on `threads` threads (the caller included).
            pub fn with_threads(threads: usize) -> Self {
                Self::with_executor(::collage::runtime::Executor::with_threads(threads))
            }

            /// A model instance whose loops run on `exec`: e.g. `Executor::Shared(pool)`, a
            /// thread pool several models share.
            pub fn with_executor(exec: ::collage::runtime::Executor) -> Self {
                Model { arena: ::collage::runtime::Arena::new(Self::ARENA_SIZE), #(#inits)* exec }
            }

            #(#methods)*
        }

        impl Default for Model {
            fn default() -> Self {
                Self::new()
            }
        }
    };
    let file: syn::File = syn::parse2(tokens).expect("generated glue parses");
    format!(
        "// @generated by collage-build {} for model {:?}. Do not edit.\n\n{}",
        env!("CARGO_PKG_VERSION"),
        name,
        prettyplease::unparse(&file)
    )
}

fn variant_glue(suffix: Option<&str>, c: &Compiled) -> VariantGlue {
    let tail = suffix.map_or(String::new(), |s| format!("_{s}"));
    let run = format_ident!("run{}", tail);
    let run_in = format_ident!("run_in{}", tail);
    let run_raw = format_ident!("run_raw{}", tail);
    let lib = format_ident!("lib{}", tail);
    let run_sym = format_ident!("collage_{}_run", c.symbol);
    let names = input_idents(&c.inputs);
    let in_tys: Vec<_> = c.inputs.iter().map(|io| array_type(&io.ty)).collect();
    let out_tys: Vec<_> = c.outputs.iter().map(|io| array_type(&io.ty)).collect();
    let out_offs: Vec<_> = c
        .outputs
        .iter()
        .map(|io| Literal::usize_unsuffixed(io.offset))
        .collect();
    let n_in = Literal::usize_unsuffixed(c.inputs.len());
    let (ret_ty, ret_ty_a, ret_val) = if c.outputs.len() == 1 {
        let t = &out_tys[0];
        let o = &out_offs[0];
        (
            quote!(&#t),
            quote!(&'a #t),
            quote!(unsafe { &*(arena.add(#o) as *const #t) }),
        )
    } else {
        (
            quote!((#(&#out_tys),*)),
            quote!((#(&'a #out_tys),*)),
            quote!((#(unsafe { &*(arena.add(#out_offs) as *const #out_tys) }),*)),
        )
    };
    let doc = format!(
        " {}Inputs: {}.\n Outputs: {}.",
        suffix.map_or(String::new(), |_| format!("`{run}`: ")),
        io_doc(&c.inputs),
        io_doc(&c.outputs),
    );
    // Library primitives (window calls) live in a per-instance state created with the model
    // (`backend::WindowCalls`).
    let has_lib =
        c.program.bufs.iter().any(
            |b| matches!(&b.kind, crate::te::BufKind::Stage(st) if st.exec.window().is_some()),
        );
    let lib_new = format_ident!("collage_{}_lib_new", c.symbol);
    let lib_free = format_ident!("collage_{}_lib_free", c.symbol);
    let (field, lib_decl, init, lib_set) = if has_lib {
        (
            quote!(#lib: ::collage::runtime::Library,),
            quote! {
                fn #lib_new(rt: *const ::collage::runtime::RawRt) -> *mut ::core::ffi::c_void;
                fn #lib_free(lib: *mut ::core::ffi::c_void);
            },
            quote! {
                // SAFETY: the constructor and destructor were generated together for this model.
                #lib: unsafe { ::collage::runtime::Library::new(#lib_new(&exec.raw()), #lib_free) },
            },
            quote! {
                let mut rt = self.exec.raw();
                rt.lib = self.#lib.as_ptr();
            },
        )
    } else {
        (
            quote!(),
            quote!(),
            quote!(),
            quote!(let rt = self.exec.raw();),
        )
    };
    let run_doc = match suffix {
        None => " Runs the model. The outputs borrow the model until the next call.".to_string(),
        Some(s) => format!(
            " Runs the model's variant `{s}`. The outputs borrow the model until the next call."
        ),
    };
    let run_in_doc: &[&str] = if has_lib {
        &[
            " Runs the model serially in a caller-provided arena. This model uses oneDNN primitives:",
            " without an instance they are shared by the process, created by the first call and used",
            " under a lock; `run` on an instance from `new` creates nothing.",
        ]
    } else {
        &[
            " Runs the model serially in a caller-provided arena (no allocation at all, e.g. a",
            " `static` buffer on an embedded target).",
        ]
    };
    let methods = quote! {
        #[doc = #run_doc]
        pub fn #run(&mut self, #(#names: &#in_tys),*) -> #ret_ty {
            #lib_set
            let arena = self.arena.as_mut_ptr();
            // SAFETY: the arena holds ARENA_SIZE bytes and the inputs have the compiled types.
            unsafe { Self::#run_raw(&rt, arena, #(#names),*) }
        }

        #(#[doc = #run_in_doc])*
        pub fn #run_in<'a>(arena: &'a mut ArenaBuf, #(#names: &#in_tys),*) -> #ret_ty_a {
            let rt = ::collage::runtime::Executor::Serial.raw();
            // SAFETY: `arena` holds ARENA_SIZE bytes and the inputs have the compiled types.
            unsafe { Self::#run_raw(&rt, arena.0.as_mut_ptr(), #(#names),*) }
        }

        unsafe fn #run_raw<'a>(rt: &::collage::runtime::RawRt, arena: *mut u8, #(#names: &#in_tys),*) -> #ret_ty_a {
            let inputs: [*const u8; #n_in] = [#(#names as *const #in_tys as *const u8),*];
            // SAFETY: the entry point was generated for exactly these buffers.
            unsafe { #run_sym(rt, arena, WEIGHTS.0.as_ptr(), inputs.as_ptr()) };
            let arena = arena as *const u8;
            #ret_val
        }
    };
    VariantGlue {
        decls: quote! {
            fn #run_sym(rt: *const ::collage::runtime::RawRt, arena: *mut u8, weights: *const u8, inputs: *const *const u8);
            #lib_decl
        },
        field,
        init,
        methods,
        doc,
    }
}

/// `name`: type of each of `ids`, at their run-time shapes.
fn ranged_io_doc(r: &crate::te::Ranged, ids: &[crate::te::BufId], names: &[String]) -> String {
    ids.iter()
        .zip(names)
        .map(|(&b, n)| format!("`{n}`: {}", r.type_text(b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The glue of a model served over a range of one dimension ([`crate::te::Ranged`]): `run`
/// takes each input as a slice with its run-time shape, checks the shapes (the range's size
/// from the first input that has the dimension, every other dimension against what the model
/// needs at that size) and returns each output as a slice with its shape; a shape the model
/// does not serve is a `ShapeError`, and nothing runs.
pub fn emit_ranged(c: &Compiled, r: &crate::te::Ranged, weights_file: &str) -> String {
    let p = &r.program;
    let model_inputs = &p.inputs[..p.inputs.len() - 1];
    let run_sym = format_ident!("collage_{}_run", c.symbol);
    let dim = &r.dim;
    let (lo, hi) = (
        Literal::usize_unsuffixed(r.lo),
        Literal::usize_unsuffixed(r.hi),
    );
    // A run-time dimension as Rust over the size `d`.
    let size = |e: &crate::te::Expr| -> TokenStream {
        match r.sym_of(e) {
            Some(s) => {
                let (a, b, c) = (
                    Literal::i64_unsuffixed(s.a),
                    Literal::i64_unsuffixed(s.b),
                    Literal::i64_unsuffixed(s.c),
                );
                if (s.m, s.k) == (1, 0) {
                    quote!(::collage::runtime::ranged_dim(d, #a, #b, #c))
                } else {
                    let (m, k) = (Literal::i64_unsuffixed(s.m), Literal::i64_unsuffixed(s.k));
                    quote!((#m * ::collage::runtime::ranged_dim(d, #a, #b, #c) as i64 + #k).max(0) as usize)
                }
            }
            None => {
                let n = Literal::usize_unsuffixed(r.int_at(e, r.lo) as usize);
                quote!(#n)
            }
        }
    };
    let names = input_idents(&c.inputs[..model_inputs.len()]);
    let shape_names: Vec<_> = names.iter().map(|n| format_ident!("{}_shape", n)).collect();
    let elem = |ty: &TensorType| format_ident!("{}", ty.dtype.rust_type());
    let in_elems: Vec<_> = c.inputs[..model_inputs.len()]
        .iter()
        .map(|io| elem(&io.ty))
        .collect();
    let in_ranks: Vec<_> = model_inputs
        .iter()
        .map(|&b| Literal::usize_unsuffixed(r.shapes[b.index()].len()))
        .collect();
    // The size: the first input axis that is the dimension itself.
    let unit = crate::te::Sym::affine(1, 0);
    let (src_input, src_axis) = model_inputs
        .iter()
        .enumerate()
        .find_map(|(i, &b)| {
            let k = r.shapes[b.index()]
                .iter()
                .position(|e| r.sym_of(e) == Some(unit))?;
            Some((i, k))
        })
        .expect("a ranged model has an input with the dimension");
    let src_shape = &shape_names[src_input];
    let src_name = &c.inputs[src_input].name;
    let src_axis = Literal::usize_unsuffixed(src_axis);
    let checks = model_inputs.iter().enumerate().map(|(i, &b)| {
        let (name, shape, io) = (&names[i], &shape_names[i], &c.inputs[i].name);
        let dims = r.shapes[b.index()].iter().map(size);
        quote! {
            let want = [#(#dims),*];
            for k in 0..want.len() {
                if #shape[k] != want[k] {
                    return Err(::collage::runtime::ShapeError::Dim { input: #io, axis: k, got: #shape[k], expected: want[k] });
                }
            }
            let n: usize = want.iter().product();
            if #name.len() != n {
                return Err(::collage::runtime::ShapeError::Len { input: #io, got: #name.len(), expected: n });
            }
        }
    });
    let n_ptrs = Literal::usize_unsuffixed(model_inputs.len() + 1);
    let outs: Vec<(TokenStream, TokenStream, TokenStream)> = p
        .outputs
        .iter()
        .zip(&c.outputs)
        .map(|(&b, io)| {
            let e = elem(&io.ty);
            let dims: Vec<TokenStream> = r.shapes[b.index()].iter().map(size).collect();
            let rank = Literal::usize_unsuffixed(dims.len());
            let off = Literal::usize_unsuffixed(io.offset);
            (
                quote!((&'a [#e], [usize; #rank])),
                quote!((&[#e], [usize; #rank])),
                quote! {{
                    let shape: [usize; #rank] = [#(#dims),*];
                    let n: usize = shape.iter().product();
                    // SAFETY: the output lies in the arena at its planned offset, packed at its
                    // run-time shape (no larger than the largest size's).
                    (unsafe { ::core::slice::from_raw_parts(arena.add(#off) as *const #e, n) }, shape)
                }},
            )
        })
        .collect();
    let (ret_a, ret, vals) = if outs.len() == 1 {
        let (a, b, v) = &outs[0];
        (a.clone(), b.clone(), v.clone())
    } else {
        let a = outs.iter().map(|o| &o.0);
        let b = outs.iter().map(|o| &o.1);
        let v = outs.iter().map(|o| &o.2);
        (quote!((#(#a),*)), quote!((#(#b),*)), quote!((#(#v),*)))
    };
    let err = quote!(::collage::runtime::ShapeError);
    let params = quote!(#(#names: &[#in_elems], #shape_names: [usize; #in_ranks]),*);
    let args = quote!(#(#names, #shape_names),*);
    let methods = quote! {
        /// The dimension served over a range, and its smallest and largest sizes.
        pub const RANGE: (&'static str, usize, usize) = (#dim, #lo, #hi);

        /// Runs the model on inputs at their run-time shapes (each a slice and its shape);
        /// each output is a slice and its shape, borrowing the model until the next call. A
        /// shape the model does not serve is an error, and nothing runs.
        pub fn run(&mut self, #params) -> Result<#ret, #err> {
            let rt = self.exec.raw();
            let arena = self.arena.as_mut_ptr();
            // SAFETY: the arena holds ARENA_SIZE bytes (the largest size's).
            unsafe { Self::run_raw(&rt, arena, #args) }
        }

        /// Runs the model serially in a caller-provided arena (no allocation at all).
        pub fn run_in<'a>(arena: &'a mut ArenaBuf, #params) -> Result<#ret_a, #err> {
            let rt = ::collage::runtime::Executor::Serial.raw();
            // SAFETY: `arena` holds ARENA_SIZE bytes.
            unsafe { Self::run_raw(&rt, arena.0.as_mut_ptr(), #args) }
        }

        unsafe fn run_raw<'a>(rt: &::collage::runtime::RawRt, arena: *mut u8, #params) -> Result<#ret_a, #err> {
            let d = #src_shape[#src_axis];
            if !(#lo..=#hi).contains(&d) {
                return Err(#err::OutOfRange { input: #src_name, dim: #dim, got: d, lo: #lo, hi: #hi });
            }
            #(#checks)*
            let size = d as i64;
            let inputs: [*const u8; #n_ptrs] = [#(#names.as_ptr() as *const u8,)* &size as *const i64 as *const u8];
            // SAFETY: the entry point was generated for these buffers at any size of the range,
            // and every input has the shape it reads at size `d` (checked above).
            unsafe { #run_sym(rt, arena, WEIGHTS.0.as_ptr(), inputs.as_ptr()) };
            let arena = arena as *const u8;
            Ok(#vals)
        }
    };
    let glue = VariantGlue {
        decls: quote! {
            fn #run_sym(rt: *const ::collage::runtime::RawRt, arena: *mut u8, weights: *const u8, inputs: *const *const u8);
        },
        field: quote!(),
        init: quote!(),
        methods,
        doc: String::new(),
    };
    let doc = format!(
        " Model `{}` compiled ahead of time by collage-build, served over `{dim}` in {}..={}: one set of kernels whose extent along `{dim}` is read at run time.\n\n Inputs: {}.\n Outputs: {}.\n\n `run` performs no heap allocation; the activation arena ({} bytes, the largest size's) is allocated once by `new`.",
        c.name,
        r.lo,
        r.hi,
        ranged_io_doc(r, model_inputs, &p.input_names),
        ranged_io_doc(r, &p.outputs, &p.output_names),
        c.arena_size
    );
    emit_glue(
        &c.name,
        &[glue],
        &doc,
        c.arena_size,
        c.weights.len(),
        weights_file,
    )
}
