//! The errors of the monitoring library.

use std::path::PathBuf;

/// What can go wrong while reading GPUs.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// NVML could not be loaded or initialised: no NVIDIA driver on this machine (or no access).
    #[error(
        "no NVIDIA driver: {detail}. `vramscope watch` and `vramscope run` read real GPUs through \
         NVML, which comes with the NVIDIA driver; on a machine without one, `vramscope estimate` \
         still predicts memory"
    )]
    NoDriver {
        /// Why loading failed, as NVML or the dynamic loader said it.
        detail: String,
    },
    /// This build has no NVML support.
    #[error(
        "no NVIDIA driver support in this build: vramscope was built without the cargo feature \
         `nvml`; rebuild with default features to read real GPUs"
    )]
    NotBuilt,
    /// An NVML call failed for the whole sample (per-field failures are reported as unavailable).
    #[error("NVML {call}: {detail}")]
    Nvml {
        /// The call that failed.
        call: &'static str,
        /// NVML's message.
        detail: String,
    },
    /// A fake-GPU script could not be read.
    #[error("fake GPU script {}: {detail}", path.display())]
    FakeScript {
        /// The script file.
        path: PathBuf,
        /// What was wrong with it.
        detail: String,
    },
    /// The sampling thread ended before sending a sample.
    #[error("the GPU sampling thread stopped unexpectedly")]
    SamplerStopped,
}
