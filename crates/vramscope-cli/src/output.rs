//! What a command writes to stdout: text as it is, or JSON pretty-printed as
//! `serde_json::to_string_pretty` prints it (streamed through `vramscope_report::to_writer_pretty`),
//! then a line break. A reader that closes the pipe ends the command quietly (`main`). And the
//! files a command writes (`--trace`, `run --output`), whole or not at all.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes `text` to stdout.
pub fn text(text: &str) -> Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}

/// Writes `value` to stdout as pretty JSON and a line break, without building the text first (a
/// 70B model's report is 270 KB).
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    json_with(|out| vramscope_report::to_writer_pretty(out, value))
}

/// Writes an estimate's report to stdout as [`json`] would, its per-layer list written by hand
/// (`vramscope_report::report_to_writer_pretty`).
pub fn report_json(report: &vramscope_report::EstimateReport) -> Result<()> {
    json_with(|out| vramscope_report::report_to_writer_pretty(out, report))
}

/// Streams what `write` writes to stdout through a buffer, then a line break.
fn json_with(write: impl FnOnce(&mut dyn Write) -> serde_json::Result<()>) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    // as the I/O error it holds (a closed pipe stays one)
    write(&mut out)
        .map_err(std::io::Error::from)
        .context("writing to stdout")?;
    out.write_all(b"\n").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}

/// Writes `bytes` to `path` whole or not at all: into a temporary file beside it (a name no user
/// file has: hidden, with this process's id), renamed over `path` once written; on a failure the
/// temporary file is removed and the error names `path` (`what` says what it is, for the message).
pub fn file(path: &Path, bytes: &[u8], what: &str) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!(
            "writing {what} {}: a directory; expected a file's path",
            path.display()
        );
    }
    let name = path
        .file_name()
        .with_context(|| format!("writing {what} {}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".vramscope-{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {what} {}", path.display()));
    }
    Ok(())
}

/// A result either way, for a command that decides in several places.
pub enum Output {
    /// Text for a terminal.
    Text(String),
    /// `--json`.
    Json(serde_json::Value),
}

impl Output {
    /// Writes it to stdout.
    pub fn print(&self) -> Result<()> {
        match self {
            Output::Text(t) => text(t),
            Output::Json(v) => json(v),
        }
    }
}
