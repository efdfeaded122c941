//! The views around `scaled_dot_product_attention` in `F.multi_head_attention_forward`, whose
//! memory depends on which attention kernel runs (see [`SdpaBackend::choose`]):
//!
//! - [`AttentionHeadsView`]: `q.view(L, B·H, d)` and `q.view(B, H, L, d)` (and k, v). Forward
//!   they are views. Mem-efficient attention (fp32) returns contiguous `[B, H, L, d]` gradients,
//!   so both views get a gradient they cannot view and `ViewBackward0` copies it (a new tensor of
//!   the input's size); cuDNN attention (fp16/bf16) returns gradients laid out like q, k, v, which
//!   view back without a copy.
//! - [`AttentionHeadsMerge`]: `attn_output.permute(2, 0, 1, 3).reshape(B·L, E)`. cuDNN attention
//!   allocates its output like q (a slice of the packed `[3, L, B, E]` projection), so the reshape
//!   is a view; mem-efficient attention's output is contiguous `[B, H, L, d]` and the reshape
//!   copies it. The copy is what `out_proj` saves; here this node keeps it (it is freed right
//!   after `out_proj`'s backward, as in PyTorch).

use super::*;

/// Whether the attention kernel (no dropout, no mask) for heads of `head_dim` in `dtype` lays out
/// its tensors like q.
fn like_q(dtype: DType, head_dim: u64, training: bool) -> bool {
    let call = super::attention::SdpaCall::around(head_dim, false, false, training);
    SdpaBackend::choose(dtype, &call) == SdpaBackend::Cudnn
}

/// `q.view(shape)` next to an attention call (see the module docs).
#[derive(Debug, Clone)]
pub struct AttentionHeadsView {
    /// The output shape.
    pub shape: Shape,
}

impl Op for AttentionHeadsView {
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
        let t = &ctx.inputs[0];
        if !t.dtype.is_float() {
            vec![GradIn::None]
        } else if like_q(t.dtype, self.shape.last().copied().unwrap_or(0), true) {
            vec![GradIn::PassThrough(0)]
        } else {
            vec![GradIn::New]
        }
    }
}

/// `attn_output.permute(2, 0, 1, 3).reshape(B·L, E)` of a `[B, H, L, d]` attention output.
#[derive(Debug, Clone)]
pub struct AttentionHeadsMerge;

impl Op for AttentionHeadsMerge {
    fn kind(&self) -> &'static str {
        "reshape"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("reshape", inputs, 0, 4)?;
        Ok(vec![vec![s[2] * s[0], s[1] * s[3]]])
    }

    // modelled as a view of the attention output; the copy, when there is one, is an extra
    fn alias(&self) -> Alias {
        Alias::View(0)
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let t = &ctx.inputs[0];
        if like_q(t.dtype, t.shape.last().copied().unwrap_or(0), ctx.training) {
            Vec::new()
        } else {
            vec![ctx.outputs[0].clone()]
        }
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        let t = &ctx.inputs[0];
        if like_q(t.dtype, t.shape.last().copied().unwrap_or(0), ctx.training) {
            Vec::new()
        } else {
            vec![Saved::Extra(0)]
        }
    }

    fn input_grads(&self, _ctx: &OpCtx) -> Vec<GradIn> {
        vec![GradIn::PassThrough(0)]
    }
}
