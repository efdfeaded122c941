//! `F.linear(x, weight, bias)` on a *non-contiguous* input of rank ≥ 3, with the weight and bias
//! passed as tensors (`nn.MultiheadAttention`'s packed in-projection on the transposed `[L, B, E]`
//! query). `aten::linear` then takes the `matmul` path instead of one `addmm`: `matmul` folds the
//! input with `reshape(-1, E)`, which must copy (the copy is what `MmBackward0` saves), runs `mm`,
//! and the bias is added out of place (`add.Tensor`), after which the `mm` result is dropped.
//!
//! Under autocast `linear` is on the lower-precision list: input, weight and bias are cast first
//! (weight and bias through the autocast cache), and the copy is made of the cast input.
//!
//! The op has one output per tensor it creates, in PyTorch's order: the input copy, the `mm`
//! result and (with a bias) the sum; the last one is `F.linear`'s result. The copy is saved; the
//! `mm` result has no other user and is freed when the op returns.
//!
//! Backward: `AddBackward0` sums the gradient into the bias gradient; `MmBackward0` makes the
//! weight gradient (contiguous in the weight's layout, so `AccumulateGrad` keeps it) and the
//! input gradient, which `reshape`'s backward hands on as a view.

use super::*;

/// `F.linear` on a non-contiguous N-d input; inputs are `[x, weight, bias]` (bias optional);
/// the last output is the result.
#[derive(Debug, Clone)]
pub struct LinearStrided {
    /// Input features.
    pub in_features: u64,
    /// Output features.
    pub out_features: u64,
}

impl Op for LinearStrided {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn grad_order(&self) -> GradOrder {
        GradOrder::RightToLeft
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let x = inputs
            .first()
            .ok_or_else(|| ShapeError::new("linear", "missing input"))?;
        let w = inputs
            .get(1)
            .ok_or_else(|| ShapeError::new("linear", "missing weight"))?;
        if x.last() != Some(&self.in_features)
            || w[..] != [self.out_features, self.in_features]
            || inputs.get(2).is_some_and(|b| b[..] != [self.out_features])
        {
            return Err(ShapeError::new(
                "linear",
                format!(
                    "input {x:?} and weight {w:?} do not fit in_features {} / out_features {}",
                    self.in_features, self.out_features
                ),
            ));
        }
        let mut o = x.to_vec();
        if let Some(l) = o.last_mut() {
            *l = self.out_features;
        }
        // the copy, the mm result, and (with a bias) the sum
        let mut outs = vec![x.to_vec(), o.clone()];
        if inputs.len() > 2 {
            outs.push(o);
        }
        Ok(outs)
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![inputs.first().copied().unwrap_or(DType::F32); n]
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Output(0), Saved::Input(1)]
    }
}
