//! vramscope-report: turns a simulation into the JSON contract of DESIGN.md and terminal tables.
#![deny(missing_docs)]

mod explain;
mod gpu;
mod json;
mod pretty;
mod table;

pub use explain::render_explain;
pub use gpu::{find_gpu, Gpu, GPUS};
pub use json::{CacheReleaseInfo, EstimateReport, GenerationReport, ModelInfo, ReportInput};
pub use pretty::{report_to_writer_pretty, to_writer_pretty};
pub use table::{human, render_gpus, render_text, TRICKS_HINT};
