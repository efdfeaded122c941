//! The [`GpuSource`] trait and the choice of source from the environment.

use std::path::PathBuf;

use crate::{FakeSource, GpuSample, MonitorError};

/// Environment variable naming a fake-GPU script (JSON) to replay instead of reading NVML.
pub const FAKE_ENV: &str = "VRAMSCOPE_FAKE_GPU";
/// Environment variable naming the NVML library to load instead of `libnvidia-ml.so`.
pub const NVML_LIB_ENV: &str = "VRAMSCOPE_NVML_LIB";

/// Something that can say what is on the GPUs right now.
pub trait GpuSource: Send {
    /// Reads every GPU once. Values the driver refuses are `None` in the sample; an error means
    /// nothing could be read at all.
    fn sample(&mut self) -> Result<Vec<GpuSample>, MonitorError>;
    /// Reads only what a memory timeline needs (memory and processes; the rest may be `None`),
    /// which is cheaper on real GPUs. By default the same as [`GpuSource::sample`].
    fn sample_memory(&mut self) -> Result<Vec<GpuSample>, MonitorError> {
        self.sample()
    }
    /// Where the samples come from (`NVML, driver 550.54.15` or `fake GPU script x.json`).
    fn describe(&self) -> String;
}

/// The source vramscope uses: the fake script named by `VRAMSCOPE_FAKE_GPU` if set, else NVML
/// (from `VRAMSCOPE_NVML_LIB` if set). Fails with [`MonitorError::NoDriver`] when NVML cannot be
/// loaded.
pub fn open_default() -> Result<Box<dyn GpuSource>, MonitorError> {
    if let Some(path) = std::env::var_os(FAKE_ENV).filter(|p| !p.is_empty()) {
        return Ok(Box::new(FakeSource::from_file(&PathBuf::from(path))?));
    }
    open_nvml()
}

#[cfg(feature = "nvml")]
fn open_nvml() -> Result<Box<dyn GpuSource>, MonitorError> {
    let lib = std::env::var_os(NVML_LIB_ENV).filter(|p| !p.is_empty());
    Ok(Box::new(crate::NvmlSource::open(lib.as_deref())?))
}

#[cfg(not(feature = "nvml"))]
fn open_nvml() -> Result<Box<dyn GpuSource>, MonitorError> {
    Err(MonitorError::NotBuilt)
}
