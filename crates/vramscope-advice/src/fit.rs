//! What fits: the largest size of one dimension (the batch, or a transformer's sequence length)
//! whose predicted device memory fits a GPU with a margin, found by re-simulating (for a
//! transformer without a length, the largest batch at each of several lengths); and the reverse
//! question, the smallest GPU of the table that fits a step.
//!
//! Device memory is what `nvidia-smi` shows: the simulator's peak reserved memory plus the GPU's
//! CUDA context and library workspace. The search evaluates the batch-1 step and a probe, guesses
//! the answer from the (near-linear) growth, gallops from the guess until it brackets the
//! boundary, then bisects. Memory is not always monotone in the size at the allocator level
//! (block rounding and segment reuse), so the result states what was verified: the answer fits,
//! the next size does not, and a few sizes above were checked as well.

use serde::Serialize;
use vramscope_core::sim::{simulate, Simulation, StepConfig};
use vramscope_core::Graph;
use vramscope_report::{CacheReleaseInfo, Gpu, GPUS};

use crate::AdviceError;

/// The largest size ever tried (a batch of four million samples).
pub const MAX_SIZE: u64 = 1 << 22;

/// Sizes above `size + 1` that are checked for a non-monotone "fits again".
const LOOKAHEAD: u64 = 3;

/// A GPU and the fraction of its memory kept free.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    /// Fraction of the GPU's memory to leave free (0.05 for 5%).
    pub margin: f64,
}

impl Target<'_> {
    /// Device bytes a step may use: the GPU's memory less the margin.
    pub fn budget(&self) -> u64 {
        (self.gpu.memory_bytes as f64 * (1.0 - self.margin.clamp(0.0, 1.0))).floor() as u64
    }

    /// Device bytes of a step whose peak reserved memory is `reserved`.
    pub fn device_bytes(&self, reserved: u64) -> u64 {
        reserved + self.gpu.overhead_bytes()
    }
}

/// The predicted memory of one step at one size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// The searched dimension's value (the batch size).
    pub size: u64,
    /// Peak `memory_allocated()`.
    pub allocated_bytes: u64,
    /// Peak `memory_reserved()`.
    pub reserved_bytes: u64,
    /// Reserved + CUDA context + library workspace (what nvidia-smi shows).
    pub device_bytes: u64,
    /// Phase of the allocated peak.
    pub peak_phase: String,
    /// Whether `device_bytes` is within the budget.
    pub fits: bool,
    /// The step fits only with the allocator capped at the budget, freeing its cached segments
    /// and retrying when a segment would not fit (as PyTorch does before raising
    /// out-of-memory): `reserved_bytes` and `device_bytes` are then the capped run's.
    pub cache_released: bool,
}

impl Estimate {
    /// A size whose graph cannot be built (tensors too large, a sequence past the model's
    /// positions): it does not fit.
    fn unbuildable(size: u64) -> Estimate {
        Estimate {
            size,
            allocated_bytes: u64::MAX,
            reserved_bytes: u64::MAX,
            device_bytes: u64::MAX,
            peak_phase: String::new(),
            fits: false,
            cache_released: false,
        }
    }

    /// Whether the graph could be built at this size (see [`Estimate::unbuildable`]).
    pub fn built(&self) -> bool {
        self.device_bytes != u64::MAX
    }
}

/// The answer of a fit search.
#[derive(Debug, Clone, Serialize)]
pub struct FitResult {
    /// The searched dimension (`batch_size`).
    pub dimension: String,
    /// The largest size that fits (0 when not even size 1 fits).
    pub size: u64,
    /// GPU name.
    pub gpu: String,
    /// GPU memory.
    pub gpu_memory_bytes: u64,
    /// The margin, as a fraction.
    pub margin: f64,
    /// Device bytes allowed.
    pub budget_bytes: u64,
    /// The estimate at `size` (none when nothing fits).
    pub at_size: Option<Estimate>,
    /// The estimate at `size + 1` (does not fit, unless the search hit [`MAX_SIZE`]).
    pub next_size: Option<Estimate>,
    /// Sizes above `size + 1` that were simulated to look for a non-monotone "fits again", and
    /// the ones among them that fit.
    pub checked_above: Vec<u64>,
    /// Of `checked_above`, those that fit (normally none).
    pub fits_again_at: Vec<u64>,
    /// Whether `size` fits and `size + 1` does not, both simulated.
    pub verified: bool,
    /// Simulations run.
    pub simulations: u32,
}

/// Simulates one size; `build` makes the graph for a size.
fn estimate_at<F>(
    build: &mut F,
    cfg: &StepConfig,
    target: &Target,
    size: u64,
    sims: &mut u32,
) -> Result<Estimate, AdviceError>
where
    F: FnMut(u64) -> Result<Graph, String>,
{
    let graph = build(size).map_err(|e| AdviceError::Build { size, message: e })?;
    let sim = simulate(&graph, cfg)?;
    *sims += 1;
    let mut estimate = Estimate {
        size,
        allocated_bytes: sim.peak_allocated,
        reserved_bytes: sim.peak_reserved,
        device_bytes: target.device_bytes(sim.peak_reserved),
        peak_phase: sim
            .phases
            .get(sim.peak_phase)
            .map(|p| p.name.clone())
            .unwrap_or_default(),
        fits: false,
        cache_released: false,
    };
    if let Some(runs) = runs_on(&graph, cfg, &sim, target, sims)? {
        estimate.reserved_bytes = runs.reserved_bytes;
        estimate.device_bytes = target.device_bytes(runs.reserved_bytes);
        estimate.fits = true;
        estimate.cache_released = runs.cache_released;
    }
    Ok(estimate)
}

/// How a step runs on a [`Target`] ([`runs_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    /// Its peak reserved memory there.
    pub reserved_bytes: u64,
    /// Only on an allocator capped at the budget, freeing its cached segments.
    pub cache_released: bool,
}

/// Whether the step `sim` (of `graph` in `cfg`) runs on `target`, as `fit`, the smallest-GPU
/// table and `tricks --gpu` decide: its reserved peak plus the GPU's overheads within the
/// budget, or, where only the allocator's cache is over, a run capped at the budget that frees
/// the cache and runs out of nothing ([`with_cache_release`]). `None`: it does not run.
pub fn runs_on(
    graph: &Graph,
    cfg: &StepConfig,
    sim: &Simulation,
    target: &Target,
    sims: &mut u32,
) -> Result<Option<Runs>, AdviceError> {
    if target.device_bytes(sim.peak_reserved) <= target.budget() {
        return Ok(Some(Runs {
            reserved_bytes: sim.peak_reserved,
            cache_released: false,
        }));
    }
    Ok(
        reserved_with_cache_release(graph, cfg, sim, target, sims)?.map(|reserved| Runs {
            reserved_bytes: reserved,
            cache_released: true,
        }),
    )
}

/// A step whose reserved memory (`sim`, on a GPU with room to spare) is over `target`'s budget
/// but whose allocated peak is not, simulated again with the allocator capped at the budget:
/// it frees its cached segments and retries when a segment would not fit, as PyTorch does
/// before raising out-of-memory. Whether that run ran out of memory, and its peak reserved
/// memory; `None` where the allocated peak alone is over (nothing to release would help).
pub fn with_cache_release(
    graph: &Graph,
    cfg: &StepConfig,
    sim: &Simulation,
    target: &Target,
    sims: &mut u32,
) -> Result<Option<CacheReleaseInfo>, AdviceError> {
    let overhead = target.gpu.overhead_bytes();
    if sim.peak_allocated + overhead > target.budget() {
        return Ok(None);
    }
    let capped = StepConfig {
        reserved_limit: Some(target.budget() - overhead),
        record_events: false,
        ..cfg.clone()
    };
    let again = simulate(graph, &capped)?;
    *sims += 1;
    Ok(Some(CacheReleaseInfo {
        fits: !again.out_of_memory,
        peak_reserved_bytes: again.peak_reserved,
    }))
}

/// [`with_cache_release`]'s peak reserved memory where the capped run fits.
pub fn reserved_with_cache_release(
    graph: &Graph,
    cfg: &StepConfig,
    sim: &Simulation,
    target: &Target,
    sims: &mut u32,
) -> Result<Option<u64>, AdviceError> {
    Ok(with_cache_release(graph, cfg, sim, target, sims)?
        .filter(|c| c.fits)
        .map(|c| c.peak_reserved_bytes))
}

/// Finds the largest size of `dimension` that fits `target`. `build(size)` builds the graph with
/// that size (the batch, or the sequence length at a fixed batch); `cfg` is the step.
pub fn fit_search<F>(
    dimension: &str,
    mut build: F,
    cfg: &StepConfig,
    target: &Target,
) -> Result<FitResult, AdviceError>
where
    F: FnMut(u64) -> Result<Graph, String>,
{
    let mut sims = 0u32;
    let mut result = FitResult {
        dimension: dimension.to_string(),
        size: 0,
        gpu: target.gpu.name.clone(),
        gpu_memory_bytes: target.gpu.memory_bytes,
        margin: target.margin,
        budget_bytes: target.budget(),
        at_size: None,
        next_size: None,
        checked_above: Vec::new(),
        fits_again_at: Vec::new(),
        verified: false,
        simulations: 0,
    };
    let one = estimate_at(&mut build, cfg, target, 1, &mut sims)?;
    if !one.fits {
        result.next_size = Some(one);
        result.verified = true;
        result.simulations = sims;
        return Ok(result);
    }
    // a size whose graph cannot be built (tensors too large) does not fit
    let mut fits = |size: u64, sims: &mut u32| -> Result<Estimate, AdviceError> {
        match estimate_at(&mut build, cfg, target, size, sims) {
            Err(AdviceError::Build { .. }) => Ok(Estimate::unbuildable(size)),
            r => r,
        }
    };
    // (lo fits, hi does not)
    let mut lo = one.clone();
    let probe_size = 16.min(MAX_SIZE);
    let probe = fits(probe_size, &mut sims)?;
    let mut hi: Option<Estimate> = None;
    if probe.fits {
        // guess from the growth between 1 and the probe, then gallop to bracket the boundary
        let slope = (probe.device_bytes.saturating_sub(one.device_bytes) / (probe_size - 1)).max(1);
        let room = target.budget().saturating_sub(probe.device_bytes);
        let guess = (probe_size + room / slope).clamp(probe_size + 1, MAX_SIZE);
        lo = probe;
        let g = fits(guess, &mut sims)?;
        let mut step = (guess / 64).max(1);
        if g.fits {
            lo = g;
            while lo.size < MAX_SIZE {
                let s = (lo.size + step).min(MAX_SIZE);
                let e = fits(s, &mut sims)?;
                if !e.fits {
                    hi = Some(e);
                    break;
                }
                lo = e;
                step *= 2;
            }
        } else {
            let mut h = g;
            loop {
                let s = h.size.saturating_sub(step).max(lo.size);
                if s == lo.size {
                    break;
                }
                let e = fits(s, &mut sims)?;
                if e.fits {
                    lo = e;
                    break;
                }
                h = e;
                step *= 2;
            }
            hi = Some(h);
        }
    } else {
        hi = Some(probe);
    }
    // bisect
    while let Some(h) = hi.as_ref() {
        if h.size <= lo.size + 1 {
            break;
        }
        let mid = lo.size + (h.size - lo.size) / 2;
        let e = fits(mid, &mut sims)?;
        if e.fits {
            lo = e;
        } else {
            hi = Some(e);
        }
    }
    result.size = lo.size;
    result.verified = hi
        .as_ref()
        .is_some_and(|h| h.size == lo.size + 1 && !h.fits)
        && lo.fits;
    if let Some(h) = hi.as_ref().filter(|h| h.size == lo.size + 1) {
        for s in (h.size + 1..=h.size + LOOKAHEAD).filter(|&s| s <= MAX_SIZE) {
            let e = fits(s, &mut sims)?;
            result.checked_above.push(s);
            if e.fits {
                result.fits_again_at.push(s);
            }
        }
    }
    result.at_size = Some(lo);
    result.next_size = hi;
    result.simulations = sims;
    Ok(result)
}

/// The sequence lengths [`fit_by_seq_len`] searches the batch at.
pub const SEQ_LENS: [u64; 6] = [512, 1024, 2048, 4096, 8192, 16384];

/// A batch search at one sequence length.
#[derive(Debug, Clone, Serialize)]
pub struct SeqLenFit {
    /// The sequence length.
    pub seq_len: u64,
    /// The largest batch at it.
    #[serde(flatten)]
    pub batch: FitResult,
}

/// A transformer fitted without a sequence length: the largest batch at each of several lengths,
/// and the longest sequence at batch size 1.
#[derive(Debug, Clone, Serialize)]
pub struct BySeqLen {
    /// One batch search per length, shortest first.
    pub by_seq_len: Vec<SeqLenFit>,
    /// Why the list ends before the last length asked for (the model refuses the next length,
    /// or not even batch size 1 fits at the last one).
    pub stopped: Option<String>,
    /// The longest sequence at batch size 1.
    pub longest_seq_len_at_batch_size_1: FitResult,
}

/// Answers "how large a batch at which length, and how long a sequence?" for a transformer:
/// a batch search ([`fit_search`]) at each of `seq_lens` until the model refuses a length or
/// batch size 1 no longer fits, then a sequence-length search at batch size 1. `build(seq,
/// batch)` builds the graph.
pub fn fit_by_seq_len<F>(
    seq_lens: &[u64],
    mut build: F,
    cfg: &StepConfig,
    target: &Target,
) -> Result<BySeqLen, AdviceError>
where
    F: FnMut(u64, u64) -> Result<Graph, String>,
{
    let mut rows = Vec::new();
    let mut stopped = None;
    for &seq_len in seq_lens {
        let batch = match fit_search("batch_size", |b| build(seq_len, b), cfg, target) {
            Ok(r) => r,
            // a length past the config's positions: the list ends there
            Err(AdviceError::Build { size: 1, message }) => {
                stopped = Some(message);
                break;
            }
            Err(e) => return Err(e),
        };
        let none = batch.size == 0;
        rows.push(SeqLenFit { seq_len, batch });
        if none {
            stopped = Some(format!("batch size 1 does not fit at {seq_len} tokens"));
            break;
        }
    }
    Ok(BySeqLen {
        by_seq_len: rows,
        stopped,
        longest_seq_len_at_batch_size_1: fit_search("seq_len", |s| build(s, 1), cfg, target)?,
    })
}

/// One row of the reverse question: whether a step fits a GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GpuFit {
    /// GPU name.
    pub gpu: String,
    /// GPU memory.
    pub memory_bytes: u64,
    /// Device bytes allowed with the margin.
    pub budget_bytes: u64,
    /// Predicted device bytes on this GPU.
    pub device_bytes: u64,
    /// Whether it fits.
    pub fits: bool,
    /// Whether the table has memory only for this GPU (AMD: no context/workspace numbers).
    pub memory_only: bool,
}

/// The reverse question: every GPU of the table, smallest memory first, with whether a step of
/// `graph` fits it with `margin`, and the smallest that does.
#[derive(Debug, Clone, Serialize)]
pub struct SmallestGpu {
    /// Peak allocated bytes of the step.
    pub allocated_bytes: u64,
    /// Peak reserved bytes of the step.
    pub reserved_bytes: u64,
    /// The margin.
    pub margin: f64,
    /// The smallest GPU that fits, if any.
    pub smallest: Option<String>,
    /// Every GPU, by memory.
    pub gpus: Vec<GpuFit>,
}

/// Answers "which is the smallest GPU that fits this step?".
pub fn smallest_gpu(
    graph: &Graph,
    cfg: &StepConfig,
    margin: f64,
) -> Result<SmallestGpu, AdviceError> {
    let sim = simulate(graph, cfg)?;
    let mut gpus: Vec<&Gpu> = GPUS.iter().collect();
    gpus.sort_by_key(|g| g.memory_bytes);
    let mut sims = 0;
    let mut rows = Vec::with_capacity(gpus.len());
    for g in gpus {
        let t = Target { gpu: g, margin };
        let runs = runs_on(graph, cfg, &sim, &t, &mut sims)?;
        let reserved = runs.map_or(sim.peak_reserved, |r| r.reserved_bytes);
        let (device, fits) = (t.device_bytes(reserved), runs.is_some());
        rows.push(GpuFit {
            gpu: g.name.clone(),
            memory_bytes: g.memory_bytes,
            budget_bytes: t.budget(),
            device_bytes: device,
            fits,
            memory_only: g.compute_capability.is_none(),
        });
    }
    Ok(SmallestGpu {
        allocated_bytes: sim.peak_allocated,
        reserved_bytes: sim.peak_reserved,
        margin,
        smallest: rows.iter().find(|r| r.fits).map(|r| r.gpu.clone()),
        gpus: rows,
    })
}

/// Parses a margin: `5%`, `0.05`, or `5` (a bare number of 1 or more is a percentage).
pub fn parse_margin(s: &str) -> Option<f64> {
    let t = s.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (t, false),
    };
    let v: f64 = num.parse().ok()?;
    let frac = if pct || v >= 1.0 { v / 100.0 } else { v };
    (v.is_finite() && (0.0..1.0).contains(&frac)).then_some(frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins() {
        assert_eq!(parse_margin("5%"), Some(0.05));
        assert_eq!(parse_margin("0.1"), Some(0.1));
        assert_eq!(parse_margin("10"), Some(0.1));
        assert_eq!(parse_margin("0"), Some(0.0));
        assert_eq!(parse_margin("100%"), None);
        assert_eq!(parse_margin("-1"), None);
        assert_eq!(parse_margin("x"), None);
    }
}
