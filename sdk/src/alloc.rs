//! The plugin's global allocator on WebAssembly (feature `fast-alloc`): free lists of small
//! blocks in front of the system allocator.
//!
//! A reconcile makes ~85 small allocations (each string of the request the host copies in,
//! JSON parsing, the answer) and frees them all before it returns. wasi-libc's dlmalloc, the
//! default, spent ~180 instructions on each malloc and each free there, a fifth of a reused
//! MCPServer reconcile (callgrind); a pop or a push on a free list is a few. Blocks come from
//! the system allocator one at a time, rounded up to their class's power of two, and are never
//! given back to it, so what a call frees is what the next one reuses (an instance's small
//! blocks stay at the most it held at once in each class); the system allocator's memory, and
//! so the host's memory cap, still bound everything (a block it cannot get is an allocation
//! that fails, as before).
//!
//! talc (a general allocator for WebAssembly) was measured too: reused reconcile 14.3 -> 13.6 us,
//! but a fresh instance 27 -> 35 us, as it grows linear memory on each new instance where
//! dlmalloc starts in the initial memory's unused end.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// The smallest block: 16 bytes (log2).
const MIN_SHIFT: u32 = 4;
/// Size classes 16, 32, ... 2048 bytes.
const CLASSES: usize = 8;
/// The largest block served from the free lists.
const MAX_SMALL: usize = 1 << (MIN_SHIFT as usize + CLASSES - 1);
/// Alignment of every block taken from the system allocator.
const ALIGN: usize = 16;

/// Free lists of blocks of 16 to 2048 bytes; larger or over-aligned requests go to [`System`].
pub struct SizeClasses {
    /// Each class's free list: its first free block, which holds the address of the next.
    free: UnsafeCell<[*mut u8; CLASSES]>,
}

// SAFETY: installed only on WebAssembly without threads (see lib.rs), where nothing runs
// concurrently with an allocator call.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl Sync for SizeClasses {}

impl SizeClasses {
    /// Empty free lists.
    pub const fn new() -> Self {
        Self { free: UnsafeCell::new([ptr::null_mut(); CLASSES]) }
    }
}

impl Default for SizeClasses {
    fn default() -> Self {
        Self::new()
    }
}

/// The size class of `layout`, when the free lists serve it.
#[inline]
fn class_of(layout: &Layout) -> Option<usize> {
    let size = layout.size();
    if size > MAX_SMALL || layout.align() > ALIGN {
        return None;
    }
    // The smallest power of two >= size, counted from 16.
    let bits = usize::BITS - (size.max(1 << MIN_SHIFT) - 1).leading_zeros();
    Some((bits - MIN_SHIFT) as usize)
}

unsafe impl GlobalAlloc for SizeClasses {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class_of(&layout) else {
            // SAFETY: forwarded as received.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: single-threaded (see `Sync`), and no reference to the lists outlives this call.
        let free = unsafe { &mut (*self.free.get())[c] };
        if free.is_null() {
            // One block at a time, of the class's size: carving larger chunks made a fresh
            // instance grow its linear memory (an mprotect and a TLB flush, ~8 us a call) where
            // dlmalloc's first blocks fit in the initial memory.
            // SAFETY: a class size and ALIGN make a valid, non-zero layout.
            return unsafe { System.alloc(Layout::from_size_align_unchecked(1 << (c as u32 + MIN_SHIFT), ALIGN)) };
        }
        let block = *free;
        // SAFETY: a free block holds the pointer to the next free block in its first word.
        *free = unsafe { block.cast::<*mut u8>().read() };
        block
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(c) = class_of(&layout) else {
            // SAFETY: allocated by `System` with this layout (see `alloc`).
            return unsafe { System.dealloc(block, layout) };
        };
        // SAFETY: as in `alloc`; the block is at least 16 bytes and 16-aligned, room for the link.
        unsafe {
            let free = &mut (*self.free.get())[c];
            block.cast::<*mut u8>().write(*free);
            *free = block;
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class_of(&layout).is_none() {
            // SAFETY: forwarded as received; the system allocator knows which memory is already zero.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: a block of at least `layout.size()` bytes, or null.
        unsafe {
            let block = self.alloc(layout);
            if !block.is_null() {
                ptr::write_bytes(block, 0, layout.size());
            }
            block
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(&layout), class_of(&new)) {
            // Still fits its block: a string or a vector growing within its class stays put.
            (Some(a), Some(b)) if a == b => block,
            // SAFETY: allocated by `System` with `layout`; dlmalloc may grow it in place.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            _ => {
                // SAFETY: a fresh block of `new`, then the old one's bytes that fit, then the old one freed.
                unsafe {
                    let moved = self.alloc(new);
                    if !moved.is_null() {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                    moved
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two_from_16() {
        let class = |size, align| class_of(&Layout::from_size_align(size, align).unwrap());
        assert_eq!(class(1, 1), Some(0));
        assert_eq!(class(16, 8), Some(0));
        assert_eq!(class(17, 1), Some(1));
        assert_eq!(class(2048, 8), Some(7));
        assert_eq!(class(2049, 1), None);
        assert_eq!(class(64, 32), None);
    }

    #[test]
    fn blocks_are_reused_distinct_and_keep_their_bytes() {
        let a = SizeClasses::new();
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut seed = 7u32;
        for i in 0..20_000u32 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let size = 1 + (seed >> 8) as usize % 3000;
            if seed.is_multiple_of(3) && !live.is_empty() {
                let (p, l, v) = live.swap_remove((seed >> 4) as usize % live.len());
                // SAFETY: allocated below with `l`, filled with `v`.
                unsafe {
                    assert!(std::slice::from_raw_parts(p, l.size()).iter().all(|b| *b == v));
                    a.dealloc(p, l);
                }
            } else if seed % 3 == 1 && !live.is_empty() {
                let k = (seed >> 4) as usize % live.len();
                let (p, l, v) = live[k];
                // SAFETY: as above; the grown part is filled before it is checked.
                unsafe {
                    let q = a.realloc(p, l, size);
                    let nl = Layout::from_size_align(size, l.align()).unwrap();
                    assert!(std::slice::from_raw_parts(q, l.size().min(size)).iter().all(|b| *b == v));
                    ptr::write_bytes(q, v, size);
                    live[k] = (q, nl, v);
                }
            } else {
                let layout = Layout::from_size_align(size, 8).unwrap();
                let v = i as u8;
                // SAFETY: a valid non-zero layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null() && (p as usize).is_multiple_of(8));
                    ptr::write_bytes(p, v, size);
                    live.push((p, layout, v));
                }
            }
        }
        for (p, l, v) in live {
            // SAFETY: as above.
            unsafe {
                assert!(std::slice::from_raw_parts(p, l.size()).iter().all(|b| *b == v));
                a.dealloc(p, l);
            }
        }
        // Freed small blocks stay on the free lists, as on WebAssembly (they are leaked here).
    }
}
