//! Properties of the caching-allocator model over random allocation/free sequences.

use proptest::prelude::*;
use vramscope_core::allocator::{round_size, CachingAllocator};

proptest! {
    #[test]
    fn allocated_tracks_live_blocks(ops in prop::collection::vec((1u64..64 << 20, any::<bool>(), any::<prop::sample::Index>()), 1..200)) {
        let mut a = CachingAllocator::new();
        let mut live = Vec::new();
        for (size, free, idx) in ops {
            if free && !live.is_empty() {
                let (b, _) = live.swap_remove(idx.index(live.len()));
                a.free(b);
            } else if let Some(b) = a.malloc(size) {
                prop_assert!(a.block_size(b) >= round_size(size));
                live.push((b, size));
            }
            let sum: u64 = live.iter().map(|&(b, _)| a.block_size(b)).sum();
            prop_assert_eq!(a.allocated(), sum);
            prop_assert!(a.reserved() >= a.allocated());
        }
        let reserved = a.reserved();
        for (b, _) in live.drain(..) {
            a.free(b);
        }
        prop_assert_eq!(a.allocated(), 0);
        // the cache keeps every segment (no empty_cache)
        prop_assert_eq!(a.reserved(), reserved);
    }

    #[test]
    fn a_freed_request_is_served_again_without_new_segments(size in 1u64..200 << 20) {
        let mut a = CachingAllocator::new();
        let b = a.malloc(size).unwrap();
        let reserved = a.reserved();
        a.free(b);
        let _again = a.malloc(size).unwrap();
        prop_assert_eq!(a.reserved(), reserved);
    }
}
