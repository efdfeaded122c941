//! Fine-tuning flags (`--lora`, `--lora-targets`, `--lora-alpha`, `--lora-dropout`, `--freeze`),
//! applied to a built graph by the passes of `vramscope_core::passes`.

use anyhow::{bail, Result};
use vramscope_core::passes::{apply_lora, freeze, LoraConfig};
use vramscope_core::Graph;

/// What is trained.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FinetuneArgs {
    /// PEFT LoRA with rank R: the base model frozen, adapters on `--lora-targets`.
    #[arg(long, value_name = "R")]
    pub lora: Option<u64>,
    /// LoRA target modules (names of nn.Linear modules, comma-separated; default: PEFT's for the
    /// model type, e.g. q_proj,v_proj for Llama/Mistral/Qwen2).
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Vec<String>,
    /// `lora_alpha` (PEFT's default 8; no effect on memory).
    #[arg(long, default_value_t = 8.0)]
    pub lora_alpha: f64,
    /// `lora_dropout` (PEFT's default 0.0: no dropout module runs).
    #[arg(long, default_value_t = 0.0)]
    pub lora_dropout: f64,
    /// Freeze every parameter whose name contains PATTERN (`requires_grad_(False)`), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "PATTERN")]
    pub freeze: Vec<String>,
}

impl FinetuneArgs {
    /// Whether any flag asks for a change.
    pub fn any(&self) -> bool {
        self.lora.is_some() || !self.freeze.is_empty() || !self.lora_targets.is_empty()
    }

    /// Applies the flags to `graph`.
    pub fn apply(&self, mut graph: Graph) -> Result<Graph> {
        if !self.freeze.is_empty() {
            freeze(&mut graph, &self.freeze)?;
        }
        match self.lora {
            Some(rank) => {
                let targets = if self.lora_targets.is_empty() {
                    LoraConfig::default_targets(&graph.name)
                } else {
                    self.lora_targets.clone()
                };
                let cfg = LoraConfig {
                    rank,
                    alpha: self.lora_alpha,
                    dropout: self.lora_dropout,
                    targets,
                };
                Ok(apply_lora(&graph, &cfg)?)
            }
            None if !self.lora_targets.is_empty() => {
                bail!("--lora-targets needs --lora R (the adapter rank)")
            }
            None => Ok(graph),
        }
    }
}
