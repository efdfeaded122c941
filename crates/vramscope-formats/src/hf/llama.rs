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

use super::layers::{
    add, apply_rotary, embedding, linear, mul, packed_sequence_check, position_ids, rms_norm,
    rotary, sdpa, tied_head, view,
};
use super::{build_error, HfConfig, HfError, HfInput};

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
    let s = spec(cfg, model_type)?;
    let p = class_prefix(model_type);
    let autocast = input.precision.autocast_dtype();
    let (bsz, seq) = (input.batch, input.seq);
    let masks = |b: &mut GraphBuilder| packed_sequence_check(b, bsz, seq);
    causal_lm(
        cfg,
        &s,
        p,
        model_type,
        input,
        &masks,
        &mut |b, _, x, cos, sin| decoder_layer(b, &s, p, bsz, seq, dtype, autocast, x, cos, sin),
    )
}

/// One decoder layer: `(builder, layer index, hidden states, cos, sin) -> hidden states`.
pub(super) type DecoderLayer<'a> =
    dyn FnMut(&mut GraphBuilder, u64, TensorId, TensorId, TensorId) -> TensorId + 'a;

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
        if input.seq > m {
            return Err(HfError::BadInput(format!(
                "{}: --seq-len {} exceeds max_position_embeddings = {m}",
                cfg.path, input.seq
            )));
        }
    }
    let dtype = input.precision.param_dtype();
    let (bsz, seq) = (input.batch, input.seq);
    let mut b = GraphBuilder::new(model_type, &format!("{p}ForCausalLM"));
    let ids = b.input(vec![bsz, seq], DType::I64);
    let (h, emb) = b.module("model", &format!("{p}Model"), &[ids], |b| {
        let (x, emb) = embedding(b, "embed_tokens", s.vocab, s.hidden, ids);
        let pos = position_ids(b, seq);
        // inputs_embeds and position_ids are locals of the model's forward until it returns
        b.hold(&[x, pos]);
        masks(b);
        let (cos, sin) = rotary(b, &format!("{p}RotaryEmbedding"), s.head_dim, x, pos);
        let mut x = x;
        b.module("layers", "ModuleList", &[], |b| {
            for i in 0..s.layers {
                // position_embeddings and position_ids are arguments too (a checkpoint keeps
                // them until its backward)
                x = b.module(
                    &i.to_string(),
                    &format!("{p}DecoderLayer"),
                    &[x, cos, sin, pos],
                    |b| layer(b, i, x, cos, sin),
                );
            }
        });
        (
            rms_norm(b, "norm", &format!("{p}RMSNorm"), s.hidden, dtype, x),
            emb,
        )
    });
    let logits = if s.tied {
        // post_init drops the head's own weight for the embedding's
        b.tie_at_init(&[vec![s.vocab, s.hidden]], 1, None);
        tied_head(&mut b, "lm_head", emb, h)
    } else {
        linear(&mut b, "lm_head", s.hidden, s.vocab, false, h)
    };
    let graph = b
        .finish(&[logits], Task::CausalLm { vocab: s.vocab })
        .map_err(build_error(cfg))?;
    let layers = (0..s.layers).map(|i| format!("model.layers.{i}")).collect();
    Ok((graph, layers))
}

#[allow(clippy::too_many_arguments)]
fn decoder_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    bsz: u64,
    seq: u64,
    dtype: DType,
    autocast: Option<DType>,
    input: TensorId,
    cos: TensorId,
    sin: TensorId,
) -> TensorId {
    let norm = format!("{p}RMSNorm");
    let x = rms_norm(b, "input_layernorm", &norm, s.hidden, dtype, input);
    let a = attention(b, s, p, bsz, seq, dtype, autocast, x, cos, sin);
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
/// `s.qk_norm`), rotary on q and k, SDPA (causal, GQA), `o_proj`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    bsz: u64,
    seq: u64,
    dtype: DType,
    autocast: Option<DType>,
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
) -> TensorId {
    // the projections' dtype: what the q/k norms see; their float32 weights promote q and k
    // back to float32, so rotary then runs on float32 q and k
    let proj_dtype = autocast.unwrap_or(dtype);
    let low_precision_qk = autocast.is_some() && !s.qk_norm;
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
        // `q, k = apply_rotary_pos_emb(q, k, cos, sin)`: the caller's q and k live until it returns
        let (q, k) = b.frame(|b| {
            b.hold(&[q, k]);
            (
                apply_rotary(b, q, cos, sin, low_precision_qk),
                apply_rotary(b, k, cos, sin, low_precision_qk),
            )
        });
        // query/key/value_states are locals of the attention's forward until it returns
        b.hold(&[q, k, v]);
        let o = sdpa(b, q, k, v, s.attn_dropout, true);
        let o = view(b, "transpose", o, vec![bsz, seq, s.heads, d]);
        let o = view(b, "reshape", o, vec![bsz, seq, s.heads * d]);
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
