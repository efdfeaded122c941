//! The Gemma decoders (`GemmaForCausalLM`, `Gemma2ForCausalLM`, `Gemma3ForCausalLM`:
//! transformers/models/{gemma,gemma2,gemma3}/modeling_*.py). What sets them apart from the Llama
//! family:
//!
//! * `embed_tokens` is a `*TextScaledWordEmbedding`: the lookup times `sqrt(hidden_size)`, kept as
//!   a scalar `embed_scale` buffer in the model's dtype.
//! * `GemmaRMSNorm` computes in float32 and scales by `1 + weight`, casting back at the end.
//! * The MLP's activation is `gelu_pytorch_tanh`; `head_dim` comes from the config; the head is
//!   tied to the embedding by default.
//! * Gemma2 and Gemma3 wrap attention and MLP in extra norms (`post_attention_layernorm`,
//!   `pre_feedforward_layernorm`, `post_feedforward_layernorm`) and alternate sliding-window and
//!   full-attention layers (`layer_types`); the model builds both masks every forward.
//! * Gemma2 soft-caps the final logits (`/ cap, tanh, * cap`) and, when `attn_logit_softcapping`
//!   is set, the attention scores too. Its classes declare no SDPA support, so `from_pretrained`
//!   runs them with eager attention (`matmul`, softmax over the full score matrix, float additive
//!   masks); that is what is built here (flash-attention-2 is not modelled).
//! * Gemma3 normalises q and k per head (`q_norm` / `k_norm`, after the transpose) and keeps one
//!   rotary module with frequencies per layer type (`sliding_attention_inv_freq`, ...), called
//!   once per layer type. With SDPA, a sliding-window layer gets a boolean mask (and k, v repeated
//!   to all heads) once the sequence reaches the window.
//! * `--attn-implementation eager` runs Gemma and Gemma3 through Llama's `eager_attention_forward`
//!   with Gemma2's additive masks (measured: fixtures/truth/hf_eager_gemma.jsonl).
//!
//! The same forward runs each step of a generation (`generate.rs`, [`Model`]): `logits_to_keep`,
//! the cache's sliding-window layers for Gemma3's sliding layers (inside the window SDPA needs no
//! mask; past it the sliding layers' mask is materialized each step and SDPA runs with it over
//! the last `w - 1` cached positions; eager attention, Gemma2's, adds `[B, 1, S, past + S]` masks
//! and stays inside the window).
//!
//! The bare model (`GemmaModel`, `Gemma2Model`, `Gemma3TextModel`: `--task feature-extraction`,
//! inference) returns the last hidden state and, with the config's `use_cache`, the
//! `DynamicCache` its forward filled. Gemma3's `use_bidirectional_attention` (EmbeddingGemma) is
//! read for it only: the config class halves the window on load (`w // 2 + 1`), both mask
//! functions get an `or_mask_function` (every key; keys within the window either side), which
//! builds them through `torch.vmap` and never skips them, so SDPA runs masked on every layer.
//!
//! A `gemma3` config (the vision-language `Gemma3Config`) is read through its `text_config`. As
//! `Gemma3ForCausalLM` it is the language model alone; as `Gemma3ForConditionalGeneration` (the
//! class of gemma-3-4b-it and larger) it is the whole model run on token ids: the SigLIP vision
//! tower and the projector are built and moved to the device but never run (no gradient, no
//! optimizer state), `model.language_model` is the text model, and `Gemma3Model` makes the masks
//! before it, without the packed-sequence check. LoRA wraps the tower's matching projections
//! too and 4-bit loading quantizes its Linear layers (the passes treat never-called modules as
//! PEFT and bitsandbytes do); `generate` runs the same forward each step. Other heads are
//! refused.

use vramscope_core::ops::{Aten, GradIn, Linear, Saved};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{self, HfActivation};
use super::generate::CausalLm;
use super::layers::{
    add, apply_rotary, attention_output, cached_attention, eager_attention, embedding_lookup,
    gemma_rms_norm, heads_first_grads, linear, model_mask, mul, mul_scalar, padding_input,
    position_ids, projection_dtype, rope_init, rotary, rotary_with_buffers, rotated_heads_view,
    sdpa_grads_like_inputs, sdpa_masked, sdpa_then, tied_head, view, Call, Eager, EagerFlavor,
    KvCache, MaskPattern, ROPE_INIT_DEFAULT, ROPE_INIT_GEMMA3_TWO_SETS,
    ROPE_INIT_GEMMA3_TWO_SETS_LINEAR,
};
use super::seq_cls::{decoder_outputs, sequence_classification, DecoderHead};
use super::{build_error, check_positions, AttnImplementation, HfConfig, HfError, HfInput};

/// Which Gemma generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `gemma`.
    Gemma,
    /// `gemma2`.
    Gemma2,
    /// `gemma3_text` (or a `gemma3` config read through its `text_config`).
    Gemma3,
}

impl Flavor {
    /// The `model_type` of its config class.
    pub(super) fn model_type(self) -> &'static str {
        match self {
            Flavor::Gemma => "gemma",
            Flavor::Gemma2 => "gemma2",
            Flavor::Gemma3 => "gemma3_text",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Flavor::Gemma => "Gemma",
            Flavor::Gemma2 => "Gemma2",
            Flavor::Gemma3 => "Gemma3",
        }
    }

    /// Gemma2 and Gemma3: sandwich norms around attention and MLP, sliding/full layer types.
    fn sandwich(self) -> bool {
        self != Flavor::Gemma
    }
}

/// Each layer's attention type (`config.layer_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LayerType {
    Full,
    Sliding,
}

/// The config values transformers uses (its config classes' defaults where a key is missing).
struct Spec {
    flavor: Flavor,
    /// The MLP's `act_fn`.
    act: HfActivation,
    /// How the rotary module computes its frequencies at construction, where traced
    /// (`layers::ROPE_INIT_DEFAULT`'s notation).
    rope_init: Option<&'static str>,
    vocab: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    intermediate: u64,
    attn_bias: bool,
    attn_dropout: f64,
    tied: bool,
    max_positions: u64,
    sliding_window: u64,
    layer_types: Vec<LayerType>,
    attn_softcap: Option<f64>,
    final_softcap: Option<f64>,
    /// `use_bidirectional_attention` (EmbeddingGemma): both masks let every query see keys on
    /// both sides (inside the window on sliding layers).
    bidirectional: bool,
}

fn field_err(cfg: &HfConfig, field: &str, expected: String) -> HfError {
    HfError::Field {
        path: cfg.path.clone(),
        field: field.into(),
        expected,
    }
}

fn spec(cfg: &HfConfig, flavor: Flavor) -> Result<Spec, HfError> {
    // fields the file leaves out are GemmaConfig's / Gemma2Config's / Gemma3TextConfig's
    // defaults (`HfConfig`'s class table, which `build` gives a config without `model_type` too)
    let or = |keys: &[&str], default: u64| -> Result<u64, HfError> {
        match cfg.opt_u64(keys)? {
            Some(0) => Err(field_err(cfg, keys[0], "a positive integer".into())),
            Some(n) => Ok(n),
            None => Ok(default),
        }
    };
    let hidden = cfg.u64(&["hidden_size"])?;
    let heads = cfg.u64(&["num_attention_heads"])?;
    let kv_heads = cfg.u64(&["num_key_value_heads"])?;
    if heads % kv_heads != 0 {
        return Err(field_err(
            cfg,
            "num_key_value_heads",
            format!("a divisor of num_attention_heads = {heads}"),
        ));
    }
    let layers = cfg.layers(&["num_hidden_layers"])?;
    // GemmaMLP reads `hidden_act` (its config maps the legacy "gelu" to the tanh approximation);
    // Gemma2/3 read `hidden_activation`
    let act_key = match flavor {
        Flavor::Gemma => "hidden_act",
        _ => "hidden_activation",
    };
    let act = if flavor == Flavor::Gemma && cfg.str(act_key)? == Some("gelu") {
        HfActivation::GELU_TANH
    } else {
        activation::from_config(cfg, act_key, "gelu_pytorch_tanh")?
    };
    // Gemma3TextConfig's (EmbeddingGemma); the other Gemma classes do not read it
    let bidirectional = cfg.bool_or("use_bidirectional_attention", false)?;
    if bidirectional && flavor != Flavor::Gemma3 {
        return Err(field_err(
            cfg,
            "use_bidirectional_attention",
            "false (only Gemma3 reads it)".into(),
        ));
    }
    // Gemma3TextConfig halves a bidirectional model's window on load (`w // 2 + 1`, an exclusive
    // bound either side; `to_dict` writes `(w - 1) * 2` back)
    if cfg.is_null("sliding_window") {
        // Gemma2's and Gemma3's decoders build a sliding-window mask (and sliding cache layers)
        // whatever `layer_types` says; the first Gemma reads no window
        if flavor != Flavor::Gemma {
            return Err(field_err(
                cfg,
                "sliding_window",
                "a positive integer: the decoder builds its sliding-window mask from it, which \
                 fails on null in transformers (\"Could not find a `sliding_window` argument in \
                 the config\"); leave it out for the config class's 4096"
                    .into(),
            ));
        }
    }
    let sliding_window = match or(&["sliding_window"], 4096)? {
        w if bidirectional => w / 2 + 1,
        w => w,
    };
    let layer_types = match (flavor, cfg.str_list("layer_types")?) {
        (Flavor::Gemma, _) => vec![LayerType::Full; layers as usize],
        (_, Some(list)) => {
            if list.len() as u64 != layers {
                return Err(field_err(
                    cfg,
                    "layer_types",
                    format!("one entry per layer (num_hidden_layers = {layers})"),
                ));
            }
            list.iter()
                .map(|t| match t.as_str() {
                    "full_attention" => Ok(LayerType::Full),
                    "sliding_attention" => Ok(LayerType::Sliding),
                    _ => Err(field_err(
                        cfg,
                        "layer_types",
                        format!("\"full_attention\" or \"sliding_attention\" entries (got {t:?})"),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        (_, None) => {
            // Gemma2: every other layer slides; Gemma3: all but every `sliding_window_pattern`-th
            let pattern = match flavor {
                Flavor::Gemma2 => 2,
                _ => or(&["sliding_window_pattern", "_sliding_window_pattern"], 6)?,
            };
            (0..layers)
                .map(|i| {
                    if (i + 1) % pattern != 0 {
                        LayerType::Sliding
                    } else {
                        LayerType::Full
                    }
                })
                .collect()
        }
    };
    let (attn_softcap, final_softcap) = match flavor {
        Flavor::Gemma => (None, None),
        Flavor::Gemma2 => (
            cfg.nullable_f64("attn_logit_softcapping", Some(50.0))?,
            cfg.nullable_f64("final_logit_softcapping", Some(30.0))?,
        ),
        // Gemma3Attention does not pass soft-capping to the attention function
        Flavor::Gemma3 => (None, cfg.nullable_f64("final_logit_softcapping", None)?),
    };
    // traced: one frequency set of the default rope (Gemma, Gemma2, Gemma3's sliding layers),
    // and Gemma3's two sets without rope scaling
    let unscaled = |key: &str| cfg.value(key).is_none_or(serde_json::Value::is_null);
    let types = |t: LayerType| layer_types.contains(&t);
    let rope_init = match flavor {
        _ if !unscaled("rope_parameters") => None,
        Flavor::Gemma3 if types(LayerType::Full) && types(LayerType::Sliding) => {
            let linear = cfg
                .value("rope_scaling")
                .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
                .and_then(serde_json::Value::as_str)
                == Some("linear");
            if unscaled("rope_scaling") {
                Some(ROPE_INIT_GEMMA3_TWO_SETS)
            } else {
                linear.then_some(ROPE_INIT_GEMMA3_TWO_SETS_LINEAR)
            }
        }
        // Gemma3's scaling applies to its full-attention frequencies only
        Flavor::Gemma3 if !types(LayerType::Full) => Some(ROPE_INIT_DEFAULT),
        _ => unscaled("rope_scaling").then_some(ROPE_INIT_DEFAULT),
    };
    Ok(Spec {
        flavor,
        act,
        rope_init,
        vocab: cfg.u64(&["vocab_size"])?,
        hidden,
        heads,
        kv_heads,
        head_dim: cfg.u64(&["head_dim"])?,
        intermediate: cfg.u64(&["intermediate_size"])?,
        attn_bias: cfg.bool_or("attention_bias", false)?,
        // a null one is refused by the types table where the class declares `float | int`
        // (GemmaConfig); Gemma2's and Gemma3's allow None, 0.0 in eval
        attn_dropout: cfg.prob_or("attention_dropout", 0.0)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
        max_positions: cfg.u64(&["max_position_embeddings"])?,
        sliding_window,
        layer_types,
        attn_softcap,
        final_softcap,
        bidirectional,
    })
}

/// The Gemma flavor of a `model_type` (and, for `gemma3`, its architecture), or `None` when it
/// is not a Gemma decoder this front-end builds.
pub fn flavor_of(
    cfg: &HfConfig,
    model_type: &str,
    archs: &[String],
) -> Result<Option<Flavor>, HfError> {
    Ok(match model_type {
        "gemma" => Some(Flavor::Gemma),
        "gemma2" => Some(Flavor::Gemma2),
        "gemma3_text" => Some(Flavor::Gemma3),
        "gemma3" => {
            if archs
                .iter()
                .any(|a| a == "Gemma3ForCausalLM" || a == "Gemma3ForConditionalGeneration")
            {
                Some(Flavor::Gemma3)
            } else {
                return Err(HfError::Field {
                    path: cfg.path.clone(),
                    field: "architectures".into(),
                    expected: format!(
                        "[\"Gemma3ForConditionalGeneration\"] (the vision-language model, run \
                         on text) or [\"Gemma3ForCausalLM\"] (its language model alone, read \
                         from text_config); got {archs:?}"
                    ),
                });
            }
        }
        _ => None,
    })
}

/// `Gemma3ForConditionalGeneration`'s SigLIP vision tower (`vision_config`) and its
/// `Gemma3MultiModalProjector`. A batch of token ids never runs them, but they are built, moved
/// to the device and counted like the language model (trainable, though no gradient reaches them,
/// so no optimizer state either).
struct VisionTower {
    hidden: u64,
    intermediate: u64,
    layers: u64,
    channels: u64,
    patch: u64,
    patches: u64,
    /// `vision_use_head`: SigLIP's attention-pooling head.
    head: bool,
}

impl VisionTower {
    /// The tower of a `gemma3` config whose class is `Gemma3ForConditionalGeneration`; `None` for
    /// the text-only classes.
    fn of(cfg: &HfConfig) -> Result<Option<VisionTower>, HfError> {
        // a `Gemma3Config`: `model_type` "gemma3", or (a config without one, which `build` gives
        // the text class's defaults) the language model under `text_config`
        let vision_language =
            cfg.str("model_type")? == Some("gemma3") || cfg.object("text_config")?.is_some();
        if !vision_language
            || !cfg
                .architectures()?
                .iter()
                .any(|a| a == "Gemma3ForConditionalGeneration")
        {
            return Ok(None);
        }
        let empty = serde_json::Map::new();
        let v = cfg.object("vision_config")?.unwrap_or(&empty);
        let field = |key: &str, default: u64| -> Result<u64, HfError> {
            match v.get(key) {
                None | Some(serde_json::Value::Null) => Ok(default),
                Some(x) => x.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                    field_err(
                        cfg,
                        &format!("vision_config.{key}"),
                        "a positive integer".into(),
                    )
                }),
            }
        };
        if let Some(t) = v.get("model_type").and_then(serde_json::Value::as_str) {
            if t != "siglip_vision_model" {
                return Err(field_err(
                    cfg,
                    "vision_config.model_type",
                    format!("\"siglip_vision_model\" (Gemma 3's vision tower; got {t:?})"),
                ));
            }
        }
        // SiglipVisionConfig's default keeps the pooling head (Gemma 3's configs turn it off)
        let head = match v.get("vision_use_head") {
            None | Some(serde_json::Value::Null) => true,
            Some(x) => x.as_bool().ok_or_else(|| {
                field_err(cfg, "vision_config.vision_use_head", "true or false".into())
            })?,
        };
        // SiglipVisionConfig's defaults
        let (image, patch) = (field("image_size", 224)?, field("patch_size", 16)?);
        if image % patch != 0 {
            return Err(field_err(
                cfg,
                "vision_config.image_size",
                format!("a multiple of patch_size = {patch}"),
            ));
        }
        let image_token = cfg.opt_u64(&["image_token_index", "image_token_id"])?;
        if image_token.unwrap_or(262_144) >= cfg.u64(&["vocab_size"])? {
            return Err(field_err(
                cfg,
                "image_token_index",
                "an id inside vocab_size (an image token outside it makes the forward rewrite the ids, which is not modelled)".into(),
            ));
        }
        Ok(Some(VisionTower {
            hidden: field("hidden_size", 768)?,
            intermediate: field("intermediate_size", 3072)?,
            layers: field("num_hidden_layers", 12)?,
            channels: field("num_channels", 3)?,
            patch,
            patches: (image / patch) * (image / patch),
            head,
        }))
    }

    /// Registers the tower's and the projector's parameters in `__init__` order (transformers 5's
    /// `SiglipVisionModel` holds `embeddings`, `encoder`, `post_layernorm` and `head` itself), and the
    /// tower's `post_init` temporary (`position_ids` set again from an int64 `arange`).
    fn declare(&self, b: &mut GraphBuilder, text_hidden: u64) {
        let h = self.hidden;
        let linear = |i, o| Linear {
            in_features: i,
            out_features: o,
            bias: true,
        };
        let layer_norm = |b: &mut GraphBuilder, name: &str| {
            b.declare(name, "LayerNorm", |b| {
                b.parameter("weight", vec![h]);
                b.parameter("bias", vec![h]);
            })
        };
        b.declare("vision_tower", "SiglipVisionModel", |b| {
            b.declare("embeddings", "SiglipVisionEmbeddings", |b| {
                b.declare("patch_embedding", "Conv2d", |b| {
                    b.parameter("weight", vec![h, self.channels, self.patch, self.patch]);
                    b.parameter("bias", vec![h]);
                });
                b.declare("position_embedding", "Embedding", |b| {
                    b.parameter("weight", vec![self.patches, h]);
                });
                b.buffer("position_ids", vec![1, self.patches], Some(DType::I64));
            });
            b.declare("encoder", "SiglipEncoder", |b| {
                b.declare("layers", "ModuleList", |b| {
                    for i in 0..self.layers {
                        b.declare(&i.to_string(), "SiglipEncoderLayer", |b| {
                            layer_norm(b, "layer_norm1");
                            b.declare("self_attn", "SiglipAttention", |b| {
                                for n in ["k_proj", "v_proj", "q_proj", "out_proj"] {
                                    b.declare_layer(n, &linear(h, h));
                                }
                            });
                            layer_norm(b, "layer_norm2");
                            b.declare("mlp", "SiglipMLP", |b| {
                                b.declare_layer("fc1", &linear(h, self.intermediate));
                                b.declare_layer("fc2", &linear(self.intermediate, h));
                            });
                        });
                    }
                });
            });
            layer_norm(b, "post_layernorm");
            if self.head {
                b.declare("head", "SiglipMultiheadAttentionPoolingHead", |b| {
                    b.parameter("probe", vec![1, 1, h]);
                    b.declare("attention", "MultiheadAttention", |b| {
                        b.parameter("in_proj_weight", vec![3 * h, h]);
                        b.parameter("in_proj_bias", vec![3 * h]);
                        b.declare_layer("out_proj", &linear(h, h));
                    });
                    layer_norm(b, "layernorm");
                    b.declare("mlp", "SiglipMLP", |b| {
                        b.declare_layer("fc1", &linear(h, self.intermediate));
                        b.declare_layer("fc2", &linear(self.intermediate, h));
                    });
                });
            }
        });
        b.temporary_at_init(vec![self.patches], DType::I64);
        b.declare("multi_modal_projector", "Gemma3MultiModalProjector", |b| {
            b.parameter("mm_input_projection_weight", vec![h, text_hidden]);
            b.declare("mm_soft_emb_norm", "Gemma3RMSNorm", |b| {
                b.parameter("weight", vec![h]);
            });
        });
    }
}

/// What every decoder layer of one build shares.
struct Ctx<'a> {
    s: &'a Spec,
    bsz: u64,
    /// The parameter dtype (the residual stream's).
    dtype: DType,
    /// The dtype the projections run in (the autocast dtype under autocast).
    compute: DType,
    /// The dtype the projections of the residual stream return (q, k, v, gate, up, and down of
    /// their products): `compute`, or with 4-bit layers their input's, the parameters' dtype
    /// ([`HfInput::four_bit`]).
    proj: DType,
    amp: bool,
    /// Eager attention: always for Gemma2, on `--attn-implementation eager` for the others.
    eager: bool,
    /// `Gemma3ForConditionalGeneration`: the masks are made outside the language model.
    masks_outside: bool,
}

/// Builds `Gemma{,2,3}ForCausalLM`; returns the graph and the checkpointed layers.
pub fn build(
    cfg: &HfConfig,
    flavor: Flavor,
    input: &HfInput,
    dtype: DType,
    head: DecoderHead,
) -> Result<(Graph, Vec<String>), HfError> {
    let m = Model::new(cfg, flavor, input, dtype)?;
    let s = &m.spec;
    let bare = head == DecoderHead::Bare;
    if s.bidirectional && !bare {
        return Err(field_err(
            cfg,
            "use_bidirectional_attention",
            "false, or the bare Gemma3TextModel (--task feature-extraction): bidirectional \
             attention is modelled for embedding models such as EmbeddingGemma"
                .into(),
        ));
    }
    let prefix = match (flavor, head) {
        (Flavor::Gemma3, DecoderHead::SequenceClassification(_) | DecoderHead::Bare) => {
            "Gemma3Text"
        }
        _ => flavor.prefix(),
    };
    let class = match &m.vision {
        Some(_) if head != DecoderHead::Lm => {
            return Err(HfError::BadInput(format!(
                "{}: Gemma3ForConditionalGeneration is modelled as a causal LM on text (--task causal-lm); for another head set architectures to [\"Gemma3ForCausalLM\"] (its language model alone)",
                cfg.path
            )))
        }
        Some(_) => "Gemma3ForConditionalGeneration".to_string(),
        None => head.class(prefix),
    };
    let name = match &m.vision {
        Some(_) => "gemma3",
        None => flavor.model_type(),
    };
    let mut b = GraphBuilder::new(name, &class);
    let ids = b.input(vec![input.batch, input.seq], DType::I64);
    let padding = padding_input(&mut b, input);
    let token_cls = matches!(head, DecoderHead::TokenClassification(_));
    let mut cache = head
        .fills_cache(cfg, input)?
        .then(|| KvCache::with_windows(m.cache_windows()));
    let mut call = Call::plain(input.seq, head);
    call.cache = cache.as_mut();
    call.padding_mask = padding;
    let out = m.forward(&mut b, ids, &mut call);
    drop(call);
    if (bare || token_cls) && s.rope_init.is_none() {
        // `post_init()` recomputes the rotary `inv_freq` buffers: float32 `[head_dim / 2]`
        // temporaries, three alive at once for one frequency set; Gemma3 computes one per layer
        // type and keeps each until the next is made (truth traces). The token classifier makes
        // its model with `AutoModel.from_config`, a model of its own, before its head.
        let sets = match flavor {
            Flavor::Gemma3 => [LayerType::Full, LayerType::Sliding]
                .iter()
                .filter(|t| s.layer_types.contains(t))
                .count(),
            _ => 1,
        };
        for _ in 0..2 + sets {
            b.temporary_at_init(vec![s.head_dim / 2], DType::F32);
        }
    }
    let outputs = decoder_outputs(
        &mut b,
        (head, "score"),
        s.hidden,
        vec![out],
        cache.as_ref(),
        None,
    );
    let graph = b
        .finish(&outputs, head.task(s.vocab))
        .map_err(build_error(cfg))?;
    // the bare model's layers are at the root of the names
    let root = match (bare, &m.vision) {
        (true, _) => "",
        (false, Some(_)) => "model.language_model.",
        (false, None) => "model.",
    };
    let layers = (0..s.layer_types.len())
        .map(|i| format!("{root}layers.{i}"))
        .collect();
    Ok((graph, layers))
}

/// A Gemma model ready to record its forward: the plain forward, or once per generation step.
pub struct Model {
    spec: Spec,
    dtype: DType,
    autocast: Option<DType>,
    eager: bool,
    /// `Gemma3ForConditionalGeneration`'s vision tower (run on text alone: built, never called).
    vision: Option<VisionTower>,
    four_bit: bool,
}

impl Model {
    /// Reads the config and checks the input against it.
    pub fn new(
        cfg: &HfConfig,
        flavor: Flavor,
        input: &HfInput,
        dtype: DType,
    ) -> Result<Model, HfError> {
        let spec = spec(cfg, flavor)?;
        check_positions(cfg, input, "max_position_embeddings", spec.max_positions)?;
        let vision = VisionTower::of(cfg)?;
        Ok(Model {
            eager: flavor == Flavor::Gemma2 || input.attn == AttnImplementation::Eager,
            spec,
            dtype,
            autocast: input.precision.autocast_dtype(),
            vision,
            four_bit: input.four_bit,
        })
    }

    fn ctx(&self, bsz: u64) -> Ctx<'_> {
        Ctx {
            s: &self.spec,
            bsz,
            dtype: self.dtype,
            compute: self.autocast.unwrap_or(self.dtype),
            proj: projection_dtype(self.dtype, self.autocast, self.four_bit),
            amp: self.autocast.is_some(),
            eager: self.eager,
            masks_outside: self.vision.is_some(),
        }
    }
}

impl CausalLm for Model {
    /// `Gemma{,2,3}ForCausalLM.forward`: the model, `lm_head` on the last hidden state (its last
    /// position with `logits_to_keep=1`), the final soft-capping.
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let s = &self.spec;
        let c = self.ctx(b.shape(ids)[0]);
        let p = s.flavor.prefix();
        let model_class = match s.flavor {
            Flavor::Gemma3 => "Gemma3TextModel".to_string(),
            _ => format!("{p}Model"),
        };
        if call.head == DecoderHead::Bare {
            // the model itself: its last hidden state is the output
            return model(b, &c, ids, call).0;
        }
        let (h, emb) = match &self.vision {
            // Gemma3Model: the vision tower and projector, built first, then the language model
            Some(v) => b.module("model", "Gemma3Model", &[ids], |b| {
                if call.first {
                    v.declare(b, s.hidden);
                }
                b.module("language_model", &model_class, &[ids], |b| {
                    model(b, &c, ids, call)
                })
            }),
            None => b.module("model", &model_class, &[ids], |b| model(b, &c, ids, call)),
        };
        match call.head {
            DecoderHead::SequenceClassification(head) => {
                return sequence_classification(b, head, s.hidden, ids, h);
            }
            // the caller builds it on the last hidden state (after the model's construction)
            DecoderHead::TokenClassification(_) => return h,
            _ => {}
        }
        if s.tied && call.first {
            // post_init drops the head's own weight for the embedding's
            b.tie_at_init(&[vec![s.vocab, s.hidden]], 1, None);
        }
        b.frame(|b| {
            // `hidden_states` (the last hidden state) is a local of the forward until it returns
            b.hold(&[h]);
            let h = call.head_input(b, h);
            let logits = if s.tied {
                tied_head(b, "lm_head", emb, h)
            } else {
                linear(b, "lm_head", s.hidden, s.vocab, false, h)
            };
            match s.final_softcap {
                // logits / cap, tanh (keeps its output), * cap
                Some(_) => {
                    let shape = b.shape(logits).to_vec();
                    let x = b.op(Aten::new("div", shape.clone()), &[logits]);
                    let x = b.op(Aten::new("tanh", shape).saves(vec![Saved::Output(0)]), &[x]);
                    mul_scalar(b, x)
                }
                None => logits,
            }
        })
    }

    fn layers(&self) -> usize {
        self.spec.layer_types.len()
    }

    fn vocab(&self) -> u64 {
        self.spec.vocab
    }

    fn kv_width(&self) -> u64 {
        self.spec.kv_heads * self.spec.head_dim
    }

    fn kv_dtypes(&self, param: DType, autocast: Option<DType>) -> (DType, DType) {
        super::generate::rotary_kv_dtypes(param, autocast)
    }

    // `DynamicCache(config=...)`: a `DynamicSlidingWindowLayer` per sliding layer
    fn cache_windows(&self) -> Vec<Option<u64>> {
        self.spec
            .layer_types
            .iter()
            .map(|&t| (t == LayerType::Sliding).then_some(self.spec.sliding_window))
            .collect()
    }
}

/// The model's forward (one call: the plain forward or a generation step): returns the final
/// norm's output and the embedding weight.
fn model(b: &mut GraphBuilder, c: &Ctx, ids: TensorId, call: &mut Call) -> (TensorId, TensorId) {
    let s = c.s;
    let seq = call.seq;
    let p = s.flavor.prefix();
    let (x, emb) = b.module(
        "embed_tokens",
        &format!("{p}TextScaledWordEmbedding"),
        &[ids],
        |b| {
            let w = b.parameter("weight", vec![s.vocab, s.hidden]);
            // torch.tensor(sqrt(hidden)), converted with the model
            let scale = b.buffer("embed_scale", vec![], None);
            let e = embedding_lookup(b, w, ids);
            // embedding * embed_scale.to(weight.dtype): keeps the scalar for the gradient
            let shape = b.shape(e).to_vec();
            let x = b.op(
                Aten::new("mul", shape)
                    .saves(vec![Saved::Input(1)])
                    .saved_only_for(Saved::Input(1), 0)
                    .grads(vec![GradIn::New, GradIn::None]),
                &[e, scale],
            );
            (x, w)
        },
    );
    if call.first {
        declare_in_init_order(b, s);
        // the rotary module computes its buffers step by step, and `post_init()` once more
        if let Some(program) = s.rope_init {
            let first = if s.flavor != Flavor::Gemma3 {
                "inv_freq"
            } else if s.layer_types.contains(&LayerType::Full) {
                "full_attention_inv_freq"
            } else {
                "sliding_attention_inv_freq"
            };
            let first = b.child_path(&format!("rotary_emb.{first}"));
            rope_init(b, &first, s.head_dim / 2, program);
        }
    }
    // Gemma3ForConditionalGeneration's model makes the masks (create_masks_for_generate, without
    // position ids, so without the packed-sequence check) before its language model runs, which
    // then makes its position ids and no masks
    let outer = c.masks_outside.then(|| masks(b, c, call, false));
    let pos = match call.position_ids {
        // `generate` passes them (its model inputs keep them)
        Some(pos) => pos,
        None => position_ids(b, seq),
    };
    // inputs_embeds and position_ids are locals of the model's forward until it returns
    b.hold(&[x, pos]);
    let (full_mask, sliding_mask) = match outer {
        Some(m) => m,
        None => masks(b, c, call, call.cache.is_none()),
    };
    // rotary embeddings: one module; Gemma3 calls it once per layer type present
    let rope = if s.flavor == Flavor::Gemma3 {
        let has = |t| s.layer_types.contains(&t);
        // buffers are registered for the sorted layer types
        let full = has(LayerType::Full).then(|| {
            rotary_with_buffers(
                b,
                [
                    "full_attention_inv_freq",
                    "full_attention_original_inv_freq",
                ],
                s.head_dim,
                x,
                pos,
            )
        });
        let sliding = has(LayerType::Sliding).then(|| {
            rotary_with_buffers(
                b,
                [
                    "sliding_attention_inv_freq",
                    "sliding_attention_original_inv_freq",
                ],
                s.head_dim,
                x,
                pos,
            )
        });
        [full, sliding]
    } else {
        let r = rotary(b, s.head_dim, x, pos);
        [Some(r), Some(r)]
    };
    // `position_embeddings` (Gemma3: a dict per layer type) is a local until the forward returns
    let held: Vec<TensorId> = rope.iter().flatten().flat_map(|&(c, s)| [c, s]).collect();
    b.hold(&held);
    let mut x = x;
    b.module("layers", "ModuleList", &[], |b| {
        for (i, &t) in s.layer_types.iter().enumerate() {
            let (rope, mask) = match t {
                LayerType::Full => (rope[0], full_mask),
                LayerType::Sliding => (rope[1], sliding_mask),
            };
            let Some((cos, sin)) = rope else { continue };
            // hidden states, position embeddings, mask and position_ids are its arguments (a
            // checkpoint keeps them until backward, and releases them in the call's order:
            // Gemma's forward passes position_ids first, Gemma2's and Gemma3's second)
            let mut args = if s.flavor == Flavor::Gemma {
                vec![x, pos, cos, sin]
            } else {
                vec![x, cos, sin, pos]
            };
            args.extend(mask);
            x = b.module(&i.to_string(), &format!("{p}DecoderLayer"), &args, |b| {
                decoder_layer(b, c, (x, i), cos, sin, mask, call)
            });
        }
    });
    let norm = format!("{p}RMSNorm");
    (
        gemma_rms_norm(b, "norm", &norm, s.hidden, (c.dtype, c.dtype), x),
        emb,
    )
}

/// The masks of one forward: one per layer type (Gemma: the causal one), held until the forward
/// returns (the `causal_mask_mapping` dict); eager masks (Gemma2's always) are additive in the
/// embeddings' dtype. Over a cache SDPA needs no mask but a sliding layer's past its window (inside
/// it `Model::new` and `generate` refuse the rest), and the mask code skips the packed-sequence
/// check; eager attention gets `[B, 1, S, past + S]` masks.
fn masks(
    b: &mut GraphBuilder,
    c: &Ctx,
    call: &Call,
    packed_check: bool,
) -> (Option<TensorId>, Option<TensorId>) {
    let s = c.s;
    let seq = call.seq;
    let eager = c.eager.then_some(c.dtype);
    let cache_len = call.cache.is_some().then_some(call.past + seq);
    let (full, sliding) = if s.bidirectional {
        (
            MaskPattern::Bidirectional,
            MaskPattern::BidirectionalSlidingWindow(s.sliding_window),
        )
    } else {
        (
            MaskPattern::Causal,
            MaskPattern::SlidingWindow(s.sliding_window),
        )
    };
    let mask = |b: &mut GraphBuilder, pattern| {
        let code = (cache_len, packed_check);
        model_mask(b, (c.bsz, seq), pattern, eager, code, call.padding_mask)
    };
    let full_mask = mask(b, full);
    let sliding_mask = if s.flavor.sandwich() {
        mask(b, sliding)
    } else {
        None
    };
    let held: Vec<TensorId> = full_mask
        .iter()
        .chain(sliding_mask.iter())
        .copied()
        .collect();
    b.hold(&held);
    (full_mask, sliding_mask)
}

/// Registers the layers', final norm's and rotary module's parameters and buffers in the order
/// `__init__` creates them (which decides the order of `model.parameters()`, so of the
/// allocations at construction and of the optimizer's per-parameter state): each layer's
/// attention (q, k, v, o projections, then Gemma3's q/k norms), MLP, then its norms; the final
/// norm; the rotary buffers (Gemma3: per layer type, sorted).
fn declare_in_init_order(b: &mut GraphBuilder, s: &Spec) {
    let p = s.flavor.prefix();
    let norm = format!("{p}RMSNorm");
    let lin = |i: u64, o: u64, bias: bool| Linear {
        in_features: i,
        out_features: o,
        bias,
    };
    let d = s.head_dim;
    let declare_norm = |b: &mut GraphBuilder, name: &str, dim: u64| {
        b.declare(name, &norm, |b| {
            b.parameter("weight", vec![dim]);
        })
    };
    b.declare("layers", "ModuleList", |b| {
        for i in 0..s.layer_types.len() {
            b.declare(&i.to_string(), &format!("{p}DecoderLayer"), |b| {
                b.declare("self_attn", &format!("{p}Attention"), |b| {
                    b.declare_layer("q_proj", &lin(s.hidden, s.heads * d, s.attn_bias));
                    b.declare_layer("k_proj", &lin(s.hidden, s.kv_heads * d, s.attn_bias));
                    b.declare_layer("v_proj", &lin(s.hidden, s.kv_heads * d, s.attn_bias));
                    b.declare_layer("o_proj", &lin(s.heads * d, s.hidden, s.attn_bias));
                    if s.flavor == Flavor::Gemma3 {
                        declare_norm(b, "q_norm", d);
                        declare_norm(b, "k_norm", d);
                    }
                });
                b.declare("mlp", &format!("{p}MLP"), |b| {
                    b.declare_layer("gate_proj", &lin(s.hidden, s.intermediate, false));
                    b.declare_layer("up_proj", &lin(s.hidden, s.intermediate, false));
                    b.declare_layer("down_proj", &lin(s.intermediate, s.hidden, false));
                });
                declare_norm(b, "input_layernorm", s.hidden);
                declare_norm(b, "post_attention_layernorm", s.hidden);
                if s.flavor.sandwich() {
                    declare_norm(b, "pre_feedforward_layernorm", s.hidden);
                    declare_norm(b, "post_feedforward_layernorm", s.hidden);
                }
            });
        }
    });
    declare_norm(b, "norm", s.hidden);
    b.declare("rotary_emb", &format!("{p}RotaryEmbedding"), |b| {
        let mut names = vec![["inv_freq", "original_inv_freq"]];
        if s.flavor == Flavor::Gemma3 {
            names.clear();
            if s.layer_types.contains(&LayerType::Full) {
                names.push([
                    "full_attention_inv_freq",
                    "full_attention_original_inv_freq",
                ]);
            }
            if s.layer_types.contains(&LayerType::Sliding) {
                names.push([
                    "sliding_attention_inv_freq",
                    "sliding_attention_original_inv_freq",
                ]);
            }
        }
        for pair in names {
            for n in pair {
                b.buffer_in(n, vec![d / 2], DType::F32);
            }
        }
    });
}

fn decoder_layer(
    b: &mut GraphBuilder,
    c: &Ctx,
    (input, layer): (TensorId, usize),
    cos: TensorId,
    sin: TensorId,
    mask: Option<TensorId>,
    call: &mut Call,
) -> TensorId {
    let s = c.s;
    let p = s.flavor.prefix();
    let norm = format!("{p}RMSNorm");
    let x = gemma_rms_norm(
        b,
        "input_layernorm",
        &norm,
        s.hidden,
        (c.dtype, c.dtype),
        input,
    );
    let (a, weights) = b.module("self_attn", &format!("{p}Attention"), &[x], |b| {
        attention(b, c, (x, layer), cos, sin, mask, call)
    });
    // eager attention's weights: `hidden_states, _ = self.self_attn(...)` keeps them in `_`
    b.hold(weights.as_slice());
    if s.flavor.sandwich() {
        // the post-norms read projection outputs (the autocast dtype under autocast) and cast
        // back to it; the residual adds promote. A 4-bit `o_proj` returns the attention's dtype
        // (its input's), a 4-bit `down_proj` the float32 its 4-bit gate and up made
        let a = gemma_rms_norm(
            b,
            "post_attention_layernorm",
            &norm,
            s.hidden,
            (c.compute, c.dtype),
            a,
        );
        let x = add(b, input, a);
        let y = gemma_rms_norm(
            b,
            "pre_feedforward_layernorm",
            &norm,
            s.hidden,
            (c.dtype, c.dtype),
            x,
        );
        let y = b.module("mlp", &format!("{p}MLP"), &[y], |b| mlp(b, s, y));
        let y = gemma_rms_norm(
            b,
            "post_feedforward_layernorm",
            &norm,
            s.hidden,
            (c.proj, c.dtype),
            y,
        );
        residual_add(b, x, y)
    } else {
        let x = add(b, input, a);
        let y = gemma_rms_norm(
            b,
            "post_attention_layernorm",
            &norm,
            s.hidden,
            (c.dtype, c.dtype),
            x,
        );
        let y = b.module("mlp", &format!("{p}MLP"), &[y], |b| mlp(b, s, y));
        residual_add(b, x, y)
    }
}

/// The layer's last `hidden_states = residual + hidden_states`: the MLP's output goes as the name
/// is rebound, `residual` when the layer returns (truth traces of inference).
fn residual_add(b: &mut GraphBuilder, residual: TensorId, y: TensorId) -> TensorId {
    let out = add(b, residual, y);
    b.keep_until_now(&[residual]);
    out
}

/// Self-attention from the normed hidden states `x` to the `o_proj` output, and the attention
/// weights eager attention returns; through the cache when `call` has one.
fn attention(
    b: &mut GraphBuilder,
    c: &Ctx,
    (x, layer): (TensorId, usize),
    cos: TensorId,
    sin: TensorId,
    mask: Option<TensorId>,
    call: &mut Call,
) -> (TensorId, Option<TensorId>) {
    let s = c.s;
    let (bsz, seq, d) = (c.bsz, call.seq, s.head_dim);
    let p = s.flavor.prefix();
    // (Gemma3's q/k norms keep the heads-first layout rotary gives them; its sliding layers past
    // the window copy too: truth traces at 516 tokens)
    let [q_copied, k_copied, v_copied] = heads_first_grads(
        (
            call.cache.is_some(),
            sdpa_grads_like_inputs(c.compute.size() == 2, mask.is_some(), s.attn_dropout),
        ),
        c.eager,
        mask.is_some(),
        (s.heads, s.kv_heads),
    );
    let heads_of = |b: &mut GraphBuilder, name: &str, heads: u64, copied: bool| {
        let t = linear(b, name, s.hidden, heads * d, s.attn_bias, x);
        let attn = (!c.eager).then_some((mask.is_some(), s.attn_dropout));
        let t = rotated_heads_view(b, t, vec![bsz, seq, heads, d], copied, attn);
        view(b, "transpose", t, vec![bsz, heads, seq, d])
    };
    let q = heads_of(b, "q_proj", s.heads, q_copied);
    let k = heads_of(b, "k_proj", s.kv_heads, k_copied);
    let v = heads_of(b, "v_proj", s.kv_heads, v_copied);
    let (q, k) = if s.flavor == Flavor::Gemma3 {
        // per-head GemmaRMSNorm on the transposed q and k, in the projections' dtype
        let norm = format!("{p}RMSNorm");
        // `query_states = self.q_norm(query_states)`: the projection's output goes once the norm
        // has returned, after its locals (under autocast the float32 product; truth traces of
        // EmbeddingGemma in AMP)
        let qn = gemma_rms_norm(b, "q_norm", &norm, d, (c.proj, c.dtype), q);
        b.keep_until_now(&[q]);
        let kn = gemma_rms_norm(b, "k_norm", &norm, d, (c.proj, c.dtype), k);
        b.keep_until_now(&[k]);
        (qn, kn)
    } else {
        (q, k)
    };
    // apply_rotary_pos_emb(q, k, cos, sin): its arguments live until it returns both
    let (q, k) = b.frame(|b| {
        b.hold(&[q, k]);
        (
            apply_rotary(b, q, cos, sin, c.proj != c.dtype),
            apply_rotary(b, k, cos, sin, c.proj != c.dtype),
        )
    });
    let eager = Eager {
        // Gemma's and Gemma3's eager_attention_forward are Llama's; Gemma2's soft-caps
        flavor: match s.flavor {
            Flavor::Gemma2 => EagerFlavor::Gemma2 {
                softcap: s.attn_softcap.is_some(),
            },
            _ => EagerFlavor::Llama,
        },
        dtype: c.dtype,
        autocast: c.amp.then_some(c.compute),
    };
    let merged = |masked| {
        move |b: &mut GraphBuilder, o| {
            let o = attention_output(b, o, false, (masked, s.attn_dropout));
            view(b, "reshape", o, vec![bsz, seq, s.heads * d])
        }
    };
    if let (Some(cache), Some(m), false) = (call.cache.as_deref_mut(), mask, c.eager) {
        // a sliding layer past its window: the cache update, then SDPA with the layer's mask
        // over the cached keys and values (query_states stays a local)
        b.hold(&[q]);
        let (k, v) = cache.update(b, layer, k, v);
        let o = sdpa_masked(
            b,
            q,
            (k, v, true),
            m,
            s.attn_dropout,
            c.compute,
            merged(true),
        );
        return (
            linear(b, "o_proj", s.heads * d, s.hidden, s.attn_bias, o),
            None,
        );
    }
    if call.cache.is_some() {
        // query_states stays a local; key_states / value_states are rebound to the cache's.
        // Eager attention adds the layer's mask to its scores
        call.eager_mask = if c.eager { mask } else { None };
        let o = cached_attention(b, call, layer, q, k, v, s.attn_dropout, eager);
        return (
            linear(b, "o_proj", s.heads * d, s.hidden, s.attn_bias, o),
            call.attn_weights.take(),
        );
    }
    // query_states / key_states / value_states are locals until the forward returns
    b.hold(&[q, k, v]);
    let (o, weights) = match (c.eager, mask) {
        (true, Some(m)) => {
            // eager_attention_forward is a function: the repeated k and v it keeps are freed
            // when it returns
            let (o, w) =
                b.frame(|b| eager_attention(b, eager, q, k, v, &[m], s.attn_dropout, false));
            (o, Some(w))
        }
        (_, Some(m)) => (
            sdpa_masked(
                b,
                q,
                (k, v, false),
                m,
                s.attn_dropout,
                c.compute,
                merged(true),
            ),
            None,
        ),
        (_, None) => (
            sdpa_then(b, [q, k, v], (s.attn_dropout, true, false), merged(false)),
            None,
        ),
    };
    (
        linear(b, "o_proj", s.heads * d, s.hidden, s.attn_bias, o),
        weights,
    )
}

/// `down_proj(act_fn(gate_proj(x)) * up_proj(x))` (`act_fn`: `GELUTanh` by default).
fn mlp(b: &mut GraphBuilder, s: &Spec, y: TensorId) -> TensorId {
    let g = linear(b, "gate_proj", s.hidden, s.intermediate, false, y);
    let g = s.act.module(b, "act_fn", g);
    let u = linear(b, "up_proj", s.hidden, s.intermediate, false, y);
    let m = mul(b, g, u);
    linear(b, "down_proj", s.intermediate, s.hidden, false, m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layer_types_follow_the_config_classes() {
        let cfg = HfConfig::parse(
            "c.json",
            r#"{"model_type": "gemma3_text", "num_hidden_layers": 7}"#,
        )
        .unwrap();
        let s = spec(&cfg, Flavor::Gemma3).unwrap();
        let sliding: Vec<bool> = s
            .layer_types
            .iter()
            .map(|&t| t == LayerType::Sliding)
            .collect();
        assert_eq!(sliding, [true, true, true, true, true, false, true]);
        let cfg = HfConfig::parse(
            "c.json",
            r#"{"model_type": "gemma2", "num_hidden_layers": 3}"#,
        )
        .unwrap();
        let s = spec(&cfg, Flavor::Gemma2).unwrap();
        assert_eq!(
            s.layer_types,
            [LayerType::Sliding, LayerType::Full, LayerType::Sliding]
        );
        assert_eq!((s.attn_softcap, s.final_softcap), (Some(50.0), Some(30.0)));
    }

    #[test]
    fn null_softcapping_switches_it_off() {
        let cfg = HfConfig::parse(
            "c.json",
            r#"{"model_type": "gemma2", "final_logit_softcapping": null}"#,
        )
        .unwrap();
        let s = spec(&cfg, Flavor::Gemma2).unwrap();
        assert_eq!((s.attn_softcap, s.final_softcap), (Some(50.0), None));
    }
}
