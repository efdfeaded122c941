//! The Hugging Face `config.json` front-end: reads a config (a file or a model folder), picks the
//! architecture from `model_type` / `architectures`, and builds the module graph transformers 5.23
//! builds for it, with its module names (`transformer.h.0.attn.c_attn`,
//! `model.layers.3.self_attn.q_proj`) and its forward as it runs with `attn_implementation="sdpa"`,
//! `use_cache=False` (encoder-decoders: the config's `use_cache`, see `t5.rs`) and no attention
//! mask, op by op as the truth traces show it.
//!
//! Supported: GPT-2 (`gpt2`), OPT (`opt`), the Llama family decoder (`llama`, `mistral`, `qwen2`,
//! `qwen3`, `phi3`: GQA, `head_dim`, tied embeddings, q/k/v biases, RMSNorm, rotary embeddings,
//! SiLU-gated MLP; Qwen3's per-head q/k norms; Phi-3's fused `qkv_proj` / `gate_up_proj` and
//! partial rotary; sliding-window masks once the sequence reaches the window) and its
//! Mixture-of-Experts variants (`mixtral`, `qwen2_moe`, `qwen3_moe`: top-k router, grouped-GEMM
//! experts, shared expert, q/k norm), the Gemma decoders (`gemma`, `gemma2`, `gemma3_text`, and
//! `gemma3` configs naming `Gemma3ForCausalLM`: scaled embeddings, `1 + weight` RMSNorm in
//! float32, GELU-tanh MLP, Gemma2/3 sandwich norms and sliding/full layers, Gemma2's eager
//! attention with logit soft-capping, Gemma3's q/k norms and per-layer-type rotary), all causal
//! LMs; the encoders BERT (`bert`), RoBERTa (`roberta`, and its copies XLM-RoBERTa,
//! `xlm-roberta`, and CamemBERT, `camembert`) and DistilBERT (`distilbert`) with
//! masked-LM, sequence-classification, token-classification and question-answering heads
//! (`encoder_heads.rs`); and the encoder-decoders T5 (`t5`, T5 v1.1 / FLAN-T5 included), mT5
//! (`mt5`) and UMT5 (`umt5`) trained on `model(input_ids, labels=labels).loss`. The bare models
//! of every decoder family (`GPT2Model`, `OPTModel`, `LlamaModel`, `MixtralModel`, ..., with the
//! cache their forward fills), of the encoders, and T5's (`T5Model` on `decoder_input_ids` too, or
//! its encoder alone, `T5EncoderModel`) run as `feature-extraction` in inference. `model_type` is matched exactly (a config without one
//! takes its class's), so a family that only looks like a supported one is refused, and so is
//! a class whose head is not built (with the heads that are).
//! `Gemma3ForConditionalGeneration` (the vision-language model) runs on text: its vision tower
//! and projector are on the device but idle (`gemma.rs`).
//! The causal LMs and T5 can also be built as a whole `model.generate(...)`, with the KV cache
//! or without it (`use_cache: false`; `generate.rs`), and every family's forward with `attn_implementation="eager"`
//! (`layers::eager_attention`; the encoders and T5 through its `Encoder` flavour).

mod activation;
mod bert;
mod config;
mod config_types;
mod distilbert;
mod encoder_heads;
mod gemma;
mod generate;
mod gguf_config;
mod gpt2;
pub(crate) mod layers;
mod llama;
mod moe;
mod opt;
mod quantization;
mod seq_cls;
mod t5;

use std::path::Path;

pub use config::HfConfig;
pub use generate::{Generation, GenerationInfo};
pub use gguf_config::{read_gguf, GgufModel};
pub use quantization::PreQuantized4bit;
use seq_cls::{DecoderHead, SeqCls, TokenCls};
use vramscope_core::{BuildError, DType, Graph, Precision};

/// What the model is trained on (the head and the loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfTask {
    /// `AutoModelForCausalLM`: next-token loss.
    CausalLm,
    /// `AutoModelForMaskedLM`: masked-token loss.
    MaskedLm,
    /// `AutoModelForSequenceClassification`: one label per sequence.
    SeqCls,
    /// `AutoModelForTokenClassification` (the encoders): one label per token.
    TokenCls,
    /// `AutoModelForQuestionAnswering` (the encoders): start and end logits per token, trained
    /// on `start_positions` / `end_positions` `[B]`.
    QuestionAnswering,
    /// `AutoModel` (the encoders' `{X}Model`, T5's `{X}EncoderModel`, the Llama family's
    /// `{X}Model`): the bare model's features (`last_hidden_state`, and BERT's and RoBERTa's
    /// `pooler_output`), for inference only.
    FeatureExtraction,
    /// `AutoModelForSeq2SeqLM` (`T5ForConditionalGeneration`): `input_ids` `[B, S]` for the
    /// encoder, `labels` `[B, T]` for the decoder, the loss computed inside forward.
    Seq2SeqLm,
}

impl HfTask {
    /// Parses `causal-lm`, `masked-lm`, `seq-cls`, `token-cls`, `qa`, `feature-extraction` or
    /// `seq2seq-lm`.
    pub fn parse(s: &str) -> Option<HfTask> {
        match s {
            "causal-lm" => Some(HfTask::CausalLm),
            "masked-lm" => Some(HfTask::MaskedLm),
            "seq-cls" => Some(HfTask::SeqCls),
            "token-cls" => Some(HfTask::TokenCls),
            "qa" => Some(HfTask::QuestionAnswering),
            "feature-extraction" => Some(HfTask::FeatureExtraction),
            "seq2seq-lm" => Some(HfTask::Seq2SeqLm),
            _ => None,
        }
    }

    /// The task of the first `architectures` class that names a head this front-end builds for
    /// some family (as transformers' auto classes would pick it): `...ForCausalLM` /
    /// `...LMHeadModel`, `...ForMaskedLM`, `...ForSequenceClassification`,
    /// `...ForTokenClassification`, `...ForQuestionAnswering`, `...ForConditionalGeneration`, or
    /// a bare `{X}Model`; `None` when no class does (`...ForMultipleChoice`, ...).
    pub fn from_architectures(archs: &[String]) -> Option<HfTask> {
        archs.iter().find_map(|a| {
            let head = HEADS
                .iter()
                .find(|(suffix, _)| a.ends_with(suffix))
                .map(|&(_, task)| task);
            // a bare `{X}Model` of a supported family, or T5's `{X}EncoderModel`
            let bare = CLASS_PREFIXES.iter().any(|(prefix, _)| {
                matches!(a.strip_prefix(prefix), Some("Model" | "EncoderModel"))
            });
            head.or(bare.then_some(HfTask::FeatureExtraction))
        })
    }

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            HfTask::CausalLm => "causal-lm",
            HfTask::MaskedLm => "masked-lm",
            HfTask::SeqCls => "seq-cls",
            HfTask::TokenCls => "token-cls",
            HfTask::QuestionAnswering => "qa",
            HfTask::FeatureExtraction => "feature-extraction",
            HfTask::Seq2SeqLm => "seq2seq-lm",
        }
    }
}

/// The heads this front-end builds, by the suffix of their class name.
const HEADS: &[(&str, HfTask)] = &[
    ("ForCausalLM", HfTask::CausalLm),
    ("LMHeadModel", HfTask::CausalLm),
    ("ForMaskedLM", HfTask::MaskedLm),
    ("ForSequenceClassification", HfTask::SeqCls),
    ("ForTokenClassification", HfTask::TokenCls),
    ("ForQuestionAnswering", HfTask::QuestionAnswering),
    ("ForConditionalGeneration", HfTask::Seq2SeqLm),
];

/// The class-name prefix of each supported `model_type` (`LlamaForCausalLM` is a `llama`), for
/// configs that name only their `architectures`. Longest prefixes first, so that `Qwen2Moe...`
/// is not read as `Qwen2...`.
const CLASS_PREFIXES: &[(&str, &str)] = &[
    ("XLMRoberta", "xlm-roberta"),
    ("DistilBert", "distilbert"),
    ("Camembert", "camembert"),
    ("Qwen2Moe", "qwen2_moe"),
    ("Qwen3Moe", "qwen3_moe"),
    ("Mixtral", "mixtral"),
    ("Mistral", "mistral"),
    ("Roberta", "roberta"),
    ("Gemma3Text", "gemma3_text"),
    ("Gemma2", "gemma2"),
    ("Gemma3", "gemma3"),
    ("Gemma", "gemma"),
    ("Llama", "llama"),
    ("Qwen2", "qwen2"),
    ("Qwen3", "qwen3"),
    ("UMT5", "umt5"),
    ("GPT2", "gpt2"),
    ("Phi3", "phi3"),
    ("Bert", "bert"),
    ("MT5", "mt5"),
    ("OPT", "opt"),
    ("T5", "t5"),
];

/// The `model_type` of a class name whose rest after a supported prefix is a head or a model
/// (`GPT2LMHeadModel`, `LlamaForCausalLM`, `BertModel`); `None` for other families, including
/// ones that share a prefix (`Qwen2VLForConditionalGeneration`, `Phi3SmallForCausalLM`).
fn model_type_of_class(class: &str) -> Option<&'static str> {
    CLASS_PREFIXES.iter().find_map(|&(prefix, model_type)| {
        let rest = class.strip_prefix(prefix)?;
        let head_or_model = rest.starts_with("For")
            || ["Model", "LMHeadModel", "DoubleHeadsModel", "EncoderModel"].contains(&rest);
        head_or_model.then_some(model_type)
    })
}

/// The model families this front-end builds (`model_type` values).
pub const SUPPORTED: &[&str] = &[
    "gpt2",
    "opt",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "t5",
    "mt5",
    "umt5",
];

/// Batch, sequence and how the model is run.
#[derive(Debug, Clone)]
pub struct HfInput {
    /// Batch size.
    pub batch: u64,
    /// Sequence length.
    pub seq: u64,
    /// Head and loss; `None` follows `architectures`.
    pub task: Option<HfTask>,
    /// Precision (pure fp16/bf16 adds the casts of the models' float32 islands).
    pub precision: Precision,
    /// Encoder-decoder models: the target length T (`labels` `[B, T]`); `None` is `seq`.
    pub target_seq: Option<u64>,
    /// `model.gradient_checkpointing_enable()` was called; besides checkpointing every layer
    /// ([`HfModel::checkpoint_layers`]) it changes some forwards (T5's zero position bias then
    /// requires grad).
    pub gradient_checkpointing: bool,
    /// `model.generate(..., max_new_tokens)` on a prompt of `seq` tokens instead of one forward
    /// (causal LMs and T5 / mT5 / UMT5 with their LM head).
    pub generate: Option<Generation>,
    /// `attn_implementation` (`sdpa`, transformers' default, or `eager`).
    pub attn: AttnImplementation,
    /// The batch carries an `attention_mask` (`[B, S]` int64) with padding, as a padding data
    /// collator makes it, passed to the model: the mask code builds the `[B, 1, S, S]` boolean
    /// mask, which SDPA attends with (another kernel; GQA models repeat their keys and values),
    /// or eager attention's additive one.
    pub padded: bool,
    /// Every linear layer but the head is a bitsandbytes `Linear4bit` (`--load-in-4bit`,
    /// `--qlora`; a checkpoint saved in 4 bits is read as one whatever this says), which returns
    /// its input's dtype: under autocast the projections' outputs are then float32 (what the
    /// q/k norms, Gemma's post-norms and the rotary products see).
    pub four_bit: bool,
}

impl HfInput {
    /// One forward of `batch` sequences of `seq` tokens in `precision`, as transformers runs it
    /// by default: the head `architectures` names, SDPA, no checkpointing, no generation.
    pub fn new(batch: u64, seq: u64, precision: Precision) -> Self {
        HfInput {
            batch,
            seq,
            task: None,
            precision,
            target_seq: None,
            gradient_checkpointing: false,
            generate: None,
            attn: AttnImplementation::Sdpa,
            padded: false,
            four_bit: false,
        }
    }
}

/// `config._attn_implementation`: the attention transformers runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnImplementation {
    /// `F.scaled_dot_product_attention` (fused kernels, no `[B, H, S, S]` scores).
    #[default]
    Sdpa,
    /// `eager_attention_forward`: the `[B, H, S, S]` scores and probabilities materialised, the
    /// decoders' `[B, 1, S, S]` additive mask (none for an unpadded bidirectional encoder; T5 adds
    /// its position bias).
    Eager,
}

impl AttnImplementation {
    /// Parses `sdpa` or `eager`.
    pub fn parse(s: &str) -> Option<AttnImplementation> {
        match s {
            "sdpa" => Some(AttnImplementation::Sdpa),
            "eager" => Some(AttnImplementation::Eager),
            _ => None,
        }
    }
}

/// A built model.
#[derive(Debug, Clone)]
pub struct HfModel {
    /// The forward program.
    pub graph: Graph,
    /// The task it was built for.
    pub task: HfTask,
    /// The layers `gradient_checkpointing_enable()` checkpoints (each decoder/encoder layer).
    pub checkpoint_layers: Vec<String>,
    /// What the graph of a generation covers (`None` for a forward).
    pub generation: Option<GenerationInfo>,
    /// The bitsandbytes 4-bit settings of a checkpoint saved quantized (its
    /// `quantization_config`); the graph itself is the unquantized model, which the caller
    /// quantizes as `from_pretrained` does.
    pub pre_quantized: Option<PreQuantized4bit>,
    /// Whether the forward fills the cache the config's `use_cache` asks for (T5's decoder; the
    /// decoders' bare models and per-token heads; `generate`, which keeps no cache with a false
    /// one), so that `use_cache` changes the estimate.
    pub follows_use_cache: bool,
    /// What the caller should tell the user about how the model was read (one line each).
    pub notes: Vec<String>,
    /// What transformers raises in a training forward of this config only (eval, inference and
    /// generation run): a null `attention_dropout`, which Llama's, Gemma2's and Gemma3's config
    /// classes allow, reaches the attention's dropout in training.
    pub training_error: Option<HfError>,
}

/// An error reading or building a Hugging Face model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HfError {
    /// The file could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A weight file's header could not be read (the message names the file and the field).
    #[error("{message}")]
    Header {
        /// The reader's message.
        message: String,
    },
    /// A GGUF file's tensors do not fit the model its metadata describes.
    #[error("{path}: the {class} model transformers builds from this file's metadata has {built} parameters, but the file's tensors hold {in_file} elements: they do not fit the model (transformers refuses to load such a file)")]
    GgufMismatch {
        /// The file.
        path: String,
        /// The model class built.
        class: String,
        /// Its parameter count.
        built: u64,
        /// The elements of the file's tensors.
        in_file: u64,
    },
    /// Not valid JSON.
    #[error("{path}: not valid JSON: {message}")]
    Json {
        /// The path.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A field is missing or has the wrong type.
    #[error("{path}: field `{field}`: expected {expected}")]
    Field {
        /// The path.
        path: String,
        /// The field.
        field: String,
        /// What was expected.
        expected: String,
    },
    /// The architecture is not one this front-end builds.
    #[error("{path}: model_type {model_type:?} (architectures {architectures:?}) is not supported; supported model types: {supported}")]
    Unsupported {
        /// The path.
        path: String,
        /// `model_type`.
        model_type: String,
        /// `architectures`.
        architectures: Vec<String>,
        /// The supported model types.
        supported: String,
    },
    /// The model has no head for the task.
    #[error("{path}: --task {task}: {model_type} has no {task} head in this front-end")]
    NoHead {
        /// The path.
        path: String,
        /// `model_type`.
        model_type: String,
        /// The task.
        task: &'static str,
    },
    /// `architectures` names a head (or a bare model) this front-end does not build.
    #[error("{path}: architectures {architectures:?} names no head this front-end builds for {model_type}; it builds {heads}: choose one with --task")]
    HeadNotBuilt {
        /// The path.
        path: String,
        /// `architectures`.
        architectures: Vec<String>,
        /// `model_type`.
        model_type: String,
        /// The heads built for this family, with their `--task`.
        heads: &'static str,
    },
    /// Bad batch / sequence arguments.
    #[error("{0}")]
    BadInput(String),
    /// A shape rule failed while building.
    #[error("{path}: {cause}")]
    Build {
        /// The path.
        path: String,
        /// The builder's error.
        cause: BuildError,
    },
}

/// Whether `path` looks like a Hugging Face model: a `.json` file or a folder with `config.json`.
pub fn is_hf_path(path: &str) -> bool {
    let p = Path::new(path);
    (p.is_file() && path.ends_with(".json")) || p.join("config.json").is_file()
}

/// Whether `path` names a GGUF file (by its extension, so that a missing file is an error about
/// that file rather than an unknown model name).
pub fn is_gguf_path(path: &str) -> bool {
    path.to_ascii_lowercase().ends_with(".gguf")
}

/// Reads `config.json` (or `FOLDER/config.json`).
pub fn read_config(path: &str) -> Result<HfConfig, HfError> {
    let p = Path::new(path);
    let file = if p.is_dir() {
        p.join("config.json")
    } else {
        p.to_path_buf()
    };
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(&file).map_err(|e| HfError::Io {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    HfConfig::parse(&shown, &text)
}

/// Builds the model a config describes.
pub fn build(cfg: &HfConfig, input: &HfInput) -> Result<HfModel, HfError> {
    if input.batch == 0 || input.seq == 0 {
        return Err(HfError::BadInput(
            "batch size and sequence length must be positive".into(),
        ));
    }
    let (archs, model_type, family) = model_family(cfg)?;
    config_types::check(cfg, &model_type)?;
    let pre_quantized = quantization::pre_quantized(cfg)?;
    // a checkpoint saved in 4 bits loads as 4-bit layers whatever the flags say
    let four_bit_input;
    let input = if pre_quantized.is_some() && !input.four_bit {
        four_bit_input = HfInput {
            four_bit: true,
            ..input.clone()
        };
        &four_bit_input
    } else {
        input
    };
    let dtype = input.precision.param_dtype();
    // Gemma and T5 configs without `model_type` still take their class's defaults (the class
    // found from `architectures`), as they did before the table was shared
    let class_type = match family {
        Family::Gemma(f) => Some(f.model_type()),
        Family::T5 => Some(t5::Variant::of(&model_type).model_type()),
        _ => None,
    };
    let with_defaults = class_type.and_then(|t| cfg.with_class_defaults(t));
    let cfg = with_defaults.as_ref().unwrap_or(cfg);
    let encoder = matches!(family, Family::Bert(_) | Family::DistilBert);
    let seq2seq = matches!(family, Family::T5);
    let heads = if encoder {
        "ForMaskedLM (--task masked-lm), ForSequenceClassification (--task seq-cls), \
         ForTokenClassification (--task token-cls), ForQuestionAnswering (--task qa) and the \
         bare Model (--task feature-extraction, inference)"
    } else if seq2seq {
        "ForConditionalGeneration (--task seq2seq-lm), and in inference the bare Model \
         (--task feature-extraction on a config naming it) and the encoder alone, EncoderModel \
         (--task feature-extraction)"
    } else if matches!(family, Family::Llama) {
        "ForCausalLM (--task causal-lm), ForSequenceClassification (--task seq-cls), \
         ForTokenClassification (--task token-cls), ForQuestionAnswering (--task qa; not phi3) \
         and the bare Model (--task feature-extraction, inference)"
    } else if matches!(family, Family::Moe) {
        "ForCausalLM (--task causal-lm), ForSequenceClassification (--task seq-cls), \
         ForTokenClassification (--task token-cls), ForQuestionAnswering (--task qa) and the \
         bare Model (--task feature-extraction, inference)"
    } else if matches!(family, Family::Gemma(_)) {
        "ForCausalLM (--task causal-lm), ForSequenceClassification (--task seq-cls), \
         ForTokenClassification (--task token-cls; gemma and gemma2) and the bare Model \
         (--task feature-extraction, inference)"
    } else if matches!(family, Family::Gpt2) {
        "LMHeadModel (--task causal-lm), ForSequenceClassification (--task seq-cls), \
         ForTokenClassification (--task token-cls), ForQuestionAnswering (--task qa) and the \
         bare Model (--task feature-extraction, inference)"
    } else {
        // OPT
        "ForCausalLM (--task causal-lm), ForSequenceClassification (--task seq-cls), \
         ForQuestionAnswering (--task qa) and the bare Model (--task feature-extraction, \
         inference)"
    };
    let has_head = |task| match task {
        HfTask::CausalLm => !encoder && !seq2seq,
        HfTask::MaskedLm => encoder,
        HfTask::TokenCls | HfTask::QuestionAnswering => {
            encoder || decoder_per_token_head(&model_type, task)
        }
        // every family's bare model (T5's encoder alone)
        HfTask::FeatureExtraction => true,
        HfTask::SeqCls => !seq2seq,
        HfTask::Seq2SeqLm => seq2seq,
    };
    // T5's bare encoder-decoder (`T5Model`, run on `decoder_input_ids` too) when the config
    // names it; for the other T5 configs `--task feature-extraction` is the encoder alone
    // (`T5EncoderModel`)
    let t5_model = seq2seq
        && matches!(input.task, None | Some(HfTask::FeatureExtraction))
        && !archs.iter().any(|a| a.ends_with("EncoderModel"))
        && archs.iter().any(|a| a.ends_with("Model"));
    let task = match input.task {
        Some(task) if has_head(task) => task,
        Some(task) => {
            return Err(HfError::NoHead {
                path: cfg.path.clone(),
                model_type,
                task: task.name(),
            })
        }
        None => match HfTask::from_architectures(&archs) {
            // `ForConditionalGeneration` is the class that generates text: an encoder-decoder's,
            // or a decoder's under a vision tower (Gemma 3), which is a causal LM
            Some(HfTask::Seq2SeqLm) if !seq2seq && !encoder => HfTask::CausalLm,
            Some(task) if has_head(task) => task,
            // no class named: the family's usual head
            None if archs.is_empty() && encoder => HfTask::MaskedLm,
            None if archs.is_empty() && seq2seq => HfTask::Seq2SeqLm,
            None if archs.is_empty() => HfTask::CausalLm,
            // a bare model or a head not built: not silently another head, whose parameters
            // and loss would differ from the class the checkpoint names
            _ => {
                return Err(HfError::HeadNotBuilt {
                    path: cfg.path.clone(),
                    architectures: archs,
                    model_type,
                    heads,
                })
            }
        },
    };
    if input.target_seq.is_some() && !seq2seq {
        return Err(HfError::BadInput(format!(
            "{}: --target-len applies to encoder-decoder models (T5); {model_type} reads one sequence (--seq-len)",
            cfg.path
        )));
    }
    let mut notes = Vec::new();
    let head = if task == HfTask::FeatureExtraction && !encoder && !seq2seq {
        if input.generate.is_some() {
            return Err(HfError::BadInput(format!(
                "{}: --mode generate needs a causal LM; the task is feature-extraction (a bare model has no generate())",
                cfg.path
            )));
        }
        DecoderHead::Bare
    } else if task == HfTask::SeqCls && !encoder {
        if input.generate.is_some() {
            return Err(HfError::BadInput(format!(
                "{}: --mode generate needs a causal LM; the task is seq-cls (a classifier has no generate())",
                cfg.path
            )));
        }
        // the pad_token_id the family's config class sets when config.json leaves it out
        let pad_token_default =
            matches!(family, Family::Opt | Family::Gemma(_)) || model_type == "phi3";
        let has_pad_token = SeqCls::config_has_pad_token(cfg, pad_token_default)?;
        if input.batch > 1 && !has_pad_token {
            notes.push(format!(
                "{}: the config has no pad_token_id, without which transformers' \
                 ForSequenceClassification refuses a batch of more than one (\"Cannot handle batch \
                 sizes > 1 if no padding token is defined\"); estimated as with one set, as a \
                 fine-tuning script sets it (`model.config.pad_token_id = \
                 tokenizer.eos_token_id`, or \"pad_token_id\" in config.json)",
                cfg.path
            ));
        }
        DecoderHead::SequenceClassification(SeqCls::of(cfg, has_pad_token, input.batch)?)
    } else if matches!(task, HfTask::TokenCls | HfTask::QuestionAnswering) && !encoder {
        if input.generate.is_some() {
            return Err(HfError::BadInput(format!(
                "{}: --mode generate needs a causal LM; the task is {} (a per-token head has no generate())",
                cfg.path,
                task.name()
            )));
        }
        if task == HfTask::TokenCls {
            DecoderHead::TokenClassification(TokenCls::of(cfg)?)
        } else {
            // kept from older versions: these classes hold the model as `self.transformer`
            let base = match model_type.as_str() {
                "llama" | "qwen2" | "qwen3" | "qwen3_moe" | "gpt2" => "transformer",
                _ => "model",
            };
            DecoderHead::QuestionAnswering { base }
        }
    } else {
        DecoderHead::Lm
    };
    if let Some(gen) = input.generate {
        let (graph, info) = if matches!(family, Family::T5) && task == HfTask::Seq2SeqLm {
            let model = t5::Generator::new(cfg, &model_type, input)?;
            generate::build_seq2seq(
                cfg,
                &model,
                (&model_type, &model.class()),
                (input.batch, input.seq, input.padded),
                gen,
                input.precision,
                generate::Budgets::DEFAULT,
            )?
        } else {
            let model: Box<dyn generate::CausalLm> = match family {
                Family::Gpt2 => Box::new(gpt2::Model::new(cfg, input)?),
                Family::Opt => Box::new(opt::Model::new(cfg, input)?),
                Family::Llama => Box::new(llama::Model::new(cfg, &model_type, input, dtype)?),
                Family::T5 => {
                    return Err(HfError::BadInput(format!(
                        "{}: --mode generate needs a model with an LM head; the task is {} ({model_type}'s encoder-decoder generates with {{X}}ForConditionalGeneration, --task seq2seq-lm)",
                        cfg.path,
                        task.name()
                    )))
                }
                Family::Bert(_) | Family::DistilBert => {
                    return Err(HfError::BadInput(format!(
                        "{}: --mode generate needs a causal LM or an encoder-decoder; {model_type} is an encoder (it has no generate())",
                        cfg.path
                    )))
                }
                Family::Moe => Box::new(moe::Model::new(cfg, &model_type, input, dtype)?),
                Family::Gemma(f) => Box::new(gemma::Model::new(cfg, f, input, dtype)?),
            };
            let class = archs
                .first()
                .cloned()
                .unwrap_or_else(|| format!("{model_type}ForCausalLM"));
            generate::build(
                cfg,
                model.as_ref(),
                &model_type,
                &class,
                input.batch,
                input.seq,
                gen,
                input.precision,
                input.padded,
            )?
        };
        return Ok(HfModel {
            graph,
            task,
            checkpoint_layers: Vec::new(),
            generation: Some(info),
            pre_quantized,
            follows_use_cache: true,
            training_error: None,
            notes: Vec::new(),
        });
    }
    let (graph, checkpoint_layers) = match family {
        Family::Gpt2 => gpt2::build(cfg, input, head)?,
        Family::Opt => opt::build(cfg, input, head)?,
        Family::Llama => llama::build(cfg, &model_type, input, dtype, head)?,
        Family::Gemma(f) => gemma::build(cfg, f, input, dtype, head)?,
        Family::Moe => moe::build(cfg, &model_type, input, dtype, head)?,
        Family::Bert(f) => bert::build(cfg, f, task, input)?,
        Family::DistilBert => distilbert::build(cfg, task, input)?,
        Family::T5 if t5_model => t5::build_model(cfg, &model_type, input)?,
        Family::T5 if task == HfTask::FeatureExtraction => {
            t5::build_encoder(cfg, &model_type, input)?
        }
        Family::T5 => t5::build(cfg, &model_type, input)?,
    };
    let follows_use_cache = match family {
        Family::T5 => task == HfTask::Seq2SeqLm || t5_model,
        Family::Llama | Family::Moe | Family::Gemma(_) | Family::Gpt2 | Family::Opt => {
            head == DecoderHead::Bare || head.per_token()
        }
        _ => false,
    };
    // the classes that declare `attention_dropout` without None refused a null one above
    let reads_attention_dropout = matches!(family, Family::Llama | Family::Gemma(_));
    let training_error =
        (reads_attention_dropout && cfg.is_null("attention_dropout")).then(|| HfError::Field {
            path: cfg.path.clone(),
            field: "attention_dropout".into(),
            expected: "a dropout probability to train: a null one loads and runs in eval \
                       (--mode infer, --mode generate), but a training forward hands it to the \
                       attention's dropout, which fails (scaled_dot_product_attention(): \
                       argument 'dropout_p' must be float, not NoneType); set it (0.0 is the \
                       usual value)"
                .into(),
        });
    Ok(HfModel {
        graph,
        task,
        checkpoint_layers,
        generation: None,
        pre_quantized,
        follows_use_cache,
        training_error,
        notes,
    })
}

/// Whether this front-end builds transformers' `GenericForTokenClassification` /
/// `GenericForQuestionAnswering` head for a decoder `model_type`: the Llama family's and the
/// Mixture-of-Experts models' classes, GPT-2's own two, and Gemma's and Gemma2's token
/// classifiers, and OPT's question answering (Phi-3 and the Gemmas have no question-answering
/// class, Gemma 3 and OPT no token classifier).
fn decoder_per_token_head(model_type: &str, task: HfTask) -> bool {
    let question_answering = matches!(
        model_type,
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe" | "gpt2"
    );
    match task {
        HfTask::TokenCls => question_answering || matches!(model_type, "phi3" | "gemma" | "gemma2"),
        HfTask::QuestionAnswering => question_answering || model_type == "opt",
        _ => false,
    }
}

/// Checks that the positions the model sees (`--seq-len`, or the prompt plus the new tokens of
/// a generation) fit `field` = `max`.
fn check_positions(cfg: &HfConfig, input: &HfInput, field: &str, max: u64) -> Result<(), HfError> {
    match input.generate {
        Some(g) if input.seq + g.new_tokens > max => Err(HfError::BadInput(format!(
            "{}: --prompt-len {} + --new-tokens {} = {} positions exceed {field} = {max}",
            cfg.path,
            input.seq,
            g.new_tokens,
            input.seq + g.new_tokens
        ))),
        None if input.seq > max => Err(HfError::BadInput(format!(
            "{}: --seq-len {} exceeds {field} = {max}",
            cfg.path, input.seq
        ))),
        _ => Ok(()),
    }
}

/// Checks that this front-end builds the config's model family (the error names the supported
/// ones), before any flag that only a supported model needs is asked for.
pub fn check_supported(cfg: &HfConfig) -> Result<(), HfError> {
    model_family(cfg).map(|_| ())
}

/// The config's `architectures`, model type and family.
fn model_family(cfg: &HfConfig) -> Result<(Vec<String>, String, Family), HfError> {
    let archs = cfg.architectures()?;
    // a config without `model_type` is read as the model type of its first `architectures`
    // class this front-end knows (transformers' auto classes map classes to configs the same way)
    let model_type = match cfg.str("model_type")? {
        Some(m) => m.to_string(),
        // an old config (transformers guessed the family from the checkpoint's name)
        None if archs.is_empty() => {
            return Err(HfError::Field {
                path: cfg.path.clone(),
                field: "model_type".into(),
                expected: format!(
                    "the model's family (the config names neither model_type nor \
                     architectures): add \"model_type\": one of {}",
                    SUPPORTED.join(", ")
                ),
            })
        }
        None => archs
            .iter()
            .find_map(|a| model_type_of_class(a))
            .map(str::to_string)
            .or_else(|| archs.first().map(|a| a.to_lowercase()))
            .unwrap_or_default(),
    };
    let gemma = gemma::flavor_of(cfg, &model_type, &archs)?;
    let encoder = bert::Flavor::of(&model_type);
    let family = match model_type.as_str() {
        _ if gemma.is_some() => Family::Gemma(gemma.unwrap_or(gemma::Flavor::Gemma)),
        "gpt2" => Family::Gpt2,
        "opt" => Family::Opt,
        "llama" | "mistral" | "qwen2" | "qwen3" | "phi3" => Family::Llama,
        m if moe::is_moe(m) => Family::Moe,
        _ if encoder.is_some() => Family::Bert(encoder.unwrap_or(bert::Flavor::Bert)),
        "distilbert" => Family::DistilBert,
        "t5" | "mt5" | "umt5" => Family::T5,
        _ => {
            return Err(HfError::Unsupported {
                path: cfg.path.clone(),
                model_type,
                architectures: archs,
                supported: SUPPORTED.join(", "),
            })
        }
    };
    Ok((archs, model_type, family))
}

enum Family {
    Gpt2,
    Opt,
    Llama,
    Gemma(gemma::Flavor),
    Moe,
    Bert(bert::Flavor),
    DistilBert,
    T5,
}

fn build_error(cfg: &HfConfig) -> impl Fn(BuildError) -> HfError + '_ {
    move |cause| HfError::Build {
        path: cfg.path.clone(),
        cause,
    }
}

#[allow(dead_code)]
fn is_half(d: DType) -> bool {
    d == DType::F16 || d == DType::BF16
}
