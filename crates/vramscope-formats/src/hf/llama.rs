//! The Llama-family decoder (`LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM`,
//! `Qwen3ForCausalLM`, `Phi3ForCausalLM`: transformers/models/{llama,mistral,qwen2,qwen3,phi3}/
//! modeling_*.py): `embed_tokens`, rotary embeddings computed once per forward, decoder layers of
//! RMSNorm + attention (q/k/v projections with `num_key_value_heads` ≤ heads and `head_dim`,
//! rotary applied to q and k, SDPA with `enable_gqa`, `o_proj`) + RMSNorm + SiLU-gated MLP, a
//! final RMSNorm and `lm_head` (tied to `embed_tokens` when `tie_word_embeddings`).
//!
//! The members differ in a few places: Qwen2 has biases on q/k/v; Qwen3 normalises q and k per
//! head (`q_norm` / `k_norm`, RMSNorm over `head_dim` before the transpose); Phi-3 fuses the
//! projections (`qkv_proj` sliced into q, k, v; `gate_up_proj` chunked into gate and up), applies
//! rotary to the first `partial_rotary_factor · head_dim` channels and concatenates the rest back
//! (a copy even when the factor is 1), and calls its residual dropouts as modules.
//!
//! A sliding window (Mistral's and Phi-3's `sliding_window`; Qwen2/3's with `use_sliding_window`,
//! on the layers from `max_window_layers` on) changes the mask: within the window SDPA runs
//! without one (`is_causal`), but once the sequence reaches it transformers builds a boolean
//! `[1, 1, S, S]` mask, repeats k and v to every head (no `enable_gqa` with a mask) and SDPA
//! makes the mask additive and keeps it for backward.
//!
//! The Mixture-of-Experts decoders (`moe.rs`) reuse the spec, the model around the layers
//! (`causal_lm`), the attention and the MLP; `generate.rs` runs the same forward with a KV cache
//! (sliding-window cache layers too, Qwen's per layer, past the window with SDPA or eager
//! attention: the mask each step, the cache's view of its last `w - 1` positions). Qwen3 and
//! Phi-3 run eager attention through the same code as Llama (measured:
//! fixtures/truth/hf_eager_families.jsonl).

use vramscope_core::builder::RepeatedModule;
use vramscope_core::ops::{Aten, GradIn, Saved, Slice, View};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{self, HfActivation};
use super::generate::CausalLm;
use super::layers::{
    add, apply_rotary, apply_rotary_sliced, attention_output, cached_attention, dropout, embedding,
    heads_first_grads, linear, model_mask, mul, padding_input, position_ids, projection_dtype,
    rms_norm, rope_init, rotary, rotated_heads_view, sdpa_grads_like_inputs, sdpa_masked,
    sdpa_then, view, Call, Eager, EagerFlavor, KvCache, MaskPattern, RouterLogits,
    ROPE_INIT_DEFAULT, ROPE_INIT_LINEAR, ROPE_INIT_LLAMA3, ROPE_INIT_YARN,
};
use super::seq_cls::{base_model, decoder_head, decoder_outputs, qa_inputs, DecoderHead};
use super::{build_error, check_positions, AttnImplementation, HfConfig, HfError, HfInput};

/// The family member: class names and the places the forwards differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Phi3,
}

impl Variant {
    fn of(model_type: &str) -> Variant {
        let compact = model_type.replace('_', "");
        if model_type.starts_with("mistral") {
            Variant::Mistral
        } else if model_type.starts_with("qwen3") && !compact.starts_with("qwen3moe") {
            Variant::Qwen3
        } else if model_type.starts_with("qwen2") {
            Variant::Qwen2
        } else if model_type.starts_with("phi3") {
            Variant::Phi3
        } else {
            Variant::Llama
        }
    }

    /// The class-name prefix (`Qwen2` in `Qwen2DecoderLayer`).
    fn prefix(self) -> &'static str {
        match self {
            Variant::Llama => "Llama",
            Variant::Mistral => "Mistral",
            Variant::Qwen2 => "Qwen2",
            Variant::Qwen3 => "Qwen3",
            Variant::Phi3 => "Phi3",
        }
    }
}

/// The shape of a Llama-family decoder as its config gives it (the MoE decoders of `moe.rs` read
/// the same fields).
pub(super) struct Spec {
    variant: Variant,
    pub(super) vocab: u64,
    pub(super) hidden: u64,
    pub(super) layers: u64,
    pub(super) heads: u64,
    pub(super) kv_heads: u64,
    pub(super) head_dim: u64,
    /// Channels of each head that rotary embeddings turn (Phi-3's `partial_rotary_factor`).
    rotary_dim: u64,
    /// How the rotary module computes `inv_freq` at construction, where traced
    /// (`layers::ROPE_INIT_DEFAULT`'s notation).
    rope_init: Option<&'static str>,
    pub(super) intermediate: u64,
    /// The MLPs' and experts' `act_fn` (`hidden_act`).
    pub(super) act: HfActivation,
    pub(super) attn_dropout: f64,
    /// Phi-3's `resid_pdrop` (its `resid_attn_dropout` / `resid_mlp_dropout` modules).
    resid_dropout: f64,
    pub(super) qkv_bias: bool,
    pub(super) o_bias: bool,
    pub(super) mlp_bias: bool,
    /// RMSNorm over each head's q and k before rotary (`q_norm` / `k_norm`, Qwen3)
    pub(super) qk_norm: bool,
    /// The projections are 4-bit layers, whose outputs keep their input's dtype
    /// ([`HfInput::four_bit`]).
    pub(super) four_bit: bool,
    /// Mixture-of-Experts models with `output_router_logits`: the experts per token; the output
    /// keeps every router's logits and the causal LM computes its auxiliary loss from them.
    pub(super) router_aux_top_k: Option<u64>,
    pub(super) tied: bool,
    pub(super) max_positions: Option<u64>,
    /// The SDPA mask each layer attends with in a plain forward.
    masks: Masks,
    /// The model's forward passes each layer `position_ids` before `position_embeddings`
    /// (Phi-3, Mistral, Mixtral, Qwen2-MoE, Qwen3-MoE; Llama, Qwen2 and Qwen3 the other way):
    /// the keyword arguments a checkpointed layer's frame releases in that order.
    position_ids_first: bool,
}

impl Spec {
    /// Sets the masks the model's forward makes (`patterns`, in its order) and the one each
    /// layer attends with (`of_layer`: an index into `patterns`).
    pub(super) fn set_masks(&mut self, patterns: Vec<MaskPattern>, of_layer: Vec<usize>) {
        self.masks = Masks { patterns, of_layer };
    }

    /// The index of the mask pattern layer `i` attends with (layers of one pattern record the
    /// same program: with SDPA a layer past its window takes a mask the others do not).
    pub(super) fn mask_of_layer(&self, i: usize) -> usize {
        self.masks.of_layer.get(i).copied().unwrap_or(0)
    }

    /// Per decoder layer, the window of its `DynamicCache` layer (`None`: a full one): the
    /// window of the mask pattern it attends with (Mistral's and Phi-3's on every layer, Qwen's
    /// `use_sliding_window` layers from `max_window_layers` on or as `layer_types` says).
    pub(super) fn cache_windows(&self) -> Vec<Option<u64>> {
        self.masks
            .of_layer
            .iter()
            .map(|&k| match self.masks.patterns.get(k) {
                Some(&MaskPattern::SlidingWindow(w)) => Some(w),
                _ => None,
            })
            .collect()
    }
}

/// The masks the model's forward builds and which layers use which.
struct Masks {
    /// Mistral and Phi-3: one mask for every layer, a sliding-window one when `sliding_window`
    /// is set. Qwen2/Qwen3: the causal mask always, plus a sliding-window one when some layer
    /// slides.
    patterns: Vec<MaskPattern>,
    /// Per layer, the index into `patterns`.
    of_layer: Vec<usize>,
}

/// MistralConfig defaults `sliding_window` to 4096 when the key is missing (`null` turns it off).
fn mistral_default_window(cfg: &HfConfig, variant: Variant) -> Result<Option<u64>, HfError> {
    Ok(
        (variant == Variant::Mistral && !cfg.is_null("sliding_window"))
            .then_some(cfg.opt_u64(&["sliding_window"])?.unwrap_or(4096)),
    )
}

fn masks(cfg: &HfConfig, variant: Variant, layers: u64) -> Result<Masks, HfError> {
    let window = |cfg: &HfConfig| -> Result<Option<u64>, HfError> {
        Ok(cfg.opt_u64(&["sliding_window"])?.filter(|&w| w > 0))
    };
    let n = layers as usize;
    Ok(match variant {
        Variant::Llama => Masks {
            patterns: vec![MaskPattern::Causal],
            of_layer: vec![0; n],
        },
        Variant::Mistral | Variant::Phi3 => Masks {
            patterns: vec![
                match mistral_default_window(cfg, variant)?.or(window(cfg)?) {
                    Some(w) => MaskPattern::SlidingWindow(w),
                    None => MaskPattern::Causal,
                },
            ],
            of_layer: vec![0; n],
        },
        Variant::Qwen2 | Variant::Qwen3 => {
            // Qwen{2,3}Config: no window unless use_sliding_window; then layers from
            // max_window_layers on slide, unless layer_types says otherwise
            let w = if cfg.bool_or("use_sliding_window", false)? {
                window(cfg)?
            } else {
                None
            };
            let sliding: Vec<bool> = match cfg.str_list("layer_types")? {
                Some(list) if list.len() == n => {
                    list.iter().map(|t| t == "sliding_attention").collect()
                }
                Some(_) => {
                    return Err(HfError::Field {
                        path: cfg.path.clone(),
                        field: "layer_types".into(),
                        expected: format!("one entry per layer (num_hidden_layers = {layers})"),
                    })
                }
                None => {
                    let from = cfg.opt_u64(&["max_window_layers"])?.unwrap_or(28);
                    (0..layers).map(|i| w.is_some() && i >= from).collect()
                }
            };
            match (w, sliding.iter().any(|&x| x)) {
                (Some(w), true) => Masks {
                    patterns: vec![MaskPattern::Causal, MaskPattern::SlidingWindow(w)],
                    of_layer: sliding.iter().map(|&x| usize::from(x)).collect(),
                },
                _ => Masks {
                    patterns: vec![MaskPattern::Causal],
                    of_layer: vec![0; n],
                },
            }
        }
    })
}

pub(super) fn spec(cfg: &HfConfig, model_type: &str) -> Result<Spec, HfError> {
    let variant = Variant::of(model_type);
    let hidden = cfg.u64(&["hidden_size"])?;
    let heads = cfg.u64(&["num_attention_heads"])?;
    // Qwen2MoeConfig declares `int | None` but derives nothing from None: its attention
    // divides by it and fails
    if cfg.is_null("num_key_value_heads") && model_type == "qwen2_moe" {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "num_key_value_heads".into(),
            expected: "an integer, not null: Qwen2MoeConfig keeps a null one None, on which \
                       its attention fails in transformers (it is not derived from \
                       num_attention_heads, as in Llama's and Qwen2's classes)"
                .into(),
        });
    }
    // unset (or `null`) is `num_attention_heads`, as the config classes derive it
    let kv_heads = cfg
        .opt_u64(&["num_key_value_heads"])?
        .filter(|&n| n > 0)
        .unwrap_or(heads);
    if heads % kv_heads != 0 {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "num_key_value_heads".into(),
            expected: format!("a divisor of num_attention_heads = {heads}"),
        });
    }
    // only the config classes that declare `head_dim: int | None` (Llama, Mistral, Mixtral)
    // derive a null one; Qwen3Config's is an int (the types table refused a null one), and the
    // classes that declare none (Qwen2, Phi-3, the Qwen MoE decoders) leave it to the attention's
    // `getattr(config, "head_dim", ...)`, which a null one makes None
    if cfg.is_null("head_dim") && !super::config_types::declares_nullable(model_type, "head_dim") {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "head_dim".into(),
            expected: format!(
                "an integer, not null: transformers fails on a null head_dim for model_type \
                 {model_type:?} (Llama, Mistral and Mixtral derive it from hidden_size / \
                 num_attention_heads); leave the field out for the config class's default"
            ),
        });
    }
    // Qwen3Config has its own `head_dim` (default 128); Phi3Config has none (hidden / heads), but
    // Phi3Attention reads one a config.json sets (`getattr(config, "head_dim", ...)`)
    let head_dim = match (variant, cfg.opt_u64(&["head_dim"])?) {
        (_, Some(d)) if d > 0 => d,
        (Variant::Qwen3, _) => 128,
        _ => hidden / heads,
    };
    if head_dim == 0 {
        // `self.head_dim**-0.5` in the attention's constructor fails on 0
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "num_attention_heads".into(),
            expected: format!(
                "at most hidden_size = {hidden} (head_dim = hidden_size // num_attention_heads is 0)"
            ),
        });
    }
    let act = activation::from_config(cfg, "hidden_act", "silu")?;
    let rotary_dim = match variant {
        Variant::Phi3 => {
            let factor = partial_rotary_factor(cfg)?;
            // int(head_dim * factor), as Phi3RotaryEmbedding computes it
            let d = (head_dim as f64 * factor) as u64;
            if d == 0 || !d.is_multiple_of(2) || d > head_dim {
                return Err(HfError::Field {
                    path: cfg.path.clone(),
                    field: "partial_rotary_factor".into(),
                    expected: format!(
                        "a factor in (0, 1] giving an even number of rotary channels of head_dim = {head_dim} (got {factor})"
                    ),
                });
            }
            d
        }
        _ => head_dim,
    };
    // the attention biases each family's classes make (transformers 5.23), whatever else the
    // config says: Llama's and Qwen3's follow `attention_bias` (Mixtral and Qwen3-MoE take these
    // from here too, see moe.rs), Qwen2's q/k/v always have one and its o_proj never, Mistral's
    // and Phi-3's projections have none
    let attention_bias = || cfg.bool_or("attention_bias", false);
    let (qkv_bias, o_bias) = match variant {
        Variant::Llama | Variant::Qwen3 => (attention_bias()?, attention_bias()?),
        Variant::Qwen2 => (true, false),
        Variant::Mistral | Variant::Phi3 => (false, false),
    };
    let layers = cfg.layers(&["num_hidden_layers"])?;
    let position_ids_first = matches!(
        model_type,
        "phi3" | "mistral" | "mixtral" | "qwen2_moe" | "qwen3_moe"
    );
    Ok(Spec {
        position_ids_first,
        variant,
        vocab: cfg.u64(&["vocab_size"])?,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        rotary_dim,
        rope_init: rope_init_program(cfg)?,
        intermediate: cfg.u64(&["intermediate_size"])?,
        act,
        // LlamaConfig alone declares `attention_dropout: int | float | None` (a null one is
        // 0.0 in eval; in training transformers hands SDPA None and fails); the others'
        // `float | int` refuse null (the types table)
        attn_dropout: cfg.prob_or("attention_dropout", 0.0)?,
        resid_dropout: match variant {
            Variant::Phi3 => cfg.prob_or("resid_pdrop", 0.0)?,
            _ => 0.0,
        },
        qkv_bias,
        o_bias,
        // only LlamaMLP reads `mlp_bias`
        mlp_bias: variant == Variant::Llama && cfg.bool_or("mlp_bias", false)?,
        qk_norm: variant == Variant::Qwen3,
        four_bit: false,
        router_aux_top_k: None,
        tied: cfg.bool_or("tie_word_embeddings", false)?,
        max_positions: cfg.opt_u64(&["max_position_embeddings"])?,
        masks: masks(cfg, variant, layers)?,
    })
}

/// Phi-3's `partial_rotary_factor`: top level, or inside `rope_parameters` / `rope_scaling`.
fn partial_rotary_factor(cfg: &HfConfig) -> Result<f64, HfError> {
    for holder in ["rope_parameters", "rope_scaling"] {
        if let Some(f) = cfg.nested_f64(holder, "partial_rotary_factor")? {
            return Ok(f);
        }
    }
    cfg.f64_or("partial_rotary_factor", 1.0)
}

/// Builds `{Llama,Mistral,Qwen2,Qwen3,Phi3}ForCausalLM`; returns the graph and the checkpointed
/// layers.
pub fn build(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
    dtype: DType,
    head: DecoderHead,
) -> Result<(Graph, Vec<String>), HfError> {
    let m = Model::new(cfg, model_type, input, dtype)?;
    let (s, p) = (&m.spec, m.prefix);
    let (bsz, seq) = (input.batch, input.seq);
    let masks = |b: &mut GraphBuilder, cache_len, padding| {
        sdpa_masks(
            b,
            s,
            (bsz, seq, m.eager.then_some(dtype)),
            cache_len,
            padding,
        )
    };
    causal_lm(
        cfg,
        s,
        (p, head),
        model_type,
        input,
        &masks,
        (
            &mut |b, i, x, cos, sin, call| m.layer(b, i, x, (cos, sin), call),
            // the layers attending with one mask pattern record the same program
            &|i| s.mask_of_layer(i as usize) as u64,
        ),
    )
}

/// One decoder layer: `(builder, layer index, hidden states, cos, sin, call) -> hidden states`.
pub(super) type DecoderLayer<'a> =
    dyn FnMut(&mut GraphBuilder, u64, TensorId, TensorId, TensorId, &mut Call) -> TensorId + 'a;

/// A model's mask code (inside its forward): given the cache's length after this call's update
/// (`None` without a cache) and the batch's padded `attention_mask` (`None`: none passed), the
/// masks it makes, one per pattern (`None` where SDPA runs without).
pub(super) type MaskCode<'a> =
    dyn Fn(&mut GraphBuilder, Option<u64>, Option<TensorId>) -> Vec<Option<TensorId>> + 'a;

/// The masks the model's mask code makes (`create_causal_mask` /
/// `create_sliding_window_causal_mask`, in the forward's order, each after its packed-sequence
/// check): for SDPA boolean masks, `None` where SDPA runs `is_causal`; for eager attention
/// (`eager`: the dtype of the embeddings) additive ones, never skipped, a sliding-window
/// pattern's with its window overlay whatever the length (truth traces of Mistral's).
/// `cache_len`: with a cache, its length after this call's update (no packed-sequence checks; SDPA
/// needs a mask only where a sliding window is reached). `padding`: the batch's padded
/// `attention_mask`, which makes every mask (`padded_attention_mask`).
pub(super) fn sdpa_masks(
    b: &mut GraphBuilder,
    s: &Spec,
    (bsz, seq, eager): (u64, u64, Option<DType>),
    cache_len: Option<u64>,
    padding: Option<TensorId>,
) -> Vec<Option<TensorId>> {
    s.masks
        .patterns
        .iter()
        .map(|&m| {
            model_mask(
                b,
                (bsz, seq),
                m,
                eager,
                (cache_len, cache_len.is_none()),
                padding,
            )
        })
        .collect()
}

/// The SDPA mask layer `layer` attends with in this call (none with a cache or eager attention).
fn layer_mask(s: &Spec, call: &Call, layer: usize) -> Option<TensorId> {
    let k = *s.masks.of_layer.get(layer)?;
    call.sdpa_masks.get(k).copied().flatten()
}

/// `{p}ForCausalLM` around `layer`: `model.embed_tokens`, the position ids, what the model's mask
/// code runs (`masks`, inside `model`'s forward: the SDPA masks it returns are kept until the
/// forward returns and handed to the layers through `call`), the rotary embedding computed once,
/// `model.layers.{i}` (each a `{p}DecoderLayer` that `layer` fills), `model.norm` and `lm_head`
/// (tied to `embed_tokens` when the config says so). Returns the graph and the checkpointed layers.
pub(super) fn causal_lm(
    cfg: &HfConfig,
    s: &Spec,
    (p, head): (&str, DecoderHead),
    model_type: &str,
    input: &HfInput,
    masks: &MaskCode,
    (layer, layer_kind): (&mut DecoderLayer, &dyn Fn(u64) -> u64),
) -> Result<(Graph, Vec<String>), HfError> {
    if let Some(m) = s.max_positions {
        check_positions(cfg, input, "max_position_embeddings", m)?;
    }
    let dtype = input.precision.param_dtype();
    let (bsz, seq) = (input.batch, input.seq);
    let mut b = GraphBuilder::new(model_type, &head.class(p));
    let ids = b.input(vec![bsz, seq], DType::I64);
    let padding = padding_input(&mut b, input);
    let qa_positions = qa_inputs(&mut b, head, bsz);
    let eager = input.attn == AttnImplementation::Eager;
    let use_cache = head.fills_cache(cfg, input)?;
    let mut cache = use_cache.then(|| KvCache::with_windows(s.cache_windows()));
    let mut call = Call::plain(seq, head);
    call.cache = cache.as_mut();
    call.padding_mask = padding;
    let out = forward(
        &mut b,
        (s, p, dtype, eager),
        ids,
        &mut call,
        masks,
        layer,
        Some(layer_kind),
    );
    let per_token = head.per_token();
    if (head == DecoderHead::Bare || per_token) && s.rope_init.is_none() {
        // `post_init()` at the end of `{p}Model.__init__` recomputes the rotary `inv_freq` into
        // its buffer: float32 `[rotary_dim / 2]` temporaries, three alive at once for the
        // default rope (truth traces; the rope types without a traced program, `rope_init`,
        // are taken as the default's). The per-token heads make their model with
        // `AutoModel.from_config`, a model of its own, before their head.
        for _ in 0..3 {
            b.temporary_at_init(vec![s.rotary_dim / 2], DType::F32);
        }
    }
    let outputs = decoder_outputs(
        &mut b,
        (head, "score"),
        s.hidden,
        out,
        cache.as_ref(),
        qa_positions,
    );
    let graph = b
        .finish(&outputs, head.task(s.vocab))
        .map_err(build_error(cfg))?;
    // the bare model's layers are at the root of the names
    let root = if head == DecoderHead::Bare {
        String::new()
    } else {
        format!("{}.", head.base())
    };
    let layers = (0..s.layers).map(|i| format!("{root}layers.{i}")).collect();
    Ok((graph, layers))
}

/// The construction program of the config's rope type, where traced: the default rope (no
/// `rope_type`, or `"default"`) and Llama 3's.
fn rope_init_program(cfg: &HfConfig) -> Result<Option<&'static str>, HfError> {
    let mut rope_type = None;
    for holder in ["rope_parameters", "rope_scaling"] {
        for key in ["rope_type", "type"] {
            rope_type = rope_type.or(cfg.nested_str(holder, key)?);
        }
    }
    Ok(match rope_type {
        None | Some("default") => Some(ROPE_INIT_DEFAULT),
        Some("llama3") => Some(ROPE_INIT_LLAMA3),
        Some("linear") => Some(ROPE_INIT_LINEAR),
        Some("yarn") => Some(ROPE_INIT_YARN),
        Some(_) => None,
    })
}

/// One call of `{p}ForCausalLM` on `ids` (the plain forward, or one forward of a generation with
/// its cache); returns the logits (a question-answering head: its loss, then the start and end
/// logits).
pub(super) fn forward(
    b: &mut GraphBuilder,
    (s, p, dtype, eager): (&Spec, &str, DType, bool),
    ids: TensorId,
    call: &mut Call,
    masks: &MaskCode,
    layer: &mut DecoderLayer,
    layer_kind: Option<&dyn Fn(u64) -> u64>,
) -> Vec<TensorId> {
    let seq = call.seq;
    let bare = call.head == DecoderHead::Bare;
    let base = call.head.base();
    if s.router_aux_top_k.is_some() {
        call.router_logits = Some(RouterLogits::default());
    }
    let model = |b: &mut GraphBuilder| {
        let mark = b.param_mark();
        let (x, emb) = embedding(b, "embed_tokens", s.vocab, s.hidden, ids);
        let pos = match call.position_ids {
            // `generate` passes them (its model inputs keep them)
            Some(pos) => pos,
            None => position_ids(b, seq),
        };
        // inputs_embeds and position_ids are locals of the model's forward until it returns;
        // Qwen2's and Qwen3's forward also put them in a `mask_kwargs` dict, a local bound after
        // the masks' `causal_mask_mapping`, so they go after the masks (truth traces)
        let embeds_after_masks = matches!(s.variant, Variant::Qwen2 | Variant::Qwen3);
        if !embeds_after_masks {
            b.hold(&[x, pos]);
        }
        // the mask code checks for packed sequences only without a cache; the masks it makes
        // are locals of the forward. Over a cache SDPA needs none, except a sliding-window mask
        // whose window the cache has reached (Qwen2-MoE's window-0 mask, which no layer uses)
        let m = masks(
            b,
            call.cache.is_some().then_some(call.past + seq),
            call.padding_mask,
        );
        let held: Vec<TensorId> = m.iter().flatten().copied().collect();
        b.hold(&held);
        // eager attention: the mask code made the additive masks, one per pattern, each layer
        // attending with its pattern's
        let eager_masks = if eager {
            call.sdpa_masks = vec![None; m.len()];
            held
        } else {
            call.sdpa_masks = m;
            Vec::new()
        };
        if embeds_after_masks {
            b.hold(&[x, pos]);
        }
        let (cos, sin) = rotary(b, s.rotary_dim, x, pos);
        // so are `position_embeddings`
        b.hold(&[cos, sin]);
        let mut x = x;
        let class = format!("{p}DecoderLayer");
        b.module("layers", "ModuleList", &[], |b| {
            // layers of one kind record the same program from their arguments: without a cache
            // (whose tensors differ per layer) the builder copies the first of each kind
            let mut recorded: Vec<(u64, RepeatedModule)> = Vec::new();
            for i in 0..s.layers {
                // position_embeddings, the mask and position_ids are arguments too (a checkpoint
                // keeps them until its backward, and releases them in the call's order)
                let mut args = if s.position_ids_first {
                    vec![x, pos, cos, sin]
                } else {
                    vec![x, cos, sin, pos]
                };
                args.extend(layer_mask(s, call, i as usize));
                if let Some(&k) = s.masks.of_layer.get(i as usize) {
                    if let Some(&mask) = eager_masks.get(k) {
                        call.eager_mask = Some(mask);
                        args.push(mask);
                    }
                }
                let name = i.to_string();
                // (nor with router logits kept: each layer's go into the output)
                let kind = layer_kind
                    .filter(|_| call.cache.is_none() && call.router_logits.is_none())
                    .map(|k| k(i));
                let f = |b: &mut GraphBuilder| layer(b, i, x, cos, sin, call);
                x = match kind {
                    Some(k) => {
                        let slot = match recorded.iter().position(|(kk, _)| *kk == k) {
                            Some(j) => j,
                            None => {
                                recorded.push((k, RepeatedModule::with_calls(s.layers as u32)));
                                recorded.len() - 1
                            }
                        };
                        b.module_repeated(&mut recorded[slot].1, &name, &class, &args, f)
                    }
                    None => b.module(&name, &class, &args, f),
                };
            }
        });
        let out = rms_norm(b, "norm", &format!("{p}RMSNorm"), s.hidden, dtype, x);
        // `hidden_states = self.norm(hidden_states)` rebinds the last layer's output: it goes
        // once the norm returns, before the forward's locals (truth traces of inference)
        b.keep_until_now(&[x]);
        // `__init__` makes the rotary module after the norm, computing its `inv_freq` step by
        // step, and `post_init()` computes it once more (the first call only: a generation's
        // later steps register nothing)
        if let (Some(program), true) = (s.rope_init, b.params_since(&mark) > 0) {
            b.construct_last(mark, "rotary_emb");
            let first = b.child_path("rotary_emb.inv_freq");
            rope_init(b, &first, s.rotary_dim / 2, program);
        }
        (out, emb)
    };
    let base_out = base_model(b, bare, (base, &format!("{p}Model")), ids, model);
    let out = decoder_head(b, call, (s.hidden, s.vocab, s.tied), ids, base_out);
    let mut outs = vec![out];
    if let (Some(kept), Some(top_k)) = (call.router_logits.take(), s.router_aux_top_k) {
        if call.head == DecoderHead::Bare {
            // the bare model's output holds them: the caller keeps it with its hidden states
            outs.extend(kept.kept.iter().copied());
        } else {
            let head = call.head;
            super::moe::router_logits_output(
                b,
                (base_out.0, call.padding_mask),
                &kept,
                top_k,
                head,
                call.kept_outputs.as_mut(),
            );
        }
    }
    outs
}

/// A Llama-family model ready to record its forward once per generation step.
pub struct Model {
    spec: Spec,
    prefix: &'static str,
    dtype: DType,
    autocast: Option<DType>,
    eager: bool,
}

impl Model {
    /// Reads the config and checks the input against it.
    pub fn new(
        cfg: &HfConfig,
        model_type: &str,
        input: &HfInput,
        dtype: DType,
    ) -> Result<Model, HfError> {
        let mut spec = spec(cfg, model_type)?;
        spec.four_bit = input.four_bit;
        if let Some(m) = spec.max_positions {
            check_positions(cfg, input, "max_position_embeddings", m)?;
        }
        let eager = input.attn == AttnImplementation::Eager;
        Ok(Model {
            prefix: spec.variant.prefix(),
            spec,
            dtype,
            autocast: input.precision.autocast_dtype(),
            eager,
        })
    }
}

/// The feed-forward a decoder layer runs on the `post_attention_layernorm` output: the family's
/// MLP ([`feed_forward`]), or a Mixture-of-Experts layer's sparse block.
pub(super) type FeedForward<'a> = dyn FnMut(&mut GraphBuilder, TensorId) -> TensorId + 'a;

/// One `{p}DecoderLayer`: `input_layernorm`, `self_attn`, the residual add,
/// `post_attention_layernorm`, `ffn`, the residual add (Phi-3: with its residual dropouts).
#[allow(clippy::too_many_arguments)]
pub(super) fn decoder_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    (dtype, autocast): (DType, Option<DType>),
    input: TensorId,
    (cos, sin): (TensorId, TensorId),
    (layer, call): (usize, &mut Call),
    ffn: &mut FeedForward,
) -> TensorId {
    let init_order = b.param_mark();
    let norm = format!("{p}RMSNorm");
    let x = rms_norm(b, "input_layernorm", &norm, s.hidden, dtype, input);
    let a = attention(b, s, p, (dtype, autocast), x, cos, sin, layer, call);
    // eager attention's weights: `hidden_states, _ = self.self_attn(...)` keeps them
    if let Some(w) = call.attn_weights.take() {
        b.hold(&[w]);
    }
    let phi3 = s.variant == Variant::Phi3;
    // Phi-3: `hidden_states = residual + self.resid_attn_dropout(hidden_states)`: the name
    // keeps the attention's (and below the MLP's) output until the sum is bound to it
    let x = if phi3 {
        let dropped = dropout(b, "resid_attn_dropout", s.resid_dropout, a);
        let x = add(b, input, dropped);
        b.keep_until_now(&[a]);
        x
    } else {
        add(b, input, a)
    };
    let y = rms_norm(b, "post_attention_layernorm", &norm, s.hidden, dtype, x);
    let y = ffn(b, y);
    let out = if phi3 {
        let dropped = dropout(b, "resid_mlp_dropout", s.resid_dropout, y);
        let out = add(b, x, dropped);
        b.keep_until_now(&[y]);
        out
    } else {
        add(b, x, y)
    };
    // `hidden_states = residual + hidden_states`: the MLP's output goes as the name is rebound,
    // `residual` when the layer returns (truth traces of inference)
    b.keep_until_now(&[x]);
    // `__init__` creates the attention and the MLP before the norms the forward calls first
    b.order_params(
        init_order,
        &[
            "self_attn",
            "mlp",
            "input_layernorm",
            "post_attention_layernorm",
        ],
    );
    out
}

/// The family's `mlp` module: SiLU-gated (Phi-3: with the fused `gate_up_proj`).
fn feed_forward(b: &mut GraphBuilder, s: &Spec, p: &str, y: TensorId) -> TensorId {
    if s.variant == Variant::Phi3 {
        b.module("mlp", &format!("{p}MLP"), &[y], |b| fused_mlp(b, s, y))
    } else {
        mlp(
            b,
            "mlp",
            &format!("{p}MLP"),
            (s.hidden, s.intermediate),
            (s.mlp_bias, s.act),
            y,
        )
    }
}

/// `self_attn`: q/k/v projections viewed as heads (with `q_norm` / `k_norm` over each head when
/// `s.qk_norm`; Phi-3's sliced from one `qkv_proj`), rotary on q and k, then the attention core
/// (SDPA with the layer's sliding-window mask and k, v repeated when the model made one, else
/// [`cached_attention`]: the cache when `call` has one, SDPA (causal, GQA) or eager attention),
/// `o_proj`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    (dtype, autocast): (DType, Option<DType>),
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
    layer: usize,
    call: &mut Call,
) -> TensorId {
    // the projections' dtype: what the q/k norms see; their float32 weights promote q and k
    // back to float32, so rotary then runs on float32 q and k
    let proj_dtype = autocast.unwrap_or(dtype);
    // what the projections return (float32 from 4-bit layers under autocast): rotary's products
    // are half only for half q and k (Qwen3's norms make them float32)
    let proj_out = projection_dtype(dtype, autocast, s.four_bit);
    let low_precision_qk = !s.qk_norm && proj_out != dtype;
    let xs = b.shape(x).to_vec();
    let (bsz, seq) = (xs[0], xs[1]);
    let mask = layer_mask(s, call, layer);
    // through Qwen3's q/k norms too, whose elementwise backward keeps the heads-first layout
    // rotary gives them
    let phi3 = s.variant == Variant::Phi3;
    let [q_copied, k_copied, v_copied] = heads_first_grads(
        (
            call.cache.is_some(),
            sdpa_grads_like_inputs(proj_dtype.size() == 2, mask.is_some(), s.attn_dropout),
        ),
        call.eager_mask.is_some(),
        mask.is_some(),
        (s.heads, s.kv_heads),
    );
    // the SDPA call the projections' views feed (eager attention: none)
    let attn = call
        .eager_mask
        .is_none()
        .then_some((mask.is_some(), s.attn_dropout));
    b.module("self_attn", &format!("{p}Attention"), &[x], |b| {
        let init_order = b.param_mark();
        let d = s.head_dim;
        let norm = format!("{p}RMSNorm");
        let proj = |b: &mut GraphBuilder,
                    name: &str,
                    heads: u64,
                    heads_first: bool,
                    qk_norm: Option<&str>| {
            let t = linear(b, name, s.hidden, heads * d, s.qkv_bias, x);
            let t = rotated_heads_view(b, t, vec![bsz, seq, heads, d], heads_first, attn);
            let t = match qk_norm {
                Some(n) => rms_norm(b, n, &norm, d, proj_out, t),
                None => t,
            };
            view(b, "transpose", t, vec![bsz, heads, seq, d])
        };
        let (qn, kn) = if s.qk_norm {
            (Some("q_norm"), Some("k_norm"))
        } else {
            (None, None)
        };
        let (q, k, v) = if phi3 {
            let (qd, kvd) = (s.heads * d, s.kv_heads * d);
            let qkv = linear(b, "qkv_proj", s.hidden, qd + 2 * kvd, false, x);
            // qkv[..., a:b]: the three slices (SliceBackward0 scatters into a zero [B, S, op]
            // gradient), then each viewed as heads
            let slice = |b: &mut GraphBuilder, n: u64| {
                b.op(
                    Slice {
                        shape: vec![bsz, seq, n],
                    },
                    &[qkv],
                )
            };
            let (q, k, v) = (slice(b, qd), slice(b, kvd), slice(b, kvd));
            let heads_of = |b: &mut GraphBuilder, t: TensorId, heads: u64, copied: bool| {
                let t = rotated_heads_view(b, t, vec![bsz, seq, heads, d], copied, attn);
                view(b, "transpose", t, vec![bsz, heads, seq, d])
            };
            (
                heads_of(b, q, s.heads, q_copied),
                heads_of(b, k, s.kv_heads, k_copied),
                heads_of(b, v, s.kv_heads, v_copied),
            )
        } else {
            (
                proj(b, "q_proj", s.heads, q_copied, qn),
                proj(b, "k_proj", s.kv_heads, k_copied, kn),
                proj(b, "v_proj", s.kv_heads, v_copied, None),
            )
        };
        // apply_rotary_pos_emb(q, k, ...): the raw q and k stay referenced until both are rotated
        let (q, k) = b.frame(|b| {
            b.hold(&[q, k]);
            if phi3 {
                // Phi-3's version slices the rotary channels and cats the rest back
                apply_rotary_sliced(b, (q, k), cos, sin, low_precision_qk, s.rotary_dim)
            } else {
                (
                    apply_rotary(b, q, cos, sin, low_precision_qk),
                    apply_rotary(b, k, cos, sin, low_precision_qk),
                )
            }
        });
        let o = if let (Some(m), true) = (mask, call.cache.is_some()) {
            // a generation past a sliding window: the cache update, then SDPA with the layer's
            // mask over the cached keys and values (Phi-3's `qkv` is a local until the forward
            // returns: v, a view of it, stands for it)
            b.hold(&[q]);
            if phi3 {
                b.hold(&[v]);
            }
            let (k, v) = match call.cache.as_deref_mut() {
                Some(c) => c.update(b, layer, k, v),
                None => (k, v),
            };
            // one query: the output is already laid out like q
            let kv = (k, v, call.cache.is_some());
            let o = sdpa_masked(b, q, kv, m, s.attn_dropout, proj_dtype, |b, o| {
                attention_output(b, o, phi3 && seq > 1, (true, s.attn_dropout))
            });
            view(b, "reshape", o, vec![bsz, seq, s.heads * d])
        } else if phi3 && call.cache.is_some() && call.eager_mask.is_none() {
            // a generation's forward: q stays referenced, the cache update, then SDPA on the
            // cached keys and values (causal only with more than one query); the output is
            // laid out like Phi-3's `cat`-made q, which `.contiguous()` copies in half precision
            // (one query: already contiguous). `qkv` is a local until the forward returns (v,
            // a view of it, stands for it)
            b.hold(&[v, q]);
            let (k, v) = match call.cache.as_deref_mut() {
                Some(c) => c.update(b, layer, k, v),
                None => (k, v),
            };
            let cached = call.cache.is_some();
            let o = sdpa_then(b, [q, k, v], (s.attn_dropout, seq > 1, cached), |b, o| {
                attention_output(b, o, seq > 1, (false, s.attn_dropout))
            });
            view(b, "reshape", o, vec![bsz, seq, s.heads * d])
        } else if (phi3 && call.eager_mask.is_none()) || mask.is_some() {
            // the plain SDPA forward; query/key/value_states are locals until the forward returns
            b.hold(&[q, k, v]);
            // cuDNN / flash attention lay the output out like q: Phi-3's q is a `cat` result,
            // contiguous [B, H, S, D], so `.contiguous()` copies in half precision
            let merge = |masked| {
                move |b: &mut GraphBuilder, o| {
                    attention_output(b, o, phi3, (masked, s.attn_dropout))
                }
            };
            let o = match mask {
                // a materialized mask: k and v repeated to all heads, the mask made additive
                Some(m) => {
                    let kv = (k, v, false);
                    sdpa_masked(b, q, kv, m, s.attn_dropout, proj_dtype, merge(true))
                }
                None => sdpa_then(b, [q, k, v], (s.attn_dropout, true, false), merge(false)),
            };
            view(b, "reshape", o, vec![bsz, seq, s.heads * d])
        } else {
            let eager = Eager {
                flavor: if phi3 {
                    EagerFlavor::Phi3
                } else {
                    EagerFlavor::Llama
                },
                dtype,
                autocast,
            };
            // Phi-3's `qkv` is a local until the forward returns (v, a view of it, stands for
            // it): past a sliding window the cache keeps copies, not the view
            if phi3 && call.cache.is_some() {
                b.hold(&[v]);
            }
            cached_attention(b, call, layer, q, k, v, s.attn_dropout, eager)
        };
        let out = linear(b, "o_proj", s.heads * d, s.hidden, s.o_bias, o);
        // `__init__` order: the q/k norms after the projections; Phi-3 creates o_proj first
        let children: &[&str] = if phi3 {
            &["o_proj", "qkv_proj"]
        } else {
            &["q_proj", "k_proj", "v_proj", "o_proj"]
        };
        b.order_params(init_order, children);
        out
    })
}

/// The gated MLP module `name` (class `type_name`): `down_proj(act_fn(gate_proj(x)) *
/// up_proj(x))`, the projections with biases or not.
pub(super) fn mlp(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    (hidden, intermediate): (u64, u64),
    (bias, act): (bool, HfActivation),
    x: TensorId,
) -> TensorId {
    b.module(name, type_name, &[x], |b| {
        let g = linear(b, "gate_proj", hidden, intermediate, bias, x);
        let g = act_module(b, act, "act_fn", g);
        let u = linear(b, "up_proj", hidden, intermediate, bias, x);
        let m = mul(b, g, u);
        linear(b, "down_proj", intermediate, hidden, bias, m)
    })
}

/// The activation module `name` (`act_fn`, Phi-3's `activation_fn`) called on `x`.
pub(super) fn act_module(
    b: &mut GraphBuilder,
    act: HfActivation,
    name: &str,
    x: TensorId,
) -> TensorId {
    if act == HfActivation::SILU {
        silu_module(b, name, x)
    } else {
        act.module(b, name, x)
    }
}

/// `silu` called as the activation module `name`: keeps its input for backward.
fn silu_module(b: &mut GraphBuilder, name: &str, x: TensorId) -> TensorId {
    let sh = b.shape(x).to_vec();
    b.module(name, "SiLUActivation", &[x], |b| {
        b.op(
            Aten::new("silu", sh)
                .saves(vec![Saved::Input(0)])
                .grads(vec![GradIn::New]),
            &[x],
        )
    })
}

/// Phi-3: `gate, up = gate_up_proj(y).chunk(2, -1)`, `down_proj(up * activation_fn(gate))`.
fn fused_mlp(b: &mut GraphBuilder, s: &Spec, y: TensorId) -> TensorId {
    let gu = linear(b, "gate_up_proj", s.hidden, 2 * s.intermediate, false, y);
    let mut half = b.shape(gu).to_vec();
    if let Some(l) = half.last_mut() {
        *l = s.intermediate;
    }
    // chunk: two views, whose gradients SplitBackward0 gathers into one new tensor
    let parts = b.op_multi(
        View {
            name: "chunk",
            shapes: vec![half.clone(), half],
            expand: false,
        },
        &[gu],
    );
    // after a shape error the builder hands back one placeholder; keep going with it
    let (gate, up) = match parts[..] {
        [g, u] => (g, u),
        _ => (gu, gu),
    };
    // the `up_states` local (a view of the projection) lives until the forward returns
    b.hold(&[up]);
    let g = act_module(b, s.act, "activation_fn", gate);
    let m = mul(b, up, g);
    linear(b, "down_proj", s.intermediate, s.hidden, false, m)
}

impl Model {
    /// Decoder layer `i` (`model.layers.{i}`) on `x`.
    fn layer(
        &self,
        b: &mut GraphBuilder,
        i: u64,
        x: TensorId,
        cos_sin: (TensorId, TensorId),
        call: &mut Call,
    ) -> TensorId {
        let (s, p) = (&self.spec, self.prefix);
        decoder_layer(
            b,
            s,
            p,
            (self.dtype, self.autocast),
            x,
            cos_sin,
            (i as usize, call),
            &mut |b, y| feed_forward(b, s, p, y),
        )
    }
}

impl CausalLm for Model {
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let (s, p, dtype) = (&self.spec, self.prefix, self.dtype);
        let (bsz, seq) = (b.shape(ids)[0], b.shape(ids)[1]);
        let masks = |b: &mut GraphBuilder, cache_len, padding| {
            sdpa_masks(
                b,
                s,
                (bsz, seq, self.eager.then_some(dtype)),
                cache_len,
                padding,
            )
        };
        forward(
            b,
            (s, p, dtype, self.eager),
            ids,
            call,
            &masks,
            &mut |b, i, x, cos, sin, call| self.layer(b, i, x, (cos, sin), call),
            Some(&|_| 0),
        )[0]
    }

    fn layers(&self) -> usize {
        self.spec.layers as usize
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

    fn cache_windows(&self) -> Vec<Option<u64>> {
        self.spec.cache_windows()
    }
}
