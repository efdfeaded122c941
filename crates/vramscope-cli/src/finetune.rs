//! Fine-tuning and loading flags (`--lora`, `--lora-targets`, `--lora-alpha`, `--lora-dropout`,
//! `--freeze`, `--load-in-4bit`, `--double-quant`, `--qlora`), applied to a built graph by the
//! passes of `vramscope_core::passes`.

use anyhow::{bail, Result};
use vramscope_core::ir::ParamKind;
use vramscope_core::passes::{apply_lora, freeze, load_in_4bit, FourBitConfig, LoraConfig};
use vramscope_core::{Graph, Precision};
use vramscope_formats::hf::PreQuantized4bit;

/// What is trained.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FinetuneArgs {
    /// PEFT LoRA with rank R: the base model frozen, adapters on `--lora-targets`.
    #[arg(long, value_name = "R")]
    pub lora: Option<u64>,
    /// LoRA target modules (names of nn.Linear modules, comma-separated; default: PEFT's for the
    /// model type, e.g. q_proj,v_proj for Llama/Mistral/Qwen2, else the attention's projections,
    /// qkv_proj for Phi-3).
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Vec<String>,
    /// `lora_alpha` (PEFT's default 8; no effect on memory).
    #[arg(long, default_value_t = 8.0)]
    pub lora_alpha: f64,
    /// `lora_dropout` (PEFT's default 0.0: no dropout module runs).
    #[arg(long, default_value_t = 0.0)]
    pub lora_dropout: f64,
    /// Keep the LoRA adapters of a bf16 / fp16 model in its dtype (`get_peft_model(...,
    /// autocast_adapter_dtype=False)`). By default they are float32, as PEFT makes them, and each
    /// adapted layer computes them from a float32 copy of its input.
    #[arg(long)]
    pub no_autocast_adapter_dtype: bool,
    /// Freeze every parameter whose name contains PATTERN (`requires_grad_(False)`), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "PATTERN")]
    pub freeze: Vec<String>,
    /// QLoRA with rank R: `--load-in-4bit` plus `--lora R` (PEFT's LoRA layer around each 4-bit
    /// target, float32 adapters).
    #[arg(long, value_name = "R", conflicts_with = "lora")]
    pub qlora: Option<u64>,
    /// Load the model as bitsandbytes NF4 (`BitsAndBytesConfig(load_in_4bit=True,
    /// bnb_4bit_quant_type="nf4")`): every nn.Linear but the output head becomes a frozen
    /// Linear4bit; weights loaded in the precision's dtype, computed in bf16 (fp16 for the fp16
    /// precisions).
    #[arg(long)]
    pub load_in_4bit: bool,
    /// `bnb_4bit_use_double_quant=True`: the 4-bit block scales are quantized too.
    #[arg(long)]
    pub double_quant: bool,
}

impl FinetuneArgs {
    /// Whether the flags load the weights in 4 bits (`--load-in-4bit` or `--qlora`; a checkpoint
    /// saved in 4 bits loads so whatever they say).
    pub fn four_bit(&self) -> bool {
        self.load_in_4bit || self.qlora.is_some()
    }

    /// Whether any flag asks for a change.
    pub fn any(&self) -> bool {
        self.lora.is_some()
            || !self.freeze.is_empty()
            || !self.lora_targets.is_empty()
            || self.no_autocast_adapter_dtype
            || self.qlora.is_some()
            || self.load_in_4bit
            || self.double_quant
            || self.lora_alpha != 8.0
            || self.lora_dropout != 0.0
    }

    /// Applies the flags to `graph`, for a step run in `precision`; `saved_4bit` says the graph
    /// is a checkpoint saved as bitsandbytes 4-bit, already quantized by [`load_saved_4bit`]
    /// (its settings, not the flags', decide how the weights are stored).
    pub fn apply(
        &self,
        mut graph: Graph,
        precision: Precision,
        saved_4bit: Option<PreQuantized4bit>,
    ) -> Result<Graph> {
        if !self.freeze.is_empty() {
            freeze(&mut graph, &self.freeze)?;
        }
        let four_bit = self.four_bit() || saved_4bit.is_some();
        if self.double_quant && !four_bit {
            bail!("--double-quant applies to 4-bit weights: add --load-in-4bit or --qlora R");
        }
        if let Some(saved) = saved_4bit {
            if self.double_quant && !saved.double_quant {
                bail!("--double-quant: the checkpoint was saved 4-bit with bnb_4bit_use_double_quant = false, and its quantization_config decides how the weights load");
            }
        } else if four_bit {
            let cfg = FourBitConfig::for_precision(precision, self.double_quant);
            graph = load_in_4bit(&graph, &cfg)?;
        }
        if four_bit {
            note_unquantized_experts(&graph, precision);
        }
        if self.qlora == Some(0) {
            bail!("--qlora: the rank r must be a positive integer");
        }
        match self.lora.or(self.qlora) {
            Some(rank) => {
                let cfg = LoraConfig {
                    rank,
                    alpha: self.lora_alpha,
                    dropout: self.lora_dropout,
                    targets: (!self.lora_targets.is_empty()).then(|| self.lora_targets.clone()),
                    autocast: precision.autocast_dtype().is_some(),
                    param_dtype: precision.param_dtype(),
                    upcast_adapters: !self.no_autocast_adapter_dtype,
                };
                Ok(apply_lora(&graph, &cfg)?)
            }
            None if !self.lora_targets.is_empty() => {
                bail!("--lora-targets needs --lora R or --qlora R (the adapter rank)")
            }
            None if self.no_autocast_adapter_dtype => {
                bail!("--no-autocast-adapter-dtype needs --lora R or --qlora R (the adapter rank)")
            }
            // given other than their defaults (PEFT's): an adapter option without an adapter
            None if self.lora_alpha != 8.0 || self.lora_dropout != 0.0 => {
                bail!(
                    "--lora-alpha and --lora-dropout need --lora R or --qlora R (the adapter rank)"
                )
            }
            None => Ok(graph),
        }
    }
}

/// What `from_pretrained` does unasked with a checkpoint saved as bitsandbytes 4-bit: every
/// linear layer but the head becomes a `Linear4bit` holding the saved packed weight and
/// quantization state, in the checkpoint's settings.
pub fn load_saved_4bit(graph: &Graph, saved: PreQuantized4bit) -> Result<Graph> {
    let cfg = FourBitConfig {
        double_quant: saved.double_quant,
        compute_dtype: saved.compute_dtype,
        load_dtype: saved.quant_dtype,
        pre_quantized: true,
    };
    Ok(load_in_4bit(graph, &cfg)?)
}

/// Says once that a 4-bit load left an MoE model's fused experts in full precision: transformers
/// 5 keeps each MoE layer's experts as 3-d parameters (`gate_up_proj`, `down_proj`), and its
/// bitsandbytes integration (`replace_with_bnb_linear`) replaces `nn.Linear` layers only
/// (bitsandbytes issue #1849), so most of the weights of a Mixtral or Qwen-MoE load unquantized.
fn note_unquantized_experts(graph: &Graph, precision: Precision) {
    static NOTED: std::sync::Once = std::sync::Once::new();
    let experts: Vec<_> = graph
        .params
        .iter()
        .filter(|p| {
            p.kind == ParamKind::Parameter
                && p.shape.len() == 3
                && p.dtype.is_float()
                && p.name.contains("experts.")
        })
        .collect();
    let Some(first) = experts.first() else {
        return;
    };
    let bytes: u64 = experts
        .iter()
        .map(|p| p.numel() * p.stored_dtype.unwrap_or(precision.param_dtype()).size())
        .sum();
    NOTED.call_once(|| {
        eprintln!(
            "note: 4-bit loading leaves {} fused expert weight(s) unquantized ({} in all, e.g. {} {:?} in {}): transformers 5 keeps MoE experts as 3-d parameters, and its bitsandbytes integration replaces nn.Linear layers only (bitsandbytes issue #1849)",
            experts.len(),
            crate::inspect::human(bytes),
            first.name,
            first.shape.as_slice(),
            first.stored_dtype.unwrap_or(precision.param_dtype()).name()
        )
    });
}
