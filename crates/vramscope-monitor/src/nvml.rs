//! [`NvmlSource`]: real GPUs through NVML. `libnvidia-ml.so` is loaded when the source opens, so
//! vramscope builds and runs (every other command) on machines without an NVIDIA driver.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ffi::OsStr;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::Nvml;

use crate::{GpuProcess, GpuSample, GpuSource, MonitorError};

/// Reads every GPU NVML sees.
pub struct NvmlSource {
    nvml: Nvml,
    driver: Option<String>,
    /// Product names by index, read once.
    names: BTreeMap<u32, String>,
}

impl NvmlSource {
    /// Loads NVML (from `lib` if given, else the system's `libnvidia-ml.so`) and initialises it.
    pub fn open(lib: Option<&OsStr>) -> Result<Self, MonitorError> {
        let nvml = match lib {
            Some(path) => Nvml::builder().lib_path(path).init(),
            None => Nvml::init(),
        }
        .map_err(|e| MonitorError::NoDriver {
            detail: no_driver_detail(&e, lib),
        })?;
        let driver = nvml.sys_driver_version().ok();
        Ok(NvmlSource {
            nvml,
            driver,
            names: BTreeMap::new(),
        })
    }
}

fn no_driver_detail(e: &NvmlError, lib: Option<&OsStr>) -> String {
    let name = lib.map_or_else(
        || "libnvidia-ml.so.1".to_string(),
        |p| p.to_string_lossy().into_owned(),
    );
    match e {
        NvmlError::LibloadingError(inner) => format!("could not load the NVML library ({inner})"),
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".into(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".into(),
        other => format!("initialising NVML from {name} failed ({other})"),
    }
}

fn processes(list: Result<Vec<ProcessInfo>, NvmlError>, into: &mut BTreeMap<u32, Option<u64>>) {
    for p in list.unwrap_or_default() {
        let used = match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        // a process with both a compute and a graphics context is listed twice with the same usage
        let slot = into.entry(p.pid).or_insert(None);
        *slot = match (*slot, used) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

impl GpuSource for NvmlSource {
    fn sample(&mut self) -> Result<Vec<GpuSample>, MonitorError> {
        self.read(true)
    }

    fn sample_memory(&mut self) -> Result<Vec<GpuSample>, MonitorError> {
        self.read(false)
    }

    fn describe(&self) -> String {
        match &self.driver {
            Some(v) => format!("NVML, driver {v}"),
            None => "NVML".into(),
        }
    }
}

impl NvmlSource {
    /// One sample; `everything` adds utilisation, temperature and power.
    fn read(&mut self, everything: bool) -> Result<Vec<GpuSample>, MonitorError> {
        let count = self.nvml.device_count().map_err(|e| MonitorError::Nvml {
            call: "nvmlDeviceGetCount",
            detail: e.to_string(),
        })?;
        let mut gpus = Vec::with_capacity(count as usize);
        for index in 0..count {
            // a GPU that fell off the bus is reported with every value unavailable
            let Ok(d) = self.nvml.device_by_index(index) else {
                gpus.push(GpuSample {
                    index,
                    name: None,
                    memory_used_bytes: None,
                    memory_total_bytes: None,
                    utilization_percent: None,
                    temperature_c: None,
                    power_milliwatts: None,
                    processes: Vec::new(),
                });
                continue;
            };
            let mem = d.memory_info().ok();
            let mut procs = BTreeMap::new();
            processes(d.running_compute_processes(), &mut procs);
            processes(d.running_graphics_processes(), &mut procs);
            if let Entry::Vacant(slot) = self.names.entry(index) {
                if let Ok(n) = d.name() {
                    slot.insert(n);
                }
            }
            gpus.push(GpuSample {
                index,
                name: self.names.get(&index).cloned(),
                memory_used_bytes: mem.as_ref().map(|m| m.used),
                memory_total_bytes: mem.as_ref().map(|m| m.total),
                utilization_percent: everything
                    .then(|| d.utilization_rates().ok().map(|u| u.gpu))
                    .flatten(),
                temperature_c: everything
                    .then(|| d.temperature(TemperatureSensor::Gpu).ok())
                    .flatten(),
                power_milliwatts: everything.then(|| d.power_usage().ok()).flatten(),
                processes: procs
                    .into_iter()
                    .map(|(pid, used_bytes)| GpuProcess { pid, used_bytes })
                    .collect(),
            });
        }
        Ok(gpus)
    }
}
