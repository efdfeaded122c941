//! `nll_loss(log_probs [B, K], labels [B])` (the second half of `F.cross_entropy`): a scalar loss
//! and a scalar `total_weight`; backward keeps its input (for the shape of `nll_loss_backward`'s
//! `[B, K]` result) and `total_weight`. Autocast runs it in fp32 (`nll_loss` is on the fp32 list),
//! so half log-probabilities are first copied to fp32.

use super::*;

/// Negative log-likelihood over class log-probabilities with int64 labels.
#[derive(Debug, Clone)]
pub struct NllLoss;

impl Op for NllLoss {
    fn kind(&self) -> &'static str {
        "nll_loss"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let l = inputs[0];
        let y = inputs.get(1).copied().unwrap_or(&[]);
        if l.len() != 2 || y.len() != 1 || y[0] != l[0] {
            return Err(ShapeError::new(
                "nll_loss",
                format!("log-probabilities {l:?} and labels {y:?}: expected [B, K] and [B]"),
            ));
        }
        Ok(vec![vec![]])
    }

    fn autocast(&self) -> Autocast {
        Autocast::Fp32
    }

    // `total_weight`, in the dtype of the log-probabilities (fp32 under autocast, bf16 in a pure
    // bf16 model)
    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let dtype = ctx.inputs.first().map_or(DType::F32, |m| m.dtype);
        vec![TensorMeta::new(vec![], dtype)]
    }

    // `nll_loss_forward` returns `total_weight` under `no_grad` too (an evaluation loss)
    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Input(1), Saved::Extra(0)]
    }
}
