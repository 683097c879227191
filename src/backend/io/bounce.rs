//! Aligned host buffers for requests whose guest buffers break O_DIRECT alignment.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// A heap buffer aligned for O_DIRECT. Its address is stable while it lives, so it can back
/// an in-flight io_uring operation.
pub struct BounceBuffer {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the buffer is uniquely owned memory; moving it between threads is fine.
unsafe impl Send for BounceBuffer {}

impl BounceBuffer {
    /// A zero-filled buffer of `len` bytes (at least 1) aligned to `align` (a power of two).
    pub fn zeroed(len: usize, align: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), align.max(512))
            .expect("bounce buffer: size and power-of-two alignment are checked by callers");
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        BounceBuffer { ptr, layout }
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes and initialised (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len()) }
    }
}

impl Drop for BounceBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}
