//! Aligned buffers for weights and the activation arena.

/// A value aligned to 64 bytes (a cache line; enough for any SIMD load).
///
/// Generated code embeds weights as `static W: Aligned<[u8; N]> = Aligned(*include_bytes!(..))`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct Aligned<T: ?Sized>(pub T);

/// The activation arena without the `alloc` feature: this type exists (so generated code compiles) but holds nothing and
/// `new` panics: use the generated `Model::run_in` with a caller-provided `ArenaBuf` instead.
#[cfg(not(feature = "alloc"))]
#[derive(Debug)]
pub struct Arena(());

#[cfg(not(feature = "alloc"))]
impl Arena {
    /// Panics: there is no heap without `alloc`.
    pub fn new(_bytes: usize) -> Self {
        panic!(
            "collage-runtime was built without `alloc`: use Model::run_in with a static ArenaBuf"
        )
    }

    /// Always 0.
    pub fn len(&self) -> usize {
        0
    }

    /// Always true.
    pub fn is_empty(&self) -> bool {
        true
    }

    /// A dangling pointer (never used: `new` cannot return).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        core::ptr::NonNull::dangling().as_ptr()
    }

    /// A dangling pointer (never used: `new` cannot return).
    pub fn as_ptr(&self) -> *const u8 {
        core::ptr::NonNull::dangling().as_ptr()
    }
}

/// A heap-allocated, 64-byte-aligned, zero-initialised byte buffer of fixed size: the activation
/// arena of one model instance. Allocated once in `new`; `run` never allocates.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct Arena {
    blocks: alloc::boxed::Box<[Aligned<[u8; 64]>]>,
}

#[cfg(feature = "alloc")]
impl Arena {
    /// An arena of at least `bytes` bytes.
    pub fn new(bytes: usize) -> Self {
        let n = bytes.div_ceil(64).max(1);
        Arena {
            blocks: alloc::vec![Aligned([0u8; 64]); n].into_boxed_slice(),
        }
    }

    /// The arena's size in bytes.
    pub fn len(&self) -> usize {
        self.blocks.len() * 64
    }

    /// Always false: an arena has at least one block.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start of the arena.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.blocks.as_mut_ptr() as *mut u8
    }

    /// The start of the arena, for reading outputs.
    pub fn as_ptr(&self) -> *const u8 {
        self.blocks.as_ptr() as *const u8
    }
}
