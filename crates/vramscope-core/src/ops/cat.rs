//! `torch.cat` (DenseNet, ShuffleNet, the ViT class token): a new tensor; backward hands each input a
//! narrow view of the incoming gradient, so no new memory.

use super::*;

/// Concatenation along one dimension.
#[derive(Debug, Clone)]
pub struct Cat {
    /// The dimension.
    pub dim: usize,
}

impl Op for Cat {
    fn kind(&self) -> &'static str {
        "cat"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let first = inputs
            .first()
            .ok_or_else(|| ShapeError::new("cat", "no inputs"))?;
        if self.dim >= first.len() {
            return Err(ShapeError::new(
                "cat",
                format!("dimension {} out of range for {first:?}", self.dim),
            ));
        }
        let mut out = first.to_vec();
        out[self.dim] = 0;
        for s in inputs {
            if s.len() != first.len()
                || s.iter()
                    .zip(first.iter())
                    .enumerate()
                    .any(|(i, (a, b))| i != self.dim && a != b)
            {
                return Err(ShapeError::new(
                    "cat",
                    format!(
                        "shapes {first:?} and {s:?} differ outside dimension {}",
                        self.dim
                    ),
                ));
            }
            out[self.dim] += s[self.dim];
        }
        Ok(vec![out])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![
            inputs
                .iter()
                .copied()
                .reduce(DType::promote)
                .unwrap_or(DType::F32);
            n
        ]
    }

    // not on autocast's lists: `cat` promotes mixed dtypes itself, without `_to_copy` casts
    // (ViT's fp32 class token with bf16 patch embeddings)
    fn autocast(&self) -> Autocast {
        Autocast::Unlisted
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        ctx.inputs
            .iter()
            .map(|t| cat_input_grad(t.dtype, ctx.outputs[0].dtype))
            .collect()
    }
}

/// `CatBackward0`'s gradient for an input of dtype `input`: a narrow view of the incoming
/// gradient, or, for an input of another dtype than the output, the engine's cast of it (a new
/// tensor); none for an integer input.
pub(super) fn cat_input_grad(input: DType, output: DType) -> GradIn {
    if !input.is_float() {
        GradIn::None
    } else if input == output {
        GradIn::PassThrough(0)
    } else {
        GradIn::New
    }
}
