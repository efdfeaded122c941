//! T5 (transformers/models/t5/modeling_t5.py, 5.23): `T5ForConditionalGeneration` trained on
//! `model(input_ids=[B, S], labels=[B, T]).loss`, op by op as the truth traces show it; mT5
//! (modeling_mt5.py) and UMT5 (modeling_umt5.py) through the same code (see [`Variant`]).
//!
//! - Construction: `shared` (`[V, D]`), then each `T5Stack` allocates its own `embed_tokens`
//!   weight and `lm_head` its own, which `post_init()` drops for `shared` (transformers 5.23 ties
//!   them always, `tie_word_embeddings: false` only turns the decoder-output rescale off).
//! - Forward with labels: encoder (`embed_tokens`, dropout, blocks, `final_layer_norm`, dropout);
//!   `decoder_input_ids = _shift_right(labels)`; decoder (the same plus cross-attention); the
//!   `d_model ** -0.5` rescale (unless `tie_word_embeddings: false`); `lm_head`; and the loss
//!   `CrossEntropyLoss()(logits.view(-1, V), labels.view(-1))`, inside forward.
//! - Blocks are pre-norm: `T5LayerNorm` (RMS without mean, float32 variance), attention or the
//!   feed-forward (`relu` or `gated-gelu` = `gelu_new`, ...; the wo input cast to wo's dtype),
//!   dropout, residual add; `num_heads * d_kv` may differ from `d_model`.
//! - Attention runs `attn_implementation="sdpa"`: the first layer of each stack computes the
//!   relative position bias (bucketing in int64/float32, `relative_attention_bias` embedding,
//!   `[1, H, L, S]`) which the later layers reuse; `create_position_bias_mask` folds it into a
//!   float mask (a copy per layer; the decoder's causal `where` first); cross-attention uses a
//!   zero bias made in its first layer. SDPA with that mask runs mem-efficient attention (dropout,
//!   or a mask that needs a gradient) or cuDNN attention (half precision otherwise).
//!   With `attn_implementation="eager"`, `eager_attention_forward`: the scores plus the position
//!   bias (float32 under autocast: the bias is), plus the decoder's additive causal mask
//!   (`create_causal_mask`, made once per decoder stack), softmax, dropout, `probs @ v`; each
//!   layer's weights stay referenced by the block until the next attention layer's replace them or
//!   it returns. The cache's contiguous keys and values go to bmm without copies.
//! - `use_cache` (the config's, default true): the decoder stack fills an `EncoderDecoderCache`
//!   even in a training forward (its own deep copy of the config decides, so
//!   `model.config.use_cache = False` after construction does not turn it off; gradient
//!   checkpointing does). Each decoder attention's keys and values become `cat([empty, k])`
//!   copies, which attention uses and autograd saves in place of the projections; the cache in
//!   `out.past_key_values` keeps them past backward, until the next forward returns.

use std::cell::RefCell;

use vramscope_core::ir::Task;
use vramscope_core::ops::{
    Alias, Aten, Autocast, DTypeRule, GradIn, HeadsOf, Linear, LogSoftmax, MatMul, NllLoss, Saved,
    ScaledDotProductAttentionBias, SdpaHeadsView, SdpaOutputMerge, Softmax, MEM_EFF_MASK_ALIGNMENT,
};
use vramscope_core::{DType, Graph, GraphBuilder, Precision, TensorId};

use super::activation::{HfActivation, SUPPORTED};
use super::generate::Seq2SeqLm;
use super::layers::{
    add, attention_mask_checked, cast, dropout, dropout_fn, eager_attention, eager_heads,
    embedding, embedding_lookup, linear, mul, mul_scalar, padded_attention_mask, padding_input,
    rms_rsqrt, tied_head, to_dtype, view, Eager, EagerFlavor, KvCache, MaskPattern, PaddedPattern,
};
use super::{build_error, AttnImplementation, HfConfig, HfError, HfInput};

/// Which of transformers' T5 model files builds the model (`model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// `t5` (modeling_t5.py; T5 v1.1 and FLAN-T5 are `t5` configs).
    T5,
    /// `mt5` (modeling_mt5.py): T5's modules under `MT5*` names, mT5's config defaults
    /// (gated-gelu, 250112 tokens, 8 + 8 layers of 6 heads) and no `d_model ** -0.5` rescale
    /// before `lm_head` in 5.23's forward.
    Mt5,
    /// `umt5` (modeling_umt5.py): every self-attention layer owns a `relative_attention_bias` and
    /// computes its own bias (nothing shared between layers, the cross-attention's zero bias made
    /// in every decoder layer and never requiring grad), and the rescale before `lm_head` always
    /// (`tie_word_embeddings` is forced true).
    Umt5,
}

impl Variant {
    /// The variant of a `model_type` (or lower-cased class name) the dispatcher sent here.
    pub(crate) fn of(model_type: &str) -> Variant {
        if model_type.starts_with("umt5") {
            Variant::Umt5
        } else if model_type.starts_with("mt5") {
            Variant::Mt5
        } else {
            Variant::T5
        }
    }

    /// The `model_type` of its config class.
    pub(super) fn model_type(self) -> &'static str {
        match self {
            Variant::T5 => "t5",
            Variant::Mt5 => "mt5",
            Variant::Umt5 => "umt5",
        }
    }

    /// The class-name prefix (`T5Stack`, `MT5Stack`, `UMT5Stack`).
    fn prefix(self) -> &'static str {
        match self {
            Variant::T5 => "T5",
            Variant::Mt5 => "MT5",
            Variant::Umt5 => "UMT5",
        }
    }

    /// Every self-attention layer computes its own position bias (UMT5), rather than the first
    /// layer of each stack computing the one the others reuse.
    fn bias_per_layer(self) -> bool {
        self == Variant::Umt5
    }
}

struct Spec {
    variant: Variant,
    vocab: u64,
    d_model: u64,
    d_kv: u64,
    d_ff: u64,
    heads: u64,
    enc_layers: u64,
    dec_layers: u64,
    buckets: u64,
    dropout: f64,
    gated: bool,
    act: HfActivation,
    /// `sequence_output * d_model ** -0.5` before `lm_head` (configs without
    /// `tie_word_embeddings: false`).
    scale_decoder_outputs: bool,
    precision: Precision,
    /// `gradient_checkpointing_enable()` (T5Attention's flag: the zero bias requires grad).
    gradient_checkpointing: bool,
    /// The decoder builds an `EncoderDecoderCache` (the config's `use_cache`, which the decoder
    /// stack reads from its own copy of the config, unless gradient checkpointing turned it off).
    /// In a `generate` ([`Generator`]) false keeps no cache: every decoder forward runs over the
    /// whole decoder sequence so far, the cross-attention's keys and values made anew each time.
    use_cache: bool,
    /// The cached key/value tensors (self-attention then cross-attention, layer by layer), which
    /// `out.past_key_values` keeps.
    cache: RefCell<Vec<TensorId>>,
    /// `attn_implementation="eager"`: the attention `eager_attention_forward` runs (`None`: SDPA).
    eager: Option<Eager>,
    /// `generate`'s decoder state between forwards ([`Generator`]); `None` otherwise.
    decode: RefCell<Option<Decode>>,
}

/// The decoder's `EncoderDecoderCache` and position in a `generate` ([`Generator`]).
struct Decode {
    /// Self-attention positions cached before this forward.
    past: u64,
    /// The decoder layer being recorded.
    layer: usize,
    /// `self_attention_cache`: one `DynamicLayer` per decoder layer, one position per forward.
    self_cache: KvCache,
    /// `cross_attention_cache`: each layer's keys and values over the encoder's positions, made
    /// by the first forward (`is_updated`) and reused by the others.
    cross_cache: KvCache,
}

impl Spec {
    /// The class name of a module: `Stack` -> `T5Stack` / `MT5Stack` / `UMT5Stack`.
    fn class(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.variant.prefix())
    }

    /// The forward's output, kept until the next forward returns: `first` (the loss and logits,
    /// or the decoder's last hidden state), the cache filled, the encoder's last hidden state.
    fn outputs(&self, first: &[TensorId], enc: TensorId) -> Vec<TensorId> {
        let mut out = first.to_vec();
        out.extend(self.cache.borrow().iter().copied());
        out.push(enc);
        out
    }

    fn inner(&self) -> u64 {
        self.heads * self.d_kv
    }

    /// The dtype of the activations between blocks: the embedding's (the parameters' dtype);
    /// under autocast the residual adds keep it float32.
    fn hidden_dtype(&self) -> DType {
        self.precision.param_dtype()
    }
}

fn field_err(cfg: &HfConfig, field: &str, expected: impl Into<String>) -> HfError {
    HfError::Field {
        path: cfg.path.clone(),
        field: field.to_string(),
        expected: expected.into(),
    }
}

fn spec(
    cfg: &HfConfig,
    variant: Variant,
    input: &HfInput,
    shifts_labels: bool,
) -> Result<Spec, HfError> {
    // fields the file leaves out are T5Config's (the t5-small shape) or MT5Config's /
    // UMT5Config's (the mt5-small shape) defaults: `HfConfig`'s class table, which `build` gives
    // a config without `model_type` too
    let enc_layers = cfg.aliased_layers("num_layers", "num_hidden_layers")?;
    let proj = cfg.str("feed_forward_proj")?.unwrap_or("relu");
    let parts: Vec<&str> = proj.split('-').collect();
    let (gated, act_name) = match parts.as_slice() {
        [a] => (false, *a),
        ["gated", a] => (true, *a),
        _ => {
            return Err(field_err(
                cfg,
                "feed_forward_proj",
                "`gated-{ACT}` or `{ACT}`, e.g. \"gated-gelu\" or \"relu\"",
            ))
        }
    };
    // T5Config.__post_init__: "gated-gelu" means gelu_new (backwards compatibility). Saved
    // configs also carry the derived `dense_act_fn` and `is_gated_act`, which the config sets
    // after deriving them, so they win (umt5-small's say gelu_new and gated whatever
    // feed_forward_proj says)
    let act_name = if proj == "gated-gelu" {
        "gelu_new"
    } else {
        act_name
    };
    let (act_field, act_name) = match cfg.str("dense_act_fn")? {
        Some(saved) => ("dense_act_fn", saved),
        None => ("feed_forward_proj", act_name),
    };
    let gated = cfg.opt_bool("is_gated_act")?.unwrap_or(gated);
    let act = HfActivation::parse(act_name).ok_or_else(|| {
        field_err(
            cfg,
            act_field,
            format!("an activation among {SUPPORTED} (got {act_name:?})"),
        )
    })?;
    // `_shift_right(labels)` replaces the ignored labels by it and raises without it (a `null`
    // is None, not T5Config's default 0)
    if shifts_labels && cfg.is_null("pad_token_id") {
        return Err(field_err(
            cfg,
            "pad_token_id",
            "an integer: T5ForConditionalGeneration._shift_right(labels) needs it (T5 checkpoints set 0)",
        ));
    }
    // `_shift_right(labels)` reads it and raises without it
    if shifts_labels && cfg.opt_u64(&["decoder_start_token_id"])?.is_none() {
        return Err(field_err(
            cfg,
            "decoder_start_token_id",
            "an integer: T5ForConditionalGeneration._shift_right(labels) needs it (T5 checkpoints set 0)",
        ));
    }
    let scale_decoder_outputs = match variant {
        // T5Config: `scale_decoder_outputs = tie_word_embeddings is not False`, unless the config
        // names it, as transformers 5 saves T5 v1.1 (`scale_decoder_outputs: false` beside a
        // forced `tie_word_embeddings: true`): the saved value is set after the derived one
        Variant::T5 => match cfg.opt_bool("scale_decoder_outputs")? {
            Some(scale) => scale,
            None => cfg.bool_or("tie_word_embeddings", true)?,
        },
        // MT5ForConditionalGeneration.forward has no rescale
        Variant::Mt5 => false,
        // UMT5 rescales when `tie_word_embeddings`, which UMT5Config forces to true
        Variant::Umt5 => true,
    };
    Ok(Spec {
        variant,
        vocab: cfg.u64(&["vocab_size"])?,
        d_model: cfg.aliased_u64("d_model", "hidden_size")?,
        // T5Config's attribute_map: `head_dim`, `hidden_size`, `num_attention_heads` and
        // `num_hidden_layers` win over the fields they set (`random_configs.py 2996 --t5 --nulls`)
        d_kv: cfg.aliased_u64("d_kv", "head_dim")?,
        d_ff: cfg.u64(&["d_ff"])?,
        heads: cfg.aliased_u64("num_heads", "num_attention_heads")?,
        enc_layers,
        // T5Config: `num_decoder_layers` defaults to `num_layers`
        dec_layers: match cfg.opt_u64(&["num_decoder_layers"])? {
            Some(_) => cfg.layers(&["num_decoder_layers"])?,
            None => enc_layers,
        },
        buckets: cfg.u64(&["relative_attention_num_buckets"])?,
        dropout: cfg.prob_or("dropout_rate", 0.1)?,
        gated,
        act,
        scale_decoder_outputs,
        precision: input.precision,
        gradient_checkpointing: input.gradient_checkpointing,
        // merge_with_config_defaults: `use_cache=True` with gradient checkpointing on (in
        // training) warns and becomes False
        use_cache: cfg.bool_or("use_cache", true)? && !input.gradient_checkpointing,
        cache: RefCell::new(Vec::new()),
        eager: (input.attn == AttnImplementation::Eager).then(|| Eager {
            flavor: EagerFlavor::Encoder,
            dtype: input.precision.param_dtype(),
            autocast: input.precision.autocast_dtype(),
        }),
        decode: RefCell::new(None),
    })
}

/// Builds `T5ForConditionalGeneration` (`MT5...`, `UMT5...` for those `model_type`s) for
/// `input_ids` `[B, S]` and `labels` `[B, T]`, `T` = `input.target_seq` (default `S`). Returns the
/// graph and the checkpointed layers (every `T5Block`).
pub fn build(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
) -> Result<(Graph, Vec<String>), HfError> {
    let Encoded {
        s,
        mut b,
        shared,
        second: labels,
        enc,
        bsz,
        tgt,
        padding,
    } = encoded(cfg, model_type, input, true)?;
    // _shift_right: new_zeros, `[..., 1:] = labels[..., :-1].clone()`, `[..., 0] = start`,
    // `masked_fill_(shifted == -100, pad)`: the clone and the comparison are temporaries
    let shift = Aten::new("new_zeros", vec![bsz, tgt])
        .dtype(DTypeRule::Fixed(DType::I64))
        .temporary(vec![bsz, tgt - 1], DTypeRule::Fixed(DType::I64))
        .temporary(vec![bsz, tgt], DTypeRule::Fixed(DType::Bool))
        .not_differentiable();
    let dec_ids = b.op(shift, &[labels]);
    let dec = decoder_stack(&mut b, &s, shared, dec_ids, (enc, padding));
    // decoder_input_ids and decoder_outputs are locals until forward returns
    b.hold(&[dec_ids, dec]);
    let seq_out = if s.scale_decoder_outputs {
        mul_scalar(&mut b, dec)
    } else {
        dec
    };
    b.hold(&[seq_out]);
    let logits = tied_head(&mut b, "lm_head", shared, seq_out);
    // CrossEntropyLoss(ignore_index=-100)(lm_logits.view(-1, V), labels.view(-1)), in forward
    let n = bsz * tgt;
    let flat = view(&mut b, "view", logits, vec![n, s.vocab]);
    let flat_labels = view(&mut b, "view", labels, vec![n]);
    let lp = b.op(LogSoftmax::of_cross_entropy(1), &[flat]);
    let loss = b.op(NllLoss, &[lp, flat_labels]);
    // out = Seq2SeqLMOutput(loss, logits, past_key_values, encoder_last_hidden_state): alive
    // until the next forward returns
    let graph = b
        .finish(&s.outputs(&[loss, logits], enc), Task::LossInForward)
        .map_err(build_error(cfg))?;
    Ok((graph, block_names(&s)))
}

/// What both encoder-decoder classes build first: every parameter declared, `input_ids`
/// `[B, S]`, a second `[B, T]` input (`labels`, or `decoder_input_ids` for the bare model) and
/// the encoder stack on the first.
struct Encoded {
    s: Spec,
    b: GraphBuilder,
    /// `shared.weight`.
    shared: TensorId,
    second: TensorId,
    /// The encoder's last hidden state.
    enc: TensorId,
    bsz: u64,
    tgt: u64,
    /// A padded batch's `attention_mask` (`--padded`).
    padding: Option<TensorId>,
}

/// [`Encoded`] for `{X}ForConditionalGeneration` (`lm_head`) or the bare `{X}Model`.
fn encoded(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
    lm_head: bool,
) -> Result<Encoded, HfError> {
    // the seq2seq LM shifts its labels into the decoder's inputs
    let s = spec(cfg, Variant::of(model_type), input, lm_head)?;
    let (bsz, src) = (input.batch, input.seq);
    let tgt = target_len(input)?;
    let class = s.class(if lm_head {
        "ForConditionalGeneration"
    } else {
        "Model"
    });
    let mut b = GraphBuilder::new(model_type, &class);
    let shared = declare_model(&mut b, &s, Some(lm_head));
    let ids = b.input(vec![bsz, src], DType::I64);
    // a padded batch's `attention_mask`, between the ids and the labels (DataCollatorForSeq2Seq)
    let padding = padding_input(&mut b, input);
    let second = b.input(vec![bsz, tgt], DType::I64);
    let enc = encoder_stack(&mut b, &s, shared, ids, padding);
    Ok(Encoded {
        s,
        b,
        shared,
        second,
        enc,
        bsz,
        tgt,
        padding,
    })
}

/// `encoder`, the encoder stack on `input_ids` (and a padded batch's `attention_mask`); returns
/// its last hidden state.
fn encoder_stack(
    b: &mut GraphBuilder,
    s: &Spec,
    shared: TensorId,
    ids: TensorId,
    padding: Option<TensorId>,
) -> TensorId {
    b.module("encoder", &s.class("Stack"), &[ids], |b| {
        stack(b, s, false, s.enc_layers, shared, ids, (None, padding))
    })
}

/// `decoder`, the decoder stack on `decoder_input_ids` attending to the encoder's `enc`; returns
/// its last hidden state.
fn decoder_stack(
    b: &mut GraphBuilder,
    s: &Spec,
    shared: TensorId,
    dec_ids: TensorId,
    (enc, padding): (TensorId, Option<TensorId>),
) -> TensorId {
    b.module("decoder", &s.class("Stack"), &[dec_ids, enc], |b| {
        stack(
            b,
            s,
            true,
            s.dec_layers,
            shared,
            dec_ids,
            (Some(enc), padding),
        )
    })
}

/// The decoder's length T: `--target-len`, else `--seq-len`.
fn target_len(input: &HfInput) -> Result<u64, HfError> {
    match input.target_seq.unwrap_or(input.seq) {
        0 => Err(HfError::BadInput(
            "--target-len must be positive".to_string(),
        )),
        t => Ok(t),
    }
}

/// Every `T5Block`, the encoder's then the decoder's.
fn block_names(s: &Spec) -> Vec<String> {
    (0..s.enc_layers)
        .map(|i| format!("encoder.block.{i}"))
        .chain((0..s.dec_layers).map(|i| format!("decoder.block.{i}")))
        .collect()
}

/// Builds the bare encoder-decoder `T5Model` (`MT5Model`, `UMT5Model`), run in inference on
/// `input_ids` `[B, S]` and `decoder_input_ids` `[B, T]` (`T` = `input.target_seq`, default
/// `S`): `shared`, both stacks, no `lm_head`. Its output (the decoder's last hidden state, the
/// `EncoderDecoderCache` of the config's `use_cache` and the encoder's last hidden state) is kept
/// until the next forward returns. Returns the graph and every `T5Block`.
pub fn build_model(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
) -> Result<(Graph, Vec<String>), HfError> {
    let Encoded {
        s,
        mut b,
        shared,
        second: dec_ids,
        enc,
        padding,
        ..
    } = encoded(cfg, model_type, input, false)?;
    let dec = decoder_stack(&mut b, &s, shared, dec_ids, (enc, padding));
    let graph = b
        .finish(&s.outputs(&[dec], enc), Task::Features)
        .map_err(build_error(cfg))?;
    Ok((graph, block_names(&s)))
}

/// Builds `T5EncoderModel` (`MT5...`, `UMT5...`): `shared` and the encoder stack alone, run on
/// `input_ids` `[B, S]` in inference (the text encoder of diffusion pipelines and of
/// sentence-T5); its output is the encoder's last hidden state. Returns the graph and the
/// encoder's blocks.
pub fn build_encoder(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
) -> Result<(Graph, Vec<String>), HfError> {
    let s = spec(cfg, Variant::of(model_type), input, false)?;
    let (bsz, src) = (input.batch, input.seq);
    if input.target_seq.is_some() {
        return Err(HfError::BadInput(format!(
            "{}: --target-len is the decoder's length; {} has no decoder",
            cfg.path,
            s.class("EncoderModel")
        )));
    }
    let mut b = GraphBuilder::new(model_type, &s.class("EncoderModel"));
    let shared = declare_model(&mut b, &s, None);
    let ids = b.input(vec![bsz, src], DType::I64);
    let padding = padding_input(&mut b, input);
    let enc = encoder_stack(&mut b, &s, shared, ids, padding);
    let graph = b.finish(&[enc], Task::Features).map_err(build_error(cfg))?;
    let layers = (0..s.enc_layers)
        .map(|i| format!("encoder.block.{i}"))
        .collect();
    Ok((graph, layers))
}

/// `{X}ForConditionalGeneration` as `generate` runs it ([`super::generate::build_seq2seq`]):
/// the encoder once, then the decoder on one token per forward with its
/// `EncoderDecoderCache`, `lm_head` on that token.
pub(crate) struct Generator {
    s: Spec,
    /// `shared.weight`, once declared.
    shared: std::cell::Cell<Option<TensorId>>,
}

impl Generator {
    /// The model of a `model.generate(input_ids, max_new_tokens=...)` (`--mode generate`).
    pub(crate) fn new(
        cfg: &HfConfig,
        model_type: &str,
        input: &HfInput,
    ) -> Result<Generator, HfError> {
        let s = spec(cfg, Variant::of(model_type), input, false)?;
        if input.target_seq.is_some() {
            return Err(HfError::BadInput(format!(
                "{}: --target-len is a training or forward length; generate's decoder runs on one token at a time (--new-tokens)",
                cfg.path
            )));
        }
        // DynamicCache(config=...) of the top-level config has `num_layers` layers, which the
        // decoder's deeper layers index past (IndexError in transformers 5.23)
        if s.dec_layers > s.enc_layers {
            return Err(field_err(
                cfg,
                "num_decoder_layers",
                format!(
                    "at most num_layers = {}: transformers 5.23's generate() builds the decoder's cache with num_layers layers and fails past them (got {})",
                    s.enc_layers, s.dec_layers
                ),
            ));
        }
        let layers = s.dec_layers as usize;
        *s.decode.borrow_mut() = Some(Decode {
            past: 0,
            layer: 0,
            self_cache: KvCache::with_windows(vec![None; layers]),
            cross_cache: KvCache::with_windows(vec![None; layers]),
        });
        Ok(Generator {
            s,
            shared: std::cell::Cell::new(None),
        })
    }

    /// The class name (`T5ForConditionalGeneration`, ...).
    pub(crate) fn class(&self) -> String {
        self.s.class("ForConditionalGeneration")
    }

    fn shared(&self, b: &mut GraphBuilder) -> TensorId {
        match self.shared.get() {
            Some(w) => w,
            None => {
                let w = declare_model(b, &self.s, Some(true));
                self.shared.set(Some(w));
                w
            }
        }
    }
}

impl Seq2SeqLm for Generator {
    fn declare(&self, b: &mut GraphBuilder) {
        self.shared(b);
    }

    fn encode(&self, b: &mut GraphBuilder, ids: TensorId, padding: Option<TensorId>) -> TensorId {
        let shared = self.shared(b);
        encoder_stack(b, &self.s, shared, ids, padding)
    }

    fn decode(
        &self,
        b: &mut GraphBuilder,
        ids: TensorId,
        (enc, padding): (TensorId, Option<TensorId>),
        past: u64,
    ) -> TensorId {
        if let Some(d) = self.s.decode.borrow_mut().as_mut() {
            d.past = past;
        }
        let shared = self.shared(b);
        let s = &self.s;
        b.frame(|b| {
            let dec = decoder_stack(b, s, shared, ids, (enc, padding));
            let seq_out = if s.scale_decoder_outputs {
                mul_scalar(b, dec)
            } else {
                dec
            };
            // decoder_outputs and sequence_output are locals until forward returns
            b.hold(&[dec, seq_out]);
            tied_head(b, "lm_head", shared, seq_out)
        })
    }

    fn grow_cache_to(&self, b: &mut GraphBuilder, len: u64) {
        if let Some(d) = self
            .s
            .decode
            .borrow_mut()
            .as_mut()
            .filter(|_| self.s.use_cache)
        {
            d.self_cache.grow_to(b, len);
        }
    }

    fn cache_tensors_in_drop_order(&self) -> Vec<TensorId> {
        let decode = self.s.decode.borrow();
        decode
            .as_ref()
            .filter(|_| self.s.use_cache)
            .map_or_else(Vec::new, |d| {
                let mut t = d.self_cache.tensors_in_drop_order();
                t.extend(d.cross_cache.tensors_in_drop_order());
                t
            })
    }

    fn layers(&self) -> usize {
        self.s.dec_layers as usize
    }

    fn vocab(&self) -> u64 {
        self.s.vocab
    }

    fn kv_width(&self) -> u64 {
        self.s.inner()
    }
}

/// Registers every module and parameter in `__init__` order (the order they are allocated in),
/// with the per-stack `embed_tokens` and `lm_head` weights that tying drops (`decoder`: with the
/// decoder stack, and with `lm_head` when `Some(true)`, the whole `ForConditionalGeneration`;
/// `Some(false)`, the bare `Model`; `None`, `EncoderModel`'s `shared` and encoder). Returns
/// `shared.weight`.
fn declare_model(b: &mut GraphBuilder, s: &Spec, decoder: Option<bool>) -> TensorId {
    let with_decoder = decoder.is_some();
    let shared = b.declare("shared", "Embedding", |b| {
        b.parameter("weight", vec![s.vocab, s.d_model])
    });
    let stacks = [
        ("encoder", false, s.enc_layers),
        ("decoder", true, s.dec_layers),
    ];
    for &(name, decoder, layers) in &stacks[..if with_decoder { 2 } else { 1 }] {
        b.declare(name, &s.class("Stack"), |b| {
            b.declare_module("embed_tokens", "Embedding");
            b.untied_at_init(vec![s.vocab, s.d_model]);
            b.declare("block", "ModuleList", |b| {
                for i in 0..layers {
                    b.declare(&i.to_string(), &s.class("Block"), |b| {
                        b.declare("layer", "ModuleList", |b| {
                            declare_block(b, s, decoder, i == 0 || s.variant.bias_per_layer())
                        })
                    });
                }
            });
            b.declare("final_layer_norm", &s.class("LayerNorm"), |b| {
                b.parameter("weight", vec![s.d_model])
            });
            b.declare_module("dropout", "Dropout");
        });
    }
    if decoder == Some(true) {
        // its weight is `shared.weight` (named_parameters() lists it once, as shared.weight)
        b.declare_module("lm_head", "Linear");
        // post_init: lm_head's own weight is allocated, then every untied weight is dropped
        b.tie_at_init(&[vec![s.vocab, s.d_model]], 1, None);
    }
    shared
}

fn declare_linear(b: &mut GraphBuilder, name: &str, i: u64, o: u64) {
    b.declare_layer(
        name,
        &Linear {
            in_features: i,
            out_features: o,
            bias: false,
        },
    );
}

fn declare_block(b: &mut GraphBuilder, s: &Spec, decoder: bool, first: bool) {
    let attention = |b: &mut GraphBuilder, rel_bias: bool| {
        for p in ["q", "k", "v"] {
            declare_linear(b, p, s.d_model, s.inner());
        }
        declare_linear(b, "o", s.inner(), s.d_model);
        if rel_bias {
            b.declare("relative_attention_bias", "Embedding", |b| {
                b.parameter("weight", vec![s.buckets, s.heads])
            });
        }
    };
    let norm_and_dropout = |b: &mut GraphBuilder| {
        b.declare("layer_norm", &s.class("LayerNorm"), |b| {
            b.parameter("weight", vec![s.d_model])
        });
        b.declare_module("dropout", "Dropout");
    };
    b.declare("0", &s.class("LayerSelfAttention"), |b| {
        b.declare("SelfAttention", &s.class("Attention"), |b| {
            attention(b, first)
        });
        norm_and_dropout(b);
    });
    let ff_index = if decoder {
        b.declare("1", &s.class("LayerCrossAttention"), |b| {
            b.declare("EncDecAttention", &s.class("Attention"), |b| {
                attention(b, false)
            });
            norm_and_dropout(b);
        });
        "2"
    } else {
        "1"
    };
    b.declare(ff_index, &s.class("LayerFF"), |b| {
        let dense = if s.gated {
            s.class("DenseGatedActDense")
        } else {
            s.class("DenseActDense")
        };
        b.declare("DenseReluDense", &dense, |b| {
            if s.gated {
                declare_linear(b, "wi_0", s.d_model, s.d_ff);
                declare_linear(b, "wi_1", s.d_model, s.d_ff);
            } else {
                declare_linear(b, "wi", s.d_model, s.d_ff);
            }
            declare_linear(b, "wo", s.d_ff, s.d_model);
            b.declare_module("dropout", "Dropout");
            b.declare_module("act", s.act.class());
        });
        norm_and_dropout(b);
    });
}

/// `T5Stack.forward`: embedding (the shared weight), dropout, the blocks (the first computes the
/// position biases the others reuse), `final_layer_norm`, dropout.
fn stack(
    b: &mut GraphBuilder,
    s: &Spec,
    decoder: bool,
    layers: u64,
    shared: TensorId,
    ids: TensorId,
    (enc, padding): (Option<TensorId>, Option<TensorId>),
) -> TensorId {
    let emb = b.module("embed_tokens", "Embedding", &[ids], |b| {
        embedding_lookup(b, shared, ids)
    });
    // the stack's masks, locals until it returns: with eager attention the decoder's additive
    // causal mask (`create_causal_mask`, in the dtype of inputs_embeds); for a padded batch
    // `create_bidirectional_mask` on its mask, the encoder's self-attention mask `[B, 1, S, S]`
    // or the decoder's cross-attention one `[B, 1, T, S]` (eager attention adds it: additive, in
    // the embeddings' dtype); an unpadded encoder's are `None`
    let (bsz, len) = (b.shape(ids)[0], b.shape(ids)[1]);
    let eager = s.eager.map(|_| s.hidden_dtype());
    let causal = match (eager, decoder) {
        (Some(_), true) => {
            // generate: the mask covers the cached positions too
            let cache_len = s.decode.borrow().as_ref().map(|d| d.past + len);
            attention_mask_checked(b, bsz, len, MaskPattern::Causal, eager, cache_len, false)
        }
        _ => None,
    };
    let padded = padding.map(|p| {
        let src = b.shape(p)[1];
        padded_attention_mask(b, bsz, (len, src, src), PaddedPattern::Encoder, p, eager)
    });
    let (self_mask, cross_mask) = if decoder {
        (causal, padded)
    } else {
        (padded, None)
    };
    // the masks and inputs_embeds are locals until the stack returns, cleared in the order of
    // forward's signature then its body: `attention_mask` (rebound to the self-attention
    // mask), `inputs_embeds`, then `encoder_extended_attention_mask`
    let locals: Vec<TensorId> = self_mask
        .into_iter()
        .chain([emb])
        .chain(cross_mask)
        .collect();
    b.hold(&locals);
    let mut h = dropout(b, "dropout", s.dropout, emb);
    let mut self_bias: Option<TensorId> = None;
    let mut cross_bias: Option<TensorId> = None;
    b.module("block", "ModuleList", &[], |b| {
        for i in 0..layers {
            // the checkpointed call's arguments: hidden_states, attention_mask, position_bias,
            // encoder_hidden_states, encoder_attention_mask, encoder_decoder_position_bias
            if let Some(d) = s.decode.borrow_mut().as_mut() {
                d.layer = i as usize;
            }
            let mut args = vec![h];
            args.extend(self_mask);
            args.extend(self_bias);
            args.extend(enc);
            args.extend(cross_mask);
            args.extend(cross_bias);
            let (nh, sb, cb) = b.module(&i.to_string(), &s.class("Block"), &args, |b| {
                block(
                    b,
                    s,
                    decoder,
                    h,
                    self_bias,
                    enc,
                    cross_bias,
                    (self_mask, cross_mask),
                )
            });
            h = nh;
            // UMT5's blocks return only the hidden states: every layer computes its own biases
            if !s.variant.bias_per_layer() {
                self_bias = Some(sb);
                cross_bias = cb;
            }
        }
    });
    // the shared position biases are locals until the stack returns
    b.hold(&self_bias.into_iter().chain(cross_bias).collect::<Vec<_>>());
    let h = t5_layer_norm(b, s, "final_layer_norm", h);
    dropout(b, "dropout", s.dropout, h)
}

/// `T5Block.forward`: self-attention, cross-attention (decoder), feed-forward; returns the hidden
/// states and the self- and cross-attention position biases. `masks`: the self-attention mask
/// (the decoder's eager causal one, or a padded encoder's) and the cross-attention one (a padded
/// batch's).
#[allow(clippy::too_many_arguments)]
fn block(
    b: &mut GraphBuilder,
    s: &Spec,
    decoder: bool,
    h: TensorId,
    self_bias: Option<TensorId>,
    enc: Option<TensorId>,
    cross_bias: Option<TensorId>,
    (self_mask, cross_mask): (Option<TensorId>, Option<TensorId>),
) -> (TensorId, TensorId, Option<TensorId>) {
    b.module("layer", "ModuleList", &[], |b| {
        let mut args = vec![h];
        args.extend(self_bias);
        let (h, sb, weights) = b.module("0", &s.class("LayerSelfAttention"), &args, |b| {
            attention_layer(
                b,
                s,
                "SelfAttention",
                h,
                None,
                self_bias,
                (decoder, self_mask),
            )
        });
        // eager attention's weights: `hidden_states, ..., _ = self.layer[0](...)` keeps them
        // until `_` is rebound by the cross-attention's, or the block returns
        let weights: Vec<TensorId> = weights.into_iter().collect();
        // the block's `clamp_value` local (pure float16)
        let mut clamp_value = None;
        let h = clamp_fp16(b, s, h, &mut clamp_value);
        let (h, cb, ff) = match enc {
            Some(e) if decoder => {
                let self_out = h;
                let mut args = vec![h, e];
                args.extend(cross_bias);
                let (h, cb, cross_weights) =
                    b.module("1", &s.class("LayerCrossAttention"), &args, |b| {
                        attention_layer(
                            b,
                            s,
                            "EncDecAttention",
                            h,
                            Some(e),
                            cross_bias,
                            (false, cross_mask),
                        )
                    });
                // `hidden_states, cross_attn_position_bias, _ = self.layer[1](...)` rebinds
                // hidden_states (the self-attention layer's output goes), then `_`
                b.keep_until_now(&[self_out]);
                b.keep_until_now(&weights);
                b.hold(&cross_weights.into_iter().collect::<Vec<_>>());
                (clamp_fp16(b, s, h, &mut clamp_value), Some(cb), "2")
            }
            _ => {
                b.hold(&weights);
                (h, None, "1")
            }
        };
        let h_in = h;
        let h = b.module(ff, &s.class("LayerFF"), &[h], |b| feed_forward(b, s, h));
        // `hidden_states = self.layer[-1](hidden_states)`: its input goes once it returns,
        // before the block's locals
        b.keep_until_now(&[h_in]);
        let h = clamp_fp16(b, s, h, &mut clamp_value);
        b.hold(&clamp_value.into_iter().collect::<Vec<_>>());
        (h, sb, cb)
    })
}

/// `hidden_states = clamp(hidden_states, ±clamp_value)` with `clamp_value = torch.where(
/// isinf(hidden_states).any(), finfo.max - 1000, finfo.max)`, which T5Block runs when the hidden
/// states are float16 (a pure fp16 model): `isinf`, `any`, the two Python floats as float32
/// scalar tensors, the float32 bound, `-bound`, `clamp` (truth traces). `clamp_value` is the
/// block's local: the previous bound goes when the new one is bound, the last when the block
/// returns; `-clamp_value` goes after the call, then the old hidden states as the name is
/// rebound.
fn clamp_fp16(
    b: &mut GraphBuilder,
    s: &Spec,
    h: TensorId,
    clamp_value: &mut Option<TensorId>,
) -> TensorId {
    if s.hidden_dtype() != DType::F16 {
        return h;
    }
    let shape = b.shape(h).to_vec();
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let f32 = DTypeRule::Fixed(DType::F32);
    let isinf = b.op(
        Aten::new("isinf", shape.clone())
            .dtype(bool_)
            .not_differentiable(),
        &[h],
    );
    let any = b.op(
        Aten::new("any", vec![]).dtype(bool_).not_differentiable(),
        &[isinf],
    );
    let scalar = || {
        Aten::new("scalar_tensor", vec![])
            .dtype(f32)
            .not_differentiable()
    };
    let below_max = b.op(scalar(), &[]);
    let max = b.op(scalar(), &[]);
    // the scalars go last made first, then the condition
    let bound = b.op(
        Aten::new("where", vec![]).dtype(f32).not_differentiable(),
        &[max, below_max, any],
    );
    if let Some(previous) = clamp_value.replace(bound) {
        b.keep_until_now(&[previous]);
    }
    let neg = b.op(
        Aten::new("neg", vec![]).dtype(f32).not_differentiable(),
        &[bound],
    );
    // ClampBackward1 keeps the input and both bounds (-bound is its own tensor)
    b.op(
        Aten::new("clamp", shape)
            .dtype(DTypeRule::Like(1))
            .saves(vec![Saved::Input(1), Saved::Input(0), Saved::Input(2)])
            .grads(vec![GradIn::None, GradIn::New, GradIn::None]),
        &[neg, h, bound],
    )
}

/// `T5LayerSelfAttention` / `T5LayerCrossAttention`: `layer_norm`, attention, dropout, residual
/// add. Returns the new hidden states, the attention's position bias and, with eager attention,
/// its weights. `mask`: decoder self-attention, and the attention's mask (the decoder's eager
/// causal one, a padded batch's).
fn attention_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    name: &str,
    h: TensorId,
    kv: Option<TensorId>,
    bias: Option<TensorId>,
    mask: (bool, Option<TensorId>),
) -> (TensorId, TensorId, Option<TensorId>) {
    let normed = t5_layer_norm(b, s, "layer_norm", h);
    let mut args = vec![normed];
    args.extend(kv);
    args.extend(bias);
    let (a, pb, weights) = b.module(name, &s.class("Attention"), &args, |b| {
        attention(b, s, normed, kv, bias, mask)
    });
    // normed_hidden_states and attention_output (and attn_weights) are locals until the layer
    // returns, but T5LayerSelfAttention's `attention_output = hidden_states +
    // self.dropout(attention_output)` rebinds attention_output: the attention's output goes
    // right after the sum, before the frame's locals (T5LayerCrossAttention names the sum
    // `layer_output`; UMT5's layers keep the attention's output tuple)
    let rebound = kv.is_none() && s.variant != Variant::Umt5;
    let locals = [normed, a];
    b.hold(if rebound { &locals[..1] } else { &locals });
    b.hold(&weights.into_iter().collect::<Vec<_>>());
    let d = dropout(b, "dropout", s.dropout, a);
    let out = add(b, h, d);
    if rebound {
        b.keep_until_now(&[a]);
    }
    (out, pb, weights)
}

/// `T5Attention.forward`: q/k/v projections, the cache update (decoder, `use_cache`), the
/// position bias (computed, reused, or zeros for cross-attention), `sdpa_attention_forward` or
/// `eager_attention_forward` (which adds the bias, then the additive `mask`: the decoder's
/// causal one or a padded batch's), `o`. With SDPA `mask` is a padded batch's boolean mask, which
/// the float mask folds in.
/// Returns the output, the position bias and, with eager attention, its weights.
fn attention(
    b: &mut GraphBuilder,
    s: &Spec,
    x: TensorId,
    kv: Option<TensorId>,
    bias: Option<TensorId>,
    (causal, mask): (bool, Option<TensorId>),
) -> (TensorId, TensorId, Option<TensorId>) {
    let (bsz, len) = (b.shape(x)[0], b.shape(x)[1]);
    let src = kv.unwrap_or(x);
    let kv_len = b.shape(src)[1];
    let (hn, dk, inner) = (s.heads, s.d_kv, s.inner());
    // the attention reads k and v from a cache's concatenations (a generation's decode steps
    // among them), and SDPA k from that rather than from its view
    let cached = s.use_cache && (causal || kv.is_some());
    let heads = |b: &mut GraphBuilder, t: TensorId, l: u64, key: bool| {
        if s.eager.is_some() {
            return eager_heads(b, t, hn, key);
        }
        // SDPA always has a mask here (the position bias): the math fallback hands the
        // gradients back heads-first where no fused kernel takes the head dim (k's transposed)
        let op = SdpaHeadsView {
            shape: vec![bsz, l, hn, dk],
            copied: false,
            sdpa: Some((true, s.dropout)),
            of: if key && !cached {
                HeadsOf::KeyOfLinear
            } else {
                HeadsOf::Other
            },
        };
        let t = b.op(op, &[t]);
        view(b, "transpose", t, vec![bsz, hn, l, dk])
    };
    let q = linear(b, "q", s.d_model, inner, false, x);
    let q4 = heads(b, q, len, false);
    // generate: with its cache, after the first forward the cross-attention reads its cached
    // keys and values; without one (`use_cache` false) each forward is a plain one
    let generating = s.decode.borrow().is_some();
    let caching = generating && s.use_cache;
    let decoding = caching && (causal || kv.is_some());
    let reused = match (s.decode.borrow().as_ref(), kv) {
        (Some(d), Some(_)) if s.use_cache => d.cross_cache.layer(d.layer),
        _ => None,
    };
    let (k4, v4) = match reused {
        Some(cached) => cached,
        None => {
            let k = linear(b, "k", s.d_model, inner, false, src);
            let k4 = heads(b, k, kv_len, true);
            let v = linear(b, "v", s.d_model, inner, false, src);
            let v4 = heads(b, v, kv_len, false);
            match s.decode.borrow_mut().as_mut() {
                // `past_key_values.update(...)`: the self-attention cache grows by this token,
                // the cross-attention cache is filled once
                Some(d) if decoding && kv.is_some() => d.cross_cache.update(b, d.layer, k4, v4),
                Some(d) if decoding => d.self_cache.update(b, d.layer, k4, v4),
                // the encoder's, and every projection without a cache
                Some(_) => (k4, v4),
                None if s.use_cache && (causal || kv.is_some()) => cache_update(b, s, k4, v4),
                None => (k4, v4),
            }
        }
    };
    // the keys' length: the cached positions and this forward's
    let kv_len = b.shape(k4)[2];
    // query_states, key_states, value_states are locals until forward returns
    b.hold(&[q4, k4, v4]);
    let pb = match bias {
        Some(p) => p,
        None if kv.is_none() => b.frame(|b| compute_bias(b, s, len, kv_len, causal)),
        // cross-attention: zeros((1, H, L, S), dtype=query dtype), made once and shared; with
        // gradient checkpointing on it is a leaf that requires grad
        None => {
            let zeros = Aten::new("zeros", vec![1, hn, len, kv_len]).dtype(DTypeRule::Like(0));
            // (UMT5Attention has no such flag)
            let zeros = if s.gradient_checkpointing && s.variant != Variant::Umt5 {
                zeros.requires_grad_leaf()
            } else {
                zeros.not_differentiable()
            };
            b.op(zeros, &[q4])
        }
    };
    if s.variant.bias_per_layer() {
        // position_bias is UMT5Attention.forward's own local
        b.hold(&[pb]);
    }
    if let Some(eager) = s.eager {
        // attn_weights + position_bias, then + the causal mask (decoder self-attention) or a
        // padded batch's
        let masks: Vec<TensorId> = std::iter::once(pb).chain(mask).collect();
        let (o, w) = b.frame(|b| eager_attention(b, eager, q4, k4, v4, &masks, s.dropout, cached));
        return (linear(b, "o", inner, s.d_model, false, o), pb, Some(w));
    }
    // transpose(1, 2).contiguous() before sdpa_attention_forward returns (its mask still a local):
    // free after the fused kernels, which lay the output out as [B, L, H, D]; a copy after the
    // math fallback
    let merge = SdpaOutputMerge {
        name: "clone",
        shape: vec![bsz, len, hn, dk],
        q_contiguous: false,
        masked: true,
        dropout_p: s.dropout,
    };
    let o = b.frame(|b| {
        let o = match (decoding, kv) {
            // generate's first decoder position (cached or not): the bias `[1, H, 1, 1]` is a
            // permuted view whose last stride is not 1, which SDPA's fused kernels refuse
            // (`check_last_dim_stride_equals_1`), and `.contiguous()` leaves it as it is: the math
            // path. So is one-token targets' self-attention outside generate (no causal mask over
            // one position)
            (_, None) if causal && kv_len == 1 => math_attention(b, s, [q4, k4, v4], pb),
            // a decode step's query attends to every cached position: no causal mask
            (true, _) => {
                let attn = (false, mask, cached);
                sdpa_with_bias(b, s, [q4, k4, v4], pb, attn, kv.is_none())
            }
            (false, _) => {
                let attn = (causal, mask, cached);
                sdpa_with_bias(b, s, [q4, k4, v4], pb, attn, kv.is_none())
            }
        };
        b.op(merge, &[o])
    });
    let o = view(b, "reshape", o, vec![bsz, len, inner]);
    (linear(b, "o", inner, s.d_model, false, o), pb, None)
}

/// The decoder's `past_key_values.update(key_states, value_states, layer_idx)` on a fresh
/// `EncoderDecoderCache` (`DynamicLayer.update`'s first call): `keys = cat([empty, k], -2)`, then
/// the values, each a contiguous copy that attention then reads (and autograd saves) in place of
/// the projection, whose output is freed once both are cached. The cat passes its gradient
/// through; the copies stay referenced by the cache.
fn cache_update(b: &mut GraphBuilder, s: &Spec, k: TensorId, v: TensorId) -> (TensorId, TensorId) {
    let cached = b.frame(|b| {
        // key_states and value_states stay referenced until update returns
        b.hold(&[k, v]);
        let cat = |b: &mut GraphBuilder, t: TensorId| {
            let shape = b.shape(t).to_vec();
            let op = Aten::new("cat", shape)
                .grads(vec![GradIn::PassThrough(0)])
                .kv_cache();
            b.op(op, &[t])
        };
        let nk = cat(b, k);
        (nk, cat(b, v))
    });
    s.cache.borrow_mut().extend([cached.0, cached.1]);
    cached
}

/// A no-grad integer/float op of the position-bias arithmetic.
fn index_op(name: &'static str, shape: Vec<u64>, dtype: DType) -> Aten {
    Aten::new(name, shape)
        .dtype(DTypeRule::Fixed(dtype))
        .not_differentiable()
}

/// `compute_bias(L, S)`: positions, `_relative_position_bucket` (bidirectional in the encoder,
/// causal in the decoder), the `relative_attention_bias` embedding, `permute(2, 0, 1)
/// .unsqueeze(0)` (a view).
fn compute_bias(b: &mut GraphBuilder, s: &Spec, len: u64, kv_len: u64, causal: bool) -> TensorId {
    use DType::{Bool, F32, I64};
    let a = b.op(index_op("arange", vec![len], I64), &[]);
    let context = b.op(index_op("add", vec![len, 1], I64), &[a]);
    let memory = b.op(index_op("arange", vec![kv_len], I64), &[]);
    let sq = vec![len, kv_len];
    let rel = b.op(index_op("sub", sq.clone(), I64), &[memory, context]);
    // context_position, memory_position, relative_position are locals until compute_bias returns
    b.hold(&[context, memory, rel]);
    let buckets = b.frame(|b| {
        let (start, position) = if causal {
            // relative_position = -min(relative_position, zeros_like(relative_position))
            let z = b.op(index_op("zeros_like", sq.clone(), I64), &[rel]);
            let m = b.op(index_op("minimum", sq.clone(), I64), &[rel, z]);
            (None, b.op(index_op("neg", sq.clone(), I64), &[m]))
        } else {
            // relative_buckets = 0 + (relative_position > 0).to(long) * num_buckets
            let gt = b.op(index_op("gt", sq.clone(), Bool), &[rel]);
            let l = b.op(index_op("_to_copy", sq.clone(), I64), &[gt]);
            let m = b.op(index_op("mul", sq.clone(), I64), &[l]);
            let start = b.op(index_op("add", sq.clone(), I64), &[m]);
            (Some(start), b.op(index_op("abs", sq.clone(), I64), &[rel]))
        };
        let small = b.op(index_op("lt", sq.clone(), Bool), &[position]);
        // max_exact + (log(rp.float() / max_exact) / log(...) * (nb - max_exact)).to(long)
        let mut f = b.op(index_op("_to_copy", sq.clone(), F32), &[position]);
        for name in ["div", "log", "div", "mul"] {
            f = b.op(index_op(name, sq.clone(), F32), &[f]);
        }
        // UMT5 names it: `log_ratio` is a local until the function returns
        let log_ratio = (s.variant == Variant::Umt5).then_some(f);
        let large = b.op(index_op("_to_copy", sq.clone(), I64), &[f]);
        let large = b.op(index_op("add", sq.clone(), I64), &[large]);
        let full = b.op(index_op("full_like", sq.clone(), I64), &[large]);
        let large = b.op(index_op("minimum", sq.clone(), I64), &[large, full]);
        let w = b.op(
            index_op("where", sq.clone(), I64),
            &[small, position, large],
        );
        // relative_position, is_small, (log_ratio,) relative_position_if_large are locals until
        // it returns, cleared in that order
        let locals: Vec<TensorId> = [position, small]
            .into_iter()
            .chain(log_ratio)
            .chain([large])
            .collect();
        b.hold(&locals);
        match start {
            // relative_buckets += where(...): in place
            Some(start) => {
                let op = Aten {
                    alias: Alias::InPlace(0),
                    ..index_op("add_", sq.clone(), I64)
                };
                b.op(op, &[start, w])
            }
            None => b.op(index_op("add", sq.clone(), I64), &[w]),
        }
    });
    b.hold(&[buckets]);
    let values = embedding(b, "relative_attention_bias", s.buckets, s.heads, buckets).0;
    let p = view(b, "permute", values, vec![s.heads, len, kv_len]);
    view(b, "unsqueeze", p, vec![1, s.heads, len, kv_len])
}

/// `sdpa_attention_forward` with a position bias: the float mask (`create_position_bias_mask`:
/// the causal `where` for decoder self-attention, a padded batch's `where(mask, bias, min)`,
/// `[B, H, L, S]`, then `.contiguous()`), SDPA's own mask preprocessing (expand to
/// `[B, H, L, S]`), and the kernel.
fn sdpa_with_bias(
    b: &mut GraphBuilder,
    s: &Spec,
    qkv: [TensorId; 3],
    bias: TensorId,
    (causal, padded, kv_contiguous): (bool, Option<TensorId>, bool),
    bias_is_view: bool,
) -> TensorId {
    let q = b.shape(qkv[0]).to_vec();
    let (bsz, hn, len) = (q[0], q[1], q[2]);
    let kv_len = b.shape(qkv[1])[2];
    let mask_batch = if padded.is_some() { bsz } else { 1 };
    let mask_shape = vec![mask_batch, hn, len, kv_len];
    let mask = b.frame(|b| {
        // the condition: a padded batch's boolean mask, or decoder self-attention's causal one
        let cond = match (padded, causal) {
            (Some(padded), _) => Some(padded),
            (None, true) => {
                let a = b.op(index_op("arange", vec![len], DType::I64), &[]);
                let k = b.op(index_op("arange", vec![kv_len], DType::I64), &[]);
                let ge = b.op(index_op("ge", vec![len, kv_len], DType::Bool), &[a, k]);
                // causal_mask is a local until the function returns
                b.hold(&[ge]);
                Some(ge)
            }
            (None, false) => None,
        };
        let m = match cond {
            Some(cond) => {
                let min = b.op(
                    Aten::new("scalar_tensor", vec![])
                        .dtype(DTypeRule::Like(0))
                        .not_differentiable(),
                    &[bias],
                );
                // WhereBackward0 keeps the condition; the gradient is where(cond, grad, 0),
                // summed over the batch into the bias's for a padded batch's mask
                let mut w = Aten::new("where", mask_shape.clone())
                    .dtype(DTypeRule::Like(1))
                    .saves(vec![Saved::Input(0)])
                    .grads(vec![GradIn::None, GradIn::New, GradIn::None])
                    .backward_temporary(vec![], DTypeRule::Like(1));
                if padded.is_some() {
                    w = w.backward_temporary(mask_shape.clone(), DTypeRule::Like(1));
                }
                let w = b.op(w, &[cond, bias, min]);
                // a local too, released after the condition when the function returns its
                // `.contiguous()` (truth traces of mT5's decoder self-attention)
                b.hold(&[w]);
                w
            }
            None => bias,
        };
        // .contiguous(): a copy of the permuted bias, or of a `where` laid out like it (the zeros
        // are contiguous already, and so is a `where` on them)
        if causal || bias_is_view {
            b.op(
                Aten::new("clone", mask_shape.clone()).grads(vec![GradIn::PassThrough(0)]),
                &[m],
            )
        } else {
            m
        }
    });
    // attention_mask is a local until sdpa_attention_forward returns
    b.hold(&[mask]);
    // the kernel sees the mask expanded to [B, H, L, S]; mem-efficient attention's mask gradient
    // has its last dimension padded to 16 (see ScaledDotProductAttentionBias). Autocast casts the
    // [1, H, L, S] mask before SDPA expands it, and ExpandBackward0 sums the gradient back (a
    // padded batch's mask has the batch already).
    let padded = kv_len.div_ceil(16) * 16;
    let mut expand =
        Aten::view("expand", vec![bsz, hn, len, padded]).grads(vec![if bsz > mask_batch {
            GradIn::New
        } else {
            GradIn::PassThrough(0)
        }]);
    let mut mask = mask;
    if kv_len.is_multiple_of(MEM_EFF_MASK_ALIGNMENT) {
        expand = expand.autocast(Autocast::LowerPrecision);
    } else {
        // mem-efficient attention's `preprocess_mask`: `constant_pad_nd` to a multiple of 8 (the
        // padded copy is the kernel's extra, see ScaledDotProductAttentionBias), then a slice
        // back. A mask that needs a gradient always runs mem-efficient attention, so its
        // backward runs SliceBackward0 (a padded zero tensor) and ConstantPadNdBackward0 (the
        // mask's gradient) after ExpandBackward0 (truth traces of T5 at 100 tokens). Autocast
        // casts the mask before the pad.
        let aligned = kv_len.div_ceil(MEM_EFF_MASK_ALIGNMENT) * MEM_EFF_MASK_ALIGNMENT;
        let mask_shape = b.shape(mask).to_vec();
        let mut padded_shape = mask_shape.clone();
        padded_shape[3] = aligned;
        let pad = Aten::view("constant_pad_nd", padded_shape)
            .autocast(Autocast::LowerPrecision)
            .grads(vec![GradIn::New]);
        mask = b.op(pad, &[mask]);
        mask = b.op(
            Aten::view("slice", mask_shape).grads(vec![GradIn::New]),
            &[mask],
        );
    }
    let m = b.op(expand, &[mask]);
    b.op(
        ScaledDotProductAttentionBias {
            dropout_p: s.dropout,
            mask_batch,
            mask_heads: hn,
            kv_contiguous,
        },
        &[qkv[0], qkv[1], qkv[2], m],
    )
}

/// `_scaled_dot_product_attention_math` on `[B, H, L, D]` q, k, v with the bias as its float
/// mask (truth traces of T5's first decode step, and of one-token targets in training and
/// inference), its ops recorded by autograd where it records: autocast casts the mask to the
/// lower precision; half q, k, v are copied to float32 (`query_acc`, ...); `q * sqrt(scale)`
/// and `k^T * sqrt(scale)`; `bmm`; `+ mask` (out of place under FakeTensor, as in the truth
/// traces; in place on a real GPU: `[B, H, L, S]` float32 less); `_safe_softmax`; dropout; then
/// `make_tuple(matmul(attn, value_acc).to(origin), attn.to(origin))`, its arguments evaluated
/// right to left. The locals go when it returns, last declared first.
fn math_attention(
    b: &mut GraphBuilder,
    s: &Spec,
    [q, k, v]: [TensorId; 3],
    bias: TensorId,
) -> TensorId {
    // half inputs are computed in float32 (`query_acc`, ...), and both results cast back: the
    // weights first (the tuple's arguments are evaluated right to left). Under autocast SDPA's
    // inputs come in the autocast dtype (the float32 bias cast by autocast), and the math path
    // runs with autocast off: its products are plain bmm's in float32
    let autocast = s.precision.autocast_dtype();
    let origin = s.precision.compute_dtype();
    let half = origin != DType::F32;
    let bias = match autocast {
        Some(low) => to_dtype(b, bias, low),
        None => bias,
    };
    let [q, k, v] = [q, k, v].map(|t| if half { to_dtype(b, t, DType::F32) } else { t });
    let bmm = |b: &mut GraphBuilder, x: TensorId, y: TensorId| {
        if autocast.is_none() {
            return b.op(MatMul, &[x, y]);
        }
        let mut shape = b.shape(x).to_vec();
        shape[3] = b.shape(y)[3];
        // BmmBackward0 releases mat2 before self (truth traces)
        let op = Aten::new("bmm", shape)
            .saves(vec![Saved::Input(1), Saved::Input(0)])
            .grads(vec![GradIn::New, GradIn::New])
            .right_to_left();
        b.op(op, &[x, y])
    };
    let ks = b.shape(k).to_vec();
    let kt = view(b, "transpose", k, vec![ks[0], ks[1], ks[3], ks[2]]);
    let scaled_q = mul_scalar(b, q);
    let scaled_k = mul_scalar(b, kt);
    let scores = bmm(b, scaled_q, scaled_k);
    let scores = if half {
        // the half bias's gradient: AddBackward0 hands it the float32 gradient as is, which
        // validate_outputs sums to `[1, H, 1, 1]`, then casts
        let shape = b.shape(scores).to_vec();
        let add = Aten::new("add", shape).grads(vec![GradIn::PassThrough(0), GradIn::Reduced(0)]);
        b.op(add, &[scores, bias])
    } else {
        add(b, scores, bias)
    };
    let probs = b.op(Softmax { dim: 3 }, &[scores]);
    let probs = dropout_fn(b, s.dropout, probs);
    // the locals (the scaled query, `attn`; the float32 copies and the cast weights) go when
    // the function returns, in [`math_attention`]'s order
    if !half {
        let out = b.op(MatMul, &[probs, v]);
        b.hold(&[scaled_q, probs]);
        return out;
    }
    let weights = to_dtype(b, probs, origin);
    let out = bmm(b, probs, v);
    let out = to_dtype(b, out, origin);
    b.hold(&[probs, scaled_q, v, k, q, weights, bias]);
    out
}

/// `T5LayerNorm`: `variance = x.to(float32).pow(2).mean(-1, keepdim=True)`,
/// `x * rsqrt(variance + eps)` (float32), `.to(weight.dtype)` for a half weight, `weight * x`.
fn t5_layer_norm(b: &mut GraphBuilder, s: &Spec, name: &str, x: TensorId) -> TensorId {
    let d = s.d_model;
    b.module(name, &s.class("LayerNorm"), &[x], |b| {
        let w = b.parameter("weight", vec![d]);
        // the stream is in the parameters' dtype (float32 under autocast)
        let xf = cast(b, x, s.hidden_dtype(), DType::F32);
        // variance is a local until forward returns
        let r = rms_rsqrt(b, xf, true);
        // hidden_states * rsqrt: the input (not its float32 copy) times float32; MulBackward0
        // makes rsqrt's full-size gradient first (summed to [.., 1]), then the input's
        let h = mul(b, x, r);
        let h = cast(b, h, DType::F32, s.precision.param_dtype());
        // weight * hidden_states: h's gradient first, then the weight's full-size one summed
        mul(b, w, h)
    })
}

/// `T5LayerFF`: `layer_norm`, `DenseReluDense`, dropout, residual add.
fn feed_forward(b: &mut GraphBuilder, s: &Spec, h: TensorId) -> TensorId {
    let normed = t5_layer_norm(b, s, "layer_norm", h);
    let dense = if s.gated {
        s.class("DenseGatedActDense")
    } else {
        s.class("DenseActDense")
    };
    let f = b.module("DenseReluDense", &dense, &[normed], |b| {
        dense_act_dense(b, s, normed)
    });
    // forwarded_states is a local until the layer returns
    b.hold(&[f]);
    let d = dropout(b, "dropout", s.dropout, f);
    add(b, h, d)
}

/// `T5DenseActDense` (`wi`, act, dropout, `wo`) or `T5DenseGatedActDense` (`act(wi_0(x)) *
/// wi_1(x)`, dropout, `wo`); the input of `wo` is cast to wo's dtype when it differs (under
/// autocast a bf16 activation goes back to float32 before wo casts it down again).
fn dense_act_dense(b: &mut GraphBuilder, s: &Spec, x: TensorId) -> TensorId {
    let (d, ff) = (s.d_model, s.d_ff);
    let h = if s.gated {
        let g = linear(b, "wi_0", d, ff, false, x);
        let g = s.act.module(b, "act", g);
        let l = linear(b, "wi_1", d, ff, false, x);
        // hidden_gelu and hidden_linear are locals until forward returns
        b.hold(&[g, l]);
        mul(b, g, l)
    } else {
        let h = linear(b, "wi", d, ff, false, x);
        s.act.module(b, "act", h)
    };
    let h = dropout(b, "dropout", s.dropout, h);
    // under autocast the activation is half unless a float32 `pow` (gelu_new's) promoted it
    let amp = s.precision.autocast_dtype().is_some();
    let h = if amp && !s.act.float32_under_autocast() {
        to_dtype(b, h, DType::F32)
    } else {
        h
    };
    linear(b, "wo", ff, d, false, h)
}
