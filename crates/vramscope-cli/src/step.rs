//! How the step runs: mode, optimizer, precision and checkpointing flags, turned into a
//! [`StepConfig`].

use anyhow::{anyhow, bail, Result};
use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{Checkpoint, Mode, StepConfig};
use vramscope_core::Precision;

/// The step's flags, shared by every command that simulates.
#[derive(clap::Args, Debug, Clone)]
pub struct StepArgs {
    /// train, infer, or generate (Hugging Face causal LMs: `model.generate` with the KV cache;
    /// needs --prompt-len and --new-tokens).
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// sgd, sgd-momentum, adam, adamw, adam-fused, adamw-fused (`fused=True`; Hugging Face
    /// Trainer's default `adamw_torch_fused`), adagrad, rmsprop, adam8bit (bitsandbytes), adafactor.
    #[arg(long, default_value = "sgd-momentum")]
    pub optimizer: String,
    /// fp32 (the default), fp16, bf16, amp-fp16, amp-bf16. With `--weights-dtype from-files` the
    /// default is the files' dtype (bf16 weights: bf16).
    #[arg(long)]
    pub precision: Option<String>,
    /// Modules to checkpoint, comma-separated (`layer3,layer4`), or `module:N` for
    /// checkpoint_sequential with N segments.
    #[arg(long, value_delimiter = ',')]
    pub checkpoint: Vec<String>,
}

/// Parses `--checkpoint` items.
pub fn parse_checkpoint(items: &[String]) -> Result<Vec<Checkpoint>> {
    items
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| match s.split_once(':') {
            Some((m, n)) => {
                let segments = n.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow!(
                        "--checkpoint {s}: the segment count after ':' must be a positive integer"
                    )
                })?;
                Ok(Checkpoint::Sequential {
                    module: m.trim().to_string(),
                    segments,
                })
            }
            None => Ok(Checkpoint::Module(s.trim().to_string())),
        })
        .collect()
}

impl StepArgs {
    /// The simulator configuration these flags describe.
    pub fn config(&self) -> Result<StepConfig> {
        let mode = match self.mode.as_str() {
            "train" => Mode::Train,
            "infer" | "inference" | "eval" => Mode::Infer,
            "generate" => Mode::Generate,
            m => bail!("--mode {m:?}: expected train, infer or generate"),
        };
        let name = self.precision.as_deref().unwrap_or("fp32");
        let precision = Precision::parse(name).ok_or_else(|| {
            anyhow!("--precision {name:?}: expected one of fp32, fp16, bf16, amp-fp16, amp-bf16")
        })?;
        let optimizer = Optimizer::parse(&self.optimizer).ok_or_else(|| {
            let names: Vec<&str> = Optimizer::ALL.iter().map(|o| o.name()).collect();
            anyhow!(
                "--optimizer {:?}: expected one of {}",
                self.optimizer,
                names.join(", ")
            )
        })?;
        Ok(StepConfig {
            mode,
            precision,
            optimizer,
            iterations: 2,
            checkpoint: parse_checkpoint(&self.checkpoint)?,
            ..StepConfig::default()
        })
    }
}
