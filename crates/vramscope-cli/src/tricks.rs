//! `vramscope tricks`: every memory-saving trick re-simulated and ranked. The tricks live in
//! vramscope-advice; this is argument handling, the model variants and printing.

use anyhow::Result;
use vramscope_advice::fit::Target;
use vramscope_advice::render;
use vramscope_advice::tricks::{tricks, FineTuning, ModelSource};
use vramscope_core::sim::StepConfig;
use vramscope_core::Graph;
use vramscope_formats::hf::GenerationInfo;

use crate::model::{self, parse_input, ModelArgs};
use crate::output;
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
    /// A GPU to fit (`vramscope gpus` lists them): says whether the step fits it as given and
    /// after each trick, as `fit` decides.
    #[arg(long)]
    pub gpu: Option<String>,
    /// With `--gpu`: memory to leave free, as a percentage (`5%`) or a fraction (`0.05`).
    #[arg(long, default_value = "5%")]
    pub margin: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The model of the flags at other batch sizes, inputs and fine-tuning setups.
pub struct Source<'a> {
    /// The model and its input, as given.
    pub model: &'a ModelArgs,
    /// The step, as given.
    pub step: &'a StepConfig,
    /// The checkpoint is saved in 4 bits (its `quantization_config`): it loads in 4 bits already.
    pub saved_4bit: bool,
    /// A generation without a KV cache (`use_cache: false` in the config, or `--use-cache
    /// false`).
    pub generates_without_cache: bool,
}

/// The graph `args` build at `batch`.
fn graph(args: &ModelArgs, batch: u64, step: &StepConfig) -> Result<Graph, String> {
    model::load(args, batch, step)
        .map(|l| l.graph)
        .map_err(|e| format!("{e:#}"))
}

impl ModelSource for Source<'_> {
    fn build(&self, batch: u64) -> Result<Graph, String> {
        graph(self.model, batch, self.step)
    }

    fn smaller_input(&self, batch: u64) -> Option<(String, Result<Graph, String>)> {
        // a sequence model's input is its tokens (`shorter_sequence`), not an image
        if self.model.seq_len.is_some() || self.model.prompt_len.is_some() {
            return None;
        }
        let (c, h, w) = parse_input(&self.model.input).ok()?;
        // three quarters of the side, a multiple of 8
        let (h2, w2) = ((h * 3 / 4) / 8 * 8, (w * 3 / 4) / 8 * 8);
        if h2 < 32 || w2 < 32 {
            return None;
        }
        let desc = format!("{c}x{h2}x{w2}");
        let args = ModelArgs {
            input: desc.clone(),
            ..self.model.clone()
        };
        Some((desc, graph(&args, batch, self.step)))
    }

    fn shorter_sequence(&self, batch: u64) -> Option<(u64, Result<Graph, String>)> {
        // three quarters of `--seq-len`, a multiple of 8 (a generation's prompt is left alone)
        let seq = self.model.seq_len?;
        let shorter = (seq * 3 / 4) / 8 * 8;
        if shorter < 8 {
            return None;
        }
        let args = ModelArgs {
            seq_len: Some(shorter),
            ..self.model.clone()
        };
        Some((shorter, graph(&args, batch, self.step)))
    }

    fn is_transformers_model(&self) -> bool {
        model::is_transformer(self.model)
    }

    fn fine_tuned(
        &self,
        change: FineTuning,
        batch: u64,
        cfg: &StepConfig,
    ) -> Option<Result<(Graph, StepConfig), String>> {
        if !self.is_transformers_model() {
            return None;
        }
        if self.saved_4bit && matches!(change, FineTuning::LoadIn4bit | FineTuning::Qlora(_)) {
            return None;
        }
        let mut args = self.model.clone();
        match change {
            FineTuning::GradientCheckpointing if !args.gradient_checkpointing => {
                args.gradient_checkpointing = true;
            }
            // only over a full fine-tuning: the user's own adapters, freezing or 4-bit loading
            // are a different base
            FineTuning::Lora(r) if !args.finetune.any() => args.finetune.lora = Some(r),
            FineTuning::Qlora(r) if !args.finetune.any() => args.finetune.qlora = Some(r),
            FineTuning::LoadIn4bit if !args.finetune.any() => args.finetune.load_in_4bit = true,
            FineTuning::KvCache if self.generates_without_cache => args.use_cache = Some(true),
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
    let source = Source {
        model: &a.model,
        step: &cfg,
        saved_4bit: loaded.pre_quantized.is_some(),
        generates_without_cache: loaded
            .generation
            .as_ref()
            .is_some_and(GenerationInfo::keeps_no_cache),
    };
    let target = match &a.gpu {
        Some(name) => Some(Target {
            gpu: crate::estimate::gpu(name)?,
            margin: crate::fit::margin(&a.margin)?,
        }),
        None => None,
    };
    let rows = tricks(&source, a.model.batch_size, &cfg, a.gpus, target.as_ref())?;
    if a.json {
        output::json(&rows)
    } else {
        output::text(&render::tricks_text(
            &render::step_summary(
                &loaded.graph.name,
                &cfg,
                model::padded(&a.model) == Some(true),
            ),
            a.model.batch_size,
            &rows,
            target.as_ref(),
        ))
    }
}
