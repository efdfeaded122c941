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

struct Spec {
    vocab: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    intermediate: u64,
    attn_dropout: f64,
    qkv_bias: bool,
    o_bias: bool,
    mlp_bias: bool,
    tied: bool,
    max_positions: Option<u64>,
    /// Mistral's `sliding_window` (its config class defaults it to 4096; `null` turns it off).
    sliding_window: Option<u64>,
}

fn spec(cfg: &HfConfig, model_type: &str) -> Result<Spec, HfError> {
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
    let mut b = GraphBuilder::new(model_type, &format!("{}ForCausalLM", m.prefix));
    let ids = b.input(vec![input.batch, input.seq], DType::I64);
    let logits = m.forward(&mut b, ids, &mut Call::plain(input.seq));
    let graph = b
        .finish(
            &[logits],
            Task::CausalLm {
                vocab: m.spec.vocab,
            },
        )
        .map_err(build_error(cfg))?;
    Ok((graph, m.checkpoint_layers()))
}

/// A Llama-family model ready to record its forward, once or once per generation step.
pub struct Model {
    spec: Spec,
    prefix: &'static str,
    dtype: DType,
    amp: bool,
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
            amp: input.precision.autocast_dtype().is_some(),
            autocast: input.precision.autocast_dtype(),
            eager: input.attn == AttnImplementation::Eager,
        })
    }

    /// The layers `gradient_checkpointing_enable()` checkpoints.
    pub fn checkpoint_layers(&self) -> Vec<String> {
        (0..self.spec.layers)
            .map(|i| format!("model.layers.{i}"))
            .collect()
    }

    /// Records one call of the model on `ids` (`[B, S]`) and returns the logits.
    pub fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let (s, p, dtype, amp) = (&self.spec, self.prefix, self.dtype, self.amp);
        let autocast = self.autocast;
        let bsz = b.shape(ids)[0];
        let seq = call.seq;
        let (h, emb) = b.module("model", &format!("{p}Model"), &[ids], |b| {
            let (x, emb) = embedding(b, "embed_tokens", s.vocab, s.hidden, ids);
            // `inputs_embeds` is a local of the model's forward until it returns
            b.hold(&[x]);
            let pos = match call.position_ids {
                Some(pos) => pos,
                None => {
                    let pos = position_ids(b, seq);
                    // position_ids is a local of the model's forward until it returns
                    b.hold(&[pos]);
                    // the mask code checks for packed sequences only without a cache
                    packed_sequence_check(b, bsz, seq);
                    pos
                }
            };
            if self.eager {
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
                    // position_embeddings are arguments too (a checkpoint keeps them)
                    x = b.module(
                        &i.to_string(),
                        &format!("{p}DecoderLayer"),
                        &[x, cos, sin],
                        |b| {
                            decoder_layer(
                                b,
                                s,
                                p,
                                bsz,
                                seq,
                                (dtype, amp, autocast),
                                x,
                                cos,
                                sin,
                                i as usize,
                                call,
                            )
                        },
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
}

#[allow(clippy::too_many_arguments)]
fn decoder_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    p: &str,
    bsz: u64,
    seq: u64,
    (dtype, amp, autocast): (DType, bool, Option<DType>),
    input: TensorId,
    cos: TensorId,
    sin: TensorId,
    layer: usize,
    call: &mut Call,
) -> TensorId {
    let norm = format!("{p}RMSNorm");
    let x = rms_norm(b, "input_layernorm", &norm, s.hidden, dtype, input);
    let a = b.module("self_attn", &format!("{p}Attention"), &[x], |b| {
        let d = s.head_dim;
        let proj = |b: &mut GraphBuilder, name: &str, heads: u64| {
            let t = linear(b, name, s.hidden, heads * d, s.qkv_bias, x);
            let t = view(b, "view", t, vec![bsz, seq, heads, d]);
            view(b, "transpose", t, vec![bsz, heads, seq, d])
        };
        let q = proj(b, "q_proj", s.heads);
        let k = proj(b, "k_proj", s.kv_heads);
        let v = proj(b, "v_proj", s.kv_heads);
        // apply_rotary_pos_emb(q, k, ...): the raw q and k stay referenced until both are rotated
        let (q, k) = b.frame(|b| {
            b.hold(&[q, k]);
            (
                apply_rotary(b, q, cos, sin, amp),
                apply_rotary(b, k, cos, sin, amp),
            )
        });
        let eager = Eager {
            flavor: EagerFlavor::Llama,
            dtype,
            autocast,
        };
        let o = cached_attention(b, call, layer, q, k, v, s.attn_dropout, eager);
        linear(b, "o_proj", s.heads * d, s.hidden, s.o_bias, o)
    });
    // eager attention's weights: `hidden_states, _ = self.self_attn(...)` keeps them
    if let Some(w) = call.attn_weights.take() {
        b.hold(&[w]);
    }
    let x = add(b, input, a);
    let y = rms_norm(b, "post_attention_layernorm", &norm, s.hidden, dtype, x);
    let y = b.module("mlp", &format!("{p}MLP"), &[y], |b| {
        let g = linear(b, "gate_proj", s.hidden, s.intermediate, s.mlp_bias, y);
        let sh = b.shape(g).to_vec();
        let g = b.module("act_fn", "SiLUActivation", &[g], |b| {
            b.op(
                Aten::new("silu", sh.clone())
                    .saves(vec![Saved::Input(0)])
                    .grads(vec![GradIn::New]),
                &[g],
            )
        });
        let u = linear(b, "up_proj", s.hidden, s.intermediate, s.mlp_bias, y);
        let m = mul(b, g, u);
        linear(b, "down_proj", s.intermediate, s.hidden, s.mlp_bias, m)
    });
    add(b, x, y)
}

impl CausalLm for Model {
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        Model::forward(self, b, ids, call)
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
