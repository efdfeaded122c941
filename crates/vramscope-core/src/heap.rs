//! The process's C heap settings for many estimates in one process (the benches, `fit`'s
//! searches, `watch`): glibc hands freed memory at the top of its heap back to the kernel, and an
//! estimate that follows touches those pages afresh (a 70B estimate re-faulted about 1,200 pages,
//! some 3 ms on the development VM, docs/performance.md).

/// Keeps freed memory in the process for the next estimate: raises glibc's trim threshold and
/// fixes its mmap threshold (which also stops their dynamic adjustment). Does nothing with another
/// C library.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; it is called before any thread
    // is started by us, and glibc serialises it with allocations anyway
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}
