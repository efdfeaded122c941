#!/usr/bin/env python3
"""What a first touch of a fresh page costs on this machine (the page fault a single-shot
`vramscope estimate` pays for every page of memory it uses, and a warm loop pays again for every
page glibc handed back to the kernel; docs/performance.md). Maps anonymous memory, writes one byte
per page, and prints the time per page (median of 5 runs). With `--huge` the mapping is first
marked `MADV_HUGEPAGE` (transparent huge pages, where the kernel allows them for madvised
memory: one fault zeroes 2 MiB), to compare the two per MiB.

    python3 validation/page_fault_cost.py [PAGES] [--huge]     # default 5000 pages
"""
import mmap
import statistics
import sys
import time

PAGE = mmap.PAGESIZE


def touch(m, pages):
    """Writes one byte per page of `m`; returns the seconds it took."""
    t = time.perf_counter()
    for i in range(0, pages * PAGE, PAGE):
        m[i] = 1
    return time.perf_counter() - t


HUGE = "--huge" in sys.argv


def mapping(pages):
    # private and anonymous, like the C heap (a shared anonymous mapping is shmem, which
    # transparent huge pages do not cover by default)
    m = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if HUGE:
        m.madvise(mmap.MADV_HUGEPAGE)
    return m


def once(pages):
    m = mapping(pages)
    dt = touch(m, pages)
    m.close()
    return dt


def loop_only(pages):
    # the same loop over pages already touched: the interpreter's own cost per iteration
    m = mapping(pages)
    touch(m, pages)
    dt = touch(m, pages)
    m.close()
    return dt


def main():
    args = [a for a in sys.argv[1:] if a != "--huge"]
    pages = int(args[0]) if args else 5000
    fresh = statistics.median(once(pages) for _ in range(5))
    warm = statistics.median(loop_only(pages) for _ in range(5))
    mib = pages * PAGE / (1 << 20)
    print(f"{pages} pages of {PAGE} B{' (MADV_HUGEPAGE)' if HUGE else ''}: "
          f"{1e6 * (fresh - warm) / pages:.2f} µs per first touch, "
          f"{1e3 * (fresh - warm) / mib:.3f} ms per MiB "
          f"({1e3 * fresh:.1f} ms fresh, {1e3 * warm:.1f} ms already touched)")


if __name__ == "__main__":
    main()
