//! `F.scaled_dot_product_attention` with the backend PyTorch picks on an H100 (sm_90, cuDNN 9):
//! cuDNN attention for fp16/bf16 without dropout, flash attention for fp16/bf16 with dropout,
//! memory-efficient attention for fp32. None of them materialises the L×L score matrix; each keeps
//! q, k, v, the output and a float32 log-sum-exp for backward (cuDNN and mem-efficient attention
//! also return two int64 scalars, the philox seed and offset, which backward keeps too). The math
//! fallback (an explicit softmax(QKᵀ)V) keeps the L×L probabilities.

use super::*;

/// Which fused kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SdpaBackend {
    /// cuDNN attention.
    Cudnn,
    /// FlashAttention-2.
    Flash,
    /// Memory-efficient (xformers-style) attention.
    Efficient,
    /// The math fallback.
    Math,
}

impl SdpaBackend {
    /// The backend an H100 picks for this dtype and dropout.
    pub fn on_h100(dtype: DType, dropout: bool) -> SdpaBackend {
        match (dtype, dropout) {
            (DType::F16 | DType::BF16, false) => SdpaBackend::Cudnn,
            (DType::F16 | DType::BF16, true) => SdpaBackend::Flash,
            _ => SdpaBackend::Efficient,
        }
    }
}

/// Scaled dot-product attention over `[B, H, L, E]` q, k, v.
#[derive(Debug, Clone)]
pub struct ScaledDotProductAttention {
    /// Attention dropout probability (active in training only).
    pub dropout_p: f64,
    /// `is_causal`.
    pub causal: bool,
    /// Backward allocates float32 row statistics `[B, H, L]` (seen where the output gradient
    /// arrives permuted, `nn.MultiheadAttention` in ViT; not with the `[B, S, H, D]` layout
    /// Hugging Face models use, causal or not).
    pub row_stats_temporary: bool,
}

impl ScaledDotProductAttention {
    /// The backend for this call.
    pub fn backend(&self, ctx: &OpCtx) -> SdpaBackend {
        SdpaBackend::on_h100(ctx.inputs[0].dtype, ctx.training && self.dropout_p > 0.0)
    }
}

impl Op for ScaledDotProductAttention {
    fn kind(&self) -> &'static str {
        "scaled_dot_product_attention"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![sdpa_output_shape(inputs)?])
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // the fused kernels (`_efficient_attention_backward`, `_flash_attention_backward`, cuDNN's)
    // allocate dq, dk and dv together whatever `grad_input_mask` says (truth traces of LoRA on
    // Gemma3's first layer, whose k and v need none)
    fn kernel_grads(&self) -> u8 {
        3
    }

    fn sdpa_backend(&self, ctx: &OpCtx) -> Option<SdpaBackend> {
        Some(self.backend(ctx))
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        backend_extras(self.backend(ctx), ctx)
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        backend_inference_extras(self.backend(ctx), ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        match self.backend(ctx) {
            backend @ (SdpaBackend::Efficient | SdpaBackend::Cudnn | SdpaBackend::Flash) => {
                fused_saved(None, backend)
            }
            // the math path is several autograd nodes, each keeping its own tensors
            SdpaBackend::Math => {
                let mut s = vec![
                    Saved::Input(0),
                    Saved::Input(1),
                    Saved::Input(2),
                    Saved::Output(0),
                ];
                s.extend((0..self.forward_extras(ctx).len()).map(Saved::Extra));
                s
            }
        }
    }

    // the backward kernels' float32 row statistics (delta = rowsum(dO * O)), where the traces show
    // them (see `row_stats_temporary`)
    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        if !self.row_stats_temporary {
            return Vec::new();
        }
        let q = &ctx.inputs[0].shape;
        vec![q[0] * q[1] * q[2] * 4]
    }
}

/// The results a backend's forward returns besides the output, which backward keeps (q, k, v
/// `[B, H, L, E]` first among `ctx.inputs`).
/// The output `[B, H, L, Dv]` of attention over q `[B, H, L, D]`, k `[B, Hk, S, D]` and v
/// `[B, Hk, S, Dv]` (the shape rule every SDPA op shares).
pub(crate) fn sdpa_output_shape(inputs: &[&[u64]]) -> Result<Shape, ShapeError> {
    let name = "scaled_dot_product_attention";
    let q = expect_rank(name, inputs, 0, 4)?;
    let k = expect_rank(name, inputs, 1, 4)?;
    let v = expect_rank(name, inputs, 2, 4)?;
    if q[3] != k[3] || k[2] != v[2] || q[0] != k[0] {
        return Err(ShapeError::new(
            name,
            format!("q {q:?}, k {k:?}, v {v:?} do not fit together"),
        ));
    }
    Ok(vec![q[0], q[1], q[2], v[3]])
}

/// What a fused kernel's autograd node saves ([`backend_extras`]: log-sum-exp, then the philox
/// seed and offset, or flash attention's `rng_state` and `unused`), in the order it releases them:
/// the generated node's `release_variables` (autograd/generated/Functions.h) releases its saved
/// inputs, then its saved outputs, each sorted by name: `attn_bias` (the mask the kernel read,
/// when there is one), key, query, value, then log-sum-exp, output, and `philox_offset` before
/// `philox_seed` (mem-efficient, cuDNN) or `rng_state` before `unused` (flash; truth traces of
/// GPT-2 under AMP bf16).
pub(crate) fn fused_saved(attn_bias: Option<Saved>, backend: SdpaBackend) -> Vec<Saved> {
    let mut s: Vec<Saved> = attn_bias.into_iter().collect();
    s.extend([
        Saved::Input(1),
        Saved::Input(0),
        Saved::Input(2),
        Saved::Extra(0),
        Saved::Output(0),
    ]);
    if backend == SdpaBackend::Flash {
        s.extend([Saved::Extra(1), Saved::Extra(2)]);
    } else {
        s.extend([Saved::Extra(2), Saved::Extra(1)]);
    }
    s
}

pub(crate) fn backend_extras(backend: SdpaBackend, ctx: &OpCtx) -> Vec<TensorMeta> {
    let q = &ctx.inputs[0].shape;
    let (b, h, l) = (q[0], q[1], q[2]);
    match backend {
        // log-sum-exp padded to 32 rows, then the philox seed and offset (int64 scalars)
        SdpaBackend::Efficient => vec![
            TensorMeta::new(vec![b, h, l.div_ceil(32) * 32], DType::F32),
            TensorMeta::new(vec![], DType::I64),
            TensorMeta::new(vec![], DType::I64),
        ],
        // softmax statistics, then the philox seed and offset (int64 scalars)
        SdpaBackend::Cudnn => vec![
            TensorMeta::new(vec![b, h, l, 1], DType::F32),
            TensorMeta::new(vec![], DType::I64),
            TensorMeta::new(vec![], DType::I64),
        ],
        // log-sum-exp, the philox seed pair and offset (uint64; the debug mask is empty)
        SdpaBackend::Flash => vec![
            TensorMeta::new(vec![b, h, l], DType::F32),
            TensorMeta::new(vec![2], DType::I64),
            TensorMeta::new(vec![], DType::I64),
        ],
        SdpaBackend::Math => {
            let k = &ctx.inputs[1].shape;
            vec![TensorMeta::new(vec![b, h, l, k[2]], ctx.inputs[0].dtype)]
        }
    }
}

/// [`backend_extras`] without grad: mem-efficient attention skips the log-sum-exp (an empty
/// tensor) and cuDNN still returns its statistics; both still make the seed and offset (freed
/// after the call).
pub(crate) fn backend_inference_extras(backend: SdpaBackend, ctx: &OpCtx) -> Vec<TensorMeta> {
    let q = &ctx.inputs[0].shape;
    let (b, h) = (q[0], q[1]);
    match backend {
        SdpaBackend::Efficient => vec![
            TensorMeta::new(vec![b, h, 0], DType::F32),
            TensorMeta::new(vec![], DType::I64),
            TensorMeta::new(vec![], DType::I64),
        ],
        SdpaBackend::Cudnn => backend_extras(backend, ctx),
        _ => Vec::new(),
    }
}
