//! vramscope-monitor: reads real GPU memory while programs run.
//!
//! A [`GpuSource`] answers "what is on the GPUs now" (NVML for real GPUs, [`FakeSource`] replaying a
//! script for tests); a [`Sampler`] asks it on its own thread at a fixed interval and sends
//! [`Sample`]s over a channel; [`procs`] resolves PIDs to users and commands and follows a process
//! tree through `/proc`; a [`Recorder`] turns the samples taken while a command runs into its
//! memory timeline, peak and baseline.
#![deny(missing_docs)]

mod display;
mod duration;
mod error;
mod fake;
#[cfg(feature = "nvml")]
mod nvml;
pub mod procs;
mod recorder;
mod sample;
mod sampler;
mod signals;
mod source;

pub use display::{bar, human, sparkline};
pub use duration::parse_interval;
pub use error::MonitorError;
pub use fake::FakeSource;
#[cfg(feature = "nvml")]
pub use nvml::NvmlSource;
pub use recorder::{Attribution, Point, Recorder, RunSummary};
pub use sample::{GpuProcess, GpuSample, Sample};
pub use sampler::{Fields, Sampler, SamplerStats};
pub use signals::ignore_interrupts;
pub use source::{open_default, GpuSource, FAKE_ENV, NVML_LIB_ENV};
