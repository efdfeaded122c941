//! Text output of the advice commands: the fit verdict, the GPU list of the reverse question, and
//! (with the tricks and the phase account) their tables.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use vramscope_core::sim::{Checkpoint, Mode, StepConfig};
use vramscope_report::human;

use crate::fit::{BySeqLen, Estimate, FitResult, SmallestGpu};

pub(crate) fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

pub(crate) fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

/// `resnet50 (train, fp32, sgd-momentum)`; `padded`: a Hugging Face model on a padded batch.
pub fn step_summary(model: &str, cfg: &StepConfig, padded: bool) -> String {
    let mut parts = vec![match cfg.mode {
        Mode::Train => "train".to_string(),
        Mode::Infer => "inference".to_string(),
        Mode::Generate => "generation".to_string(),
    }];
    parts.push(cfg.precision.name().to_string());
    if padded {
        parts.push("padded".to_string());
    }
    if cfg.mode == Mode::Train {
        parts.push(cfg.optimizer.name().to_string());
    }
    // a transformer's every layer (`--gradient-checkpointing`) is counted, not listed
    if cfg.checkpoint.len() > 2 {
        parts.push(format!("checkpointing {} modules", cfg.checkpoint.len()));
    } else {
        for c in &cfg.checkpoint {
            parts.push(match c {
                Checkpoint::Module(m) => format!("checkpoint {m}"),
                Checkpoint::Sequential { module, segments } => {
                    format!("checkpoint {module}:{segments}")
                }
            });
        }
    }
    format!("{model} ({})", parts.join(", "))
}

fn estimate_line(dim: &str, e: &Estimate, budget: u64) -> String {
    if !e.built() {
        return format!("  {dim} {}: the model cannot be built at this size", e.size);
    }
    let verdict = if e.fits && e.cache_released {
        format!(
            "fits, {} to spare, with the allocator freeing its cached segments when cudaMalloc fails (simulated)",
            human(budget - e.device_bytes)
        )
    } else if e.fits {
        format!("fits, {} to spare", human(budget - e.device_bytes))
    } else {
        format!(
            "does not fit, {} over",
            human(e.device_bytes.saturating_sub(budget))
        )
    };
    format!(
        "  {dim} {}: allocated {}, reserved {}, device {} (peak in {}): {verdict}",
        e.size,
        human(e.allocated_bytes),
        human(e.reserved_bytes),
        human(e.device_bytes),
        e.peak_phase
    )
}

/// `{what} on {gpu} ({memory}), margin 5%: device memory may use {budget}`.
fn fit_header(what: &str, r: &FitResult) -> String {
    let on = on_gpu(&r.gpu, r.gpu_memory_bytes, r.margin, r.budget_bytes);
    format!("{what} {on}\n")
}

/// `on {gpu} ({memory}), margin 5%: device memory may use {budget}`.
fn on_gpu(gpu: &str, memory: u64, margin: f64, budget: u64) -> String {
    format!(
        "on {gpu} ({}), margin {:.0}%: device memory may use {}",
        human(memory),
        margin * 100.0,
        human(budget)
    )
}

/// The fit verdict.
pub fn fit_text(what: &str, r: &FitResult) -> String {
    let dim = r.dimension.replace('_', " ");
    let mut out = fit_header(what, r);
    if r.size == 0 {
        out.push_str(&format!("nothing fits: even {dim} 1 needs more\n"));
    } else {
        out.push_str(&format!("largest {dim}: {}\n", r.size));
    }
    for e in r.at_size.iter().chain(r.next_size.iter()) {
        out.push_str(&estimate_line(&dim, e, r.budget_bytes));
        out.push('\n');
    }
    if r.size > 0 {
        if r.verified {
            out.push_str(&format!(
                "verified: {dim} {} fits and {} does not ({} simulations).",
                r.size,
                r.size + 1,
                r.simulations
            ));
        } else {
            out.push_str(&format!(
                "the search stopped at the largest size it tries ({}); not verified against the next size.",
                r.size
            ));
        }
        if !r.checked_above.is_empty() {
            let (a, b) = (
                r.checked_above[0],
                r.checked_above[r.checked_above.len() - 1],
            );
            if r.fits_again_at.is_empty() {
                out.push_str(&format!(
                    " Memory is not always monotone in the {dim} at the allocator level; {a}..{b} were checked too and do not fit."
                ));
            } else {
                out.push_str(&format!(
                    " Memory is not monotone here: {} fit{} again (allocator rounding); {} is the largest size below the first that does not fit.",
                    r.fits_again_at
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    if r.fits_again_at.len() == 1 { "s" } else { "" },
                    r.size
                ));
            }
        }
        out.push('\n');
    }
    out
}

/// A transformer fitted without a sequence length: the largest batch at each length, and the
/// longest sequence at batch size 1.
pub fn fit_by_seq_len_text(what: &str, r: &BySeqLen) -> String {
    let longest = &r.longest_seq_len_at_batch_size_1;
    let budget = longest.budget_bytes;
    let mut out = fit_header(what, longest);
    out.push_str("largest batch size at each sequence length:\n");
    let mut t = table(vec![
        "seq len",
        "largest batch",
        "allocated",
        "reserved",
        "device",
        "peak in",
    ]);
    for row in &r.by_seq_len {
        let b = &row.batch;
        // the estimate at the answer, or at batch 1 when not even that fits
        let (batch, e) = match (&b.at_size, &b.next_size) {
            (Some(e), _) => (b.size.to_string(), e),
            (None, Some(e)) => (
                format!(
                    "none (1 is {} over)",
                    human(e.device_bytes.saturating_sub(budget))
                ),
                e,
            ),
            (None, None) => continue,
        };
        t.add_row(vec![
            right(row.seq_len.to_string()),
            right(batch),
            right(human(e.allocated_bytes)),
            right(human(e.reserved_bytes)),
            right(human(e.device_bytes)),
            Cell::new(&e.peak_phase),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    if let Some(why) = &r.stopped {
        out.push_str(&format!("longer sequences: {why}\n"));
    }
    if longest.size == 0 {
        out.push_str("longest sequence at batch size 1: none fits\n");
    } else {
        let why = if longest.next_size.as_ref().is_some_and(|e| !e.built()) {
            " (the model's longest: it cannot be built one longer)".to_string()
        } else if longest.verified {
            format!(" ({} does not fit)", longest.size + 1)
        } else {
            " (the longest the search tries)".to_string()
        };
        out.push_str(&format!(
            "longest sequence at batch size 1: {}{why}\n",
            longest.size
        ));
    }
    out.push_str(
        "(--seq-len S: the largest batch at S, verified; --search seq-len: the longest sequence at --batch-size)\n",
    );
    out
}

/// The reverse question's table.
pub fn smallest_gpu_text(what: &str, batch: u64, r: &SmallestGpu) -> String {
    let mut out = format!(
        "{what}, batch size {batch}: peak allocated {}, reserved {}\n",
        human(r.allocated_bytes),
        human(r.reserved_bytes)
    );
    let mut t = table(vec!["GPU", "memory", "usable (margin)", "device", "fits"]);
    for g in &r.gpus {
        t.add_row(vec![
            Cell::new(&g.gpu),
            right(human(g.memory_bytes)),
            right(human(g.budget_bytes)),
            right(human(g.device_bytes)),
            Cell::new(match (g.fits, g.memory_only) {
                (true, false) => "yes",
                (true, true) => "yes (memory only: no context/workspace numbers)",
                (false, _) => "no",
            }),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    match &r.smallest {
        Some(g) => out.push_str(&format!(
            "smallest GPU that fits with a {:.0}% margin: {g}\n",
            r.margin * 100.0
        )),
        None => out.push_str(&format!(
            "no GPU of the table fits with a {:.0}% margin\n",
            r.margin * 100.0
        )),
    }
    out
}

/// The ranked tricks table.
pub fn tricks_text(
    what: &str,
    batch: u64,
    rows: &[crate::tricks::Trick],
    target: Option<&crate::fit::Target>,
) -> String {
    let before = rows.first().map(|r| r.before);
    let mut out = format!("{what}, batch size {batch}");
    if let Some(b) = before {
        out.push_str(&format!(
            ": peak allocated {}, reserved {}",
            human(b.allocated_bytes),
            human(b.reserved_bytes)
        ));
    }
    out.push('\n');
    if let Some(t) = target {
        out.push_str(&format!(
            "{}; as given the step {}\n",
            on_gpu(&t.gpu.name, t.gpu.memory_bytes, t.margin, t.budget()),
            match before.and_then(|b| b.fits) {
                Some(true) => "fits",
                _ => "does NOT fit",
            }
        ));
    }
    let mut headers = vec!["#", "trick", "peak reserved before -> after", "saved"];
    if target.is_some() {
        headers.push("fits");
    }
    headers.extend(["cost", "how (PyTorch)", "why"]);
    let mut t = table(headers);
    for (i, r) in rows.iter().enumerate() {
        let peak = match r.after {
            Some(a) => format!(
                "{} -> {}",
                human(r.before.reserved_bytes),
                human(a.reserved_bytes)
            ),
            None => "-".to_string(),
        };
        let mib = r.saved_bytes as f64 / (1u64 << 20) as f64;
        let saved = if r.after.is_none() && r.saved_bytes == 0 {
            "-".to_string()
        } else {
            format!("{mib:.1} MiB")
        };
        let mut row = vec![
            right((i + 1).to_string()),
            Cell::new(&r.name),
            right(peak),
            right(saved),
        ];
        if target.is_some() {
            row.push(Cell::new(match r.after.and_then(|a| a.fits) {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            }));
        }
        row.extend([Cell::new(&r.cost), Cell::new(&r.how), Cell::new(&r.note)]);
        t.add_row(row);
    }
    out.push_str(&t.to_string());
    out.push_str("\nRanked by peak reserved memory saved (what decides an out-of-memory error); every \"after\" is a re-simulation with that change alone.");
    if rows.iter().any(|r| r.name.starts_with("ZeRO")) {
        out.push_str(" ZeRO rows count model states only.");
    }
    out.push('\n');
    out
}
