//! `vramscope tricks`: every memory-saving trick re-simulated and ranked. The tricks live in
//! vramscope-advice; this is argument handling, the model variants and printing.

use std::io::Write;

use anyhow::{Context, Result};
use vramscope_advice::render;
use vramscope_advice::tricks::{tricks, FineTuning, ModelSource};
use vramscope_core::sim::StepConfig;
use vramscope_core::Graph;

use crate::model::{self, parse_input, ModelArgs};
use crate::step::StepArgs;

/// `vramscope tricks` flags.
#[derive(clap::Args, Debug)]
pub struct TricksArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub step: StepArgs,
    /// GPUs for the DDP / ZeRO lines.
    #[arg(long, default_value_t = 8)]
    pub gpus: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The zoo model at other batch sizes and a lower resolution.
pub struct Source<'a>(pub &'a ModelArgs, pub &'a vramscope_core::sim::StepConfig);

impl ModelSource for Source<'_> {
    fn build(&self, batch: u64) -> Result<Graph, String> {
        model::load(self.0, batch, self.1)
            .map(|l| l.graph)
            .map_err(|e| format!("{e:#}"))
    }

    fn smaller_input(&self, batch: u64) -> Option<(String, Result<Graph, String>)> {
        // a sequence model's input is its tokens (`shorter_sequence`), not an image
        if self.0.seq_len.is_some() || self.0.prompt_len.is_some() {
            return None;
        }
        let (c, h, w) = parse_input(&self.0.input).ok()?;
        // three quarters of the side, a multiple of 8
        let (h2, w2) = ((h * 3 / 4) / 8 * 8, (w * 3 / 4) / 8 * 8);
        if h2 < 32 || w2 < 32 {
            return None;
        }
        let desc = format!("{c}x{h2}x{w2}");
        let args = ModelArgs {
            input: desc.clone(),
            ..self.0.clone()
        };
        Some((desc, Source(&args, self.1).build(batch)))
    }

    fn shorter_sequence(&self, batch: u64) -> Option<(u64, Result<Graph, String>)> {
        // three quarters of `--seq-len`, a multiple of 8 (a generation's prompt is left alone)
        let seq = self.0.seq_len?;
        let shorter = (seq * 3 / 4) / 8 * 8;
        if shorter < 8 {
            return None;
        }
        let args = ModelArgs {
            seq_len: Some(shorter),
            ..self.0.clone()
        };
        Some((shorter, Source(&args, self.1).build(batch)))
    }

    fn fine_tuned(
        &self,
        change: FineTuning,
        batch: u64,
        cfg: &StepConfig,
    ) -> Option<Result<(Graph, StepConfig), String>> {
        if !model::is_transformer(self.0) {
            return None;
        }
        // a checkpoint saved in 4 bits is loaded in 4 bits already
        if matches!(change, FineTuning::LoadIn4bit | FineTuning::Qlora(_))
            && model::load(self.0, batch, cfg).is_ok_and(|m| m.pre_quantized.is_some())
        {
            return None;
        }
        let mut args = self.0.clone();
        match change {
            FineTuning::GradientCheckpointing if !args.gradient_checkpointing => {
                args.gradient_checkpointing = true;
            }
            // only over a full fine-tuning: the user's own adapters, freezing or 4-bit loading
            // are a different base
            FineTuning::Lora(r) if !args.finetune.any() => args.finetune.lora = Some(r),
            FineTuning::Qlora(r) if !args.finetune.any() => args.finetune.qlora = Some(r),
            FineTuning::LoadIn4bit if !args.finetune.any() => args.finetune.load_in_4bit = true,
            _ => return None,
        }
        Some(
            model::load(&args, batch, cfg)
                .map(|loaded| {
                    let mut c = cfg.clone();
                    // `cfg` already checkpoints what the user's flags asked for
                    if change == FineTuning::GradientCheckpointing {
                        loaded.apply_to(&mut c);
                    }
                    (loaded.graph, c)
                })
                .map_err(|e| format!("{e:#}")),
        )
    }
}

/// Runs `vramscope tricks`.
pub fn run(a: &TricksArgs) -> Result<()> {
    let mut cfg = model::step_config(&a.model, &a.step)?;
    let loaded = model::load(&a.model, a.model.batch_size, &cfg)?;
    loaded.apply_to(&mut cfg);
    let rows = tricks(&Source(&a.model, &cfg), a.model.batch_size, &cfg, a.gpus)?;
    let text = if a.json {
        serde_json::to_string_pretty(&rows).context("serialising the tricks")? + "\n"
    } else {
        render::tricks_text(
            &render::step_summary(&loaded.graph.name, &cfg),
            a.model.batch_size,
            &rows,
        )
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}
