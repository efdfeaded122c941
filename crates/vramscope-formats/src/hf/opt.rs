//! OPT (`OPTForCausalLM`, transformers/models/opt/modeling_opt.py): `model.decoder` with token
//! embeddings (optionally `project_in` / `project_out` when `word_embed_proj_dim` differs from
//! `hidden_size`), learned positions offset by 2 and computed from a ones mask (`cumsum`), decoder
//! layers (pre- or post-norm by `do_layer_norm_before`: q/k/v/out projections with q scaled
//! after its projection, SDPA `is_causal` or eager attention, functional dropout, then `fc1` + activation + `fc2` on
//! the flattened `[B·S, E]` rows), a final LayerNorm, and an `lm_head` tied to `embed_tokens`.

use vramscope_core::ops::{Aten, DTypeRule, HeadsOf, LayerNorm, Linear};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{self, HfActivation};
use super::generate::CausalLm;
use super::layers::{
    add, cached_attention, decoder_causal_mask, decoder_heads, dropout_fn, eager_key_rows,
    embedding, heads_view, linear, mul_scalar, padding_input, view, Call, Eager, EagerFlavor,
    KvCache,
};
use super::seq_cls::{base_model, decoder_head, decoder_outputs, qa_inputs, DecoderHead};
use super::{build_error, check_positions, AttnImplementation, HfConfig, HfError, HfInput};

struct Spec {
    vocab: u64,
    hidden: u64,
    proj_dim: u64,
    layers: u64,
    heads: u64,
    ffn: u64,
    max_positions: u64,
    dropout: f64,
    attn_dropout: f64,
    bias: bool,
    pre_norm: bool,
    final_norm: bool,
    act: HfActivation,
    /// `layer_norm_elementwise_affine`: the LayerNorms have a weight and a bias.
    norm_affine: bool,
    tied: bool,
}

fn field(cfg: &HfConfig, field: &str, expected: String) -> HfError {
    HfError::Field {
        path: cfg.path.clone(),
        field: field.into(),
        expected,
    }
}

fn spec(cfg: &HfConfig) -> Result<Spec, HfError> {
    let hidden = cfg.u64(&["hidden_size"])?;
    let heads = cfg.u64(&["num_attention_heads"])?;
    if hidden % heads != 0 {
        return Err(field(
            cfg,
            "num_attention_heads",
            format!("a divisor of hidden_size = {hidden}"),
        ));
    }
    let act = activation::from_config(cfg, "activation_function", "relu")?;
    let pre_norm = cfg.bool_or("do_layer_norm_before", true)?;
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        hidden,
        proj_dim: cfg.opt_u64(&["word_embed_proj_dim"])?.unwrap_or(hidden),
        layers: cfg.layers(&["num_hidden_layers"])?,
        heads,
        ffn: cfg.u64(&["ffn_dim"])?,
        max_positions: cfg.u64(&["max_position_embeddings"])?,
        dropout: cfg.prob_or("dropout", 0.1)?,
        attn_dropout: cfg.prob_or("attention_dropout", 0.0)?,
        bias: cfg.bool_or("enable_bias", true)?,
        pre_norm,
        final_norm: pre_norm && !cfg.bool_or("_remove_final_layer_norm", false)?,
        act,
        norm_affine: cfg.bool_or("layer_norm_elementwise_affine", true)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
    })
}

/// `nn.LayerNorm(n, elementwise_affine=config.layer_norm_elementwise_affine)`: without the
/// affine part it has no weight nor bias (and backward makes no gradient for them).
fn norm(s: &Spec, n: u64) -> LayerNorm {
    LayerNorm {
        normalized_shape: vec![n],
        affine: s.norm_affine,
        bias: s.norm_affine,
    }
}

/// Builds `OPTForCausalLM` (or `OPTForSequenceClassification`, `OPTForQuestionAnswering`:
/// `qa_outputs` on the projected hidden state, the loss in the forward); returns the graph and
/// the checkpointed layers (`model.decoder.layers.N`).
pub fn build(
    cfg: &HfConfig,
    input: &HfInput,
    head: DecoderHead,
) -> Result<(Graph, Vec<String>), HfError> {
    let m = Model::new(cfg, input)?;
    let mut b = GraphBuilder::new("opt", &head.class("OPT"));
    let ids = b.input(vec![input.batch, input.seq], DType::I64);
    let padding = padding_input(&mut b, input);
    let qa_positions = qa_inputs(&mut b, head, input.batch);
    let use_cache = head.fills_cache(cfg, input)?;
    let mut cache = use_cache.then(|| KvCache::with_windows(vec![None; m.spec.layers as usize]));
    let mut call = Call::plain(input.seq, head);
    call.cache = cache.as_mut();
    call.padding_mask = padding;
    let out = m.forward(&mut b, ids, &mut call);
    drop(call);
    let outputs = decoder_outputs(
        &mut b,
        (head, "classifier"),
        m.spec.proj_dim,
        vec![out],
        cache.as_ref(),
        qa_positions,
    );
    let graph = b
        .finish(&outputs, head.task(m.spec.vocab))
        .map_err(build_error(cfg))?;
    Ok((graph, m.checkpoint_layers(head)))
}

/// OPT ready to record its forward, once or once per generation step.
pub struct Model {
    spec: Spec,
    /// The attention the layers run: SDPA (`flavor` only names the eager variant) or, with
    /// `attn_implementation="eager"`, `eager_attention_forward` (OPT's copy of Llama's: the
    /// scores scaled by 1.0, then `softmax(dtype=float32).to(query.dtype)`).
    attention: Eager,
    eager: bool,
}

impl Model {
    /// Reads the config and checks the input against it.
    pub fn new(cfg: &HfConfig, input: &HfInput) -> Result<Model, HfError> {
        let spec = spec(cfg)?;
        check_positions(cfg, input, "max_position_embeddings", spec.max_positions)?;
        Ok(Model {
            spec,
            attention: Eager {
                flavor: EagerFlavor::Opt,
                dtype: input.precision.param_dtype(),
                autocast: input.precision.autocast_dtype(),
            },
            eager: input.attn == AttnImplementation::Eager,
        })
    }

    /// The layers `gradient_checkpointing_enable()` checkpoints (the bare model's are at the
    /// root of the names).
    pub fn checkpoint_layers(&self, head: DecoderHead) -> Vec<String> {
        let root = if head == DecoderHead::Bare {
            ""
        } else {
            "model."
        };
        (0..self.spec.layers)
            .map(|i| format!("{root}decoder.layers.{i}"))
            .collect()
    }

    /// Records one call of the model on `ids` (`[B, S]`) and returns the logits.
    pub fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let s = &self.spec;
        let bare = call.head == DecoderHead::Bare;
        let model = |b: &mut GraphBuilder| {
            b.module("decoder", "OPTDecoder", &[ids], |b| {
                decoder(b, self, ids, call)
            })
        };
        let out = base_model(b, bare, ("model", "OPTModel"), ids, model);
        decoder_head(b, call, (s.proj_dim, s.vocab, s.tied), ids, out)
    }
}

fn decoder(
    b: &mut GraphBuilder,
    m: &Model,
    ids: TensorId,
    call: &mut Call,
) -> (TensorId, TensorId) {
    let s = &m.spec;
    let sh = b.shape(ids).to_vec();
    let (bsz, seq) = (sh[0], sh[1]);
    let (tok, emb) = embedding(b, "embed_tokens", s.vocab, s.proj_dim, ids);
    // position_attention_mask = ones(B, past + S) (float32); without position_ids from
    // `generate`: position_ids = (cumsum(mask) * mask - 1).long()
    let f32 = DTypeRule::Fixed(DType::F32);
    let i64 = DTypeRule::Fixed(DType::I64);
    let int_op = |name, cols, rule| {
        Aten::new(name, vec![bsz, cols])
            .dtype(rule)
            .not_differentiable()
    };
    // a padded batch's int64 mask is the position mask itself (the positions stay int64, and
    // `.long()` returns them as they are)
    let (ones, pos_dtype) = match call.padding_mask {
        Some(padding) => (padding, i64),
        None => (b.op(int_op("ones", call.past + seq, f32), &[]), f32),
    };
    let pos = match call.position_ids {
        Some(pos) => pos,
        None => b.frame(|b| {
            let cs = b.op(int_op("cumsum", seq, pos_dtype), &[ones]);
            let m = b.op(int_op("mul", seq, pos_dtype), &[cs, ones]);
            let sub = b.op(int_op("sub", seq, pos_dtype), &[m]);
            // `position_ids` (the cumsum) is rebound only after `.long()`
            b.hold(&[cs]);
            if call.padding_mask.is_some() {
                sub
            } else {
                b.op(int_op("_to_copy", seq, i64), &[sub])
            }
        }),
    };
    // create_causal_mask runs after position_ids are made, before embed_positions
    let mask_arg = decoder_causal_mask(b, call, (bsz, seq), m.eager.then_some(m.attention.dtype));
    let (pe, _) = b.module(
        "embed_positions",
        "OPTLearnedPositionalEmbedding",
        &[ones, pos],
        |b| {
            let p2 = b.op(int_op("add", seq, i64), &[pos]);
            let w = b.parameter("weight", vec![s.max_positions + 2, s.hidden]);
            let mut shape = vec![bsz, seq];
            shape.push(s.hidden);
            let op = Aten::new("embedding", shape)
                .dtype(DTypeRule::Like(0))
                .saves(vec![vramscope_core::ops::Saved::Input(1)])
                .grads(vec![
                    vramscope_core::ops::GradIn::New,
                    vramscope_core::ops::GradIn::None,
                ]);
            (b.op(op, &[w, p2]), w)
        },
    );
    // __init__ order: project_out, project_in and final_layer_norm come before the layers
    // (declared before the forward calls project_in)
    if s.proj_dim != s.hidden {
        b.declare_layer("project_out", &lin(s.hidden, s.proj_dim, false));
        b.declare_layer("project_in", &lin(s.proj_dim, s.hidden, false));
    }
    if s.final_norm {
        b.declare_layer("final_layer_norm", &norm(s, s.hidden));
    }
    let tok_in = if s.proj_dim != s.hidden {
        linear(b, "project_in", s.proj_dim, s.hidden, false, tok)
    } else {
        tok
    };
    // inputs_embeds, pos_embeds, the mask and position_ids are locals until the forward returns
    // (`inputs_embeds = self.project_in(inputs_embeds)` drops the token embeddings themselves)
    b.hold(&[tok_in, pe, ones, pos]);
    let mut x = add(b, tok_in, pe);
    b.module("layers", "ModuleList", &[], |b| {
        for i in 0..s.layers {
            // `decoder_layer(hidden_states, attention_mask=causal_mask, position_ids=...)`: a
            // checkpoint keeps the position ids (and a padded batch's mask) until its backward
            let args: Vec<TensorId> = [x, pos].into_iter().chain(mask_arg).collect();
            x = b.module(&i.to_string(), "OPTDecoderLayer", &args, |b| {
                layer(b, m, bsz, seq, x, i as usize, call)
            });
        }
    });
    if s.final_norm {
        x = b.layer("final_layer_norm", norm(s, s.hidden), &[x]);
    }
    if s.proj_dim != s.hidden {
        x = linear(b, "project_out", s.hidden, s.proj_dim, false, x);
    }
    (x, emb)
}

fn layer(
    b: &mut GraphBuilder,
    m: &Model,
    bsz: u64,
    seq: u64,
    input: TensorId,
    index: usize,
    call: &mut Call,
) -> TensorId {
    let s = &m.spec;
    let e = s.hidden;
    // __init__ order: k, v, q, out projections, self_attn_layer_norm, fc1, fc2, final_layer_norm
    b.declare("self_attn", "OPTAttention", |b| {
        for n in ["k_proj", "v_proj", "q_proj", "out_proj"] {
            b.declare_layer(n, &lin(e, e, s.bias));
        }
    });
    b.declare_layer("self_attn_layer_norm", &norm(s, e));
    b.declare_layer("fc1", &lin(e, s.ffn, s.bias));
    b.declare_layer("fc2", &lin(s.ffn, e, s.bias));
    b.declare_layer("final_layer_norm", &norm(s, e));
    let x = if s.pre_norm {
        b.layer("self_attn_layer_norm", norm(s, e), &[input])
    } else {
        input
    };
    let a = b.module("self_attn", "OPTAttention", &[x], |b| {
        // forward's order: q's projection and view, then k's and v's projections, then their
        // views (backward runs the nodes last made first)
        let q = linear(b, "q_proj", e, e, s.bias, x);
        let q = mul_scalar(b, q);
        let q = decoder_heads(b, q, s.heads, call, s.attn_dropout, HeadsOf::Other);
        let k = linear(b, "k_proj", e, e, s.bias, x);
        // eager attention without a cache: k's gradient is copied by k_proj's rows, not at
        // its view
        let eager_k = call.eager_mask.is_some() && call.cache.is_none();
        let k = if eager_k { eager_key_rows(b, k) } else { k };
        let v = linear(b, "v_proj", e, e, s.bias, x);
        // with a cache, flash / cuDNN attention's gradients of the cached k and v come back
        // heads-first
        let cached_grads = call
            .cached_kv_grads_heads_first(m.attention.compute_dtype().size() == 2, s.attn_dropout);
        let k = if cached_grads || eager_k {
            let attn = (!eager_k)
                .then_some(call.sdpa_view(s.attn_dropout))
                .flatten();
            heads_view(b, k, s.heads, cached_grads, attn, HeadsOf::Other)
        } else {
            decoder_heads(b, k, s.heads, call, s.attn_dropout, HeadsOf::KeyOfLinear)
        };
        let v = if cached_grads {
            heads_view(
                b,
                v,
                s.heads,
                true,
                call.sdpa_view(s.attn_dropout),
                HeadsOf::Other,
            )
        } else {
            decoder_heads(b, v, s.heads, call, s.attn_dropout, HeadsOf::Other)
        };
        let o = cached_attention(b, call, index, q, k, v, s.attn_dropout, m.attention);
        linear(b, "out_proj", e, e, s.bias, o)
    });
    // eager attention's weights: `hidden_states, self_attn_weights = self.self_attn(...)`
    // keeps them until the layer returns
    if let Some(w) = call.attn_weights.take() {
        b.hold(&[w]);
    }
    let a = dropout_fn(b, s.dropout, a);
    let mut x = add(b, input, a);
    if !s.pre_norm {
        x = b.layer("self_attn_layer_norm", norm(s, e), &[x]);
    }
    let rows = view(b, "reshape", x, vec![bsz * seq, e]);
    // `residual = hidden_states` (the rows) is a local until the layer returns: the post-norm
    // variant's final_layer_norm runs while it is still referenced
    b.hold(&[rows]);
    let y = if s.pre_norm {
        b.layer("final_layer_norm", norm(s, e), &[rows])
    } else {
        rows
    };
    let y = linear(b, "fc1", e, s.ffn, s.bias, y);
    let y = s.act.module(b, "activation_fn", y);
    let y = linear(b, "fc2", s.ffn, e, s.bias, y);
    let y = dropout_fn(b, s.dropout, y);
    let out = add(b, rows, y);
    let out = view(b, "view", out, vec![bsz, seq, e]);
    if s.pre_norm {
        out
    } else {
        b.layer("final_layer_norm", norm(s, e), &[out])
    }
}

fn lin(in_features: u64, out_features: u64, bias: bool) -> Linear {
    Linear {
        in_features,
        out_features,
        bias,
    }
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
        self.spec.hidden
    }
}
