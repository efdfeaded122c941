#!/usr/bin/env python3
"""What a first touch of a fresh page costs on this machine (the page fault a single-shot
`vramscope estimate` pays for every page of memory it uses, and a warm loop pays again for every
page glibc handed back to the kernel; docs/performance.md). Maps anonymous memory, writes one byte
per page, and prints the time per page (median of 5 runs).

    python3 validation/page_fault_cost.py [PAGES]     # default 5000
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


def once(pages):
    m = mmap.mmap(-1, pages * PAGE)
    dt = touch(m, pages)
    m.close()
    return dt


def loop_only(pages):
    # the same loop over pages already touched: the interpreter's own cost per iteration
    m = mmap.mmap(-1, pages * PAGE)
    touch(m, pages)
    dt = touch(m, pages)
    m.close()
    return dt


def main():
    pages = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    fresh = statistics.median(once(pages) for _ in range(5))
    warm = statistics.median(loop_only(pages) for _ in range(5))
    print(f"{pages} pages of {PAGE} B: {1e6 * (fresh - warm) / pages:.2f} µs per first touch "
          f"({1e3 * fresh:.1f} ms fresh, {1e3 * warm:.1f} ms already touched)")


if __name__ == "__main__":
    main()
