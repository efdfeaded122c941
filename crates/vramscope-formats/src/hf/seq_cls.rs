//! The heads of the decoder-only families besides `lm_head`. The sequence-classification head
//! (`GPT2ForSequenceClassification`, `OPTForSequenceClassification` and transformers'
//! `GenericForSequenceClassification`, which Llama, Mistral, Qwen2/3, Phi-3, Gemma 1/2/3, Mixtral
//! and Qwen2/3-MoE share): `score`, a Linear without bias, on every position, then the logits of
//! each row's last token that is not padding (truth traces, `fixtures/truth/hf_seq_cls.jsonl`).
//! Reward models and LoRA classifiers are trained this way. The per-token heads
//! (`GenericForTokenClassification` / `GenericForQuestionAnswering`, GPT-2's and OPT's own) on
//! the last hidden state of a base model that fills the config's cache
//! (`fixtures/truth/hf_decoder_heads.jsonl`).

use vramscope_core::ir::Task;
use vramscope_core::ops::Select;
use vramscope_core::{DType, GraphBuilder, TensorId};

use super::layers::{advanced_index, dropout, int_op, linear, tied_head, Call, KvCache};
use super::{encoder_heads, HfConfig, HfError, HfInput};

/// The head a decoder-only model is built with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecoderHead {
    /// `{X}ForCausalLM` (`GPT2LMHeadModel`): `lm_head` over the vocabulary.
    Lm,
    /// `{X}ForSequenceClassification`.
    SequenceClassification(SeqCls),
    /// The bare `{X}Model` (`AutoModel`): the final norm's hidden states, for inference (the Llama
    /// family; embedding checkpoints such as e5-mistral).
    Bare,
    /// `{X}ForTokenClassification` (transformers' `GenericForTokenClassification`): dropout, then
    /// `score` (with a bias) on every position, trained on `model.loss_function(logits, labels)`.
    TokenClassification(TokenCls),
    /// `{X}ForQuestionAnswering` (`GenericForQuestionAnswering`): `qa_outputs` on every
    /// position, the start / end loss computed by the forward; `base` is the attribute holding
    /// the model (`transformer` for Llama, Qwen2, Qwen3 and Qwen3-MoE, kept from older versions;
    /// `model` for the others).
    QuestionAnswering {
        /// The base model's attribute name.
        base: &'static str,
    },
}

/// What `{X}ForTokenClassification`'s head depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenCls {
    /// `num_labels` (`score` is `[num_labels, hidden]`).
    pub num_labels: u64,
    /// The dropout before `score`: `classifier_dropout`, else `hidden_dropout`, else 0.1.
    pub dropout: f64,
}

impl TokenCls {
    /// The head a config describes.
    pub fn of(cfg: &HfConfig) -> Result<TokenCls, HfError> {
        let fallback = cfg.prob_or("hidden_dropout", 0.1)?;
        Ok(TokenCls {
            num_labels: super::bert::num_labels(cfg)?,
            dropout: cfg.prob_or("classifier_dropout", fallback)?,
        })
    }
}

impl DecoderHead {
    /// The model class: `{prefix}ForCausalLM`, `{prefix}ForSequenceClassification`, ...
    pub fn class(self, prefix: &str) -> String {
        match self {
            DecoderHead::Lm => format!("{prefix}ForCausalLM"),
            DecoderHead::SequenceClassification(_) => {
                format!("{prefix}ForSequenceClassification")
            }
            DecoderHead::Bare => format!("{prefix}Model"),
            DecoderHead::TokenClassification(_) => format!("{prefix}ForTokenClassification"),
            DecoderHead::QuestionAnswering { .. } => format!("{prefix}ForQuestionAnswering"),
        }
    }

    /// Whether it is a per-token head ([`per_token_head`]).
    pub fn per_token(self) -> bool {
        matches!(
            self,
            DecoderHead::TokenClassification(_) | DecoderHead::QuestionAnswering { .. }
        )
    }

    /// Whether the base model under this head fills the cache the config's `use_cache` (true by
    /// default) asks for: the bare model returns it with the hidden states, and the per-token
    /// heads call their model without `use_cache` (gradient checkpointing turns it off); the
    /// causal LM and the sequence classifier are built with use_cache=False.
    pub fn fills_cache(self, cfg: &HfConfig, input: &HfInput) -> Result<bool, HfError> {
        let asked =
            self == DecoderHead::Bare || (self.per_token() && !input.gradient_checkpointing);
        Ok(asked && cfg.bool_or("use_cache", true)?)
    }

    /// The attribute (and module path) holding the base model under the head.
    pub fn base(self) -> &'static str {
        match self {
            DecoderHead::QuestionAnswering { base } => base,
            _ => "model",
        }
    }

    /// What the output is trained against: the next tokens, or one label per sequence.
    pub fn task(self, vocab: u64) -> Task {
        match self {
            DecoderHead::Lm => Task::CausalLm { vocab },
            DecoderHead::SequenceClassification(c) => Task::Classification {
                num_classes: c.num_labels,
            },
            DecoderHead::Bare => Task::Features,
            // the loss `model.loss_function` computes outside the forward: a cross-entropy over
            // every position's `num_labels` logits, as the masked LM's over its vocabulary
            DecoderHead::TokenClassification(t) => Task::MaskedLm {
                vocab: t.num_labels,
            },
            DecoderHead::QuestionAnswering { .. } => Task::LossInForward,
        }
    }
}

/// What `{X}ForSequenceClassification`'s head depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqCls {
    /// `num_labels` (`score` is `[num_labels, hidden]`).
    pub num_labels: u64,
    /// Whether the forward looks for the last non-padding token (`pad_token_id` set); without one
    /// it reads the last position (`logits[arange(B), -1]`).
    pub pad_token: bool,
}

impl SeqCls {
    /// Reads `num_labels` (or `id2label`); `has_pad_token` is
    /// [`config_has_pad_token`](Self::config_has_pad_token). Without a pad token transformers
    /// refuses a batch of more than one; a trainer sets it (to the EOS token, as
    /// `../shared/truth` does), so a batch of more than one is built as with one: the memory does
    /// not depend on its value.
    pub fn of(cfg: &HfConfig, has_pad_token: bool, batch: u64) -> Result<SeqCls, HfError> {
        Ok(SeqCls {
            num_labels: super::bert::num_labels(cfg)?,
            pad_token: has_pad_token || batch > 1,
        })
    }

    /// Whether the model's config has a `pad_token_id`: the file's, else `pad_token_default`,
    /// what the family's config class sets when config.json leaves it out (OPT 1, Gemma 0,
    /// Phi-3 32000, the others none).
    pub fn config_has_pad_token(cfg: &HfConfig, pad_token_default: bool) -> Result<bool, HfError> {
        Ok(if cfg.is_null("pad_token_id") {
            false
        } else if cfg.token_ids("pad_token_id")? > 0 {
            true
        } else {
            pad_token_default
        })
    }
}

/// The head on the last hidden state `h` (`[B, S, hidden]`) of a forward on `ids` (`[B, S]`),
/// inside the model class's forward: `logits = score(h)`; with a pad token `non_pad_mask =
/// (ids != pad).to(int32)`, `token_indices = arange(S, int32)`, `last = (token_indices *
/// non_pad_mask).argmax(-1)`, else `last = -1` (a `select`); then `logits[arange(B), last]`,
/// whose backward scatters into zeros of the indexed tensor's shape. `h` (`hidden_states`, also
/// held by the base model's output), `logits`, the mask and the indices are locals until the
/// forward returns, in that order (truth traces of a padded Qwen2 classifier, whose forward
/// peaks during the pooling). Returns the pooled logits `[B, num_labels]`.
pub fn sequence_classification(
    b: &mut GraphBuilder,
    head: SeqCls,
    hidden: u64,
    ids: TensorId,
    h: TensorId,
) -> TensorId {
    let (bsz, seq) = (b.shape(ids)[0], b.shape(ids)[1]);
    let labels = head.num_labels;
    b.frame(|b| {
        let logits = linear(b, "score", hidden, labels, false, h);
        if head.pad_token {
            let ne = int_op(b, "ne", vec![bsz, seq], DType::Bool, &[ids]);
            let mask = int_op(b, "_to_copy", vec![bsz, seq], DType::I32, &[ne]);
            let positions = int_op(b, "arange", vec![seq], DType::I32, &[]);
            let masked = int_op(b, "mul", vec![bsz, seq], DType::I32, &[positions, mask]);
            let last = int_op(b, "argmax", vec![bsz], DType::I64, &[masked]);
            let rows = int_op(b, "arange", vec![bsz], DType::I64, &[]);
            b.hold(&[h, logits, mask, positions, last]);
            b.op(
                advanced_index(vec![bsz, labels], vec![bsz, seq, labels], 2),
                &[logits, rows, last],
            )
        } else {
            let at_last = b.op(Select { dim: 1 }, &[logits]);
            let rows = int_op(b, "arange", vec![bsz], DType::I64, &[]);
            b.hold(&[h, logits]);
            b.op(
                advanced_index(vec![bsz, labels], vec![bsz, labels], 1),
                &[at_last, rows],
            )
        }
    })
}

/// A per-token head on a decoder's last hidden state `h`, built by the caller after its base
/// model: the base model's output (`h` and the `cache` it filled, if any) is a local of the
/// forward until it returns, the first to go (the cache from its last layer, as CPython drops a
/// list); then `{X}ForTokenClassification`'s dropout and `classifier` (`score` for transformers'
/// generic class, `classifier` for GPT-2's own), whose input `sequence_output` is freed after
/// it, or `{X}ForQuestionAnswering`'s `qa_outputs` and loss on `qa_positions`. Returns the
/// forward's outputs.
fn per_token_head(
    b: &mut GraphBuilder,
    (head, classifier): (DecoderHead, &str),
    hidden: u64,
    h: TensorId,
    cache: Option<&KvCache>,
    qa_positions: Option<[TensorId; 2]>,
) -> Vec<TensorId> {
    let kv: Vec<TensorId> = cache
        .iter()
        .flat_map(|c| c.tensors_in_drop_order())
        .collect();
    b.frame(|b| {
        b.hold(&[h]);
        b.hold(&kv);
        match (head, qa_positions) {
            (DecoderHead::TokenClassification(t), _) => {
                let x = dropout(b, "dropout", t.dropout, h);
                b.hold(&[x]);
                vec![linear(b, classifier, hidden, t.num_labels, true, x)]
            }
            (DecoderHead::QuestionAnswering { .. }, Some(positions)) => {
                encoder_heads::question_answering(b, hidden, h, positions)
            }
            // not a per-token head, or no positions made for it
            _ => vec![h],
        }
    })
}

/// The base model `{X}Model` that `model` records: the class's attribute `attr` (`transformer`,
/// `model`), or, for the bare model, the class itself at the root of the names.
pub(super) fn base_model<R>(
    b: &mut GraphBuilder,
    bare: bool,
    (attr, class): (&str, &str),
    ids: TensorId,
    model: impl FnOnce(&mut GraphBuilder) -> R,
) -> R {
    if bare {
        model(b)
    } else {
        b.module(attr, class, &[ids], model)
    }
}

/// What a decoder's class puts on its base model's last hidden state `h` (`hidden` wide, from
/// `ids`; `emb` the token embedding): the sequence classifier's pooled logits; `h` itself for
/// the bare model and the per-token heads (the caller builds those after the base model's
/// construction temporaries); else `lm_head` on the positions whose logits are kept, tied to
/// `emb` when `tied` (`post_init` then drops the head's own weight).
pub(super) fn decoder_head(
    b: &mut GraphBuilder,
    call: &Call,
    (hidden, vocab, tied): (u64, u64, bool),
    ids: TensorId,
    (h, emb): (TensorId, TensorId),
) -> TensorId {
    match call.head {
        DecoderHead::SequenceClassification(c) => {
            return sequence_classification(b, c, hidden, ids, h);
        }
        head if head == DecoderHead::Bare || head.per_token() => return h,
        _ => {}
    }
    let h = call.head_input(b, h);
    if !tied {
        return linear(b, "lm_head", hidden, vocab, false, h);
    }
    if call.first {
        b.tie_at_init(&[vec![vocab, hidden]], 1, None);
    }
    tied_head(b, "lm_head", emb, h)
}

/// The forward's outputs of a decoder whose base model returned `out` (its last hidden state
/// first) after filling `cache`: a per-token head's ([`per_token_head`], its `classifier` on
/// `hidden` features), the bare model's last hidden state and the cache it returns, or the other
/// heads' `out` itself.
pub(super) fn decoder_outputs(
    b: &mut GraphBuilder,
    (head, classifier): (DecoderHead, &str),
    hidden: u64,
    out: Vec<TensorId>,
    cache: Option<&KvCache>,
    qa_positions: Option<[TensorId; 2]>,
) -> Vec<TensorId> {
    match head {
        head if head.per_token() => {
            per_token_head(b, (head, classifier), hidden, out[0], cache, qa_positions)
        }
        DecoderHead::Bare => out
            .into_iter()
            .chain(cache.into_iter().flat_map(KvCache::tensors))
            .collect(),
        _ => out,
    }
}

/// The `start_positions` / `end_positions` inputs a question-answering head reads, made after
/// `input_ids` (`None` for the other heads).
pub(super) fn qa_inputs(
    b: &mut GraphBuilder,
    head: DecoderHead,
    batch: u64,
) -> Option<[TensorId; 2]> {
    matches!(head, DecoderHead::QuestionAnswering { .. })
        .then(|| encoder_heads::question_answering_inputs(b, batch))
}
