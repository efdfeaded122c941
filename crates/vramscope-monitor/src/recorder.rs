//! [`Recorder`]: the memory timeline of one command, from the samples taken while it runs.
//!
//! The command's memory is the sum of what the driver reports for the processes of its tree
//! ([`Attribution::PerProcess`]) as soon as the driver names one of them with a number. Until then,
//! and for good when it never does (PIDs from another PID namespace, drivers that report no
//! per-process memory), it is the change of device memory since just before the command started
//! ([`Attribution::DeviceDelta`]), which also counts whatever else runs on the GPUs.

use serde::Serialize;

use crate::sample::device_used_bytes;
use crate::GpuSample;

/// How the command's memory was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attribution {
    /// Sum of the GPU memory the driver reports for the command's processes.
    PerProcess,
    /// Device memory used minus the baseline taken before the command started.
    DeviceDelta,
}

impl Attribution {
    /// A phrase for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Attribution::PerProcess => "per process (GPU memory the driver reports for the command's processes)",
            Attribution::DeviceDelta => "change in device memory since the command started (the driver named none of its processes; other programs on the GPUs count too)",
        }
    }
}

/// One sample of the command's memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the command started.
    pub t_s: f64,
    /// GPU memory of the command's processes, when the driver gave a number for any of them.
    pub process_bytes: Option<u64>,
    /// Device memory in use, summed over GPUs.
    pub device_used_bytes: Option<u64>,
    /// How many of the command's processes the driver listed on a GPU.
    pub gpu_processes: u32,
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// How the command's memory was measured.
    pub attribution: Attribution,
    /// Device memory in use just before the command started, summed over GPUs.
    pub baseline_device_bytes: Option<u64>,
    /// Highest memory of the command.
    pub peak_bytes: Option<u64>,
    /// Seconds after the start when the peak was first seen.
    pub peak_at_s: Option<f64>,
    /// Device memory in use at that sample.
    pub peak_device_used_bytes: Option<u64>,
    /// Highest device memory in use over the run.
    pub max_device_used_bytes: Option<u64>,
    /// Samples taken while the command ran.
    pub samples: usize,
    /// Seconds from the start to the last sample.
    pub duration_s: f64,
}

/// Collects the samples of one run.
#[derive(Debug, Clone)]
pub struct Recorder {
    baseline: Option<u64>,
    points: Vec<Point>,
    per_process: bool,
}

impl Recorder {
    /// Starts a recording; `baseline` is a sample taken before the command started.
    pub fn new(baseline: &[GpuSample]) -> Self {
        Recorder {
            baseline: device_used_bytes(baseline),
            points: Vec::new(),
            per_process: false,
        }
    }

    /// Adds the sample taken `t_s` seconds after the start; `in_tree` says which PIDs belong to
    /// the command.
    pub fn record(&mut self, t_s: f64, gpus: &[GpuSample], in_tree: impl Fn(u32) -> bool) {
        let mut process_bytes = None;
        let mut gpu_processes = 0;
        for p in gpus.iter().flat_map(|g| &g.processes) {
            if in_tree(p.pid) {
                gpu_processes += 1;
                if let Some(b) = p.used_bytes {
                    process_bytes = Some(process_bytes.unwrap_or(0) + b);
                }
            }
        }
        self.per_process |= process_bytes.is_some();
        self.points.push(Point {
            t_s,
            process_bytes,
            device_used_bytes: device_used_bytes(gpus),
            gpu_processes,
        });
    }

    /// How the memory is measured given what has been seen so far.
    pub fn attribution(&self) -> Attribution {
        if self.per_process {
            Attribution::PerProcess
        } else {
            Attribution::DeviceDelta
        }
    }

    /// The command's memory at `p` under the current attribution.
    pub fn value(&self, p: &Point) -> Option<u64> {
        match self.attribution() {
            Attribution::PerProcess => Some(p.process_bytes.unwrap_or(0)),
            Attribution::DeviceDelta => p
                .device_used_bytes
                .map(|d| d.saturating_sub(self.baseline.unwrap_or(0))),
        }
    }

    /// The samples so far.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The command's memory at every sample.
    pub fn series(&self) -> Vec<Option<u64>> {
        self.points.iter().map(|p| self.value(p)).collect()
    }

    /// The command's memory at the last sample.
    pub fn current(&self) -> Option<u64> {
        self.points.last().and_then(|p| self.value(p))
    }

    /// The highest memory so far and the first sample that reached it.
    pub fn peak(&self) -> Option<(u64, &Point)> {
        let mut best: Option<(u64, &Point)> = None;
        for p in &self.points {
            if let Some(v) = self.value(p) {
                match best {
                    Some((b, _)) if v <= b => {}
                    _ => best = Some((v, p)),
                }
            }
        }
        best
    }

    /// The summary of the recording.
    pub fn summary(&self) -> RunSummary {
        let peak = self.peak();
        RunSummary {
            attribution: self.attribution(),
            baseline_device_bytes: self.baseline,
            peak_bytes: peak.map(|(b, _)| b),
            peak_at_s: peak.map(|(_, p)| p.t_s),
            peak_device_used_bytes: peak.and_then(|(_, p)| p.device_used_bytes),
            max_device_used_bytes: self.points.iter().filter_map(|p| p.device_used_bytes).max(),
            samples: self.points.len(),
            duration_s: self.points.last().map_or(0.0, |p| p.t_s),
        }
    }
}
