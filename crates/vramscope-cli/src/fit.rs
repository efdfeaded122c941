//! `vramscope fit`: the largest batch that fits a GPU (`--gpu`; for a transformer without
//! `--seq-len`, at each of several sequence lengths), or, without `--gpu`, the smallest GPU of
//! the table that fits the step at `--batch-size`. The search itself lives in
//! vramscope-advice; this is argument handling and printing.

use anyhow::{anyhow, bail, Context, Result};
use vramscope_advice::{
    fit_by_seq_len, fit_search, parse_margin, render, smallest_gpu, Target, SEQ_LENS,
};
use vramscope_core::sim::{Mode, StepConfig};
use vramscope_core::Graph;

use crate::estimate::gpu;
use crate::model::{self, ModelArgs};
use crate::output::Output;
use crate::step::StepArgs;

/// `vramscope fit` flags.
#[derive(clap::Args, Debug)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub step: StepArgs,
    /// GPU to fit: search the largest batch size (a transformer without `--seq-len`: the largest
    /// batch at 512 ... 16384 tokens, and the longest sequence at batch size 1). Without it,
    /// print the smallest GPU of the table that fits `--batch-size`.
    #[arg(long)]
    pub gpu: Option<String>,
    /// What to maximise with `--gpu`: `batch` (the batch size) or `seq-len` (the sequence length
    /// of a transformer at `--batch-size`).
    #[arg(long, default_value = "batch")]
    pub search: String,
    /// Memory to leave free, as a percentage (`5%`) or a fraction (`0.05`).
    #[arg(long, default_value = "5%")]
    pub margin: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `args` with `--seq-len seq`.
fn at_seq(args: &ModelArgs, seq: u64) -> ModelArgs {
    ModelArgs {
        seq_len: Some(seq),
        ..args.clone()
    }
}

/// The graph of `args` at `batch`, for a search (which reports a build error as a message).
fn graph(args: &ModelArgs, batch: u64, cfg: &StepConfig) -> Result<Graph, String> {
    model::load(args, batch, cfg)
        .map(|l| l.graph)
        .map_err(|e| format!("{e:#}"))
}

/// A transformer fitted without `--seq-len`: the largest batch at each of [`SEQ_LENS`], and the
/// longest sequence at batch size 1.
fn by_seq_len(
    a: &FitArgs,
    cfg: &StepConfig,
    target: &Target,
    what: &str,
    name: &str,
) -> Result<()> {
    let r = fit_by_seq_len(
        &SEQ_LENS,
        |seq, batch| graph(&at_seq(&a.model, seq), batch, cfg),
        cfg,
        target,
    )?;
    let out = if a.json {
        let mut v = serde_json::to_value(&r).context("serialising the result")?;
        for row in v["by_seq_len"].as_array_mut().into_iter().flatten() {
            row["batch_size"] = row["size"].clone();
        }
        v["model"] = name.into();
        Output::Json(v)
    } else {
        Output::Text(render::fit_by_seq_len_text(what, &r))
    };
    out.print()
}

/// `--margin`'s value as a fraction.
pub fn margin(text: &str) -> Result<f64> {
    parse_margin(text).ok_or_else(|| {
        anyhow!(
            "--margin {text:?}: expected a percentage below 100 (`5%`) or a fraction below 1 (`0.05`)"
        )
    })
}

/// Runs `vramscope fit`.
pub fn run(a: &FitArgs) -> Result<()> {
    let mut cfg = model::step_config(&a.model, &a.step)?;
    let margin = margin(&a.margin)?;
    let seq_search = matches!(a.search.as_str(), "seq-len" | "seq");
    // a transformer without --seq-len: the searches supply the lengths
    let no_seq_len = a.gpu.is_some()
        && a.model.seq_len.is_none()
        && cfg.mode != Mode::Generate
        && model::is_transformer(&a.model);
    // check the model and its input once, with a clear error, before searching
    let probe = if no_seq_len {
        at_seq(&a.model, 1)
    } else {
        a.model.clone()
    };
    let loaded = model::load(&probe, a.model.batch_size, &cfg)?;
    loaded.apply_to(&mut cfg);
    let name = loaded.graph.name.clone();
    let what = render::step_summary(&name, &cfg, model::padded(&a.model) == Some(true));
    let out = match &a.gpu {
        Some(g) => {
            let gpu = gpu(g)?;
            let target = Target { gpu, margin };
            if no_seq_len && !seq_search {
                return by_seq_len(a, &cfg, &target, &what, &name);
            }
            let r = match a.search.as_str() {
                "batch" | "batch-size" => {
                    fit_search("batch_size", |b| graph(&a.model, b, &cfg), &cfg, &target)?
                }
                "seq-len" | "seq" => {
                    if cfg.mode == Mode::Generate {
                        bail!("--search seq-len searches a forward's --seq-len; with --mode generate search the batch (--search batch) at a given --prompt-len and --new-tokens");
                    }
                    let onnx = a.model.model.to_ascii_lowercase().ends_with(".onnx");
                    if !onnx && !model::is_transformer(&a.model) {
                        bail!("--search seq-len is for models with a sequence (a built-in transformer, a config.json, a model folder or an ONNX file); `{}` is not one", a.model.model);
                    }
                    fit_search(
                        "seq_len",
                        |s| graph(&at_seq(&a.model, s), a.model.batch_size, &cfg),
                        &cfg,
                        &target,
                    )?
                }
                other => bail!("--search {other:?}: expected batch or seq-len"),
            };
            if a.json {
                let mut v = serde_json::to_value(&r).context("serialising the result")?;
                if r.dimension == "seq_len" {
                    v["seq_len"] = r.size.into();
                    v["batch_size"] = a.model.batch_size.into();
                } else {
                    v["batch_size"] = r.size.into();
                }
                v["model"] = name.into();
                Output::Json(v)
            } else if r.size == 0 {
                Output::Text(render::fit_text(&what, &r) + vramscope_report::TRICKS_HINT + "\n")
            } else {
                Output::Text(render::fit_text(&what, &r))
            }
        }
        None => {
            let r = smallest_gpu(&loaded.graph, &cfg, margin)?;
            if a.json {
                let mut v = serde_json::to_value(&r).context("serialising the result")?;
                v["batch_size"] = a.model.batch_size.into();
                v["model"] = name.into();
                Output::Json(v)
            } else {
                Output::Text(render::smallest_gpu_text(&what, a.model.batch_size, &r))
            }
        }
    };
    out.print()
}
