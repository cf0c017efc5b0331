//! The global allocator of weir's binaries (`weir`, and `weir-bare` so
//! that the bare references run on the same stack): mimalloc, entered
//! through `mi_malloc` rather than `mi_malloc_aligned` whenever the layout
//! allows.
//!
//! The `mimalloc` crate sends every allocation through mimalloc's aligned
//! entry points. Those first check the alignment, then whether the free
//! block happens to be aligned, before the same small-page allocation
//! `mi_malloc` makes. Entered here instead, a node serving Envoy's
//! `ShouldRateLimit` ran 1,555 fewer instructions per request (66,898
//! against 68,453, `bench/server-count.sh`; 60 allocations per request,
//! so about 26 each). mimalloc's blocks already have the alignment most
//! layouts ask for (see `plain`, the rule std's own `System` applies to
//! glibc's `malloc`), so only layouts asking for more go the aligned way.
//!
//! A library embedding weir keeps its own allocator: this is set by the
//! binaries only.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment `mi_malloc` guarantees for a block of at least this size
/// (`MI_MAX_ALIGN_SIZE`).
pub const MIN_ALIGN: usize = 16;

/// mimalloc, through its unaligned entry points when they suffice.
pub struct Mimalloc;

/// Whether `mi_malloc(size)` returns a block aligned to `align`. On a
/// 64-bit target mimalloc's size classes are multiples of two words from
/// 16 bytes up, and every block of one is 16-aligned; the one smaller
/// class, 8 bytes, is 8-aligned. So an alignment no larger than 16 or the
/// size is always met.
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every pointer handed out comes from mimalloc, aligned as the
// layout asks (see `plain`), and is given back to mimalloc's `mi_free` or
// reallocated by mimalloc, which accept blocks from any of its entry points.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        let p = if plain(align, size) {
            mi::mi_malloc(size)
        } else {
            mi::mi_malloc_aligned(size, align)
        };
        p.cast()
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        let p = if plain(align, size) {
            mi::mi_zalloc(size)
        } else {
            mi::mi_zalloc_aligned(size, align)
        };
        p.cast()
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = if plain(layout.align(), new_size) {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size)
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
        };
        p.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `size` bytes at `p` with a pattern `holds` recognises.
    #[allow(unsafe_code)]
    unsafe fn fill(p: *mut u8, size: usize) {
        for i in 0..size {
            p.add(i).write(i as u8);
        }
    }

    #[allow(unsafe_code)]
    unsafe fn holds(p: *const u8, size: usize) -> bool {
        (0..size).all(|i| p.add(i).read() == i as u8)
    }

    /// Every size class from a byte to a large block, at every alignment
    /// from 1 to a page: each block is aligned as asked, keeps what is
    /// written to it through growing and shrinking, and a zeroed block is
    /// zero. Called on the allocator directly, not as the test binary's
    /// global one, so a misaligned block fails here.
    #[test]
    #[allow(unsafe_code)]
    fn every_block_is_aligned_as_its_layout_asks_and_keeps_its_bytes() {
        let a = Mimalloc;
        let sizes = [
            1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 40, 48, 72, 100, 1000, 4096, 70_000,
        ];
        for align in (0..=12).map(|s| 1usize << s) {
            for &size in &sizes {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; each block is written within its
                // size and freed once, with the layout it has then.
                unsafe {
                    for new_size in [size * 3, size.div_ceil(2)] {
                        let p = a.alloc(layout);
                        assert_eq!(p as usize % align, 0, "size {size}, align {align}");
                        fill(p, size);
                        let q = a.realloc(p, layout, new_size);
                        assert_eq!(q as usize % align, 0, "{size} to {new_size}, align {align}");
                        assert!(
                            holds(q, size.min(new_size)),
                            "{size} to {new_size} lost bytes"
                        );
                        a.dealloc(q, Layout::from_size_align(new_size, align).unwrap());
                    }
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed, size {size}, align {align}");
                    assert!((0..size).all(|i| z.add(i).read() == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }

    #[test]
    fn only_layouts_that_mi_malloc_already_aligns_skip_the_aligned_entry() {
        assert!(plain(8, 8));
        assert!(plain(16, 16));
        assert!(plain(8, 100));
        assert!(!plain(32, 64), "beyond MIN_ALIGN");
        assert!(!plain(16, 8), "a block smaller than its alignment");
    }
}
