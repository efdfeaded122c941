//! The Llama-family decoder (`LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM`:
//! transformers/models/{llama,mistral,qwen2}/modeling_*.py): `embed_tokens`, rotary embeddings
//! computed once per forward, decoder layers of RMSNorm + attention (q/k/v projections with
//! `num_key_value_heads` ≤ heads and `head_dim`, rotary applied to q and k, SDPA with
//! `enable_gqa`, `o_proj`) + RMSNorm + SiLU-gated MLP, a final RMSNorm and `lm_head` (tied to
//! `embed_tokens` when `tie_word_embeddings`). Qwen2 has biases on q/k/v. A sliding window only
//! changes the mask, which SDPA runs without (`is_causal`) at sequence lengths within the window.

use vramscope_core::ir::Task;
use vramscope_core::ops::{Aten, GradIn, Saved};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::generate::CausalLm;
use super::layers::{
    add, apply_rotary, cached_attention, eager_causal_mask, embedding, linear, mul,
    packed_sequence_check, position_ids, rms_norm, rotary, tied_head, view, Call, Eager,
    EagerFlavor,
};
use super::{build_error, check_positions, AttnImplementation, HfConfig, HfError, HfInput};

/// The shape of a Llama-family decoder as its config gives it (the MoE decoders of `moe.rs` read
/// the same fields).
pub(super) struct Spec {
    pub(super) vocab: u64,
    pub(super) hidden: u64,
    pub(super) layers: u64,
    pub(super) heads: u64,
    pub(super) kv_heads: u64,
    pub(super) head_dim: u64,
    pub(super) intermediate: u64,
    pub(super) attn_dropout: f64,
    pub(super) qkv_bias: bool,
    pub(super) o_bias: bool,
    pub(super) mlp_bias: bool,
    /// RMSNorm over each head's q and k before rotary (`q_norm` / `k_norm`, Qwen3)
    pub(super) qk_norm: bool,
    pub(super) tied: bool,
    pub(super) max_positions: Option<u64>,
    /// Mistral's `sliding_window` (its config class defaults it to 4096; `null` turns it off).
    pub(super) sliding_window: Option<u64>,
}

pub(super) fn spec(cfg: &HfConfig, model_type: &str) -> Result<Spec, HfError> {
    let hidden = cfg.u64(&["hidden_size"])?;
    let heads = cfg.u64(&["num_attention_heads"])?;
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
    let head_dim = match cfg.opt_u64(&["head_dim"])? {
        Some(d) if d > 0 => d,
        _ => hidden / heads,
    };
    if let Some(act) = cfg.str("hidden_act")? {
        if act != "silu" {
            return Err(HfError::Field {
                path: cfg.path.clone(),
                field: "hidden_act".into(),
                expected: "\"silu\" (the only activation modelled for this family)".into(),
            });
        }
    }
    let qwen2 = model_type.starts_with("qwen2");
    let attention_bias = cfg.bool_or("attention_bias", false)?;
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        hidden,
        layers: cfg.u64(&["num_hidden_layers"])?,
        heads,
        kv_heads,
        head_dim,
        intermediate: cfg.u64(&["intermediate_size"])?,
        attn_dropout: cfg.f64_or("attention_dropout", 0.0)?,
        qkv_bias: qwen2 || attention_bias,
        o_bias: attention_bias,
        mlp_bias: cfg.bool_or("mlp_bias", false)?,
        qk_norm: false,
        tied: cfg.bool_or("tie_word_embeddings", false)?,
        max_positions: cfg.opt_u64(&["max_position_embeddings"])?,
        sliding_window: if model_type.starts_with("mistral") && !cfg.is_null("sliding_window") {
            Some(cfg.opt_u64(&["sliding_window"])?.unwrap_or(4096))
        } else {
            None
        },
    })
}

fn class_prefix(model_type: &str) -> &'static str {
    if model_type.starts_with("mistral") {
        "Mistral"
    } else if model_type.starts_with("qwen2") {
        "Qwen2"
    } else {
        "Llama"
    }
}

/// Builds `{Llama,Mistral,Qwen2}ForCausalLM`; returns the graph and the checkpointed layers.
pub fn build(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
    dtype: DType,
) -> Result<(Graph, Vec<String>), HfError> {
    let m = Model::new(cfg, model_type, input, dtype)?;
    let (s, p) = (&m.spec, m.prefix);
    let (bsz, seq) = (input.batch, input.seq);
    let masks = |b: &mut GraphBuilder| packed_sequence_check(b, bsz, seq);
    let autocast = m.autocast;
    causal_lm(
        cfg,
        s,
        p,
        model_type,
        input,
        &masks,
        &mut |b, i, x, cos, sin, call| {
            decoder_layer(b, s, p, dtype, autocast, x, cos, sin, i as usize, call)
        },
    )
}

/// One decoder layer: `(builder, layer index, hidden states, cos, sin, call) -> hidden states`.
pub(super) type DecoderLayer<'a> =
    dyn FnMut(&mut GraphBuilder, u64, TensorId, TensorId, TensorId, &mut Call) -> TensorId + 'a;

/// `{p}ForCausalLM` around `layer`: `model.embed_tokens`, the position ids, what the model's mask
/// code runs (`masks`, inside `model`'s forward), the rotary embedding computed once,
/// `model.layers.{i}` (each a `{p}DecoderLayer` that `layer` fills), `model.norm` and `lm_head`
/// (tied to `embed_tokens` when the config says so). Returns the graph and the checkpointed layers.
pub(super) fn causal_lm(
    cfg: &HfConfig,
    s: &Spec,
    p: &str,
    model_type: &str,
    input: &HfInput,
    masks: &dyn Fn(&mut GraphBuilder),
    layer: &mut DecoderLayer,
) -> Result<(Graph, Vec<String>), HfError> {
    if let Some(m) = s.max_positions {
        check_positions(cfg, input, "max_position_embeddings", m)?;
    }
    let dtype = input.precision.param_dtype();
    let (bsz, seq) = (input.batch, input.seq);
    let mut b = GraphBuilder::new(model_type, &format!("{p}ForCausalLM"));
    let ids = b.input(vec![bsz, seq], DType::I64);
    let eager = input.attn == AttnImplementation::Eager;
    let logits = forward(
        &mut b,
        (s, p, dtype, eager),
        ids,
        &mut Call::plain(seq),
        masks,
        layer,
    );
    let graph = b
        .finish(&[logits], Task::CausalLm { vocab: s.vocab })
        .map_err(build_error(cfg))?;
    let layers = (0..s.layers).map(|i| format!("model.layers.{i}")).collect();
    Ok((graph, layers))
}

/// One call of `{p}ForCausalLM` on `ids` (the plain forward, or one forward of a generation with
/// its cache); returns the logits.
fn forward(
    b: &mut GraphBuilder,
    (s, p, dtype, eager): (&Spec, &str, DType, bool),
    ids: TensorId,
    call: &mut Call,
    masks: &dyn Fn(&mut GraphBuilder),
    layer: &mut DecoderLayer,
) -> TensorId {
    let bsz = b.shape(ids)[0];
    let seq = call.seq;
    let (h, emb) = b.module("model", &format!("{p}Model"), &[ids], |b| {
        let (x, emb) = embedding(b, "embed_tokens", s.vocab, s.hidden, ids);
        let pos = match call.position_ids {
            // `generate` passes them (its model inputs keep them)
            Some(pos) => pos,
            None => position_ids(b, seq),
        };
        // inputs_embeds and position_ids are locals of the model's forward until it returns
        b.hold(&[x, pos]);
        // the mask code checks for packed sequences only without a cache
        if call.cache.is_none() {
            masks(b);
        }
        if eager {
            let mask = eager_causal_mask(b, bsz, seq, x);
            // `causal_mask` is a local of the forward until it returns
            b.hold(&[mask]);
            call.eager_mask = Some(mask);
        }
        let (cos, sin) = rotary(b, &format!("{p}RotaryEmbedding"), s.head_dim, x, pos);
        // so are `position_embeddings`
        b.hold(&[cos, sin]);
        let mut x = x;
        b.module("layers", "ModuleList", &[], |b| {
            for i in 0..s.layers {
                // position_embeddings and position_ids are arguments too (a checkpoint keeps
                // them until its backward)
                x = b.module(
                    &i.to_string(),
                    &format!("{p}DecoderLayer"),
                    &[x, cos, sin, pos],
                    |b| layer(b, i, x, cos, sin, call),
                );
            }
        });
        (
            rms_norm(b, "norm", &format!("{p}RMSNorm"), s.hidden, dtype, x),
            emb,
        )
    });
    let h = call.head_input(b, h);
    if s.tied {
        if call.first {
            // post_init drops the head's own weight for the embedding's
            b.tie_at_init(&[vec![s.vocab, s.hidden]], 1, None);
        }
        tied_head(b, "lm_head", emb, h)
    } else {
        linear(b, "lm_head", s.hidden, s.vocab, false, h)
    }
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
        let spec = spec(cfg, model_type)?;
        if let Some(m) = spec.max_positions {
            check_positions(cfg, input, "max_position_embeddings", m)?;
        }
        if input.generate.is_some() && cfg.bool_or("use_sliding_window", false)? {
            return Err(HfError::Field {
                path: cfg.path.clone(),
                field: "use_sliding_window".into(),
                expected:
                    "false for --mode generate (per-layer sliding-window caches are not modelled)"
                        .into(),
            });
        }
        Ok(Model {
            spec,
            prefix: class_prefix(model_type),
            dtype,
            autocast: input.precision.autocast_dtype(),
            eager: input.attn == AttnImplementation::Eager,
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn decoder_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    dtype: DType,
    autocast: Option<DType>,
    input: TensorId,
    cos: TensorId,
    sin: TensorId,
    layer: usize,
    call: &mut Call,
) -> TensorId {
    let norm = format!("{p}RMSNorm");
    let x = rms_norm(b, "input_layernorm", &norm, s.hidden, dtype, input);
    let a = attention(b, s, p, (dtype, autocast), x, cos, sin, layer, call);
    // eager attention's weights: `hidden_states, _ = self.self_attn(...)` keeps them
    if let Some(w) = call.attn_weights.take() {
        b.hold(&[w]);
    }
    let x = add(b, input, a);
    let y = rms_norm(b, "post_attention_layernorm", &norm, s.hidden, dtype, x);
    let y = mlp(
        b,
        "mlp",
        &format!("{p}MLP"),
        s.hidden,
        s.intermediate,
        s.mlp_bias,
        y,
    );
    add(b, x, y)
}

/// `self_attn`: q/k/v projections viewed as heads (with `q_norm` / `k_norm` over each head when
/// `s.qk_norm`), rotary on q and k, then the attention core ([`cached_attention`]: the cache
/// when `call` has one, SDPA (causal, GQA) or eager attention), `o_proj`.
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
    let low_precision_qk = autocast.is_some() && !s.qk_norm;
    let xs = b.shape(x).to_vec();
    let (bsz, seq) = (xs[0], xs[1]);
    b.module("self_attn", &format!("{p}Attention"), &[x], |b| {
        let d = s.head_dim;
        let norm = format!("{p}RMSNorm");
        let proj = |b: &mut GraphBuilder, name: &str, heads: u64, qk_norm: Option<&str>| {
            let t = linear(b, name, s.hidden, heads * d, s.qkv_bias, x);
            let t = view(b, "view", t, vec![bsz, seq, heads, d]);
            let t = match qk_norm {
                Some(n) => rms_norm(b, n, &norm, d, proj_dtype, t),
                None => t,
            };
            view(b, "transpose", t, vec![bsz, heads, seq, d])
        };
        let (qn, kn) = if s.qk_norm {
            (Some("q_norm"), Some("k_norm"))
        } else {
            (None, None)
        };
        let q = proj(b, "q_proj", s.heads, qn);
        let k = proj(b, "k_proj", s.kv_heads, kn);
        let v = proj(b, "v_proj", s.kv_heads, None);
        // apply_rotary_pos_emb(q, k, ...): the raw q and k stay referenced until both are rotated
        let (q, k) = b.frame(|b| {
            b.hold(&[q, k]);
            (
                apply_rotary(b, q, cos, sin, low_precision_qk),
                apply_rotary(b, k, cos, sin, low_precision_qk),
            )
        });
        let eager = Eager {
            flavor: EagerFlavor::Llama,
            dtype,
            autocast,
        };
        let o = cached_attention(b, call, layer, q, k, v, s.attn_dropout, eager);
        linear(b, "o_proj", s.heads * d, s.hidden, s.o_bias, o)
    })
}

/// The SiLU-gated MLP module `name` (class `type_name`): `down_proj(act_fn(gate_proj(x)) *
/// up_proj(x))`.
pub(super) fn mlp(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    hidden: u64,
    intermediate: u64,
    bias: bool,
    x: TensorId,
) -> TensorId {
    b.module(name, type_name, &[x], |b| {
        let g = linear(b, "gate_proj", hidden, intermediate, bias, x);
        let g = silu_act_fn(b, g);
        let u = linear(b, "up_proj", hidden, intermediate, bias, x);
        let m = mul(b, g, u);
        linear(b, "down_proj", intermediate, hidden, bias, m)
    })
}

/// The `act_fn` module (`SiLUActivation`) called on `x`: `silu` keeps its input for backward.
pub(super) fn silu_act_fn(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let sh = b.shape(x).to_vec();
    b.module("act_fn", "SiLUActivation", &[x], |b| {
        b.op(
            Aten::new("silu", sh)
                .saves(vec![Saved::Input(0)])
                .grads(vec![GradIn::New]),
            &[x],
        )
    })
}

impl CausalLm for Model {
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let (s, p, dtype, autocast) = (&self.spec, self.prefix, self.dtype, self.autocast);
        let (bsz, seq) = (b.shape(ids)[0], b.shape(ids)[1]);
        let masks = |b: &mut GraphBuilder| packed_sequence_check(b, bsz, seq);
        forward(
            b,
            (s, p, dtype, self.eager),
            ids,
            call,
            &masks,
            &mut |b, i, x, cos, sin, call| {
                decoder_layer(b, s, p, dtype, autocast, x, cos, sin, i as usize, call)
            },
        )
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

    // under autocast the rotary products promote the keys to the model's dtype (cos/sin keep
    // it), and the values are cached in the keys' dtype (the empty cache tensors take it)
    fn kv_dtypes(&self, param: DType, autocast: Option<DType>) -> (DType, DType) {
        let d = autocast.map_or(param, |low| DType::promote(low, param));
        (d, d)
    }

    fn sliding_window(&self) -> Option<u64> {
        self.spec.sliding_window
    }
}
