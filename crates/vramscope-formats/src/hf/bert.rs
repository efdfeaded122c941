//! BERT and RoBERTa encoders (transformers/models/{bert,roberta}/modeling_*.py; XLM-RoBERTa and
//! CamemBERT are RoBERTa's modules under their own class names) with their
//! masked-LM and sequence-classification heads: embeddings (word + token type + position,
//! LayerNorm, dropout; RoBERTa computes its position ids from the input ids, BERT slices a
//! buffer), post-norm encoder layers (`attention.self` q/k/v + SDPA without mask,
//! `attention.output` dense + dropout + LayerNorm(h + input), `intermediate` dense + activation,
//! `output` dense + dropout + LayerNorm(h + input)), and the heads: `cls.predictions` /
//! `lm_head` (dense, GELU, LayerNorm, decoder tied to the word embeddings with its own bias), BERT's
//! pooler + dropout + `classifier`, RoBERTa's `classifier` (dense + tanh + out_proj on the first
//! token), and the per-token heads of `encoder_heads.rs`. With `attn_implementation="eager"` the self-attention runs `eager_attention_forward`
//! without a mask (`layers::eager_attention_core`) and each layer keeps its attention weights
//! (`self_attention_output, _ = self.attention(...)`) until it returns.

use vramscope_core::builder::BUFFERS;
use vramscope_core::ir::Task;
use vramscope_core::ops::{ActivationKind, Aten, DTypeRule, Select};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::{self, HfActivation};
use super::layers::{
    activation, activation_fn, add, dropout, embedding, encoder_padded_mask,
    encoder_self_attention, layer_norm, linear, padding_input, tied_head_bias, view, Eager,
    EagerFlavor,
};
use super::{build_error, encoder_heads, AttnImplementation, HfConfig, HfError, HfInput, HfTask};

/// Which encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `bert`
    Bert,
    /// `roberta`, and the encoders transformers copies from it under other class names
    /// ([`ROBERTAS`]): the same modules and forward, named `{class}Embeddings`, `{class}Layer`,
    /// ... under the same `roberta.` prefix.
    Roberta {
        /// The `model_type`.
        model_type: &'static str,
        /// The class-name prefix (`XLMRoberta`).
        class: &'static str,
        /// Whether the heads' `__init__` creates the head before the encoder (`self.lm_head` /
        /// `self.classifier` / `self.qa_outputs`, then `self.roberta`), so that `parameters()`
        /// and the construction start with the head.
        head_first: bool,
    },
}

/// RoBERTa and its copies: `model_type`, class-name prefix, head created first (transformers
/// 5's XLM-RoBERTa and CamemBERT classes; XLM-RoBERTa is also BGE-M3's and multilingual-e5's).
const ROBERTAS: &[(&str, &str, bool)] = &[
    ("roberta", "Roberta", false),
    ("xlm-roberta", "XLMRoberta", true),
    ("camembert", "Camembert", true),
];

impl Flavor {
    /// The flavor of a `model_type` this module builds.
    pub fn of(model_type: &str) -> Option<Flavor> {
        if model_type == "bert" {
            return Some(Flavor::Bert);
        }
        ROBERTAS
            .iter()
            .find(|r| r.0 == model_type)
            .map(|&(model_type, class, head_first)| Flavor::Roberta {
                model_type,
                class,
                head_first,
            })
    }

    fn head_first(self) -> bool {
        matches!(
            self,
            Flavor::Roberta {
                head_first: true,
                ..
            }
        )
    }

    /// The `model_type` of the flavor (the graph's name).
    fn model_type(self) -> &'static str {
        match self {
            Flavor::Bert => "bert",
            Flavor::Roberta { model_type, .. } => model_type,
        }
    }
}

struct Spec {
    vocab: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    intermediate: u64,
    max_positions: u64,
    type_vocab: u64,
    pad: u64,
    hidden_dropout: f64,
    attn_dropout: f64,
    classifier_dropout: f64,
    act: HfActivation,
    num_labels: u64,
    /// `tie_word_embeddings` (true unless the config says otherwise): the MLM decoder's weight is
    /// the word embeddings' and its bias the head's `bias`.
    tied: bool,
    /// `attn_implementation="eager"`: the attention `eager_attention_forward` runs (`None`: SDPA).
    eager: Option<Eager>,
}

/// The encoders' `eager_attention_forward` for an input's precision, when it asks for eager
/// attention.
pub(super) fn encoder_eager(input: &HfInput) -> Option<Eager> {
    (input.attn == AttnImplementation::Eager).then(|| Eager {
        flavor: EagerFlavor::Encoder,
        dtype: input.precision.param_dtype(),
        autocast: input.precision.autocast_dtype(),
    })
}

/// `num_labels` of a config (or the size of `id2label`), default 2.
pub fn num_labels(cfg: &HfConfig) -> Result<u64, HfError> {
    if let Some(n) = cfg.opt_u64(&["num_labels"])? {
        return Ok(n.max(1));
    }
    Ok(cfg.map_len("id2label")?.filter(|&n| n > 0).unwrap_or(2))
}

fn spec(cfg: &HfConfig, input: &HfInput) -> Result<Spec, HfError> {
    cfg.refuse_cross_attention()?;
    let hidden = cfg.u64(&["hidden_size"])?;
    let heads = cfg.u64(&["num_attention_heads"])?;
    if hidden % heads != 0 {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "num_attention_heads".into(),
            expected: format!("a divisor of hidden_size = {hidden}"),
        });
    }
    let act = activation::from_config(cfg, "hidden_act", "gelu")?;
    let hidden_dropout = cfg.prob_or("hidden_dropout_prob", 0.1)?;
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        hidden,
        layers: cfg.layers(&["num_hidden_layers"])?,
        heads,
        intermediate: cfg.u64(&["intermediate_size"])?,
        max_positions: cfg.u64(&["max_position_embeddings"])?,
        type_vocab: cfg.opt_u64(&["type_vocab_size"])?.unwrap_or(2),
        pad: cfg.opt_u64(&["pad_token_id"])?.unwrap_or(0),
        hidden_dropout,
        attn_dropout: cfg.prob_or("attention_probs_dropout_prob", 0.1)?,
        classifier_dropout: cfg.prob_or("classifier_dropout", hidden_dropout)?,
        act,
        num_labels: num_labels(cfg)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
        eager: encoder_eager(input),
    })
}

/// Builds `{Bert,Roberta}For{MaskedLM,SequenceClassification,TokenClassification,QuestionAnswering}`
/// or the bare `{Bert,Roberta}Model`.
pub fn build(
    cfg: &HfConfig,
    flavor: Flavor,
    task: HfTask,
    input: &HfInput,
) -> Result<(Graph, Vec<String>), HfError> {
    let s = spec(cfg, input)?;
    if matches!(flavor, Flavor::Roberta { .. }) && cfg.is_null("pad_token_id") {
        // `create_position_ids_from_input_ids(input_ids, padding_idx)` compares the ids with it
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "pad_token_id".into(),
            expected: "a token id, not null: RoBERTa-family embeddings number the positions from \
                       it, and transformers' forward fails without one"
                .into(),
        });
    }
    // RoBERTa numbers positions from padding_idx + 1
    let limit = match flavor {
        Flavor::Bert => s.max_positions,
        Flavor::Roberta { .. } => s.max_positions.saturating_sub(s.pad + 1),
    };
    if input.seq > limit {
        return Err(HfError::BadInput(format!(
            "{}: --seq-len {} exceeds the {limit} positions of max_position_embeddings = {}",
            cfg.path, input.seq, s.max_positions
        )));
    }
    let (prefix, base) = match flavor {
        Flavor::Bert => ("Bert", "bert"),
        Flavor::Roberta { class, .. } => (class, "roberta"),
    };
    let head = match task {
        HfTask::SeqCls => "ForSequenceClassification",
        HfTask::TokenCls => "ForTokenClassification",
        HfTask::QuestionAnswering => "ForQuestionAnswering",
        HfTask::FeatureExtraction => "Model",
        _ => "ForMaskedLM",
    };
    // `{prefix}Model` itself (`AutoModel`): no head, the encoder at the root of the names, and
    // its pooler (`add_pooling_layer=True`)
    let bare = task == HfTask::FeatureExtraction;
    if task == HfTask::QuestionAnswering {
        encoder_heads::check_question_answering_labels(cfg, s.num_labels)?;
    }
    let (bsz, seq) = (input.batch, input.seq);
    let mut b = GraphBuilder::new(flavor.model_type(), &format!("{prefix}{head}"));
    let top = b.param_mark();
    let ids = b.input(vec![bsz, seq], DType::I64);
    let padding = padding_input(&mut b, input);
    let positions = (task == HfTask::QuestionAnswering)
        .then(|| encoder_heads::question_answering_inputs(&mut b, bsz));
    let pooler = bare || (flavor == Flavor::Bert && task == HfTask::SeqCls);
    let encoder = |b: &mut GraphBuilder| {
        let (x, word) = b.module("embeddings", &format!("{prefix}Embeddings"), &[ids], |b| {
            embeddings(b, &s, flavor, ids)
        });
        // `embedding_output` is a local of the model's forward until it returns, after the
        // pooler (truth traces of inference)
        b.hold(&[x]);
        let mut x = x;
        // a padded batch's mask, handed to every layer
        let mask = encoder_padded_mask(
            b,
            (bsz, seq),
            padding,
            input.precision,
            input.attn == AttnImplementation::Eager,
        );
        b.module("encoder", &format!("{prefix}Encoder"), &[x], |b| {
            b.module("layer", "ModuleList", &[], |b| {
                for i in 0..s.layers {
                    let args: Vec<TensorId> = std::iter::once(x).chain(mask.map(|m| m.0)).collect();
                    x = b.module(&i.to_string(), &format!("{prefix}Layer"), &args, |b| {
                        encoder_layer(b, &s, prefix, x, mask)
                    });
                }
            });
        });
        let pooled = if pooler {
            Some(b.module("pooler", &format!("{prefix}Pooler"), &[x], |b| {
                let first = b.op(Select { dim: 1 }, &[x]);
                let p = linear(b, "dense", s.hidden, s.hidden, true, first);
                activation(b, "activation", ActivationKind::Tanh, p)
            }))
        } else {
            None
        };
        // `post_init()` at the end of `{prefix}Model.__init__`: `_init_weights` copies a fresh
        // `arange(max_position_embeddings)` into `position_ids`
        b.temporary_at_init(vec![s.max_positions], DType::I64);
        (x, word, pooled)
    };
    let layer_prefix = if bare {
        String::new()
    } else {
        format!("{base}.")
    };
    let layers = (0..s.layers)
        .map(|i| format!("{layer_prefix}encoder.layer.{i}"))
        .collect();
    if bare {
        // BaseModelOutputWithPooling(last_hidden_state, pooler_output)
        let (h, _, pooled) = b.frame(encoder);
        let outputs: Vec<TensorId> = std::iter::once(h).chain(pooled).collect();
        let graph = b
            .finish(&outputs, Task::Features)
            .map_err(build_error(cfg))?;
        return Ok((graph, layers));
    }
    let (h, word, pooled) = b.module(base, &format!("{prefix}Model"), &[ids], encoder);
    let (outputs, task_ir, tied_bias) = b.frame(|b| {
        // `sequence_output` / `outputs` stay referenced until the forward returns
        b.hold(&[h]);
        if let Some(positions) = positions {
            let outputs = encoder_heads::question_answering(b, s.hidden, h, positions);
            return (outputs, Task::LossInForward, None);
        }
        let (logits, task_ir, tied_bias) = match task {
            HfTask::TokenCls => {
                let (logits, task_ir) = encoder_heads::token_classification(
                    b,
                    s.classifier_dropout,
                    s.hidden,
                    s.num_labels,
                    h,
                );
                (logits, task_ir, None)
            }
            HfTask::SeqCls => {
                let logits = match pooled {
                    Some(p) => {
                        let p = dropout(b, "dropout", s.classifier_dropout, p);
                        linear(b, "classifier", s.hidden, s.num_labels, true, p)
                    }
                    None => b.module(
                        "classifier",
                        &format!("{prefix}ClassificationHead"),
                        &[h],
                        |b| roberta_classifier(b, &s, h),
                    ),
                };
                (
                    logits,
                    Task::Classification {
                        num_classes: s.num_labels,
                    },
                    None,
                )
            }
            _ => {
                let (logits, tied_bias) = match flavor {
                    Flavor::Bert => b.module("cls", "BertOnlyMLMHead", &[h], |b| {
                        b.module("predictions", "BertLMPredictionHead", &[h], |b| {
                            mlm_head(b, &s, flavor, word, h)
                        })
                    }),
                    Flavor::Roberta { .. } => {
                        b.module("lm_head", &format!("{prefix}LMHead"), &[h], |b| {
                            mlm_head(b, &s, flavor, word, h)
                        })
                    }
                };
                (logits, Task::MaskedLm { vocab: s.vocab }, tied_bias)
            }
        };
        (vec![logits], task_ir, tied_bias)
    });
    if flavor.head_first() {
        b.order_params(top, &["lm_head", "classifier", "qa_outputs", base]);
    }
    if let Some(bias) = tied_bias {
        // post_init drops the decoder's own weight and bias and pads the head's bias into a new
        // tensor; a head built first made its decoder before the encoder
        let head = flavor.head_first().then_some("lm_head");
        b.tie_decoder_bias_at_init(head, vec![s.vocab, s.hidden], bias);
    }

    let graph = b.finish(&outputs, task_ir).map_err(build_error(cfg))?;
    Ok((graph, layers))
}

/// The inside of the masked-LM head (`BertLMPredictionHead` / `RobertaLMHead`): the transform
/// (BERT's `transform` module: dense, activation, LayerNorm; RoBERTa's dense, GELU, layer_norm),
/// then the decoder. Tied (the default), the decoder's weight is the word embeddings' and its
/// bias the head's `bias`, which is returned for `tie_at_init`; with `tie_word_embeddings:
/// false` the decoder keeps its own weight and bias, and the head's `bias` is a parameter the
/// forward never reads (no gradient, no optimizer state).
fn mlm_head(
    b: &mut GraphBuilder,
    s: &Spec,
    flavor: Flavor,
    word: TensorId,
    h: TensorId,
) -> (TensorId, Option<TensorId>) {
    let tied_bias = s.tied.then(|| b.parameter("bias", vec![s.vocab]));
    let t = match flavor {
        Flavor::Bert => b.module("transform", "BertPredictionHeadTransform", &[h], |b| {
            let t = linear(b, "dense", s.hidden, s.hidden, true, h);
            let t = s.act.module(b, "transform_act_fn", t);
            layer_norm(b, "LayerNorm", s.hidden, t)
        }),
        Flavor::Roberta { .. } => {
            let t = linear(b, "dense", s.hidden, s.hidden, true, h);
            let t = activation_fn(b, ActivationKind::GELU, t);
            layer_norm(b, "layer_norm", s.hidden, t)
        }
    };
    match tied_bias {
        Some(bias) => (
            tied_head_bias(b, "decoder", word, Some(bias), t).0,
            Some(bias),
        ),
        None => {
            let logits = linear(b, "decoder", s.hidden, s.vocab, true, t);
            b.parameter("bias", vec![s.vocab]);
            (logits, None)
        }
    }
}

/// `features[:, 0, :]`, dropout, dense, tanh, dropout, out_proj.
fn roberta_classifier(b: &mut GraphBuilder, s: &Spec, h: TensorId) -> TensorId {
    let x = b.op(Select { dim: 1 }, &[h]);
    let x = dropout(b, "dropout", s.classifier_dropout, x);
    let x = linear(b, "dense", s.hidden, s.hidden, true, x);
    let x = activation_fn(b, ActivationKind::Tanh, x);
    let x = dropout(b, "dropout", s.classifier_dropout, x);
    linear(b, "out_proj", s.hidden, s.num_labels, true, x)
}

fn embeddings(
    b: &mut GraphBuilder,
    s: &Spec,
    flavor: Flavor,
    ids: TensorId,
) -> (TensorId, TensorId) {
    let sh = b.shape(ids).to_vec();
    let (bsz, seq) = (sh[0], sh[1]);
    let i64 = Some(DType::I64);
    let int = |name, shape: Vec<u64>, d: DType| {
        Aten::new(name, shape)
            .dtype(DTypeRule::Fixed(d))
            .not_differentiable()
    };
    let init_order = b.param_mark();
    let pos_buf = b.buffer("position_ids", vec![s.max_positions], i64);
    let tt_buf = b.buffer("token_type_ids", vec![1, s.max_positions], i64);
    let pos = match flavor {
        // create_position_ids_from_input_ids: (cumsum(mask).type_as(mask) + 0) * mask, .long() + pad
        Flavor::Roberta { .. } => b.frame(|b| {
            let ne = b.op(int("ne", vec![bsz, seq], DType::Bool), &[ids]);
            let mask = b.op(int("_to_copy", vec![bsz, seq], DType::I32), &[ne]);
            let cs = b.op(int("cumsum", vec![bsz, seq], DType::I64), &[mask]);
            let cs = b.op(int("_to_copy", vec![bsz, seq], DType::I32), &[cs]);
            let cs = b.op(int("add", vec![bsz, seq], DType::I32), &[cs]);
            let m = b.op(int("mul", vec![bsz, seq], DType::I32), &[cs, mask]);
            let l = b.op(int("_to_copy", vec![bsz, seq], DType::I64), &[m]);
            b.hold(&[mask, m]);
            b.op(int("add", vec![bsz, seq], DType::I64), &[l])
        }),
        Flavor::Bert => view(b, "slice", pos_buf, vec![1, seq]),
    };
    let prows = b.shape(pos)[0];
    // token_type_ids = gather(buffer.expand(rows, -1), 1, position_ids).expand(B, S)
    let tt_exp = view(b, "expand", tt_buf, vec![prows, s.max_positions]);
    let tt = b.op(int("gather", vec![prows, seq], DType::I64), &[tt_exp, pos]);
    let tt = view(b, "expand", tt, vec![bsz, seq]);
    let (word_e, word) = embedding(b, "word_embeddings", s.vocab, s.hidden, ids);
    let (tt_e, _) = embedding(b, "token_type_embeddings", s.type_vocab, s.hidden, tt);
    let x = add(b, word_e, tt_e);
    let (pos_e, _) = embedding(b, "position_embeddings", s.max_positions, s.hidden, pos);
    let x = add(b, x, pos_e);
    // inputs_embeds, position_ids, token_type_ids, token_type_embeddings and
    // position_embeddings are locals until the return (in inference nothing else keeps the ids)
    b.hold(&[word_e, pos, tt, tt_e, pos_e]);
    let x = layer_norm(b, "LayerNorm", s.hidden, x);
    // `__init__` order: BERT creates position_embeddings before token_type_embeddings (its
    // buffers after its children), RoBERTa creates its buffers, then position_embeddings last
    // (which decides the small pool's blocks when the table is under 1 MiB)
    let children: &[&str] = match flavor {
        Flavor::Bert => &[
            "word_embeddings",
            "position_embeddings",
            "token_type_embeddings",
            "LayerNorm",
        ],
        Flavor::Roberta { .. } => &[
            "word_embeddings",
            "token_type_embeddings",
            "LayerNorm",
            BUFFERS,
            "position_embeddings",
        ],
    };
    b.order_params(init_order, children);
    (dropout(b, "dropout", s.hidden_dropout, x), word)
}

/// `dense(h)`, dropout, `LayerNorm(h + input)` (`*SelfOutput` / `*Output`); the dropped tensor
/// stays referenced until the LayerNorm returns.
fn output_block(
    b: &mut GraphBuilder,
    s: &Spec,
    in_features: u64,
    h: TensorId,
    input: TensorId,
) -> TensorId {
    let d = linear(b, "dense", in_features, s.hidden, true, h);
    let d = dropout(b, "dropout", s.hidden_dropout, d);
    b.hold(&[d]);
    let sum = add(b, d, input);
    layer_norm(b, "LayerNorm", s.hidden, sum)
}

fn encoder_layer(
    b: &mut GraphBuilder,
    s: &Spec,
    prefix: &str,
    x: TensorId,
    mask: Option<(TensorId, DType)>,
) -> TensorId {
    let e = s.hidden;
    let (a, weights) = b.module("attention", &format!("{prefix}Attention"), &[x], |b| {
        let (o, weights) = b.module("self", &format!("{prefix}SelfAttention"), &[x], |b| {
            encoder_self_attention(
                b,
                x,
                ["query", "key", "value"],
                (e, s.heads, s.attn_dropout),
                s.eager,
                mask,
            )
        });
        let a = b.module("output", &format!("{prefix}SelfOutput"), &[o, x], |b| {
            output_block(b, s, e, o, x)
        });
        (a, weights)
    });
    // eager attention's weights: `self_attention_output, _ = self.attention(...)` keeps them
    // until the layer returns
    b.hold(&weights.into_iter().collect::<Vec<_>>());
    let i = b.module(
        "intermediate",
        &format!("{prefix}Intermediate"),
        &[a],
        |b| {
            let h = linear(b, "dense", e, s.intermediate, true, a);
            s.act.module(b, "intermediate_act_fn", h)
        },
    );
    b.module("output", &format!("{prefix}Output"), &[i, a], |b| {
        output_block(b, s, s.intermediate, i, a)
    })
}
