//! The allocator-facing half of the simulator: the caching-allocator model and the accounting
//! around it (per-phase and overall peaks, the breakdown by category, block lifetimes for the
//! live-at-peak list, the event trace).
//!
//! The rest of the simulator never reads it back while it runs: it only tells it what happens
//! (a storage is allocated, freed or changes category, a phase starts) as [`Msg`]s, in order. So
//! the model can run on a second thread, batches of messages behind ([`MemoryFeed`]); it sees
//! the same messages in the same order either way, and its results are the same.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::allocator::{round_size, BlockId, CachingAllocator};

use super::{Breakdown, Category, Event, Label, PhaseStats};

/// What the simulator tells the memory model. Storage ids are implicit: the n-th
/// [`Msg::Alloc`] makes storage n.
#[derive(Debug, Clone, Copy)]
pub(super) enum Msg {
    /// A new storage of `bytes` bytes (no block when 0).
    Alloc { bytes: u64, category: Category },
    /// The storage's last reference is gone.
    Free(u32),
    /// A storage is now counted under another category (a gradient stolen by `AccumulateGrad`).
    Recategorize(u32, Category),
    /// A phase starts (its name stays with the simulator).
    Phase,
}

/// Messages per batch: enough that handing a batch over costs little, few enough that the
/// batches the simulator applies itself at the end are short.
const BATCH: usize = 2048;

/// Batches waiting for the model's thread beyond which the simulator applies them itself (the
/// thread is slow, or not running): the thread can only make an estimate faster, never slower
/// than doing all the work on one thread (by more than the hand-overs).
const MAX_WAITING: usize = 2;

/// How many times the model's thread checks for a batch before it sleeps until the next one.
const SPINS: u32 = 1 << 14;

/// How long the model may take applying batches on the simulator's thread before it moves to a
/// thread of its own (`ModelThread::Auto`). A second thread pays only where the model has much
/// to do: on the development VM a new thread often starts running milliseconds after it is
/// spawned, so in a short simulation the simulator ends up applying most batches itself and the
/// thread's start, hand-overs and join are pure cost (`validation/ab_runs.py`, docs/performance.md:
/// the 70B training estimate, about 1.1 ms of model work, 4.84 ms median with the thread from the
/// start against 4.46 ms with this budget; a generation of llama-3-8b, about 5 ms of model work,
/// 27.3 ms on one thread, 23.5 ms with the thread from the start, 25.3 ms with this budget).
const MODEL_TIME_BEFORE_THREAD: Duration = Duration::from_micros(2500);

/// Where the memory model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModelThread {
    /// On the simulator's thread, then, once the model has taken [`MODEL_TIME_BEFORE_THREAD`]
    /// there and when the process may use two CPUs, on a thread of its own (when one can be
    /// started).
    Auto,
    /// On the simulator's thread.
    Never,
    /// On a thread of its own whatever the simulation's length and the CPUs (tests of the
    /// threaded path).
    Always,
    /// On the simulator's thread, then, once the model has taken this long there, on a thread
    /// of its own whatever the CPUs (tests of the move).
    #[cfg(test)]
    After(Duration),
}

/// The memory model's state.
pub(super) struct MemoryModel {
    pub(super) alloc: CachingAllocator,
    /// per storage: its block (`u32::MAX`: none, or freed) and current category
    blocks: Vec<(u32, Category)>,
    /// per storage, the block events before its allocation and before its free (`u32::MAX`: no
    /// block, not freed): the live-at-peak list is read from these
    lifetimes: Vec<(u32, u32)>,
    /// block events (allocations and frees) so far
    block_events: u32,
    pub(super) phases: Vec<PhaseStats>,
    cur_cat: Breakdown,
    pub(super) peak_allocated: u64,
    pub(super) peak_reserved: u64,
    pub(super) peak_phase: usize,
    /// block events before the overall peak was (last) reached
    peak_event: u32,
    record_events: bool,
    /// the event trace; labels, modules and exact bytes are filled in by the simulator
    pub(super) events: Vec<Event>,
}

const NO_BLOCK: u32 = u32::MAX;

impl MemoryModel {
    pub(super) fn new(storages: usize, blocks: usize, record_events: bool) -> Self {
        MemoryModel {
            alloc: CachingAllocator::with_block_capacity(blocks),
            blocks: Vec::with_capacity(storages),
            lifetimes: Vec::with_capacity(storages),
            block_events: 0,
            phases: Vec::new(),
            cur_cat: Breakdown::default(),
            peak_allocated: 0,
            peak_reserved: 0,
            peak_phase: 0,
            peak_event: 0,
            record_events,
            events: Vec::new(),
        }
    }

    /// A model that has seen nothing and holds no memory (what a finished feed keeps).
    fn empty() -> Self {
        Self::new(0, 0, false)
    }

    fn apply(&mut self, msgs: &[Msg]) {
        for &m in msgs {
            match m {
                Msg::Alloc { bytes, category } => self.alloc_storage(bytes, category),
                Msg::Free(sid) => self.free_storage(sid),
                Msg::Recategorize(sid, to) => self.recategorize(sid, to),
                Msg::Phase => self.phase(),
            }
        }
    }

    fn phase(&mut self) {
        let a = self.alloc.allocated();
        let r = self.alloc.reserved();
        self.phases.push(PhaseStats {
            name: String::new(),
            allocated_after: a,
            peak_allocated: a,
            reserved_after: r,
            peak_reserved: r,
            allocated_bytes: 0,
            freed_bytes: 0,
            breakdown_at_peak: self.cur_cat,
        });
    }

    fn bump(&mut self) {
        let a = self.alloc.allocated();
        let r = self.alloc.reserved();
        let ph = self.phases.len() - 1;
        let p = &mut self.phases[ph];
        if a > p.peak_allocated {
            p.peak_allocated = a;
            p.breakdown_at_peak = self.cur_cat;
        }
        p.peak_reserved = p.peak_reserved.max(r);
        p.allocated_after = a;
        p.reserved_after = r;
        if a > self.peak_allocated {
            self.peak_allocated = a;
            self.peak_event = self.block_events;
            // the phase's peak moved too, at this same event: its breakdown is the overall one
            self.peak_phase = ph;
        }
        self.peak_reserved = self.peak_reserved.max(r);
    }

    fn alloc_storage(&mut self, bytes: u64, category: Category) {
        let sid = self.blocks.len() as u32;
        let block = self.alloc.malloc(bytes);
        let bsize = block.map(|b| self.alloc.block_size(b)).unwrap_or(0);
        self.cur_cat.0[category.index()] += bsize;
        let ph = self.phases.len() - 1;
        self.phases[ph].allocated_bytes += bsize;
        self.blocks
            .push((block.map_or(NO_BLOCK, |b| b.0), category));
        if block.is_some() {
            self.lifetimes.push((self.block_events, u32::MAX));
            self.block_events += 1;
            self.bump();
            self.record(true, sid, category, bsize);
        } else {
            self.lifetimes.push((u32::MAX, u32::MAX));
        }
    }

    fn free_storage(&mut self, sid: u32) {
        let (block, category) = self.blocks[sid as usize];
        if block == NO_BLOCK {
            return;
        }
        self.blocks[sid as usize].0 = NO_BLOCK;
        let b = BlockId(block);
        let size = self.alloc.block_size(b);
        self.alloc.free(b);
        self.cur_cat.0[category.index()] -= size;
        // a free lowers `allocated` and leaves `reserved` as it was: no peak to update
        let (allocated, reserved) = (self.alloc.allocated(), self.alloc.reserved());
        let ph = self.phases.len() - 1;
        let p = &mut self.phases[ph];
        p.freed_bytes += size;
        p.allocated_after = allocated;
        p.reserved_after = reserved;
        self.lifetimes[sid as usize].1 = self.block_events;
        self.block_events += 1;
        self.record(false, sid, category, size);
    }

    fn recategorize(&mut self, sid: u32, to: Category) {
        let (block, from) = self.blocks[sid as usize];
        if block != NO_BLOCK {
            let size = self.alloc.block_size(BlockId(block));
            self.cur_cat.0[from.index()] -= size;
            self.cur_cat.0[to.index()] += size;
        }
        self.blocks[sid as usize].1 = to;
    }

    fn record(&mut self, alloc: bool, sid: u32, category: Category, block: u64) {
        if !self.record_events {
            return;
        }
        self.events.push(Event {
            phase: (self.phases.len() - 1) as u16,
            alloc,
            storage: sid,
            bytes: 0,
            block,
            category,
            label: Label::new(""),
            module: None,
            allocated: self.alloc.allocated(),
            reserved: self.alloc.reserved(),
        });
    }

    /// Segments the allocator created.
    pub(super) fn segments(&self) -> u64 {
        self.alloc.segments()
    }

    /// The 20 largest storages alive at the overall peak (block bytes, storage id), largest
    /// first; storages of equal size in the order they were made.
    pub(super) fn largest_live_at_peak(&self, bytes_of: impl Fn(u32) -> u64) -> Vec<(u64, u32)> {
        let n = self.peak_event;
        let mut live: Vec<(u64, u32)> = self
            .lifetimes
            .iter()
            .enumerate()
            .filter(|(_, &(allocated_at, freed_at))| allocated_at < n && freed_at >= n)
            .map(|(i, _)| (round_size(bytes_of(i as u32)), i as u32))
            .collect();
        // the same order as a stable sort of every live tensor by size, largest first (the keys
        // are distinct): pick the 20 first, then sort only those
        let key = |&(bytes, i): &(u64, u32)| (std::cmp::Reverse(bytes), i);
        if live.len() > 20 {
            live.select_nth_unstable_by_key(20, key);
            live.truncate(20);
        }
        live.sort_unstable_by_key(key);
        live
    }
}

/// Where the simulator sends its [`Msg`]s: the model itself on this thread, or the queue a
/// thread of its own works through.
pub(super) struct MemoryFeed {
    batch: Vec<Msg>,
    to: Destination,
    /// While the model is on this thread: how much longer it may take applying batches here
    /// before it moves to a thread of its own, and whether it moves only with two CPUs
    thread_after: Option<(Duration, bool)>,
}

enum Destination {
    Here(Box<MemoryModel>),
    Thread {
        shared: Arc<Shared>,
        worker: JoinHandle<()>,
    },
}

/// What the simulator and the model's thread share. Batches are applied in the order they were
/// queued: whoever applies them holds `model` while taking them off `queue`.
struct Shared {
    model: Mutex<MemoryModel>,
    queue: Mutex<VecDeque<Vec<Msg>>>,
    /// `queue`'s length (written under its lock), read without the lock
    waiting: AtomicUsize,
    /// emptied batches, for their memory to be reused
    spare: Mutex<Vec<Vec<Msg>>>,
    done: AtomicBool,
}

/// `m`'s lock, poisoned or not: a panic while applying leaves the model half-updated, and the
/// panic itself is reported (`finish` resumes it), so the poison carries no news.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Applies every queued batch, in order, under the model's lock.
    fn drain(&self, model: &mut MemoryModel) {
        loop {
            let next = {
                let mut queue = lock(&self.queue);
                let next = queue.pop_front();
                self.waiting.store(queue.len(), Ordering::Release);
                next
            };
            let Some(mut batch) = next else { return };
            model.apply(&batch);
            batch.clear();
            lock(&self.spare).push(batch);
        }
    }

    /// The model's thread: applies batches as they come, spinning a while for the next one before
    /// it sleeps (waking a sleeping thread costs more than a batch on a virtual machine).
    fn work(&self) {
        let mut spins = 0;
        loop {
            if self.waiting.load(Ordering::Acquire) > 0 {
                let mut model = lock(&self.model);
                self.drain(&mut model);
                spins = 0;
            } else if self.done.load(Ordering::Acquire) {
                return;
            } else if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::park();
            }
        }
    }
}

impl MemoryFeed {
    /// A feed to `model`, run where `thread` says.
    pub(super) fn new(model: MemoryModel, thread: ModelThread) -> Self {
        let mut feed = MemoryFeed {
            batch: Vec::with_capacity(BATCH),
            to: Destination::Here(Box::new(model)),
            thread_after: None,
        };
        match thread {
            ModelThread::Auto => feed.thread_after = Some((MODEL_TIME_BEFORE_THREAD, true)),
            ModelThread::Never => {}
            ModelThread::Always => feed.start_thread(),
            #[cfg(test)]
            ModelThread::After(wait) => feed.thread_after = Some((wait, false)),
        }
        feed
    }

    /// Moves the model to a thread of its own (it stays here when no thread can be started: a
    /// limit on threads).
    fn start_thread(&mut self) {
        // the model is on this thread until it moves, once
        let Destination::Here(here) = &mut self.to else {
            return;
        };
        let model = std::mem::replace(&mut **here, MemoryModel::empty());
        let shared = Arc::new(Shared {
            model: Mutex::new(model),
            queue: Mutex::new(VecDeque::new()),
            waiting: AtomicUsize::new(0),
            spare: Mutex::new(Vec::new()),
            done: AtomicBool::new(false),
        });
        let started = std::thread::Builder::new()
            .name("vramscope-allocator".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || shared.work()
            });
        self.to = match started {
            Ok(worker) => Destination::Thread { shared, worker },
            Err(_) => Destination::Here(Box::new(Self::unshare(&shared))),
        };
    }

    /// The shared model, an empty one left in its place.
    fn unshare(shared: &Shared) -> MemoryModel {
        std::mem::replace(&mut *lock(&shared.model), MemoryModel::empty())
    }

    #[inline]
    pub(super) fn send(&mut self, m: Msg) {
        self.batch.push(m);
        if self.batch.len() == BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        match &mut self.to {
            Destination::Here(model) => {
                let Some((left, needs_two_cpus)) = self.thread_after else {
                    model.apply(&self.batch);
                    self.batch.clear();
                    return;
                };
                let start = Instant::now();
                model.apply(&self.batch);
                self.batch.clear();
                match left.checked_sub(start.elapsed()) {
                    Some(left) if !left.is_zero() => {
                        self.thread_after = Some((left, needs_two_cpus))
                    }
                    _ => {
                        self.thread_after = None;
                        if !needs_two_cpus || two_cpus() {
                            self.start_thread();
                        }
                    }
                }
            }
            Destination::Thread { shared, worker } => {
                let next = lock(&shared.spare)
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(BATCH));
                let batch = std::mem::replace(&mut self.batch, next);
                let waiting = {
                    let mut queue = lock(&shared.queue);
                    queue.push_back(batch);
                    shared.waiting.store(queue.len(), Ordering::Release);
                    queue.len()
                };
                if waiting > MAX_WAITING {
                    // the thread lags: catch up here, unless it is at it right now
                    if let Ok(mut model) = shared.model.try_lock() {
                        shared.drain(&mut model);
                    }
                } else {
                    worker.thread().unpark();
                }
            }
        }
    }

    /// Applies what is left and returns the model once it has seen every message; the feed is
    /// left with an empty model on this thread.
    pub(super) fn finish(&mut self) -> MemoryModel {
        self.flush();
        let placeholder = Destination::Here(Box::new(MemoryModel::empty()));
        match std::mem::replace(&mut self.to, placeholder) {
            Destination::Here(model) => *model,
            Destination::Thread { shared, worker } => {
                shared.done.store(true, Ordering::Release);
                {
                    let mut model = lock(&shared.model);
                    shared.drain(&mut model);
                }
                worker.thread().unpark();
                if let Err(panic) = worker.join() {
                    std::panic::resume_unwind(panic);
                }
                Self::unshare(&shared)
            }
        }
    }
}

impl Drop for MemoryFeed {
    /// A simulation that ends without [`finish`](Self::finish) (a panic) stops the model's
    /// thread rather than leave it asleep for good.
    fn drop(&mut self) {
        if let Destination::Thread { shared, worker } = &self.to {
            shared.done.store(true, Ordering::Release);
            worker.thread().unpark();
        }
    }
}

/// Whether this process may run on two CPUs or more (asked once): on one, the model's thread
/// would only take turns with the simulator.
fn two_cpus() -> bool {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of allocations (sizes from 512 B to 64 MiB), frees of live storages and phases,
    /// from a fixed pseudo-random sequence.
    fn stream(n: usize) -> Vec<Msg> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut live: Vec<u32> = Vec::new();
        let mut made = 0u32;
        let mut msgs = vec![Msg::Phase];
        for _ in 0..n {
            let r = next();
            if r % 97 == 0 {
                msgs.push(Msg::Phase);
            } else if r % 3 == 0 && !live.is_empty() {
                let sid = live.swap_remove((r >> 8) as usize % live.len());
                msgs.push(Msg::Free(sid));
            } else if r % 41 == 0 && !live.is_empty() {
                let sid = live[(r >> 8) as usize % live.len()];
                msgs.push(Msg::Recategorize(sid, Category::Gradients));
            } else {
                let bytes = 512 << ((r >> 16) % 18);
                msgs.push(Msg::Alloc {
                    bytes,
                    category: Category::Activations,
                });
                live.push(made);
                made += 1;
            }
        }
        msgs
    }

    fn run(msgs: &[Msg], thread: ModelThread) -> MemoryModel {
        let mut feed = MemoryFeed::new(MemoryModel::new(0, 0, true), thread);
        for &m in msgs {
            feed.send(m);
        }
        feed.finish()
    }

    #[test]
    fn a_feed_dropped_unfinished_stops_its_thread() {
        let mut feed = MemoryFeed::new(MemoryModel::new(0, 0, false), ModelThread::Always);
        for &m in &stream(3 * BATCH) {
            feed.send(m);
        }
        let Destination::Thread { shared, worker } = &feed.to else {
            panic!("no thread")
        };
        let (thread, shared) = (worker.thread().clone(), Arc::downgrade(shared));
        drop(feed);
        // the thread drops its handle on the shared state when it returns
        let start = std::time::Instant::now();
        while shared.upgrade().is_some() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{:?} still running",
                thread.name()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn the_model_thread_sees_what_this_thread_sees() {
        // far more batches than may wait: the sender applies some itself while the thread runs
        let msgs = stream(40 * BATCH);
        let here = run(&msgs, ModelThread::Never);
        for thread in [
            ModelThread::Always,
            // moved after the first batch, and after a few
            ModelThread::After(Duration::ZERO),
            ModelThread::After(Duration::from_micros(1)),
        ] {
            assert_same_model(&here, &run(&msgs, thread));
        }
    }

    #[test]
    fn a_model_moves_to_its_thread_once_its_time_here_is_spent() {
        let mut feed = MemoryFeed::new(
            MemoryModel::new(0, 0, false),
            ModelThread::After(Duration::ZERO),
        );
        assert!(matches!(feed.to, Destination::Here(_)));
        for &m in &stream(BATCH) {
            feed.send(m);
        }
        assert!(matches!(feed.to, Destination::Thread { .. }));
        // the simulator's thread never moves it
        let mut feed = MemoryFeed::new(MemoryModel::new(0, 0, false), ModelThread::Never);
        for &m in &stream(3 * BATCH) {
            feed.send(m);
        }
        assert!(matches!(feed.to, Destination::Here(_)));
    }

    fn assert_same_model(here: &MemoryModel, threaded: &MemoryModel) {
        assert!(here.peak_allocated > 0 && here.phases.len() > 100);
        assert_eq!(here.peak_allocated, threaded.peak_allocated);
        assert_eq!(here.peak_reserved, threaded.peak_reserved);
        assert_eq!(here.peak_phase, threaded.peak_phase);
        assert_eq!(here.segments(), threaded.segments());
        assert_eq!(
            format!("{:?}", here.phases),
            format!("{:?}", threaded.phases)
        );
        assert_eq!(
            format!("{:?}", here.events),
            format!("{:?}", threaded.events)
        );
        let bytes = |_| 1;
        assert_eq!(
            here.largest_live_at_peak(bytes),
            threaded.largest_live_at_peak(bytes)
        );
    }
}
