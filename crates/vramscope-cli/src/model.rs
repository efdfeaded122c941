//! Which model to simulate and for what input: `MODEL` and the flags that shape the input. Every
//! front-end (the zoo, Hugging Face config.json files or model folders) is dispatched from here,
//! and so is `--mode generate`, whose graph is the whole `model.generate` (checked here against
//! `--prompt-len` / `--new-tokens` / `--seq-len` and the model kind).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use vramscope_core::sim::{Mode, StepConfig};
use vramscope_core::{DType, Graph, Precision};
use vramscope_formats::checkpoint_dtypes::{apply_file_dtypes, dominant_float_dtype};
use vramscope_formats::hf::{
    self, AttnImplementation, Generation, GenerationInfo, HfInput, HfTask,
};
use vramscope_formats::weights::{self, WeightFormat, WeightInventory};

use crate::step::StepArgs;
use vramscope_formats::hf_zoo;
use vramscope_formats::names;
use vramscope_formats::zoo::{self, ZooInput};

/// MODEL as given, or the built-in name it spells otherwise (`Llama-3-8B` → `llama-3-8b`); a
/// file or folder of that name comes first.
fn builtin_or_path(model: &str) -> Result<String, std::convert::Infallible> {
    Ok(match names::builtin(model) {
        Some(name) if !Path::new(model).exists() => name.to_string(),
        _ => model.to_string(),
    })
}

/// Neither a file nor a built-in name: what to do instead, with the closest built-in name.
fn unknown_model(model: &str) -> anyhow::Error {
    let hint = names::closest(model)
        .map(|n| format!(" (did you mean `{n}`?)"))
        .unwrap_or_default();
    let looks_like_hub_id = model.split('/').count() == 2 && !model.starts_with(['.', '/']);
    let how = if looks_like_hub_id {
        format!(
            "; vramscope reads no network: to estimate a Hugging Face Hub model, download its config.json (`hf download {model} config.json --local-dir DIR`) and pass DIR"
        )
    } else if model.contains(['/', '\\']) || model.ends_with(".json") {
        String::new()
    } else {
        "; `vramscope models` lists the built-in models".to_string()
    };
    anyhow!("{model}: no such file or folder, and not a built-in model{hint}{how}")
}

/// The model and its input, shared by every command that simulates.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A built-in model name (`vramscope models` lists them: torchvision models and transformer
    /// checkpoints such as gpt2 or llama-3-8b), a Hugging Face `config.json` (or a folder holding
    /// one), a `.gguf` file (the model transformers builds from its metadata), or an `.onnx`
    /// file. Built-in names ignore case and `-` / `_` (`Llama-3-8B`).
    #[arg(value_parser = builtin_or_path)]
    pub model: String,
    /// Batch size.
    #[arg(long, short = 'b', default_value_t = 32)]
    pub batch_size: u64,
    /// Input of one sample as CxHxW (or just H for a square 3-channel image).
    #[arg(long, default_value = "3x224x224")]
    pub input: String,
    /// Classes of the classifier head.
    #[arg(long, default_value_t = 1000)]
    pub num_classes: u64,
    /// Sequence length (Hugging Face models: required; ONNX: bound to symbolic `sequence` dims, default 128).
    /// Encoder-decoder models (T5): the encoder's `input_ids` `[B, S]`.
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Encoder-decoder models (T5): the target length T. The step is
    /// `model(input_ids=[B, S], labels=[B, T]).loss`: `decoder_input_ids = shift_right(labels)`
    /// and the cross-entropy over `[B*T, vocab]`, both inside forward. Default: --seq-len.
    #[arg(long)]
    pub target_len: Option<u64>,
    /// Head and loss of a Hugging Face model: causal-lm, masked-lm, seq-cls, token-cls (encoders,
    /// the Llama family, MoE models, Gemma / Gemma2, GPT-2), qa (question answering: encoders,
    /// the Llama family but Phi-3, MoE models, GPT-2, OPT), feature-extraction (a bare model:
    /// every family's, T5's encoder alone; with --mode infer) or seq2seq-lm (default: from the
    /// config's `architectures`).
    #[arg(long)]
    pub task: Option<String>,
    /// What `model.gradient_checkpointing_enable()` does: every decoder/encoder layer checkpointed
    /// (non-reentrant). Hugging Face models only.
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// Where parameter dtypes come from: `precision` (the --precision flag) or `from-files` (each
    /// tensor's dtype in the safetensors headers of the model folder; only headers are read).
    #[arg(long, value_enum, default_value_t = WeightsDtype::Precision)]
    pub weights_dtype: WeightsDtype,
    /// `--mode generate`: prompt tokens of each sequence (the prefill's length).
    #[arg(long)]
    pub prompt_len: Option<u64>,
    /// `--mode generate`: tokens generated after the prompt (`max_new_tokens`, greedy, no early
    /// stop at EOS).
    #[arg(long)]
    pub new_tokens: Option<u64>,
    /// Hugging Face models: `attn_implementation`, `sdpa` (transformers' default) or `eager`
    /// (the `[B, H, S, S]` scores and probabilities materialised; every family, `--mode
    /// generate` for the Llama and Gemma families).
    #[arg(long)]
    pub attn_implementation: Option<String>,
    /// Encoder-decoder models (T5, mT5, UMT5): the config's `use_cache`, as
    /// `from_pretrained(..., use_cache=...)` sets it (default: the config's, true when absent).
    /// With it the decoder's forward fills an `EncoderDecoderCache` that `out.past_key_values`
    /// keeps until the next forward returns, in training too; gradient checkpointing turns it
    /// off. Setting `model.config.use_cache` after loading does not reach the decoder stack.
    /// The decoders' bare models and token-classification / question-answering heads fill a
    /// `DynamicCache` the same way (a local of the heads' forward). `--mode generate` takes it
    /// too: generate() keeps a KV cache only when it is true; false (a config saved after
    /// training with gradient checkpointing says so) reruns the whole sequence every step (an
    /// encoder-decoder's decoder sequence, the encoder once).
    #[arg(long)]
    pub use_cache: Option<bool>,
    /// Hugging Face decoders of the Llama family, MoE models, Gemma, Gemma2 and Gemma3 text
    /// models, GPT-2, OPT (causal-lm) and BERT / RoBERTa / DistilBERT encoders (masked-lm), and
    /// their seq-cls, token-cls, qa and feature-extraction heads, T5 and its variants, SDPA or
    /// eager attention: each batch carries an `attention_mask`
    /// with padding, as a padding data collator makes it (`model(input_ids=...,
    /// attention_mask=...)`). transformers then builds the `[B, 1, S, S]` boolean mask instead of
    /// letting SDPA skip it: SDPA takes another kernel with an additive `[B, 1, S, S]` mask per
    /// layer, and GQA models repeat their keys and values (eager attention adds the additive
    /// mask made from the batch's). With `--mode generate` the prompts are left-padded and the
    /// mask is passed to `generate`. Without it the batch is unpadded (equal lengths, or packed).
    #[arg(long)]
    pub padded: bool,
    /// Fine-tuning: LoRA adapters, frozen parameters.
    #[command(flatten)]
    pub finetune: crate::finetune::FinetuneArgs,
    /// `--weights-dtype from-files`: the checkpoint folder and its headers, read once per command
    /// (`fit` and `tricks` build the model many times; clones share what was read).
    #[arg(skip)]
    pub(crate) checkpoint_headers: OnceLock<(PathBuf, WeightInventory)>,
    /// Set once the checkpoint's name/dtype warnings have been printed (once per command).
    #[arg(skip)]
    pub(crate) checkpoint_warned: OnceLock<()>,
    /// A config.json MODEL's or a built-in transformer's config, read and parsed once per
    /// command (the dtype note and every build of the model share it).
    #[arg(skip)]
    pub(crate) hf_config: OnceLock<hf::HfConfig>,
    /// A `.gguf` MODEL's header and the config rebuilt from it, read once per command.
    #[arg(skip)]
    pub(crate) gguf: OnceLock<hf::GgufModel>,
    /// Set once the GGUF file has been checked against the model and noted (once per command).
    #[arg(skip)]
    pub(crate) gguf_checked: OnceLock<()>,
    /// Set once a Hugging Face model's notes have been printed (once per command).
    #[arg(skip)]
    pub(crate) hf_noted: OnceLock<()>,
}

/// Where parameter dtypes come from (`--weights-dtype`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsDtype {
    /// Every float parameter in the precision's dtype.
    #[default]
    Precision,
    /// Each parameter in the dtype its checkpoint tensor is stored in.
    FromFiles,
}

/// The step configuration of `step`, with `--weights-dtype from-files` and no `--precision`
/// running in the checkpoint's own dtype (bf16 weights: `--precision bf16`), as
/// `from_pretrained(dtype="auto")` would load them.
pub fn step_config(model: &ModelArgs, step: &StepArgs) -> Result<StepConfig> {
    let mut cfg = step.config()?;
    if model.weights_dtype == WeightsDtype::FromFiles && step.precision.is_none() {
        let (_, inv) = checkpoint(model)?;
        cfg.precision = match dominant_float_dtype(inv) {
            Some(DType::BF16) => Precision::Bf16,
            Some(DType::F16) => Precision::Fp16,
            _ => Precision::Fp32,
        };
    } else if step.precision.is_none() {
        note_config_dtype(model, cfg.precision);
    }
    Ok(cfg)
}

/// Says on stderr when a Hugging Face config names a half dtype (`dtype` / `torch_dtype`) and no
/// `--precision` was given: transformers 5's `from_pretrained` loads the model in that dtype
/// unless its `dtype=` says otherwise (`"auto"` is the default), while the estimate follows
/// `--precision` (default fp32).
fn note_config_dtype(model: &ModelArgs, precision: Precision) {
    // a config that cannot be read is reported by the build that follows
    let Ok(Some(cfg)) = hf_config(model) else {
        return;
    };
    let named = ["dtype", "torch_dtype"]
        .into_iter()
        .find_map(|k| cfg.str(k).ok().flatten().map(|v| (k, v.to_string())));
    let Some((field, dtype)) = named else { return };
    let flag = match dtype.as_str() {
        "bfloat16" => "bf16",
        "float16" => "fp16",
        _ => return,
    };
    if precision.param_dtype().name() != dtype {
        eprintln!(
            "note: {}: `{field}` is {dtype}, in which transformers 5's from_pretrained loads the model by default (dtype=\"auto\"); this estimate uses --precision {} (the default); --precision {flag} estimates the model as loaded",
            model.model,
            precision.name()
        );
    }
}

/// The config of a Hugging Face model path (its config.json) or of a built-in transformer, read
/// on the first call; `None` for any other MODEL (a GGUF file's comes from its header).
fn hf_config(args: &ModelArgs) -> Result<Option<&hf::HfConfig>> {
    if let Some(cfg) = args.hf_config.get() {
        return Ok(Some(cfg));
    }
    let cfg = if hf::is_hf_path(&args.model) {
        hf::read_config(&args.model)?
    } else if let Some(text) = hf_zoo::config(&args.model) {
        hf::HfConfig::parse(&format!("built-in {}", args.model), text)?
    } else {
        return Ok(None);
    };
    Ok(Some(args.hf_config.get_or_init(|| cfg)))
}

/// The folder of a Hugging Face model path and its safetensors inventory (headers only), read on
/// the first call.
fn checkpoint(args: &ModelArgs) -> Result<&(PathBuf, WeightInventory)> {
    if let Some(read) = args.checkpoint_headers.get() {
        return Ok(read);
    }
    let read = read_checkpoint(args)?;
    Ok(args.checkpoint_headers.get_or_init(|| read))
}

fn read_checkpoint(args: &ModelArgs) -> Result<(PathBuf, WeightInventory)> {
    let path = Path::new(&args.model);
    if hf::is_gguf_path(&args.model) {
        bail!(
            "--weights-dtype from-files: {} is a GGUF file, whose tensors transformers dequantizes into the model's dtype on load: choose that dtype with --precision",
            args.model
        );
    }
    if !hf::is_hf_path(&args.model) {
        bail!(
            "--weights-dtype from-files reads the safetensors of a Hugging Face model folder (config.json beside *.safetensors); `{}` is not one",
            args.model
        );
    }
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let inv = weights::inspect(&dir)
        .with_context(|| "--weights-dtype from-files: reading the checkpoint's headers")?;
    if inv.format != WeightFormat::Safetensors {
        bail!(
            "--weights-dtype from-files: {} holds a {} file; it reads safetensors checkpoints",
            dir.display(),
            inv.format.name()
        );
    }
    Ok((dir, inv))
}

/// Gives the graph's parameters their checkpoint dtypes and warns about names that do not line up.
fn apply_checkpoint_dtypes(
    args: &ModelArgs,
    graph: &mut Graph,
    precision: Precision,
) -> Result<()> {
    let (dir, inv) = checkpoint(args)?;
    let m = apply_file_dtypes(graph, inv)?;
    let few = |v: &[String]| {
        let mut s = v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if v.len() > 5 {
            s.push_str(&format!(", ... ({} in all)", v.len()));
        }
        s
    };
    if m.matched == 0 {
        bail!(
            "--weights-dtype from-files: no tensor of {} has the name of a parameter of the model built from its config (the model's are named like {}; the files' like {})",
            dir.display(),
            few(&graph.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
            few(&inv.tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>())
        );
    }
    // the same warnings for every batch size a search tries: print them once
    if args.checkpoint_warned.set(()).is_err() {
        return Ok(());
    }
    if !m.missing.is_empty() {
        eprintln!(
            "warning: --weights-dtype from-files: {} parameter(s) of the model are not in {} (their dtype follows --precision {}): {}",
            m.missing.len(),
            dir.display(),
            precision.name(),
            few(&m.missing)
        );
    }
    if !m.unused.is_empty() {
        eprintln!(
            "warning: --weights-dtype from-files: {} tensor(s) of {} match no parameter of the model built from its config: {}",
            m.unused.len(),
            dir.display(),
            few(&m.unused)
        );
    }
    let mut floats: Vec<DType> = graph
        .params
        .iter()
        .filter(|p| p.kind == vramscope_core::ir::ParamKind::Parameter)
        .filter_map(|p| p.stored_dtype.filter(|d| d.is_float()))
        .collect();
    floats.sort_by_key(|d| d.name());
    floats.dedup();
    if floats.len() > 1 && precision.autocast_dtype().is_none() {
        eprintln!(
            "warning: --weights-dtype from-files: the weights mix {}; without autocast PyTorch's matmuls reject operands of different dtypes (an AMP --precision casts them)",
            floats.iter().map(|d| d.name()).collect::<Vec<_>>().join(" and ")
        );
    }
    if let Some(d) = dominant_float_dtype(inv).filter(|&d| d != precision.param_dtype()) {
        eprintln!(
            "warning: --weights-dtype from-files: the weights are mostly {}, but --precision {} builds the activations' dtype casts for {} parameters",
            d.name(),
            precision.name(),
            precision.param_dtype().name()
        );
    }
    Ok(())
}

/// A built graph and where it came from.
pub struct LoadedModel {
    /// The forward program.
    pub graph: Graph,
    /// `zoo` (torchvision or built-in transformer), `hf-config`, `onnx`, ...
    pub source: &'static str,
    /// The modules `--gradient-checkpointing` checkpoints.
    pub checkpoint_layers: Vec<String>,
    /// What a `--mode generate` graph covers.
    pub generation: Option<GenerationInfo>,
    /// A Hugging Face checkpoint saved as bitsandbytes 4-bit (its `quantization_config`), which
    /// `load` quantizes the graph for.
    pub pre_quantized: Option<hf::PreQuantized4bit>,
    /// Why transformers cannot train this model although it runs it in eval.
    pub training_error: Option<hf::HfError>,
}

impl LoadedModel {
    /// Adds what the model's own flags imply to the step (`--gradient-checkpointing` checkpoints
    /// every decoder/encoder layer).
    pub fn apply_to(&self, cfg: &mut vramscope_core::sim::StepConfig) {
        cfg.checkpoint.extend(
            self.checkpoint_layers
                .iter()
                .map(|m| vramscope_core::sim::Checkpoint::Module(m.clone())),
        );
    }
}

/// Parses `--input`.
pub fn parse_input(s: &str) -> Result<(u64, u64, u64)> {
    let parts: Vec<&str> = s.split(['x', 'X']).collect();
    let nums: Result<Vec<u64>, _> = parts.iter().map(|p| p.trim().parse::<u64>()).collect();
    let nums = nums.map_err(|_| {
        anyhow!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size")
    })?;
    match nums.as_slice() {
        [h] => Ok((3, *h, *h)),
        [c, h, w] => Ok((*c, *h, *w)),
        _ => bail!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size"),
    }
}

/// `--padded` as the report states it: whether a Hugging Face model's batch is padded, `None`
/// for other models (which refuse the flag).
pub fn padded(args: &ModelArgs) -> Option<bool> {
    is_transformer(args).then_some(args.padded)
}

/// Whether `args.model` is a Hugging Face model (a config.json, a model folder, a GGUF file or a
/// built-in transformer), whose forward needs a sequence length.
pub fn is_transformer(args: &ModelArgs) -> bool {
    hf::is_hf_path(&args.model)
        || hf::is_gguf_path(&args.model)
        || hf_zoo::config(&args.model).is_some()
}

/// The GGUF MODEL's header and the config rebuilt from it, read on the first call.
fn gguf(args: &ModelArgs) -> Result<&hf::GgufModel> {
    if let Some(read) = args.gguf.get() {
        return Ok(read);
    }
    let read = hf::read_gguf(Path::new(&args.model))?;
    Ok(args.gguf.get_or_init(|| read))
}

/// Checks, once per command, that the file's tensors fit the model built from its metadata
/// (the parameter count does not depend on the batch or length `fit` and `tricks` vary), and
/// notes what its blocks take as stored beside the dequantized model that is simulated.
fn check_gguf_once(args: &ModelArgs, graph: &Graph) -> Result<()> {
    if args.gguf_checked.get().is_some() {
        return Ok(());
    }
    let read = gguf(args)?;
    read.check_fits(graph)?;
    let human = crate::inspect::human;
    let blocks: Vec<String> = read
        .block_type_bytes()
        .into_iter()
        .map(|(name, bytes)| format!("{name} {}", human(bytes)))
        .collect();
    eprintln!(
        "note: {}: {} tensors, {} as stored{}; transformers' GGUF loader dequantizes a {} file into the model's dtype (--precision) on load, which is what is simulated",
        args.model,
        read.inventory.tensors.len(),
        human(read.inventory.bytes()),
        if blocks.is_empty() {
            String::new()
        } else {
            format!(" ({})", blocks.join(", "))
        },
        read.architecture()
    );
    let _ = args.gguf_checked.set(());
    Ok(())
}

/// Builds the graph for `args` run as `step` says (with `batch_size` overriding the flag, for
/// searches).
pub fn load(args: &ModelArgs, batch_size: u64, step: &StepConfig) -> Result<LoadedModel> {
    let generate = generation(args, step.mode)?;
    let mut m = load_base(args, batch_size, step.precision, generate)?;
    if m.graph.task == vramscope_core::ir::Task::Features && step.mode == Mode::Train {
        bail!(
            "{}: a bare model ({}, --task feature-extraction) has no loss to train on: estimate it with --mode infer, or train one of its heads (--task; `vramscope estimate --help` lists them)",
            args.model,
            m.graph.modules.first().map_or("", |m| &*m.type_name)
        );
    }
    if step.mode == Mode::Train {
        if let Some(e) = m.training_error.take() {
            return Err(e.into());
        }
    }
    if let Some(saved) = m.pre_quantized {
        // before the files' dtypes: a 4-bit checkpoint stores the packed weights and their
        // quantization state under the names the quantized model has
        m.graph = crate::finetune::load_saved_4bit(&m.graph, saved)?;
    }
    if args.weights_dtype == WeightsDtype::FromFiles {
        apply_checkpoint_dtypes(args, &mut m.graph, step.precision)?;
    }
    if args.finetune.any() {
        m.graph = args
            .finetune
            .apply(m.graph, step.precision, m.pre_quantized)?;
    }
    if m.source == "zoo" && hf_zoo::config(&args.model).is_some() {
        // the report names the checkpoint the user asked for (`llama-3-70b`), not its
        // model_type; only now, as the fine-tuning passes read the model type from the name
        // (LoRA's default targets)
        m.graph.name.clone_from(&args.model);
    }
    Ok(m)
}

/// Checks the generation flags against the mode: `--mode generate` needs `--prompt-len` and
/// `--new-tokens` (and no `--seq-len`), the other modes take neither.
fn generation(args: &ModelArgs, mode: Mode) -> Result<Option<Generation>> {
    if mode != Mode::Generate {
        if args.prompt_len.is_some() || args.new_tokens.is_some() {
            bail!("--prompt-len and --new-tokens describe a generation: add --mode generate");
        }
        return Ok(None);
    }
    if args.seq_len.is_some() {
        bail!("--mode generate takes --prompt-len (the prompt's tokens) and --new-tokens instead of --seq-len");
    }
    if args.gradient_checkpointing {
        bail!("--gradient-checkpointing applies to training; --mode generate runs under no_grad");
    }
    let new_tokens = args.new_tokens.ok_or_else(|| {
        anyhow!("--mode generate needs --new-tokens N (the tokens to generate after the prompt)")
    })?;
    if new_tokens == 0 {
        bail!("--new-tokens must be at least 1");
    }
    if args.prompt_len.is_none() {
        bail!("--mode generate needs --prompt-len P (the prompt's tokens per sequence)");
    }
    Ok(Some(Generation { new_tokens }))
}

fn load_base(
    args: &ModelArgs,
    batch_size: u64,
    precision: Precision,
    generate: Option<Generation>,
) -> Result<LoadedModel> {
    if hf::is_hf_path(&args.model) {
        if let Some(cfg) = hf_config(args)? {
            return load_hf(
                args,
                cfg.clone(),
                batch_size,
                precision,
                generate,
                "hf-config",
            );
        }
    }
    if hf::is_gguf_path(&args.model) {
        let cfg = gguf(args)?.config.clone();
        let m = load_hf(args, cfg, batch_size, precision, generate, "gguf")?;
        check_gguf_once(args, &m.graph)?;
        return Ok(m);
    }
    if let Some(cfg) = hf_config(args)? {
        return load_hf(args, cfg.clone(), batch_size, precision, generate, "zoo");
    }
    let path = Path::new(&args.model);
    let is_onnx = args.model.to_ascii_lowercase().ends_with(".onnx");
    if !is_onnx && zoo::names().iter().all(|&n| n != args.model) {
        if path.is_dir() {
            bail!("{}: a folder without a config.json: vramscope builds a Hugging Face model from its config.json (`vramscope inspect {}` lists the tensors of its weight files)", args.model, args.model);
        }
        if path.exists() {
            bail!("{}: not a model file: expected a Hugging Face config.json (any name ending in .json), an .onnx or a .gguf file, or a model folder", args.model);
        }
        return Err(unknown_model(&args.model));
    }
    if generate.is_some() {
        bail!(
            "--mode generate needs a Hugging Face causal LM (a built-in transformer such as gpt2 or llama-3-8b, a config.json, a model folder or a .gguf file); `{}` is not one",
            args.model
        );
    }
    if (args.seq_len.is_some() && !is_onnx)
        || args.task.is_some()
        || args.gradient_checkpointing
        || args.attn_implementation.is_some()
        || args.target_len.is_some()
        || args.use_cache.is_some()
        || args.padded
    {
        bail!(
            "--seq-len, --target-len, --task, --gradient-checkpointing, --attn-implementation, --use-cache and --padded apply to Hugging Face models (a built-in transformer, a config.json, a model folder or a .gguf file; --seq-len also to ONNX files); `{}` is not one",
            args.model
        );
    }
    let (c, h, w) = parse_input(&args.input)?;
    if is_onnx {
        // the task is classification with --num-classes taken from the output shape
        let opts = vramscope_formats::onnx::OnnxOptions {
            batch: batch_size,
            seq_len: args.seq_len.unwrap_or(128),
            chw: (c, h, w),
        };
        let graph = vramscope_formats::onnx::load(std::path::Path::new(&args.model), &opts)?;
        return Ok(LoadedModel {
            graph,
            source: "onnx",
            checkpoint_layers: Vec::new(),
            generation: None,
            pre_quantized: None,
            training_error: None,
        });
    }
    let input = ZooInput {
        batch: batch_size,
        channels: c,
        height: h,
        width: w,
        num_classes: args.num_classes,
    };
    Ok(LoadedModel {
        graph: zoo::build(&args.model, &input)?,
        source: "zoo",
        checkpoint_layers: Vec::new(),
        generation: None,
        pre_quantized: None,
        training_error: None,
    })
}

fn load_hf(
    args: &ModelArgs,
    cfg: hf::HfConfig,
    batch_size: u64,
    precision: Precision,
    generate: Option<Generation>,
    source: &'static str,
) -> Result<LoadedModel> {
    let seq = match generate {
        // checked by `generation`
        Some(_) => args.prompt_len.unwrap_or_default(),
        None => match args.seq_len {
            Some(s) => s,
            None => {
                // an unsupported family is the first thing to say
                hf::check_supported(&cfg)?;
                // the context the model was trained for, when the config states it
                let positions = cfg
                    .opt_u64(&["max_position_embeddings", "n_positions"])
                    .ok()
                    .flatten()
                    .filter(|&n| n > 0);
                let example = positions.map_or(2048, |n| n.min(2048));
                let context = positions
                    .map(|n| format!("; its config has {n} positions"))
                    .unwrap_or_default();
                bail!(
                    "{}: a Hugging Face model needs --seq-len (the sequence length to simulate, e.g. --seq-len {example}{context})",
                    args.model
                )
            }
        },
    };
    let task = match &args.task {
        None => None,
        Some(t) => Some(HfTask::parse(t).ok_or_else(|| {
            anyhow!(
                "--task {t:?}: expected causal-lm, masked-lm, seq-cls, token-cls, qa, feature-extraction or seq2seq-lm"
            )
        })?),
    };
    let attn = match &args.attn_implementation {
        None => AttnImplementation::Sdpa,
        Some(a) => AttnImplementation::parse(a)
            .ok_or_else(|| anyhow!("--attn-implementation {a:?}: expected sdpa or eager"))?,
    };
    let cfg = match args.use_cache {
        Some(u) => cfg.with_value("use_cache", u.into()),
        None => cfg,
    };
    let m = hf::build(
        &cfg,
        &HfInput {
            batch: batch_size,
            seq,
            task,
            precision,
            generate,
            attn,
            target_seq: args.target_len,
            gradient_checkpointing: args.gradient_checkpointing,
            padded: args.padded,
            four_bit: args.finetune.four_bit(),
        },
    )?;
    // about the batch asked for, not the ones a search or the advice tries
    let asked = batch_size == args.batch_size;
    if asked && !m.notes.is_empty() && args.hf_noted.set(()).is_ok() {
        for note in &m.notes {
            eprintln!("note: {note}");
        }
    }
    if args.use_cache.is_some() && !m.follows_use_cache {
        bail!(
            "{}: --use-cache applies to encoder-decoder models (T5, mT5, UMT5) and to the decoders' bare models and token-classification / question-answering heads; causal LMs, sequence classifiers and encoders are modelled with use_cache=False (--mode generate follows it: generate() caches only when it is true)",
            args.model
        );
    }
    let mut graph = m.graph;
    if args.gradient_checkpointing {
        // gradient_checkpointing_enable() also calls enable_input_require_grads(): a forward hook
        // that makes the input embeddings' output require grad
        graph.grad_leaves.extend(input_embeddings_output(&graph));
    }
    Ok(LoadedModel {
        graph,
        source,
        checkpoint_layers: if args.gradient_checkpointing {
            m.checkpoint_layers
        } else {
            Vec::new()
        },
        generation: m.generation,
        pre_quantized: m.pre_quantized,
        training_error: m.training_error,
    })
}

/// The output of `get_input_embeddings()`: the module whose forward looks the token ids up first
/// (its `embedding` op's output, or what the module makes of it: Gemma's scaled embedding
/// multiplies it, and the hook marks the product).
fn input_embeddings_output(g: &Graph) -> Option<vramscope_core::TensorId> {
    let ids = *g.inputs.first()?;
    let (i, n) = g
        .nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.op.kind() == "embedding" && n.inputs.contains(&ids))?;
    let last = g
        .scopes
        .iter()
        .filter(|s| s.module == n.module && (s.first as usize) <= i && i < s.end as usize)
        .map(|s| s.end as usize - 1)
        .max()
        .unwrap_or(i);
    g.nodes[last].outputs.first().copied()
}
