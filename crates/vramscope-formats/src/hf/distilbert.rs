//! DistilBERT (transformers/models/distilbert/modeling_distilbert.py) with its masked-LM and
//! sequence-classification heads: embeddings (word + position from a buffer slice, LayerNorm,
//! dropout), post-norm `TransformerBlock`s (`attention` q_lin/k_lin/v_lin + SDPA without mask +
//! out_lin, `sa_layer_norm(attn + x)`, `ffn` lin1 + activation + lin2 + dropout,
//! `output_layer_norm(ffn + attn)`), then `vocab_transform` + activation + `vocab_layer_norm` +
//! `vocab_projector` (weight tied to the word embeddings) or `pre_classifier` + ReLU + dropout +
//! `classifier` on the first token, or the per-token heads of `encoder_heads.rs` (dropout first). With `attn_implementation="eager"` the attention runs
//! `eager_attention_forward` without a mask (`layers::eager_attention_core`) and each block keeps
//! its attention weights until it returns.

use vramscope_core::ir::Task;
use vramscope_core::ops::{ActivationKind, Select};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{self, HfActivation};
use super::bert::{encoder_eager, num_labels};
use super::layers::{
    activation_fn, add, dropout, embedding, encoder_padded_mask, encoder_self_attention,
    layer_norm, linear, padding_input, tied_head_bias, view, Eager,
};
use super::{build_error, encoder_heads, AttnImplementation, HfConfig, HfError, HfInput, HfTask};

struct Spec {
    vocab: u64,
    dim: u64,
    layers: u64,
    heads: u64,
    hidden_dim: u64,
    max_positions: u64,
    dropout: f64,
    attn_dropout: f64,
    classif_dropout: f64,
    /// `qa_dropout`: `DistilBertForQuestionAnswering`'s dropout before `qa_outputs`.
    qa_dropout: f64,
    act: HfActivation,
    num_labels: u64,
    /// `tie_word_embeddings` (true unless the config says otherwise): `vocab_projector`'s weight
    /// is the word embeddings'.
    tied: bool,
    /// `attn_implementation="eager"` (`None`: SDPA).
    eager: Option<Eager>,
}

fn spec(cfg: &HfConfig, input: &HfInput) -> Result<Spec, HfError> {
    let dim = cfg.aliased_u64("dim", "hidden_size")?;
    let heads = cfg.aliased_u64("n_heads", "num_attention_heads")?;
    if dim % heads != 0 {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "n_heads".into(),
            expected: format!("a divisor of dim = {dim}"),
        });
    }
    let act = activation::from_config(cfg, "activation", "gelu")?;
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        dim,
        layers: cfg.aliased_layers("n_layers", "num_hidden_layers")?,
        heads,
        hidden_dim: cfg.u64(&["hidden_dim"])?,
        max_positions: cfg.u64(&["max_position_embeddings"])?,
        dropout: cfg.prob_or("dropout", 0.1)?,
        attn_dropout: cfg.prob_or("attention_dropout", 0.1)?,
        classif_dropout: cfg.prob_or("seq_classif_dropout", 0.2)?,
        qa_dropout: cfg.prob_or("qa_dropout", 0.1)?,
        act,
        num_labels: num_labels(cfg)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
        eager: encoder_eager(input),
    })
}

/// Builds `DistilBertFor{MaskedLM,SequenceClassification,TokenClassification,QuestionAnswering}`
/// or the bare `DistilBertModel`.
pub fn build(
    cfg: &HfConfig,
    task: HfTask,
    input: &HfInput,
) -> Result<(Graph, Vec<String>), HfError> {
    let s = spec(cfg, input)?;
    if input.seq > s.max_positions {
        return Err(HfError::BadInput(format!(
            "{}: --seq-len {} exceeds max_position_embeddings = {}",
            cfg.path, input.seq, s.max_positions
        )));
    }
    let (bsz, seq) = (input.batch, input.seq);
    let head = match task {
        HfTask::SeqCls => "DistilBertForSequenceClassification",
        HfTask::TokenCls => "DistilBertForTokenClassification",
        HfTask::QuestionAnswering => "DistilBertForQuestionAnswering",
        HfTask::FeatureExtraction => "DistilBertModel",
        _ => "DistilBertForMaskedLM",
    };
    // `DistilBertModel` itself (`AutoModel`): no head, the encoder at the root of the names
    let bare = task == HfTask::FeatureExtraction;
    if task == HfTask::QuestionAnswering {
        encoder_heads::check_question_answering_labels(cfg, s.num_labels)?;
    }
    let mut b = GraphBuilder::new("distilbert", head);
    let ids = b.input(vec![bsz, seq], DType::I64);
    let padding = padding_input(&mut b, input);
    let positions = (task == HfTask::QuestionAnswering)
        .then(|| encoder_heads::question_answering_inputs(&mut b, bsz));
    let encoder = |b: &mut GraphBuilder| {
        let (x, word) = b.module("embeddings", "Embeddings", &[ids], |b| {
            let init_order = b.param_mark();
            let pos_buf = b.buffer("position_ids", vec![s.max_positions], Some(DType::I64));
            let (w, word) = embedding(b, "word_embeddings", s.vocab, s.dim, ids);
            let pos = view(b, "slice", pos_buf, vec![1, seq]);
            let (p, _) = embedding(b, "position_embeddings", s.max_positions, s.dim, pos);
            let x = add(b, w, p);
            b.hold(&[w, p]);
            let x = layer_norm(b, "LayerNorm", s.dim, x);
            // `__init__` registers `position_ids` after its children (truth traces)
            b.order_params(
                init_order,
                &["word_embeddings", "position_embeddings", "LayerNorm"],
            );
            (dropout(b, "dropout", s.dropout, x), word)
        });
        let mut x = x;
        // a padded batch's mask, handed to every block
        let mask = encoder_padded_mask(
            b,
            (bsz, seq),
            padding,
            input.precision,
            input.attn == AttnImplementation::Eager,
        );
        b.module("transformer", "Transformer", &[x], |b| {
            b.module("layer", "ModuleList", &[], |b| {
                for i in 0..s.layers {
                    let args: Vec<TensorId> = std::iter::once(x).chain(mask.map(|m| m.0)).collect();
                    x = b.module(&i.to_string(), "TransformerBlock", &args, |b| {
                        block(b, &s, x, mask)
                    });
                }
            });
        });
        // `post_init()` at the end of `DistilBertModel.__init__`: `_init_weights` copies a fresh
        // `arange(max_position_embeddings)` into `position_ids`
        b.temporary_at_init(vec![s.max_positions], DType::I64);
        (x, word)
    };
    let layer_prefix = if bare { "" } else { "distilbert." };
    let layers = (0..s.layers)
        .map(|i| format!("{layer_prefix}transformer.layer.{i}"))
        .collect();
    if bare {
        // BaseModelOutput(last_hidden_state)
        let (h, _) = encoder(&mut b);
        let graph = b.finish(&[h], Task::Features).map_err(build_error(cfg))?;
        return Ok((graph, layers));
    }
    let (h, word) = b.module("distilbert", "DistilBertModel", &[ids], encoder);
    let (outputs, task_ir) = b.frame(|b| {
        b.hold(&[h]);
        if let Some(positions) = positions {
            // `self.dropout(hidden_states)` (qa_dropout), then qa_outputs; both locals
            let x = dropout(b, "dropout", s.qa_dropout, h);
            b.hold(&[x]);
            let outputs = encoder_heads::question_answering(b, s.dim, x, positions);
            return (outputs, Task::LossInForward);
        }
        let (logits, task_ir) = if task == HfTask::TokenCls {
            encoder_heads::token_classification(b, s.dropout, s.dim, s.num_labels, h)
        } else if task == HfTask::SeqCls {
            let first = b.op(Select { dim: 1 }, &[h]);
            let p = linear(b, "pre_classifier", s.dim, s.dim, true, first);
            let p = activation_fn(b, ActivationKind::ReLU, p);
            let p = dropout(b, "dropout", s.classif_dropout, p);
            let l = linear(b, "classifier", s.dim, s.num_labels, true, p);
            (
                l,
                Task::Classification {
                    num_classes: s.num_labels,
                },
            )
        } else {
            let t = linear(b, "vocab_transform", s.dim, s.dim, true, h);
            let t = s.act.module(b, "activation", t);
            let t = layer_norm(b, "vocab_layer_norm", s.dim, t);
            let l = if s.tied {
                let (l, bias) = tied_head_bias(b, "vocab_projector", word, None, t);
                // post_init drops the projector's own weight and pads its bias into a new tensor
                b.tie_at_init(&[vec![s.vocab, s.dim], vec![s.vocab]], 1, Some(bias));
                l
            } else {
                linear(b, "vocab_projector", s.dim, s.vocab, true, t)
            };
            (l, Task::MaskedLm { vocab: s.vocab })
        };
        (vec![logits], task_ir)
    });
    let graph = b.finish(&outputs, task_ir).map_err(build_error(cfg))?;
    Ok((graph, layers))
}

fn block(b: &mut GraphBuilder, s: &Spec, x: TensorId, mask: Option<(TensorId, DType)>) -> TensorId {
    let e = s.dim;
    let (a, weights) = b.module("attention", "DistilBertSelfAttention", &[x], |b| {
        let (o, weights) = encoder_self_attention(
            b,
            x,
            ["q_lin", "k_lin", "v_lin"],
            (e, s.heads, s.attn_dropout),
            s.eager,
            mask,
        );
        (linear(b, "out_lin", e, e, true, o), weights)
    });
    // eager attention's weights: `attention_output, _ = self.attention(...)` keeps them until
    // the block returns
    b.hold(&weights.into_iter().collect::<Vec<_>>());
    // `attention_output` is rebound only after the LayerNorm returns
    let a = b.frame(|b| {
        b.hold(&[a]);
        let sum = add(b, a, x);
        layer_norm(b, "sa_layer_norm", e, sum)
    });
    // the new `attention_output` is a local until the block returns
    b.hold(&[a]);
    let f = b.module("ffn", "FFN", &[a], |b| {
        let h = linear(b, "lin1", e, s.hidden_dim, true, a);
        let h = s.act.module(b, "activation", h);
        let h = linear(b, "lin2", s.hidden_dim, e, true, h);
        dropout(b, "dropout", s.dropout, h)
    });
    b.frame(|b| {
        b.hold(&[f]);
        let sum = add(b, f, a);
        layer_norm(b, "output_layer_norm", e, sum)
    })
}
