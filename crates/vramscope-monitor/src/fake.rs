//! [`FakeSource`]: replays scripted samples, for tests and for trying vramscope without a GPU.
//!
//! A script is a JSON array with one entry per sample: an array of GPUs (the fields of
//! [`GpuSample`], every field but `index` optional) or `{"error": "..."}` for a sample that fails
//! as a whole. After the last entry the last one repeats.

use std::path::Path;

use serde::Deserialize;

use crate::{GpuSample, GpuSource, MonitorError};

/// One scripted sample.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Tick {
    Gpus(Vec<GpuSample>),
    Error { error: String },
}

/// Replays a script of samples in order, repeating the last one.
#[derive(Debug, Clone)]
pub struct FakeSource {
    ticks: Vec<Tick>,
    next: usize,
    origin: String,
}

impl FakeSource {
    /// A source that returns `samples` in order, then repeats the last one (no GPUs if empty).
    pub fn new(samples: Vec<Vec<GpuSample>>) -> Self {
        FakeSource {
            ticks: samples.into_iter().map(Tick::Gpus).collect(),
            next: 0,
            origin: "fake GPU (in memory)".into(),
        }
    }

    /// Reads a script (see the module documentation).
    pub fn from_file(path: &Path) -> Result<Self, MonitorError> {
        let err = |detail: String| MonitorError::FakeScript {
            path: path.to_path_buf(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let ticks: Vec<Tick> = serde_json::from_str(&text).map_err(|e| {
            err(format!(
                "{e}; expected a JSON array of samples, each an array of GPUs \
                 ({{\"index\": 0, \"memory_used_bytes\": ...}}) or {{\"error\": \"...\"}}"
            ))
        })?;
        Ok(FakeSource {
            ticks,
            next: 0,
            origin: format!("fake GPU script {}", path.display()),
        })
    }
}

impl GpuSource for FakeSource {
    fn sample(&mut self) -> Result<Vec<GpuSample>, MonitorError> {
        let Some(last) = self.ticks.len().checked_sub(1) else {
            return Ok(Vec::new());
        };
        let tick = &self.ticks[self.next.min(last)];
        self.next += 1;
        match tick {
            Tick::Gpus(g) => Ok(g.clone()),
            Tick::Error { error } => Err(MonitorError::Nvml {
                call: "scripted sample",
                detail: error.clone(),
            }),
        }
    }

    fn describe(&self) -> String {
        self.origin.clone()
    }
}
