//! A GGUF file as a Hugging Face model: the config transformers 5.23 rebuilds from the file's
//! metadata when it is given `from_pretrained(folder, gguf_file=...)`, read from the header alone.
//!
//! For the architectures built here (Llama, Mistral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Phi-3,
//! GPT-2, Gemma2, Gemma3) transformers takes its legacy GGUF loader
//! (`modeling_gguf_pytorch_utils.load_gguf_checkpoint`): the config comes from
//! `GGUF_CONFIG_MAPPING` (llama.cpp's key names → config fields, per architecture), and every
//! tensor is dequantized on load into the model's dtype, so the model in memory is the ordinary
//! one in `--precision` (its packed `GgufLinear` path covers only Qwen3.5 and LFM2). What the
//! file's blocks take is reported beside it.

use std::path::Path;

use serde_json::{Map, Number, Value};

use vramscope_core::Graph;

use super::{HfConfig, HfError};
use crate::weights::WeightInventory;

/// A GGUF file read as a model: its config and its tensors as stored.
#[derive(Debug, Clone)]
pub struct GgufModel {
    /// The config transformers rebuilds from the metadata.
    pub config: HfConfig,
    /// The file's tensors (names, ggml types, bytes), from the header.
    pub inventory: WeightInventory,
}

impl GgufModel {
    /// `general.architecture` as the file says it (checked present when the config was built).
    pub fn architecture(&self) -> &str {
        self.inventory
            .metadata
            .get("general.architecture")
            .map_or("", String::as_str)
    }

    /// Transformers' loader fills the model it built from the metadata with the file's tensors
    /// and refuses a file whose tensors do not fit it: the same check, on the parameter count of
    /// `graph` (the model built from [`config`](Self::config)) against the elements of the
    /// file's tensors, llama.cpp's rope frequency factors aside (transformers skips them).
    pub fn check_fits(&self, graph: &Graph) -> Result<(), HfError> {
        let in_file: u64 = self
            .inventory
            .tensors
            .iter()
            .filter(|t| !(t.name.starts_with("rope_freqs") || t.name.starts_with("rope_factors")))
            .map(|t| t.elements)
            .sum();
        let built = graph.parameter_count();
        if in_file == built {
            return Ok(());
        }
        Err(HfError::GgufMismatch {
            path: self.config.path.clone(),
            class: graph
                .modules
                .first()
                .map_or(String::new(), |m| m.type_name.to_string()),
            built,
            in_file,
        })
    }

    /// The bytes each block-quantized ggml type takes as stored (`Q4_K`, ...), by type name.
    pub fn block_type_bytes(&self) -> Vec<(String, u64)> {
        self.inventory
            .by_dtype()
            .into_iter()
            .filter(|(name, _)| crate::gguf::is_block_type(name))
            .map(|(name, total)| (name, total.bytes))
            .collect()
    }
}

/// The architectures whose GGUF files are read here, as `general.architecture` names them.
pub const SUPPORTED: &str =
    "llama (and Mistral), qwen2, qwen2moe, qwen3, qwen3moe, phi3, gpt2, gemma2, gemma3";

/// Architectures transformers' GGUF loaders know but this front-end does not build.
const KNOWN_ELSEWHERE: &[&str] = &[
    "bloom",
    "deci",
    "falcon",
    "gemma4",
    "gpt-oss",
    "gpt_oss",
    "lfm2",
    "mamba",
    "minimax-m2",
    "nemotron",
    "qwen35",
    "qwen35moe",
    "stablelm",
    "starcoder2",
    "t5",
    "t5encoder",
    "umt5",
];

/// `GGUF_CONFIG_MAPPING[arch]` of transformers 5.23, as the metadata key (after `{arch}.`) and
/// the config field it sets: the rows every decoder built here shares, then each family's own
/// (its `None` rows, keys read and set nowhere, are left out). GPT-2 has a table of its own.
fn mapping(model_type: &str) -> [&'static [(&'static str, &'static str)]; 2] {
    const COMMON: &[(&str, &str)] = &[
        ("context_length", "max_position_embeddings"),
        ("block_count", "num_hidden_layers"),
        ("feed_forward_length", "intermediate_size"),
        ("embedding_length", "hidden_size"),
        ("rope.freq_base", "rope_theta"),
        ("attention.head_count", "num_attention_heads"),
        ("attention.head_count_kv", "num_key_value_heads"),
        ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
        ("vocab_size", "vocab_size"),
    ];
    // `feed_forward_length` sets a field GPT2Config does not read (its MLP is n_inner or 4 × n_embd)
    const GPT2: &[(&str, &str)] = &[
        ("block_count", "n_layer"),
        ("context_length", "n_ctx"),
        ("embedding_length", "n_embd"),
        ("feed_forward_length", "feed_forward_length"),
        ("attention.head_count", "n_head"),
        ("attention.layer_norm_epsilon", "layer_norm_epsilon"),
    ];
    let own: &'static [(&str, &str)] = match model_type {
        "gpt2" => return [GPT2, &[]],
        "llama" | "mistral" => &[("rope.dimension_count", "head_dim")],
        "qwen2_moe" => &[
            ("expert_count", "num_experts"),
            ("expert_used_count", "num_experts_per_tok"),
        ],
        "qwen3_moe" => &[
            ("attention.key_length", "head_dim"),
            ("expert_count", "num_experts"),
            ("expert_used_count", "num_experts_per_tok"),
        ],
        "gemma2" | "gemma3" => &[
            ("attention.key_length", "head_dim"),
            ("attention.sliding_window", "sliding_window"),
        ],
        // Qwen2, Qwen3 and Phi-3 read `rope.dimension_count` but set no head_dim from it
        _ => &[],
    };
    [COMMON, own]
}

/// `GGUF_TO_TRANSFORMERS_MAPPING["config"]["tokenizer"]`: token ids the config takes.
const TOKEN_IDS: &[(&str, &str)] = &[
    ("tokenizer.ggml.bos_token_id", "bos_token_id"),
    ("tokenizer.ggml.eos_token_id", "eos_token_id"),
    ("tokenizer.ggml.unknown_token_id", "unk_token_id"),
    ("tokenizer.ggml.padding_token_id", "pad_token_id"),
];

/// Reads `path`'s GGUF header and rebuilds the config as `load_gguf_checkpoint` does.
pub fn read_gguf(path: &Path) -> Result<GgufModel, HfError> {
    let inventory = crate::gguf::read_file(path).map_err(|e| HfError::Header {
        message: e.to_string(),
    })?;
    let config = config_from(path, &inventory)?;
    Ok(GgufModel { config, inventory })
}

fn config_from(path: &Path, inv: &WeightInventory) -> Result<HfConfig, HfError> {
    let shown = path.display().to_string();
    let field_err = |field: &str, expected: String| HfError::Field {
        path: shown.clone(),
        field: field.to_string(),
        expected,
    };
    let meta = &inv.metadata;
    let arch = meta.get("general.architecture").ok_or_else(|| {
        field_err(
            "general.architecture",
            "the model's architecture (a GGUF model file names it; this file does not)".into(),
        )
    })?;
    // `"mistral" in model_name`: a one-element list, so the whole name must be "mistral"
    let name = meta.get("general.name").map(String::as_str);
    let model_type = match arch.as_str() {
        "llama" if name == Some("mistral") => "mistral",
        "llama" => "llama",
        "qwen2" => "qwen2",
        "qwen2moe" => "qwen2_moe",
        "qwen3" => "qwen3",
        "qwen3moe" => "qwen3_moe",
        "phi3" => "phi3",
        "gpt2" => "gpt2",
        "gemma2" => "gemma2",
        "gemma3" => "gemma3",
        other if KNOWN_ELSEWHERE.contains(&other) => {
            return Err(field_err(
                "general.architecture",
                format!("one of the architectures vramscope builds ({SUPPORTED}); transformers loads {other:?} GGUF files, but vramscope does not build that model"),
            ))
        }
        other => {
            return Err(field_err(
                "general.architecture",
                format!("one of {SUPPORTED} (got {other:?}, which transformers' GGUF loader does not load either)"),
            ))
        }
    };
    if model_type == "llama" {
        if let Some(n) = meta.get("llama.expert_count").filter(|n| n.as_str() != "0") {
            return Err(field_err(
                "llama.expert_count",
                format!("none: this llama-architecture file has {n} experts (Mixtral), and transformers' GGUF loader builds a dense LlamaForCausalLM from it, which cannot hold them; estimate the model's config.json instead"),
            ));
        }
    }
    let mut cfg = Map::new();
    // `load_gguf_checkpoint` renames gemma3 last, after the metadata is read under its own name
    let config_type = if model_type == "gemma3" {
        "gemma3_text"
    } else {
        model_type
    };
    cfg.insert("model_type".into(), Value::from(config_type));
    let has_output = inv.tensors.iter().any(|t| t.name == "output.weight");
    cfg.insert("tie_word_embeddings".into(), Value::Bool(!has_output));
    if model_type == "qwen3_moe" {
        // GGUF_CONFIG_DEFAULTS_MAPPING: llama.cpp normalizes the top-k weights
        cfg.insert("norm_topk_prob".into(), Value::Bool(true));
    }
    for (suffix, field) in mapping(model_type).into_iter().flatten() {
        let key = format!("{arch}.{suffix}");
        if let Some(text) = meta.get(&key) {
            cfg.insert((*field).into(), number(&key, text, &field_err)?);
        }
    }
    for (key, field) in TOKEN_IDS {
        if let Some(text) = meta.get(*key) {
            cfg.insert((*field).into(), number(key, text, &field_err)?);
        }
    }
    if !cfg.contains_key("vocab_size") {
        // the tokenizer's vocabulary (transformers issue 32526); the header keeps arrays as
        // `[string; N]`
        if let Some(n) = meta
            .get("tokenizer.ggml.tokens")
            .and_then(|s| s.strip_prefix("[string; "))
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse::<u64>().ok())
        {
            cfg.insert("vocab_size".into(), Value::from(n));
        }
    }
    let text = Value::Object(cfg).to_string();
    HfConfig::parse(&shown, &text)
}

/// A metadata value as a JSON number (the header keeps values as text).
fn number(
    key: &str,
    text: &str,
    field_err: &dyn Fn(&str, String) -> HfError,
) -> Result<Value, HfError> {
    if let Ok(n) = text.parse::<u64>() {
        return Ok(Value::from(n));
    }
    if let Ok(n) = text.parse::<i64>() {
        return Ok(Value::from(n));
    }
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| field_err(key, format!("a number (got {text:?})")))
}
