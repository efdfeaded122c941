//! vramscope-advice: what fits and what to change. Every answer is a re-simulation of the step
//! with the engine of vramscope-core: the fit search (largest batch for a GPU, smallest GPU for a
//! batch), the memory-saving tricks, and the plain-words account of each phase.
#![deny(missing_docs)]

pub mod fit;
pub mod render;
pub mod tricks;

pub use fit::{
    fit_by_seq_len, fit_search, parse_margin, reserved_with_cache_release, runs_on, smallest_gpu,
    with_cache_release, BySeqLen, Estimate, FitResult, Runs, SeqLenFit, SmallestGpu, Target,
    SEQ_LENS,
};

/// Why advice could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    /// The model could not be built at a size the search needed.
    #[error("building the model with size {size}: {message}")]
    Build {
        /// The size tried.
        size: u64,
        /// The front-end's message.
        message: String,
    },
    /// The simulator refused the step.
    #[error(transparent)]
    Sim(#[from] vramscope_core::sim::SimError),
}
