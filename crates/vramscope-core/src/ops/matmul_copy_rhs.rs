//! `a.matmul(b)` of two batched operands where `matmul`'s expand-and-reshape for `bmm` must copy
//! `b` (a strided view, e.g. Swin's `v`, a slice of the permuted q/k/v projection). Under autocast
//! `matmul` casts its operands first and then copies the (cast) `b`, so the copy is this op's first
//! output and the product its second. `BmmBackward0` keeps `a` and the copy.

use super::*;

/// `[..., n, k] @ [..., k, m]` with a copy of the right operand; outputs `[copy of b, a @ b]`.
#[derive(Debug, Clone)]
pub struct MatMulCopyRhs;

impl Op for MatMulCopyRhs {
    fn kind(&self) -> &'static str {
        "matmul"
    }

    fn grads_right_to_left(&self) -> bool {
        true
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let mut out = MatMul.output_shapes(inputs)?;
        out.insert(0, inputs[1].to_vec());
        Ok(out)
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![inputs.first().copied().unwrap_or(DType::F32); n]
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Output(0)]
    }
}
