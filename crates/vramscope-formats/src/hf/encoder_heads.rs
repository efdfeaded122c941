//! The per-token heads of the encoders (BERT, RoBERTa, DistilBERT), as transformers 5.23 writes
//! them in `*ForTokenClassification` and `*ForQuestionAnswering`:
//!
//! - token classification: dropout, `classifier` (`[B, S, num_labels]`), trained on
//!   `model.loss_function(logits, labels)` (`ForTokenClassification`: `view(-1, num_labels)`,
//!   `.float()`, cross-entropy against `labels` `[B, S]`), the loss outside the forward as for the
//!   masked LM: the same computation as [`Task::MaskedLm`] over `num_labels` classes;
//! - question answering: `qa_outputs` (`[B, S, 2]`), `split(1, dim=-1)`, each half squeezed and
//!   made contiguous (a `[B, S]` copy), and the loss the forward computes when it is given
//!   `start_positions` / `end_positions` (as a `Trainer` calls it): each clamped to `[0, S]`,
//!   `CrossEntropyLoss(ignore_index=S)` of the start and the end logits, `(start + end) / 2`.

use vramscope_core::ir::Task;
use vramscope_core::ops::{Add, Aten, DTypeRule, GradIn, LogSoftmax, NllLoss, View};
use vramscope_core::{DType, GraphBuilder, TensorId};

use super::layers::{dropout, linear, view};
use super::{HfConfig, HfError};

/// Question answering splits `qa_outputs` into exactly a start and an end logit: transformers
/// fails on any other `num_labels` (`DistilBertForQuestionAnswering.__init__` raises, the others'
/// `start_logits, end_logits = logits.split(1, dim=-1)` cannot unpack).
pub fn check_question_answering_labels(cfg: &HfConfig, num_labels: u64) -> Result<(), HfError> {
    if num_labels == 2 {
        return Ok(());
    }
    Err(HfError::Field {
        path: cfg.path.clone(),
        field: "num_labels".into(),
        expected: format!(
            "2 for question answering (a start and an end logit per token), not {num_labels}"
        ),
    })
}

/// `dropout(p)` then `classifier`: the logits `[B, S, num_labels]` and the loss the caller's
/// `model.loss_function` computes.
pub fn token_classification(
    b: &mut GraphBuilder,
    dropout_p: f64,
    hidden: u64,
    num_labels: u64,
    h: TensorId,
) -> (TensorId, Task) {
    let x = dropout(b, "dropout", dropout_p, h);
    let logits = linear(b, "classifier", hidden, num_labels, true, x);
    (logits, Task::MaskedLm { vocab: num_labels })
}

/// The positions a question-answering batch carries besides `input_ids`: `start_positions` and
/// `end_positions`, `[B]` each, made by the data loader after the ids.
pub fn question_answering_inputs(b: &mut GraphBuilder, batch: u64) -> [TensorId; 2] {
    [
        b.input(vec![batch], DType::I64),
        b.input(vec![batch], DType::I64),
    ]
}

/// `qa_outputs` on `h` (after the caller's dropout, if any), the start and end logits, and the
/// loss computed inside the forward. Returns the forward's outputs: the loss first, then the
/// start and end logits (`QuestionAnsweringModelOutput`, alive until the next forward returns).
pub fn question_answering(
    b: &mut GraphBuilder,
    hidden: u64,
    h: TensorId,
    [start_positions, end_positions]: [TensorId; 2],
) -> Vec<TensorId> {
    let shape = b.shape(h).to_vec();
    let (bsz, seq) = (shape[0], shape[1]);
    let logits = linear(b, "qa_outputs", hidden, 2, true, h);
    let halves = b.op_multi(
        View {
            name: "split",
            shapes: vec![vec![bsz, seq, 1]; 2],
            expand: false,
        },
        &[logits],
    );
    // `squeeze(-1).contiguous()`: a view, then a copy (each half has stride 2); `CloneBackward0`
    // hands the gradient on
    let [start, end] = [halves[0], halves[1]].map(|half| {
        let squeezed = view(b, "squeeze", half, vec![bsz, seq]);
        b.op(
            Aten::new("clone", vec![bsz, seq])
                .dtype(DTypeRule::Like(0))
                .grads(vec![GradIn::PassThrough(0)]),
            &[squeezed],
        )
    });
    // `start_positions.clamp(0, ignored_index)`, rebinding the locals
    let clamp = |b: &mut GraphBuilder, t: TensorId| {
        b.op(
            Aten::new("clamp", vec![bsz])
                .dtype(DTypeRule::Fixed(DType::I64))
                .not_differentiable(),
            &[t],
        )
    };
    let start_positions = clamp(b, start_positions);
    let end_positions = clamp(b, end_positions);
    // CrossEntropyLoss(ignore_index=S): log_softmax over the positions, nll_loss
    let start_loss = {
        let lp = b.op(LogSoftmax::of_cross_entropy(1), &[start]);
        b.op(NllLoss, &[lp, start_positions])
    };
    let end_loss = {
        let lp = b.op(LogSoftmax::of_cross_entropy(1), &[end]);
        b.op(NllLoss, &[lp, end_positions])
    };
    let sum = b.op(Add { inplace: false }, &[start_loss, end_loss]);
    let loss = b.op(Aten::new("div", vec![]), &[sum]);
    // `logits`, the clamped positions and the two losses are locals until the forward returns
    b.hold(&[logits, start_positions, end_positions, start_loss, end_loss]);
    vec![loss, start, end]
}
