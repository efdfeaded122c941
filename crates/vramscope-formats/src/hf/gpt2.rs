//! GPT-2 (`GPT2LMHeadModel`, transformers/models/gpt2/modeling_gpt2.py): token and position
//! embeddings, `drop`, pre-norm blocks (`ln_1`, `attn` with a packed `Conv1D` `c_attn` split into
//! q, k, v, SDPA with `attn_pdrop`, `c_proj`, `resid_dropout`; `ln_2`, `mlp` with `c_fc`,
//! `gelu_new` written out as its pointwise ops, `c_proj`, `dropout`), `ln_f`, and an `lm_head` tied
//! to `wte`. With eager attention and `reorder_and_upcast_attn` the blocks run
//! `_upcast_and_reordered_attn` (layers.rs), whose backward depends on each layer's scaling.

use vramscope_core::builder::RepeatedModule;
use vramscope_core::ops::{HeadsOf, LayerNorm};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{HfActivation, SUPPORTED};
use super::generate::CausalLm;
use super::layers::{
    add, cached_attention, conv1d, decoder_causal_mask, dropout, embedding, heads_view,
    packed_sequence_check, padding_input, position_ids, view, Call, Eager, EagerFlavor, KvCache,
};
use super::seq_cls::{base_model, decoder_head, decoder_outputs, qa_inputs, DecoderHead};
use super::{build_error, check_positions, AttnImplementation, HfConfig, HfError, HfInput};

struct Spec {
    vocab: u64,
    positions: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    inner: u64,
    embd_pdrop: f64,
    attn_pdrop: f64,
    resid_pdrop: f64,
    tied: bool,
    /// `activation_function` (`gelu_new` by default).
    act: HfActivation,
    /// `reorder_and_upcast_attn`: eager attention runs `_upcast_and_reordered_attn` (SDPA
    /// ignores the flag).
    upcast_attn: bool,
    /// `scale_attn_weights` (`scaling = head_dim ** -0.5`).
    scale_attn_weights: bool,
    /// `scale_attn_by_inverse_layer_idx` (`scaling /= layer + 1`).
    scale_by_layer: bool,
    /// `add_cross_attention`: each block also has `crossattention` and `ln_cross_attn`, which
    /// run only on `encoder_hidden_states` (the decoder of an encoder-decoder model): alone, a
    /// model holds their parameters and never calls them.
    cross_attention: bool,
}

impl Spec {
    /// Whether layer `i`'s attention `scaling` is 1.
    fn unit_scaling(&self, i: u64) -> bool {
        let head_dim = self.hidden / self.heads;
        let scaled_by_dim = self.scale_attn_weights && head_dim != 1;
        !(scaled_by_dim || self.scale_by_layer && i > 0)
    }
}

fn spec(cfg: &HfConfig) -> Result<Spec, HfError> {
    let hidden = cfg.aliased_u64("n_embd", "hidden_size")?;
    let heads = cfg.aliased_u64("n_head", "num_attention_heads")?;
    if hidden % heads != 0 {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "n_head".into(),
            expected: format!("a divisor of n_embd = {hidden}"),
        });
    }
    let act_name = cfg.str("activation_function")?.unwrap_or("gelu_new");
    let act = HfActivation::parse(act_name).ok_or_else(|| HfError::Field {
        path: cfg.path.clone(),
        field: "activation_function".into(),
        expected: format!("one of {SUPPORTED} (got {act_name:?})"),
    })?;
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        positions: cfg.aliased_u64("n_positions", "max_position_embeddings")?,
        hidden,
        layers: cfg.aliased_layers("n_layer", "num_hidden_layers")?,
        heads,
        inner: cfg.opt_u64(&["n_inner"])?.unwrap_or(4 * hidden),
        embd_pdrop: cfg.prob_or("embd_pdrop", 0.1)?,
        attn_pdrop: cfg.prob_or("attn_pdrop", 0.1)?,
        resid_pdrop: cfg.prob_or("resid_pdrop", 0.1)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
        act,
        upcast_attn: cfg.bool_or("reorder_and_upcast_attn", false)?,
        scale_attn_weights: cfg.bool_or("scale_attn_weights", true)?,
        scale_by_layer: cfg.bool_or("scale_attn_by_inverse_layer_idx", false)?,
        cross_attention: cfg.bool_or("add_cross_attention", false)?,
    })
}

/// Builds `GPT2LMHeadModel` (or `GPT2ForSequenceClassification`, `GPT2ForTokenClassification`:
/// dropout and `classifier`, `GPT2ForQuestionAnswering`: `qa_outputs` and the loss in the
/// forward); returns the graph and the checkpointed layers (`transformer.h.N`).
pub fn build(
    cfg: &HfConfig,
    input: &HfInput,
    head: DecoderHead,
) -> Result<(Graph, Vec<String>), HfError> {
    let m = Model::new(cfg, input)?;
    let class = match head {
        DecoderHead::Lm => "GPT2LMHeadModel".to_string(),
        _ => head.class("GPT2"),
    };
    let mut b = GraphBuilder::new("gpt2", &class);
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
        m.spec.hidden,
        vec![out],
        cache.as_ref(),
        qa_positions,
    );
    let graph = b
        .finish(&outputs, head.task(m.spec.vocab))
        .map_err(build_error(cfg))?;
    Ok((graph, m.checkpoint_layers(head)))
}

/// GPT-2 ready to record its forward, once or once per generation step.
pub struct Model {
    spec: Spec,
    /// The attention's dtypes (`eager_attention_forward`'s with `attn_implementation="eager"`;
    /// with SDPA, the dtype it makes a padded batch's mask additive in).
    attention: Eager,
    /// `attn_implementation="eager"`.
    eager: bool,
}

impl Model {
    /// Reads the config and checks the input against it.
    pub fn new(cfg: &HfConfig, input: &HfInput) -> Result<Model, HfError> {
        let spec = spec(cfg)?;
        check_positions(cfg, input, "n_positions", spec.positions)?;
        Ok(Model {
            spec,
            attention: Eager {
                flavor: EagerFlavor::Gpt2,
                dtype: input.precision.param_dtype(),
                autocast: input.precision.autocast_dtype(),
            },
            eager: input.attn == AttnImplementation::Eager,
        })
    }

    /// Layer `i`'s attention: with eager attention and `reorder_and_upcast_attn`,
    /// `_upcast_and_reordered_attn` at the layer's scaling.
    fn attention_of(&self, i: u64) -> Eager {
        let mut e = self.attention;
        if self.eager && self.spec.upcast_attn {
            e.flavor = EagerFlavor::Gpt2Upcast {
                unit_scaling: self.spec.unit_scaling(i),
            };
        }
        e
    }

    /// The layers `gradient_checkpointing_enable()` checkpoints (the bare model's are at the
    /// root of the names).
    pub fn checkpoint_layers(&self, head: DecoderHead) -> Vec<String> {
        let root = if head == DecoderHead::Bare {
            ""
        } else {
            "transformer."
        };
        (0..self.spec.layers)
            .map(|i| format!("{root}h.{i}"))
            .collect()
    }

    /// Records one call of the model on `ids` (`[B, S]`) and returns the logits.
    pub fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let s = &self.spec;
        let bsz = b.shape(ids)[0];
        let seq = call.seq;
        let bare = call.head == DecoderHead::Bare;
        let model = |b: &mut GraphBuilder| {
            let (tok, wte) = embedding(b, "wte", s.vocab, s.hidden, ids);
            let pos = match call.position_ids {
                Some(pos) => pos,
                None => {
                    let pos = position_ids(b, seq);
                    view(b, "unsqueeze", pos, vec![1, seq])
                }
            };
            let (pe, _) = embedding(b, "wpe", s.positions, s.hidden, pos);
            // `inputs_embeds`, `position_ids` and `position_embeds` are locals of the forward
            // until it returns
            b.hold(&[tok, pos, pe]);
            let x = add(b, tok, pe);
            // `create_causal_mask`: on a padded batch's mask (no packed-sequence check), else
            // the check and no mask (SDPA's is_causal)
            if call.padding_mask.is_none() && call.cache.is_none() {
                packed_sequence_check(b, bsz, seq);
            }
            let mask_arg = decoder_causal_mask(
                b,
                call,
                (bsz, seq),
                self.eager.then_some(self.attention.dtype),
            );
            let mut x = dropout(b, "drop", s.embd_pdrop, x);
            b.module("h", "ModuleList", &[], |b| {
                // every block records the same program (the upcast attention's two, scaled or
                // not): without a cache (whose tensors differ per block) the builder copies the
                // first
                let mut blocks = [
                    RepeatedModule::with_calls(s.layers as u32),
                    RepeatedModule::with_calls(s.layers as u32),
                ];
                for i in 0..s.layers {
                    let name = i.to_string();
                    let replay = call.cache.is_none();
                    let attention = self.attention_of(i);
                    let kind = usize::from(matches!(
                        attention.flavor,
                        EagerFlavor::Gpt2Upcast { unit_scaling: true }
                    ));
                    let f = |b: &mut GraphBuilder| {
                        block(b, s, attention, (bsz, seq), x, i as usize, call)
                    };
                    // `position_ids` is a keyword argument of every block (unused there, but a
                    // checkpoint keeps it until its backward)
                    let args: Vec<TensorId> =
                        std::iter::once(x).chain(mask_arg).chain([pos]).collect();
                    x = if replay {
                        b.module_repeated(&mut blocks[kind], &name, "GPT2Block", &args, f)
                    } else {
                        b.module(&name, "GPT2Block", &args, f)
                    };
                }
            });
            (b.layer("ln_f", LayerNorm::new(s.hidden), &[x]), wte)
        };
        let out = base_model(b, bare, ("transformer", "GPT2Model"), ids, model);
        decoder_head(b, call, (s.hidden, s.vocab, s.tied), ids, out)
    }
}

fn block(
    b: &mut GraphBuilder,
    s: &Spec,
    attention: Eager,
    (bsz, seq): (u64, u64),
    input: TensorId,
    layer: usize,
    call: &mut Call,
) -> TensorId {
    let e = s.hidden;
    let x = b.layer("ln_1", LayerNorm::new(e), &[input]);
    let a = b.module("attn", "GPT2Attention", &[x], |b| {
        // SDPA applies the attention dropout itself; the module exists but is never called
        b.declare_module("attn_dropout", "Dropout");
        let qkv = conv1d(b, "c_attn", e, 3 * e, x);
        let parts = b.op_multi(
            vramscope_core::ops::View {
                name: "split",
                shapes: vec![vec![bsz, seq, e]; 3],
                expand: false,
            },
            &[qkv],
        );
        // with a cache, flash / cuDNN attention's gradients of the cached k and v come back
        // heads-first
        let cached_grads =
            call.cached_kv_grads_heads_first(attention.compute_dtype().size() == 2, s.attn_pdrop);
        // eager attention's matmuls hand q's and v's gradients back heads-first too (k's, the
        // transposed operand, comes back laid out like k: its view needs no copy;
        // validation/grad_layout_probe.py)
        let eager = call.eager_mask.is_some();
        let heads: Vec<TensorId> = parts
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let copied = (cached_grads && i > 0) || (eager && i != 1);
                // with a cache SDPA reads the cache's concatenation, not k's view
                let of = if i == 1 && call.cache.is_none() {
                    HeadsOf::KeyOfSplit
                } else {
                    HeadsOf::Other
                };
                heads_view(b, t, s.heads, copied, call.sdpa_view(s.attn_pdrop), of)
            })
            .collect();
        let o = cached_attention(
            b,
            call,
            layer,
            heads[0],
            heads[1],
            heads[2],
            s.attn_pdrop,
            attention,
        );

        let o = conv1d(b, "c_proj", e, e, o);
        dropout(b, "resid_dropout", s.resid_pdrop, o)
    });
    // `hidden_states = attn_output + residual`: the LayerNorm output goes when `hidden_states`
    // is rebound, `attn_output` stays a local until the block returns
    let ln1 = x;
    // eager attention's weights: `attn_output, self_attn_weights = self.attn(...)` keeps them
    if let Some(w) = call.attn_weights.take() {
        b.hold(&[w]);
    }
    let x = add(b, a, input);
    b.keep_until_now(&[ln1]);
    // `residual = hidden_states`: the block's first local, so cleared first when it returns
    // (after the last add has rebound `hidden_states`, freeing ln_2's output)
    b.hold(&[x, a]);
    let ln2 = b.layer("ln_2", LayerNorm::new(e), &[x]);
    if s.cross_attention {
        // created between ln_2 and mlp (`GPT2Attention(is_cross_attention=True)`: c_attn of
        // keys and values, q_attn, c_proj), never called without encoder_hidden_states: their
        // parameters get no gradients, so no optimizer state either
        b.declare("crossattention", "GPT2Attention", |b| {
            for (name, nf) in [("c_attn", 2 * e), ("q_attn", e), ("c_proj", e)] {
                b.declare(name, "Conv1D", |b| {
                    b.parameter("weight", vec![e, nf]);
                    b.parameter("bias", vec![nf]);
                });
            }
            b.declare_module("attn_dropout", "Dropout");
            b.declare_module("resid_dropout", "Dropout");
        });
        b.declare_layer("ln_cross_attn", &LayerNorm::new(e));
    }
    let y = b.module("mlp", "GPT2MLP", &[ln2], |b| {
        let h = conv1d(b, "c_fc", e, s.inner, ln2);
        let h = s.act.module(b, "act", h);
        let h = conv1d(b, "c_proj", s.inner, e, h);
        dropout(b, "dropout", s.resid_pdrop, h)
    });
    // `feed_forward_hidden_states` too is a local until the block returns, freed after
    // `attn_output` (CPython clears a frame's locals in the order they were first bound)
    b.hold(&[y]);
    let out = add(b, x, y);
    b.keep_until_now(&[ln2]);
    out
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
