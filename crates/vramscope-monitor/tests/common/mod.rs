//! Sample builders shared by the integration tests.
#![allow(dead_code)]

use vramscope_monitor::{GpuProcess, GpuSample};

pub const GIB: u64 = 1 << 30;

/// A GPU with `used` bytes in use and the given processes.
pub fn gpu(index: u32, used: u64, procs: &[(u32, Option<u64>)]) -> GpuSample {
    GpuSample {
        index,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        memory_used_bytes: Some(used),
        memory_total_bytes: Some(80 * GIB),
        utilization_percent: Some(37),
        temperature_c: Some(41),
        power_milliwatts: Some(123_456),
        processes: procs
            .iter()
            .map(|&(pid, used_bytes)| GpuProcess { pid, used_bytes })
            .collect(),
    }
}
