//! A projection `[B, S, H·D]` viewed as `[B, S, H, D]` for `F.scaled_dot_product_attention`
//! (which reads it after `transpose(1, 2)`). Forward it is a view. Its gradient comes back from
//! the attention in the layout the kernel gives it: the fused kernels' rules are the caller's
//! (`copied`, from truth traces per family), while the math fallback and flash attention over
//! padded head dims ([`SdpaBackend::choose`]) hand back contiguous heads-first `[B, H, S, D]`
//! gradients (`bmm`'s, `ConstantPadNdBackward0`'s), which `ViewBackward0` cannot view as
//! `[B, S, H·D]`: it copies them (truth traces of a Llama and a GPT-2 with head dims 6, 10 and
//! 12), unless there is one head or one position. The key is the exception on the math
//! fallback: `k.transpose(-2, -1) * scale` gives its gradient the transposed layout, which the
//! view takes as it is ([`HeadsOf`]; truth traces of GPT-2 and mT5 with head dim 10: q's and v's
//! views copy, k's does not). Fed to eager attention (`sdpa: None`) only the caller's rule holds.

use super::attention::SdpaCall;
use super::*;

/// `x.view(B, S, H, D)` of an attention operand; see the module docs.
#[derive(Debug, Clone)]
pub struct SdpaHeadsView {
    /// The output shape `[B, S, H, D]`.
    pub shape: Shape,
    /// The gradient is copied whatever the kernel (the caller's rule for the fused kernels).
    pub copied: bool,
    /// The SDPA call the view feeds: whether it has a mask, and its dropout probability (active
    /// in training only); `None` for eager attention.
    pub sdpa: Option<(bool, f64)>,
    /// Which operand the view makes.
    pub of: HeadsOf,
}

/// The operand a heads view makes, for the layout of its gradient on the math fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadsOf {
    /// q or v, or a key that goes through a rotary embedding: their gradients come back
    /// heads-first.
    Other,
    /// The key, a slice of a fused projection (GPT-2's `c_attn`): the split's backward
    /// concatenates the transposed gradient as it is.
    KeyOfSplit,
    /// The key, a `Linear`'s output: the view takes the transposed gradient, but the
    /// projection's `matmul` reshapes it to rows, which copies it unless the batch is one
    /// (truth traces of UMT5 at batch 2: `UnsafeViewBackward0`'s clone; of mT5 at batch 1: none).
    /// The copy is counted here, the node before.
    KeyOfLinear,
}

impl SdpaHeadsView {
    /// Whether `ViewBackward0` copies the gradient.
    fn copies(&self, ctx: &OpCtx) -> bool {
        let dim = |i: usize| self.shape.get(i).copied().unwrap_or(1);
        if dim(1) <= 1 || dim(2) <= 1 {
            return false;
        }
        if self.copied {
            return true;
        }
        let Some((masked, dropout_p)) = self.sdpa else {
            return false;
        };
        let dropout = ctx.training && dropout_p > 0.0;
        let call = SdpaCall::around(dim(3), dropout, masked, true);
        let backend = SdpaBackend::choose(ctx.inputs[0].dtype, &call);
        if backend != SdpaBackend::Math {
            return backend.heads_first(&call);
        }
        match self.of {
            HeadsOf::Other => true,
            HeadsOf::KeyOfSplit => false,
            HeadsOf::KeyOfLinear => dim(0) > 1,
        }
    }
}

impl Op for SdpaHeadsView {
    fn kind(&self) -> &'static str {
        "view"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        super::view::same_numel("view", inputs[0], &self.shape)
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        if self.copies(ctx) {
            vec![GradIn::New]
        } else {
            vec![GradIn::PassThrough(0)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grads(op: &SdpaHeadsView, dtype: DType) -> Vec<GradIn> {
        let inputs = [TensorMeta::new(vec![2, 64, 4 * op.shape[3]], dtype)];
        op.input_grads(&OpCtx {
            inputs: &inputs,
            params: &[],
            outputs: &[],
            training: true,
            inputs_require_grad: &[true],
            keeps_saved: true,
            saved_unpacked: false,
        })
    }

    #[test]
    fn gradient_is_copied_when_it_comes_back_heads_first() {
        let view = |d: u64, copied| SdpaHeadsView {
            shape: vec![2, 64, 4, d],
            copied,
            sdpa: Some((false, 0.0)),
            of: HeadsOf::Other,
        };
        // cuDNN hands back gradients laid out like its inputs
        assert_eq!(
            grads(&view(64, false), DType::BF16),
            vec![GradIn::PassThrough(0)]
        );
        assert_eq!(grads(&view(64, true), DType::BF16), vec![GradIn::New]);
        // padded flash attention and the math fallback: heads-first
        assert_eq!(grads(&view(12, false), DType::BF16), vec![GradIn::New]);
        assert_eq!(grads(&view(6, false), DType::F32), vec![GradIn::New]);
        // mem-efficient attention (float32, a multiple of 4)
        assert_eq!(
            grads(&view(12, false), DType::F32),
            vec![GradIn::PassThrough(0)]
        );
        // the key on the math fallback comes back transposed: a split takes it, a Linear's rows
        // copy it (at batch 2 here); on padded flash heads-first
        let key = |d: u64, of| SdpaHeadsView {
            of,
            ..view(d, false)
        };
        let (split, linear) = (HeadsOf::KeyOfSplit, HeadsOf::KeyOfLinear);
        assert_eq!(
            grads(&key(6, split), DType::F32),
            vec![GradIn::PassThrough(0)]
        );
        assert_eq!(grads(&key(6, linear), DType::F32), vec![GradIn::New]);
        let one_row = SdpaHeadsView {
            shape: vec![1, 64, 4, 6],
            ..key(6, linear)
        };
        assert_eq!(grads(&one_row, DType::F32), vec![GradIn::PassThrough(0)]);
        assert_eq!(grads(&key(12, split), DType::BF16), vec![GradIn::New]);
    }
}
