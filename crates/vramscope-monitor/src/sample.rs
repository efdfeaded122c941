//! What one look at the GPUs returns. Every value NVML may refuse is an `Option`: `None` means
//! "unavailable" (not supported by this GPU or driver, or no permission), never zero.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One process using a GPU, as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// PID as the driver sees it (the host's PID namespace).
    pub pid: u32,
    /// GPU memory used by the process; `None` when the driver does not say.
    #[serde(default)]
    pub used_bytes: Option<u64>,
}

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML index (the order of `nvidia-smi`).
    pub index: u32,
    /// Product name.
    #[serde(default)]
    pub name: Option<String>,
    /// Device memory in use (what `nvidia-smi` shows as used).
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    /// Device memory installed.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Percent of time a kernel ran over the driver's last sample period.
    #[serde(default)]
    pub utilization_percent: Option<u32>,
    /// GPU core temperature in °C.
    #[serde(default)]
    pub temperature_c: Option<u32>,
    /// Power draw in milliwatts.
    #[serde(default)]
    pub power_milliwatts: Option<u32>,
    /// Processes with a context on this GPU (compute and graphics, one entry per PID).
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
}

/// All GPUs at one instant, stamped with the time since the sampler started.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Time since the sampler started.
    pub elapsed: Duration,
    /// One entry per GPU.
    pub gpus: Vec<GpuSample>,
}

impl Sample {
    /// Device memory in use summed over GPUs; `None` if no GPU reported it.
    pub fn device_used_bytes(&self) -> Option<u64> {
        device_used_bytes(&self.gpus)
    }
}

/// Device memory in use summed over `gpus`; `None` if no GPU reported it.
pub fn device_used_bytes(gpus: &[GpuSample]) -> Option<u64> {
    gpus.iter()
        .filter_map(|g| g.memory_used_bytes)
        .fold(None, |acc, b| Some(acc.unwrap_or(0) + b))
}
