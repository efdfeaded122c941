//! `vramscope fit`: the largest batch that fits a GPU (`--gpu`), or, without `--gpu`, the
//! smallest GPU of the table that fits the step at `--batch-size`. The search itself lives in
//! vramscope-advice; this is argument handling and printing.

use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use vramscope_advice::{fit_search, parse_margin, render, smallest_gpu, Target};

use crate::estimate::gpu;
use crate::model::{self, ModelArgs};
use crate::step::StepArgs;

/// `vramscope fit` flags.
#[derive(clap::Args, Debug)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub step: StepArgs,
    /// GPU to fit: search the largest batch size. Without it, print the smallest GPU of the
    /// table that fits `--batch-size`.
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

/// Runs `vramscope fit`.
pub fn run(a: &FitArgs) -> Result<()> {
    let mut cfg = model::step_config(&a.model, &a.step)?;
    let margin = parse_margin(&a.margin).ok_or_else(|| {
        anyhow!(
            "--margin {:?}: expected a percentage below 100 (`5%`) or a fraction below 1 (`0.05`)",
            a.margin
        )
    })?;
    // check the model and its input once, with a clear error, before searching
    let loaded = model::load(&a.model, a.model.batch_size, &cfg)?;
    loaded.apply_to(&mut cfg);
    let name = loaded.graph.name.clone();
    let what = render::step_summary(&name, &cfg);
    let text = match &a.gpu {
        Some(g) => {
            let gpu = gpu(g)?;
            let target = Target { gpu, margin };
            let r = match a.search.as_str() {
                "batch" | "batch-size" => fit_search(
                    "batch_size",
                    |b| {
                        model::load(&a.model, b, &cfg)
                            .map(|l| l.graph)
                            .map_err(|e| format!("{e:#}"))
                    },
                    &cfg,
                    &target,
                )?,
                "seq-len" | "seq" => {
                    if cfg.mode == vramscope_core::sim::Mode::Generate {
                        bail!("--search seq-len searches a forward's --seq-len; with --mode generate search the batch (--search batch) at a given --prompt-len and --new-tokens");
                    }
                    if a.model.seq_len.is_none() {
                        bail!("--search seq-len is for transformers: give --seq-len (any value) to mark the model as one");
                    }
                    fit_search(
                        "seq_len",
                        |s| {
                            let args = ModelArgs {
                                seq_len: Some(s),
                                ..a.model.clone()
                            };
                            model::load(&args, a.model.batch_size, &cfg)
                                .map(|l| l.graph)
                                .map_err(|e| format!("{e:#}"))
                        },
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
                serde_json::to_string_pretty(&v).context("serialising the result")? + "\n"
            } else {
                render::fit_text(&what, &r)
            }
        }
        None => {
            let r = smallest_gpu(&loaded.graph, &cfg, margin)?;
            if a.json {
                let mut v = serde_json::to_value(&r).context("serialising the result")?;
                v["batch_size"] = a.model.batch_size.into();
                v["model"] = name.into();
                serde_json::to_string_pretty(&v).context("serialising the result")? + "\n"
            } else {
                render::smallest_gpu_text(&what, a.model.batch_size, &r)
            }
        }
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}
