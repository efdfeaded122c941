//! `a @ b` between two activations (`bmm`): keeps both inputs; autocast runs it in low precision.

use super::*;

/// Batched matrix multiplication `[..., n, k] @ [..., k, m]`.
#[derive(Debug, Clone)]
pub struct MatMul;

impl Op for MatMul {
    fn kind(&self) -> &'static str {
        "matmul"
    }

    fn grad_order(&self) -> GradOrder {
        GradOrder::RightToLeft
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.len() < 2 || b.len() < 2 || a[a.len() - 1] != b[b.len() - 2] {
            return Err(ShapeError::new(
                "matmul",
                format!("cannot multiply {a:?} by {b:?}"),
            ));
        }
        let mut out = broadcast("matmul", &a[..a.len() - 2], &b[..b.len() - 2])?;
        out.push(a[a.len() - 2]);
        out.push(b[b.len() - 1]);
        Ok(vec![out])
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // MmBackward0 / BmmBackward0 release `mat2_` (the right operand) before `self_` (Functions.h)
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(1), Saved::Input(0)]
    }
}
