//! The process's C heap settings. Many estimates in one process (the benches, `fit`'s searches,
//! `watch`): glibc hands freed memory at the top of its heap back to the kernel, and an estimate
//! that follows touches those pages afresh (a 70B estimate re-faulted about 1,200 pages, some
//! 3 ms on the development VM). One estimate in a fresh process: each 4 KiB page it touches first
//! costs a page fault, and a 70B estimate touches about 5 MiB; transparent huge pages fault
//! 2 MiB at a time (docs/performance.md).

/// Keeps freed memory in the process for the next estimate: raises glibc's trim threshold and
/// fixes its mmap threshold (which also stops their dynamic adjustment). Then asks the kernel
/// for transparent huge pages where the heap grows next (`huge_pages_ahead`). Call it first
/// thing in `main`. Does nothing with another C library.
pub fn tune_for_estimates() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; it is called before any thread
    // is started by us, and glibc serialises it with allocations anyway
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        huge_pages_ahead();
    }
}

/// Grows glibc's heap by 32 MiB at once (untouched, so it costs no memory until used) and
/// advises transparent huge pages for it, the way glibc's own `glibc.malloc.hugetlb=1` tunable
/// does (which only an environment variable set before the process starts can turn on). The
/// allocations that follow start at the first 2 MiB boundary: the bytes before it stay
/// allocated and untouched.
///
/// Only advice: where the kernel has huge pages off (or gives none), the heap is as before, and
/// if glibc places the blocks otherwise than expected, fewer pages are huge. Nothing else
/// changes. Measured on a 70B estimate: 1,430 page faults down to about 160, and about half the
/// kernel time (docs/performance.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe fn huge_pages_ahead() {
    /// The size (and alignment) of a transparent huge page on x86-64 and most arm64 kernels.
    const HUGE_PAGE: usize = 2 << 20;
    /// How far the heap grows at once: room for a 70B estimate (about 8 MiB at its peak).
    const AHEAD: usize = 32 << 20;
    /// glibc's chunk header in front of every block it returns.
    const HEADER: usize = 2 * std::mem::size_of::<usize>();
    /// A first block larger than what is left at the top of the heap after start-up.
    const PROBE: usize = 256 << 10;
    let align_up = |a: usize| (a + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
    libc::mallopt(libc::M_TOP_PAD, AHEAD as libc::c_int);
    // glibc grows the heap by the probe plus the pad
    let probe = std::hint::black_box(libc::malloc(PROBE)) as usize;
    libc::mallopt(libc::M_TOP_PAD, 128 << 10);
    if probe == 0 {
        return;
    }
    // given back to the top of the heap, which now starts at the probe's header
    libc::free(probe as *mut libc::c_void);
    let top = probe - HEADER;
    let end = libc::sbrk(0) as usize;
    // glibc wrote the header of the rest of the heap after the probe: the huge pages start at
    // the boundary after it (a 2 MiB range whose first touch was a 4 KiB page stays in them)
    let first = align_up(probe + PROBE + HEADER);
    if end < first + HUGE_PAGE {
        return;
    }
    libc::madvise(
        first as *mut libc::c_void,
        (end & !(HUGE_PAGE - 1)) - first,
        libc::MADV_HUGEPAGE,
    );
    // a block from the top to the boundary, kept, so that the next blocks start there (a chunk
    // of `request + HEADER / 2` bytes rounded up to 16: exactly the gap). After the advice:
    // glibc writes the header of what remains at the boundary, the first touch of that page
    if first - top >= 4 * HEADER {
        std::hint::black_box(libc::malloc(first - top - HEADER / 2));
    }
}
