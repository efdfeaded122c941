//! `a.matmul(b)` of batched operands where `matmul`'s expand-and-reshape for `bmm` must copy one
//! or both operands: a strided view whose batch dimensions cannot merge (a transformers eager
//! attention's `query`, laid out `[B, S, H, D]` by the rotary products or sliced from GPT-2's
//! packed `c_attn` output, and the transposed keys of such a layout). Under autocast `matmul`
//! casts its operands first (right to left) and copies the cast ones, so the copies are this op's
//! first outputs and the product its last; `BmmBackward0` keeps what `bmm` received: the copies,
//! or the operands themselves where they needed none. Swin's `attn @ v` (`v` a slice of the
//! permuted qkv projection) copies only the right operand.

use super::*;

/// `[..., n, k] @ [..., k, m]` copying the left and/or right operand; outputs the copies (left
/// first) then `a @ b`.
#[derive(Debug, Clone)]
pub struct MatMulCopy {
    /// Copies the left operand.
    pub lhs: bool,
    /// Copies the right operand.
    pub rhs: bool,
}

impl Op for MatMulCopy {
    fn kind(&self) -> &'static str {
        "matmul"
    }

    fn grad_order(&self) -> GradOrder {
        GradOrder::RightToLeft
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let mut out = MatMul.output_shapes(inputs)?;
        if self.rhs {
            out.insert(0, inputs[1].to_vec());
        }
        if self.lhs {
            out.insert(0, inputs[0].to_vec());
        }
        Ok(out)
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        let mut d = vec![inputs.first().copied().unwrap_or(DType::F32); n];
        if self.lhs && self.rhs && n == 3 {
            d[1] = inputs.get(1).copied().unwrap_or(d[1]);
        } else if self.rhs && !self.lhs && n == 2 {
            d[0] = inputs.get(1).copied().unwrap_or(d[0]);
        }
        d
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // BmmBackward0 releases `mat2_` (the right operand) before `self_` (Functions.h)
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        match (self.lhs, self.rhs) {
            (true, true) => vec![Saved::Output(1), Saved::Output(0)],
            (true, false) => vec![Saved::Input(1), Saved::Output(0)],
            (false, true) => vec![Saved::Output(0), Saved::Input(0)],
            (false, false) => vec![Saved::Input(1), Saved::Input(0)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_come_first_then_the_product() {
        let op = MatMulCopy {
            lhs: true,
            rhs: true,
        };
        let s = op.output_shapes(&[&[2, 4, 8, 16], &[2, 4, 16, 8]]).unwrap();
        assert_eq!(
            s,
            vec![vec![2, 4, 8, 16], vec![2, 4, 16, 8], vec![2, 4, 8, 8]]
        );
        let q_only = MatMulCopy {
            lhs: true,
            rhs: false,
        };
        assert_eq!(
            q_only
                .output_shapes(&[&[2, 4, 8, 16], &[2, 4, 16, 8]])
                .unwrap()
                .len(),
            2
        );
    }
}
