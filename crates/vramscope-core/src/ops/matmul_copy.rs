//! `a.matmul(b)` of batched operands where `matmul`'s expand-and-reshape for `bmm` must copy one
//! or both operands: a strided view whose batch dimensions cannot merge (a transformers eager
//! attention's `query`, laid out `[B, S, H, D]` by the rotary products or sliced from GPT-2's
//! packed `c_attn` output, and the transposed keys of such a layout). Under autocast `matmul`
//! casts its operands first (right to left) and copies the cast ones. The copies are extras made
//! before the product: `bmm` keeps what it received for backward (`BmmBackward0`: the copies, or
//! the operands themselves where they needed none), and otherwise `matmul` drops them as it
//! returns, before the autocast wrapper drops its casts (truth traces of eager MQA inference).
//! Swin's `attn @ v` (`v` a slice of the permuted qkv projection) copies only the right operand.

use super::*;

/// `[..., n, k] @ [..., k, m]` copying the left and/or right operand; outputs `a @ b`, the copies
/// (left first) are its extras.
#[derive(Debug, Clone)]
pub struct MatMulCopy {
    /// Copies the left operand.
    pub lhs: bool,
    /// Copies the right operand.
    pub rhs: bool,
}

impl MatMulCopy {
    /// The copies `matmul` makes of `inputs` (left first).
    fn copies(&self, inputs: &[TensorMeta]) -> Vec<TensorMeta> {
        let copied = [self.lhs, self.rhs];
        inputs
            .iter()
            .zip(copied)
            .filter(|(_, c)| *c)
            .map(|(m, _)| m.clone())
            .collect()
    }
}

impl Op for MatMulCopy {
    fn kind(&self) -> &'static str {
        "matmul"
    }

    fn grad_order(&self) -> GradOrder {
        GradOrder::RightToLeft
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        MatMul.output_shapes(inputs)
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.copies(ctx.inputs)
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.copies(ctx.inputs)
    }

    fn extras_before_outputs(&self) -> bool {
        true
    }

    // BmmBackward0 releases `mat2_` (the right operand) before `self_` (Functions.h)
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        match (self.lhs, self.rhs) {
            (true, true) => vec![Saved::Extra(1), Saved::Extra(0)],
            (true, false) => vec![Saved::Input(1), Saved::Extra(0)],
            (false, true) => vec![Saved::Extra(0), Saved::Input(0)],
            (false, false) => vec![Saved::Input(1), Saved::Input(0)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(shape: &[u64]) -> TensorMeta {
        TensorMeta {
            shape: shape.to_vec(),
            dtype: DType::BF16,
        }
    }

    #[test]
    fn the_copies_are_extras_made_before_the_product() {
        let op = MatMulCopy {
            lhs: true,
            rhs: true,
        };
        let s = op.output_shapes(&[&[2, 4, 8, 16], &[2, 4, 16, 8]]).unwrap();
        assert_eq!(s, vec![vec![2, 4, 8, 8]]);
        assert!(op.extras_before_outputs());
        let inputs = [meta(&[2, 4, 8, 16]), meta(&[2, 4, 16, 8])];
        let ctx = OpCtx {
            inputs: &inputs,
            params: &[],
            outputs: &[],
            training: false,
            inputs_require_grad: &[],
            keeps_saved: true,
            saved_unpacked: false,
        };
        assert_eq!(op.inference_extras(&ctx), inputs.to_vec());
        let k_only = MatMulCopy {
            lhs: false,
            rhs: true,
        };
        assert_eq!(k_only.forward_extras(&ctx), vec![inputs[1].clone()]);
        assert_eq!(
            k_only.saved_for_backward(&ctx),
            vec![Saved::Extra(0), Saved::Input(0)]
        );
    }
}
