//! A model of PyTorch's default `CUDACachingAllocator` (c10/cuda/CUDACachingAllocator.cpp) on one
//! stream: requests rounded up to 512 B; requests of at most 1 MiB served from 2 MiB segments (the
//! small pool), requests under 10 MiB from 20 MiB segments, larger ones from their own segment
//! rounded up to 2 MiB; best-fit reuse of cached blocks; splitting when the remainder is at least
//! 512 B (small pool) or more than 1 MiB (large pool); coalescing of free neighbours. It turns an
//! allocation/free stream into `memory_allocated()` and `memory_reserved()`.

/// Minimum block size and rounding (512 B).
pub const MIN_BLOCK: u64 = 512;
/// Largest request served from the small pool (1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (2 MiB).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for mid-sized requests (20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size on get their own segment (10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Rounding of dedicated segments (2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The size a request occupies in the allocator (rounded up to 512 B).
pub fn round_size(n: u64) -> u64 {
    if n < MIN_BLOCK {
        MIN_BLOCK
    } else {
        n.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// A handle to an allocated block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockId(pub(crate) u32);

#[derive(Debug, Clone)]
struct Block {
    addr: u64,
    size: u64,
    allocated: bool,
    small: bool,
    // u32 links keep a block at 40 bytes: the best fit's block is a likely cache miss
    prev: Option<u32>,
    next: Option<u32>,
}

/// The cached (free) blocks of one pool. Best fit is the smallest block of at least the requested
/// size, the lowest address among equal sizes (the order of the allocator's `(size, address)`
/// block set). Blocks are grouped by size; each group is sorted by descending address, so that the
/// best fit is the group's last entry. A group stays when it empties (a model frees and reuses the
/// same few sizes over and over, and a run meets a few hundred sizes at most), and a bit set marks
/// the non-empty ones, so that the best fit's group is a binary search and a bit scan.
#[derive(Debug, Clone)]
struct FreePool {
    /// every block size the pool has held, ascending
    sizes: Vec<u64>,
    /// the free blocks of `sizes[i]`: (address, block index) by descending address
    lists: Vec<Vec<(u64, usize)>>,
    /// bit `i` is set when `lists[i]` is not empty
    nonempty: Vec<u64>,
    /// the group used last: runs of frees and allocations of one size are common (a model's
    /// layers), so it is tried before a search
    hint: usize,
    /// recently looked-up groups, by a hash of their size (checked against `sizes` before use:
    /// a new group moves the later ones): most lookups are of a size met before, and a binary
    /// search over a few hundred sizes is a chain of dependent loads
    recent: [u32; RECENT],
}

/// Entries of [`FreePool::recent`].
const RECENT: usize = 64;

/// The slot of `size` in [`FreePool::recent`] (sizes are multiples of 512).
fn recent_slot(size: u64) -> usize {
    ((size >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// In a list sorted by descending address, the first position whose address is at most `addr`.
/// Searched from the end, where freed (recent, low-address) blocks mostly go: steps of 1, 2, 4, ...
/// back from the end, then a binary search within the last step.
fn position_from_end(list: &[(u64, usize)], addr: u64) -> usize {
    let mut hi = list.len();
    let mut step = 1;
    while step <= hi {
        let i = hi - step;
        if list[i].0 > addr {
            return i + 1 + list[i + 1..hi].partition_point(|e| e.0 > addr);
        }
        hi = i;
        step *= 2;
    }
    list[..hi].partition_point(|e| e.0 > addr)
}

impl Default for FreePool {
    fn default() -> Self {
        FreePool {
            sizes: Vec::new(),
            lists: Vec::new(),
            nonempty: Vec::new(),
            hint: 0,
            recent: [0; RECENT],
        }
    }
}

impl FreePool {
    /// The group of blocks of `size` bytes, or where it would go.
    fn group_of(&mut self, size: u64) -> Result<usize, usize> {
        if self.sizes.get(self.hint) == Some(&size) {
            return Ok(self.hint);
        }
        let slot = recent_slot(size);
        let g = self.recent[slot] as usize;
        if self.sizes.get(g) == Some(&size) {
            return Ok(g);
        }
        let found = self.sizes.binary_search(&size);
        if let Ok(g) = found {
            self.recent[slot] = g as u32;
        }
        found
    }

    fn mark(&mut self, g: usize, nonempty: bool) {
        let (w, bit) = (g / 64, 1u64 << (g % 64));
        if nonempty {
            self.nonempty[w] |= bit;
        } else {
            self.nonempty[w] &= !bit;
        }
    }

    /// Adds an empty group for `size` at position `g`, moving the later groups' bits up by one.
    fn new_group(&mut self, g: usize, size: u64) {
        self.sizes.insert(g, size);
        self.lists.insert(g, Vec::new());
        if self.sizes.len() > self.nonempty.len() * 64 {
            self.nonempty.push(0);
        }
        let w = g / 64;
        for k in (w + 1..self.nonempty.len()).rev() {
            self.nonempty[k] = (self.nonempty[k] << 1) | (self.nonempty[k - 1] >> 63);
        }
        let below = (1u64 << (g % 64)) - 1;
        let x = self.nonempty[w];
        self.nonempty[w] = (x & below) | ((x & !below) << 1);
    }

    /// The first non-empty group at or after `g`.
    fn first_nonempty_from(&self, g: usize) -> Option<usize> {
        let mut w = g / 64;
        let mut bits = self.nonempty.get(w)? & (!0u64 << (g % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.nonempty.get(w)?;
        }
    }

    fn insert(&mut self, size: u64, addr: u64, block: usize) {
        let g = match self.group_of(size) {
            Ok(g) => g,
            Err(g) => {
                self.new_group(g, size);
                g
            }
        };
        self.hint = g;
        // freed blocks are mostly recent, low-address ones: their place is often the end
        let list = &mut self.lists[g];
        let at = position_from_end(list, addr);
        if at == list.len() {
            list.push((addr, block));
        } else {
            list.insert(at, (addr, block));
        }
        self.mark(g, true);
    }

    fn remove_at(&mut self, g: usize, at: usize) -> usize {
        let list = &mut self.lists[g];
        let (_, block) = if at + 1 == list.len() {
            list.pop().unwrap_or_default()
        } else {
            list.remove(at)
        };
        if list.is_empty() {
            self.mark(g, false);
        }
        block
    }

    fn remove(&mut self, size: u64, addr: u64) {
        if let Ok(g) = self.group_of(size) {
            let list = &self.lists[g];
            let at = position_from_end(list, addr);
            if list.get(at).is_some_and(|e| e.0 == addr) {
                self.remove_at(g, at);
            }
        }
    }

    /// Removes and returns the best fit for `size` bytes.
    fn take_best_fit(&mut self, size: u64) -> Option<usize> {
        // the first group of at least `size` bytes: where a group of exactly `size` is or would go
        let first = match self.group_of(size) {
            Ok(g) | Err(g) => g,
        };
        let g = self.first_nonempty_from(first)?;
        let last = self.lists[g].len() - 1;
        self.hint = g;
        Some(self.remove_at(g, last))
    }
}

/// The caching allocator's state.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    blocks: Vec<Block>,
    free_small: FreePool,
    free_large: FreePool,
    next_addr: u64,
    allocated: u64,
    reserved: u64,
    segments: u64,
    recycled: Vec<usize>,
    /// The bytes segments may take (`None`: as many as they need).
    reserved_limit: Option<u64>,
    /// A segment went past `reserved_limit` even with the cache released.
    out_of_memory: bool,
}

impl CachingAllocator {
    /// An empty allocator.
    pub fn new() -> Self {
        // a large model's step splits a few thousand blocks
        Self::with_block_capacity(4096)
    }

    /// An empty allocator with room for `blocks` blocks (segments and the pieces they are split
    /// into) before its list grows.
    pub fn with_block_capacity(blocks: usize) -> Self {
        CachingAllocator {
            next_addr: 1 << 40,
            blocks: Vec::with_capacity(blocks),
            ..Default::default()
        }
    }

    /// `memory_allocated()`: bytes in allocated blocks.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// `memory_reserved()`: bytes in segments obtained with `cudaMalloc`.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Number of segments ever created.
    pub fn segments(&self) -> u64 {
        self.segments
    }

    /// Caps the bytes the segments may take (the GPU's memory less what else holds it). A new
    /// segment past the cap first frees every cached segment that holds no live block, as
    /// PyTorch does when `cudaMalloc` fails (`release_cached_blocks` in CUDACachingAllocator.cpp:
    /// with the default unlimited `max_split_size` it skips `release_available_cached_blocks`);
    /// past it still, the request is out of memory ([`Self::out_of_memory`]), and the
    /// simulation goes on as if it had been served.
    pub fn set_reserved_limit(&mut self, limit: Option<u64>) {
        self.reserved_limit = limit;
    }

    /// Whether a request found no room under the reserved limit, the cache released.
    pub fn out_of_memory(&self) -> bool {
        self.out_of_memory
    }

    /// Whether a new segment of `seg` bytes goes past the reserved limit.
    fn over_limit(&self, seg: u64) -> bool {
        self.reserved_limit
            .is_some_and(|limit| self.reserved + seg > limit)
    }

    /// `release_cached_blocks`: frees every free block that is a whole segment (never split, or
    /// merged back), from both pools.
    fn release_cached_blocks(&mut self) {
        let mut dead = vec![false; self.blocks.len()];
        for &i in &self.recycled {
            dead[i] = true;
        }
        for (i, dead) in dead.into_iter().enumerate() {
            let b = &self.blocks[i];
            if dead || b.allocated || b.prev.is_some() || b.next.is_some() {
                continue;
            }
            self.remove_free(i);
            self.reserved -= self.blocks[i].size;
            self.recycled.push(i);
        }
    }

    /// The size of an allocated block.
    pub fn block_size(&self, b: BlockId) -> u64 {
        self.blocks[b.0 as usize].size
    }

    fn pool(&mut self, small: bool) -> &mut FreePool {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
        }
    }

    fn insert_free(&mut self, i: usize) {
        let (size, addr, small) = (
            self.blocks[i].size,
            self.blocks[i].addr,
            self.blocks[i].small,
        );
        self.pool(small).insert(size, addr, i);
    }

    fn remove_free(&mut self, i: usize) {
        let (size, addr, small) = (
            self.blocks[i].size,
            self.blocks[i].addr,
            self.blocks[i].small,
        );
        self.pool(small).remove(size, addr);
    }

    fn new_block(&mut self, b: Block) -> usize {
        if let Some(i) = self.recycled.pop() {
            self.blocks[i] = b;
            i
        } else {
            self.blocks.push(b);
            self.blocks.len() - 1
        }
    }

    /// Allocates `nbytes`; `None` for a zero-byte request (which takes no block).
    pub fn malloc(&mut self, nbytes: u64) -> Option<BlockId> {
        if nbytes == 0 {
            return None;
        }
        let size = round_size(nbytes);
        let small = size <= SMALL_SIZE;
        let i = match self.pool(small).take_best_fit(size) {
            Some(i) => i,
            None => {
                let seg = if small {
                    SMALL_BUFFER
                } else if size < MIN_LARGE_ALLOC {
                    LARGE_BUFFER
                } else {
                    size.div_ceil(ROUND_LARGE) * ROUND_LARGE
                };
                if self.over_limit(seg) {
                    self.release_cached_blocks();
                    self.out_of_memory |= self.over_limit(seg);
                }
                let addr = self.next_addr;
                self.next_addr += seg + (1 << 21);
                self.reserved += seg;
                self.segments += 1;
                self.new_block(Block {
                    addr,
                    size: seg,
                    allocated: false,
                    small,
                    prev: None,
                    next: None,
                })
            }
        };
        let remaining = self.blocks[i].size - size;
        if (small && remaining >= MIN_BLOCK) || (!small && remaining > SMALL_SIZE) {
            let next = self.blocks[i].next;
            let r = self.new_block(Block {
                addr: self.blocks[i].addr + size,
                size: remaining,
                allocated: false,
                small,
                prev: Some(i as u32),
                next,
            });
            if let Some(n) = next {
                self.blocks[n as usize].prev = Some(r as u32);
            }
            self.blocks[i].next = Some(r as u32);
            self.blocks[i].size = size;
            self.insert_free(r);
        }
        self.blocks[i].allocated = true;
        self.allocated += self.blocks[i].size;
        Some(BlockId(i as u32))
    }

    /// Returns a block to the cache, merging it with free neighbours.
    pub fn free(&mut self, b: BlockId) {
        let i = b.0 as usize;
        self.blocks[i].allocated = false;
        self.allocated -= self.blocks[i].size;
        if let Some(p) = self.blocks[i].prev {
            let p = p as usize;
            if !self.blocks[p].allocated {
                self.remove_free(p);
                self.blocks[i].addr = self.blocks[p].addr;
                self.blocks[i].size += self.blocks[p].size;
                let pp = self.blocks[p].prev;
                self.blocks[i].prev = pp;
                if let Some(pp) = pp {
                    self.blocks[pp as usize].next = Some(i as u32);
                }
                self.recycled.push(p);
            }
        }
        if let Some(n) = self.blocks[i].next {
            let n = n as usize;
            if !self.blocks[n].allocated {
                self.remove_free(n);
                self.blocks[i].size += self.blocks[n].size;
                let nn = self.blocks[n].next;
                self.blocks[i].next = nn;
                if let Some(nn) = nn {
                    self.blocks[nn as usize].prev = Some(i as u32);
                }
                self.recycled.push(n);
            }
        }
        self.insert_free(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The pool picks what the allocator's ordered set of `(size, address, block)` picks.
        #[test]
        fn free_pool_orders_as_a_set_of_size_address(
            ops in prop::collection::vec((0u8..3, 1u64..200, any::<prop::sample::Index>()), 1..600)
        ) {
            let mut pool = FreePool::default();
            let mut set: BTreeSet<(u64, u64, usize)> = BTreeSet::new();
            let mut next_addr = 0u64;
            for (op, size, pick) in ops {
                match op {
                    0 => {
                        // few distinct sizes, unique addresses (as real blocks have)
                        next_addr += 1 + size % 3;
                        let block = next_addr as usize * 7;
                        pool.insert(size * 512, next_addr, block);
                        set.insert((size * 512, next_addr, block));
                    }
                    1 if !set.is_empty() => {
                        let key = *set.iter().nth(pick.index(set.len())).unwrap();
                        set.remove(&key);
                        pool.remove(key.0, key.1);
                    }
                    _ => {
                        let want = size * 512;
                        let expected = set.range((want, 0, 0)..).next().copied();
                        if let Some(k) = expected {
                            set.remove(&k);
                        }
                        prop_assert_eq!(pool.take_best_fit(want), expected.map(|k| k.2));
                    }
                }
                let flat: Vec<(u64, u64, usize)> = pool
                    .sizes
                    .iter()
                    .zip(&pool.lists)
                    .flat_map(|(s, list)| list.iter().rev().map(move |&(a, b)| (*s, a, b)))
                    .collect();
                prop_assert_eq!(flat, set.iter().copied().collect::<Vec<_>>());
                prop_assert!(pool.sizes.windows(2).all(|w| w[0] < w[1]));
                for (g, list) in pool.lists.iter().enumerate() {
                    prop_assert_eq!(pool.nonempty[g / 64] >> (g % 64) & 1 == 1, !list.is_empty());
                }
            }
        }
    }

    #[test]
    fn rounds_and_pools() {
        let mut a = CachingAllocator::new();
        let b = a.malloc(4).unwrap();
        assert_eq!(a.allocated(), 512);
        assert_eq!(a.reserved(), SMALL_BUFFER);
        a.free(b);
        assert_eq!(a.allocated(), 0);
        assert_eq!(a.reserved(), SMALL_BUFFER);
        // a 3 MiB request takes a 20 MiB segment; a 12 MiB one fits in its 17 MiB remainder
        let c = a.malloc(3 << 20).unwrap();
        assert_eq!(a.reserved(), SMALL_BUFFER + LARGE_BUFFER);
        let d = a.malloc((12 << 20) + 1).unwrap();
        assert_eq!(a.reserved(), SMALL_BUFFER + LARGE_BUFFER);
        // a 15 MiB request does not fit any more: its own segment, rounded up to 2 MiB
        let big = a.malloc((15 << 20) + 1).unwrap();
        assert_eq!(a.reserved(), SMALL_BUFFER + LARGE_BUFFER + (16 << 20));
        a.free(c);
        a.free(d);
        a.free(big);
        // best fit: a 10 MiB request splits the 16 MiB block (the remainder is over 1 MiB)
        let e = a.malloc(10 << 20).unwrap();
        assert_eq!(a.block_size(e), 10 << 20);
        assert_eq!(a.segments(), 3);
    }

    #[test]
    fn unsplit_block_counts_whole() {
        let mut a = CachingAllocator::new();
        let b = a.malloc(20 << 20).unwrap();
        a.free(b);
        // 19.5 MiB in a 20 MiB free block: remainder 0.5 MiB <= 1 MiB, not split
        let c = a.malloc((19 << 20) + (1 << 19)).unwrap();
        assert_eq!(a.block_size(c), 20 << 20);
        assert_eq!(a.allocated(), 20 << 20);
    }

    /// Capped, a segment past the cap first frees the cached segments that hold no live block
    /// (PyTorch's `release_cached_blocks` after a failed `cudaMalloc`), and is out of memory if
    /// it is past the cap still.
    #[test]
    fn a_reserved_limit_releases_the_cache_then_runs_out() {
        const MIB: u64 = 1 << 20;
        let run = |limit: Option<u64>| {
            let mut a = CachingAllocator::new();
            a.set_reserved_limit(limit);
            for size in [12, 14] {
                // each a little larger than the cached segment before it, as without a KV cache
                let b = a.malloc(size * MIB).unwrap();
                a.free(b);
            }
            let live = a.malloc(16 * MIB).unwrap();
            let after_release = (a.reserved(), a.out_of_memory());
            let second = a.malloc(16 * MIB).unwrap();
            assert_eq!(a.block_size(live), 16 * MIB);
            assert_eq!(a.block_size(second), 16 * MIB);
            (after_release, a.reserved(), a.out_of_memory())
        };
        // no cap: every segment stays
        assert_eq!(run(None), ((42 * MIB, false), 58 * MIB, false));
        // a 30 MiB cap: the 12 and 14 MiB cached segments go for the first 16 MiB; the second
        // one has nothing left to release
        assert_eq!(run(Some(30 * MIB)), ((16 * MIB, false), 32 * MIB, true));
    }

    #[test]
    fn coalesces_neighbours() {
        let mut a = CachingAllocator::new();
        let x = a.malloc(2 << 20).unwrap();
        let y = a.malloc(2 << 20).unwrap();
        let z = a.malloc(2 << 20).unwrap();
        assert_eq!(a.segments(), 1);
        a.free(x);
        a.free(z);
        a.free(y);
        // the whole 20 MiB segment is one free block again
        let w = a.malloc(19 << 20).unwrap();
        assert_eq!(a.segments(), 1);
        assert_eq!(a.block_size(w), 20 << 20);
    }
}
