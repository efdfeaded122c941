//! `F.scaled_dot_product_attention(q, k, v, attn_mask=bias)` with a float additive mask, as
//! transformers' SDPA path runs T5's relative position bias (`create_position_bias_mask`). The
//! mask is `[B, H, L, S]` as the kernel sees it (the broadcast `[1, H, L, S]` bias expanded).
//!
//! Backend on an H100 (sm_90, cuDNN 9; truth traces): flash attention takes no mask, so dropout
//! means mem-efficient attention; without dropout fp16/bf16 run cuDNN attention, unless the mask
//! needs a gradient, which cuDNN's backward cannot give (mem-efficient attention then); fp32 runs
//! mem-efficient attention; outside their head-dim limits mem-efficient attention or the math
//! fallback ([`SdpaBackend::choose`]). Each fused kernel keeps q, k, v, the output, the mask and the backend's statistics
//! for backward. Mem-efficient attention's backward returns the mask's gradient as a new
//! `[B, H, L, S]` tensor whose last dimension is padded to 16 elements (`attention_backward.cu`);
//! the caller records the mask with that padded last dimension so the gradient has its size.

use super::attention::{backend_extras, backend_inference_extras, fused_saved, SdpaCall};
use super::*;

/// Scaled dot-product attention over `[B, H, L, E]` q, k, v with an additive float mask.
#[derive(Debug, Clone)]
pub struct ScaledDotProductAttentionBias {
    /// Attention dropout probability (active in training only).
    pub dropout_p: f64,
    /// The mask's batch size before SDPA expands it (1 for a bias shared by the batch).
    pub mask_batch: u64,
    /// The mask's head count before SDPA expands it (T5's bias has one per head; a causal or
    /// sliding-window mask made additive is `[B, 1, L, S]`, shared by the heads).
    pub mask_heads: u64,
    /// k and v are contiguous `[B, H, S, D]` (`repeat_kv`'s copies, a cache's concatenations)
    /// rather than transposed projections (the math fallback's `matmul` reads them as they are).
    pub kv_contiguous: bool,
}

/// Mem-efficient attention wants the mask's rows aligned to 8 elements: `preprocess_mask` pads
/// the last dimension (`constant_pad_nd`) and slices it back.
pub const MEM_EFF_MASK_ALIGNMENT: u64 = 8;

impl ScaledDotProductAttentionBias {
    /// The backend for this call.
    pub fn backend(&self, ctx: &OpCtx) -> SdpaBackend {
        let call = SdpaCall::of(ctx, self.dropout_p, true);
        SdpaBackend::choose(ctx.inputs[0].dtype, &call)
    }
}

impl Op for ScaledDotProductAttentionBias {
    fn kind(&self) -> &'static str {
        "scaled_dot_product_attention"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let name = "scaled_dot_product_attention";
        let out = super::attention::sdpa_output_shape(inputs)?;
        let (q, k) = (inputs[0], inputs[1]);
        let m = expect_rank(name, inputs, 3, 4)?;
        if m[0] != q[0] || m[1] != q[1] || m[2] != q[2] || m[3] < k[2] {
            return Err(ShapeError::new(
                name,
                format!(
                    "mask {m:?}: expected [{}, {}, {}, >= {}] for q {q:?} and k {k:?}",
                    q[0], q[1], q[2], k[2]
                ),
            ));
        }
        Ok(vec![out])
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // the fused kernels (`_efficient_attention_backward`, `_flash_attention_backward`, cuDNN's)
    // allocate dq, dk and dv together whatever `grad_input_mask` says (truth traces of LoRA on
    // Gemma3's first layer, whose k and v need none)
    fn kernel_grads(&self, ctx: &OpCtx) -> u8 {
        if self.backend(ctx) == SdpaBackend::Math {
            0
        } else {
            3
        }
    }

    fn sdpa_backend(&self, ctx: &OpCtx) -> Option<SdpaBackend> {
        Some(self.backend(ctx))
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let backend = self.backend(ctx);
        if backend == SdpaBackend::Math {
            return Vec::new();
        }
        let mut e = backend_extras(backend, ctx);
        e.extend(self.padded_mask(backend, ctx));
        e
    }

    // `preprocess_mask` pads the mask before the kernel runs (truth traces of T5 in float32 at
    // 100 tokens: `constant_pad_nd`, then the kernel's output and statistics)
    fn extras_made_first(&self, ctx: &OpCtx) -> usize {
        usize::from(self.padded_mask(self.backend(ctx), ctx).is_some())
    }

    fn input_replaced_by_early_extras(&self) -> Option<usize> {
        Some(3)
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let backend = self.backend(ctx);
        if backend == SdpaBackend::Math {
            return Vec::new();
        }
        let mut e = backend_inference_extras(backend, ctx);
        e.extend(self.padded_mask(backend, ctx));
        e
    }

    // the mask the kernel reads is the padded copy when there is one (the extra after the
    // backend's three), else the mask itself
    fn forward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        match self.math_call(ctx) {
            Some(call) => super::attention_math::forward_scratch(ctx, &call),
            None => Vec::new(),
        }
    }

    fn backward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        match self.math_call(ctx) {
            Some(call) => super::attention_math::backward_scratch(ctx, &call),
            None => Vec::new(),
        }
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        match self.math_call(ctx) {
            Some(call) => super::attention_math::input_grads(ctx, &call),
            None => new_grads_for_float_inputs(ctx),
        }
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        if let Some(call) = self.math_call(ctx) {
            return super::attention_math::saved_for_backward(ctx, &call);
        }
        let backend = self.backend(ctx);
        let mask = match self.padded_mask(backend, ctx) {
            Some(_) => Saved::Extra(3),
            None => Saved::Input(3),
        };
        fused_saved(Some(mask), backend)
    }
}

impl ScaledDotProductAttentionBias {
    /// The math fallback's call when this call runs it ([`super::attention_math`]).
    fn math_call(&self, ctx: &OpCtx) -> Option<super::attention_math::MathCall> {
        (self.backend(ctx) == SdpaBackend::Math).then_some(super::attention_math::MathCall {
            causal: false,
            mask: true,
            mask_broadcast: self.mask_batch < ctx.inputs[0].shape[0]
                || self.mask_heads < ctx.inputs[0].shape[1],
            dropout: ctx.training && self.dropout_p > 0.0,
            kv_contiguous: self.kv_contiguous,
        })
    }

    /// The `[mask_batch, mask_heads, L, S]` mask padded to `[.., S rounded up to 8]` that
    /// mem-efficient attention makes when S is not a multiple of 8 (cuDNN takes the mask as it
    /// is).
    fn padded_mask(&self, backend: SdpaBackend, ctx: &OpCtx) -> Option<TensorMeta> {
        let kv_len = ctx.inputs[1].shape[2];
        if backend != SdpaBackend::Efficient || kv_len.is_multiple_of(MEM_EFF_MASK_ALIGNMENT) {
            return None;
        }
        let m = &ctx.inputs[3];
        let padded = kv_len.div_ceil(MEM_EFF_MASK_ALIGNMENT) * MEM_EFF_MASK_ALIGNMENT;
        Some(TensorMeta::new(
            vec![self.mask_batch, self.mask_heads, m.shape[2], padded],
            m.dtype,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(inputs: &'a [TensorMeta], rg: &'a [bool], training: bool) -> OpCtx<'a> {
        OpCtx {
            inputs,
            params: &[],
            outputs: &[],
            training,
            inputs_require_grad: rg,
            keeps_saved: true,
            saved_unpacked: false,
        }
    }

    fn qkvm(dtype: DType) -> Vec<TensorMeta> {
        vec![
            TensorMeta::new(vec![2, 8, 32, 64], dtype),
            TensorMeta::new(vec![2, 8, 48, 64], dtype),
            TensorMeta::new(vec![2, 8, 48, 64], dtype),
            TensorMeta::new(vec![2, 8, 32, 48], dtype),
        ]
    }

    #[test]
    fn backend_follows_dtype_dropout_and_mask_gradient() {
        let op = ScaledDotProductAttentionBias {
            dropout_p: 0.1,
            mask_batch: 1,
            mask_heads: 8,
            kv_contiguous: false,
        };
        let bf16 = qkvm(DType::BF16);
        let f32 = qkvm(DType::F32);
        let no_grad = [false; 4];
        let mask_grad = [true, true, true, true];
        // dropout rules out flash (no mask) and cuDNN (dropout)
        assert_eq!(
            op.backend(&ctx(&bf16, &no_grad, true)),
            SdpaBackend::Efficient
        );
        // eval: no dropout, cuDNN for half
        assert_eq!(op.backend(&ctx(&bf16, &no_grad, false)), SdpaBackend::Cudnn);
        let op = ScaledDotProductAttentionBias {
            dropout_p: 0.0,
            mask_batch: 1,
            mask_heads: 8,
            kv_contiguous: false,
        };
        assert_eq!(op.backend(&ctx(&bf16, &no_grad, true)), SdpaBackend::Cudnn);
        // cuDNN's backward gives no mask gradient
        assert_eq!(
            op.backend(&ctx(&bf16, &mask_grad, true)),
            SdpaBackend::Efficient
        );
        assert_eq!(
            op.backend(&ctx(&f32, &no_grad, false)),
            SdpaBackend::Efficient
        );
    }

    #[test]
    fn mask_must_cover_the_keys() {
        let op = ScaledDotProductAttentionBias {
            dropout_p: 0.0,
            mask_batch: 1,
            mask_heads: 8,
            kv_contiguous: false,
        };
        let q = [2, 8, 32, 64];
        let k = [2, 8, 48, 64];
        assert!(op.output_shapes(&[&q, &k, &k, &[2, 8, 32, 48]]).is_ok());
        // padded to 16 for the gradient's size
        assert!(op.output_shapes(&[&q, &k, &k, &[2, 8, 32, 64]]).is_ok());
        let err = op
            .output_shapes(&[&q, &k, &k, &[2, 8, 32, 40]])
            .unwrap_err();
        assert!(err.message.contains("mask"), "{err}");
    }
}
