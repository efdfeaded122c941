//! `F.scaled_dot_product_attention` with the backend PyTorch picks on an H100 (sm_90, cuDNN 9;
//! [`SdpaBackend::choose`]): cuDNN attention for fp16/bf16 without dropout, flash attention for
//! fp16/bf16 with dropout, memory-efficient attention for fp32, each within its head-dim limits.
//! None of them materialises the L×L score matrix; each keeps q, k, v, the output and a float32
//! log-sum-exp for backward (cuDNN and mem-efficient attention also return two int64 scalars, the
//! philox seed and offset, which backward keeps too). Flash attention over a head dim that is not
//! a multiple of 8 runs on padded copies of q, k and v. The math fallback (an explicit
//! softmax(QKᵀ)V) keeps the L×L probabilities.

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

/// What the choice of an attention kernel depends on besides the dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaCall {
    /// q's and k's head dim.
    pub head_dim: u64,
    /// v's head dim.
    pub head_dim_v: u64,
    /// Dropout is active (training with `dropout_p > 0`).
    pub dropout: bool,
    /// An `attn_mask` is passed.
    pub mask: bool,
    /// The mask requires grad (T5's relative position bias being trained).
    pub mask_grad: bool,
    /// q, k or v requires grad, with grad mode on.
    pub grad: bool,
}

impl SdpaCall {
    /// A call over q, k and v that share `head_dim`, with no gradient for a mask: what the ops
    /// around an attention call (its heads views, its output's transpose) know of it.
    pub fn around(head_dim: u64, dropout: bool, mask: bool, grad: bool) -> SdpaCall {
        SdpaCall {
            head_dim,
            head_dim_v: head_dim,
            dropout,
            mask,
            mask_grad: false,
            grad,
        }
    }

    /// The call of attention over q `[.., E]` and v `[.., Ev]`, with grad as `ctx` says (or, where
    /// it is not known, as `ctx.training` does).
    pub fn of(ctx: &OpCtx, dropout_p: f64, mask: bool) -> SdpaCall {
        let rg = ctx.inputs_require_grad;
        SdpaCall {
            head_dim: ctx.inputs[0].shape.last().copied().unwrap_or(0),
            head_dim_v: ctx.inputs[2].shape.last().copied().unwrap_or(0),
            dropout: ctx.training && dropout_p > 0.0,
            mask,
            mask_grad: mask && rg.get(3).copied().unwrap_or(false),
            grad: if rg.is_empty() {
                ctx.training
            } else {
                rg.iter().take(3).any(|&g| g)
            },
        }
    }
}

/// Flash attention pads q's, k's and v's head dims to a multiple of this (`pad_last_dim<8>`).
pub const FLASH_HEAD_DIM_ALIGNMENT: u64 = 8;

impl SdpaBackend {
    /// The backend `select_sdp_backend` picks on an H100 (sm_90, cuDNN 9), in its order of
    /// priority, as torch 2.15's own dispatcher answers under `../shared/truth`'s fake H100
    /// (`validation/sdpa_choice.py` prints the table this follows):
    ///
    /// - cuDNN attention: fp16/bf16, no dropout, head dims multiples of 8 up to 256; with grad
    ///   only up to 128 or exactly 256; no gradient for a mask.
    /// - Flash attention: fp16/bf16, no mask, head dims up to 256 (padded to a multiple of 8).
    /// - Memory-efficient attention: head dims aligned to 16 bytes (8 elements in half
    ///   precision, 4 in float32).
    /// - The math fallback otherwise.
    pub fn choose(dtype: DType, call: &SdpaCall) -> SdpaBackend {
        let (d, dv) = (call.head_dim, call.head_dim_v);
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let aligned = |n: u64| match dtype {
            DType::F16 | DType::BF16 => n.is_multiple_of(8),
            DType::F32 => n.is_multiple_of(4),
            _ => false,
        };
        let cudnn = half
            && !call.dropout
            && !call.mask_grad
            && d.is_multiple_of(8)
            && dv.is_multiple_of(8)
            && d.max(dv) <= 256
            && (!call.grad || d.max(dv) <= 128 || (d == 256 && dv == 256));
        if cudnn {
            SdpaBackend::Cudnn
        } else if half && !call.mask && d.max(dv) <= 256 {
            SdpaBackend::Flash
        } else if aligned(d) && aligned(dv) {
            SdpaBackend::Efficient
        } else {
            SdpaBackend::Math
        }
    }

    /// Whether the kernel hands its output and its q, k and v gradients back as contiguous
    /// heads-first `[B, H, S, D]` tensors whatever its inputs' layout: the math fallback's
    /// `bmm` results, padded flash attention's slice and `ConstantPadNdBackward0` copies.
    pub fn heads_first(self, call: &SdpaCall) -> bool {
        self == SdpaBackend::Math || self.pads_head_dims(call)
    }

    /// Whether flash attention runs on padded copies of q, k and v (a head dim that is not a
    /// multiple of 8).
    pub fn pads_head_dims(self, call: &SdpaCall) -> bool {
        self == SdpaBackend::Flash
            && !(call.head_dim.is_multiple_of(FLASH_HEAD_DIM_ALIGNMENT)
                && call.head_dim_v.is_multiple_of(FLASH_HEAD_DIM_ALIGNMENT))
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
    /// k and v are contiguous `[B, H, S, D]` (a KV cache's concatenations, `repeat_kv`'s
    /// copies) rather than transposed projections: the math fallback's `matmul` reads them as
    /// they are.
    pub kv_contiguous: bool,
}

impl ScaledDotProductAttention {
    /// The backend for this call.
    pub fn backend(&self, ctx: &OpCtx) -> SdpaBackend {
        SdpaBackend::choose(ctx.inputs[0].dtype, &self.call(ctx))
    }

    fn call(&self, ctx: &OpCtx) -> SdpaCall {
        SdpaCall::of(ctx, self.dropout_p, false)
    }

    /// Whether this call runs the math fallback ([`super::attention_math`]).
    fn math(&self, ctx: &OpCtx) -> bool {
        self.backend(ctx) == SdpaBackend::Math
    }

    /// Whether dropout is active in this call.
    fn dropout(&self, ctx: &OpCtx) -> bool {
        ctx.training && self.dropout_p > 0.0
    }

    /// The math fallback's call ([`super::attention_math`]).
    fn math_call(&self, ctx: &OpCtx) -> super::attention_math::MathCall {
        super::attention_math::MathCall {
            causal: self.causal,
            mask: false,
            mask_broadcast: false,
            dropout: self.dropout(ctx),
            kv_contiguous: self.kv_contiguous,
        }
    }

    /// Whether this call is flash attention over padded copies of q, k and v.
    fn padded(&self, ctx: &OpCtx) -> bool {
        let call = self.call(ctx);
        SdpaBackend::choose(ctx.inputs[0].dtype, &call).pads_head_dims(&call)
    }
}

/// `t` with its last dim padded to a multiple of 8.
fn padded_last_dim(t: &TensorMeta) -> TensorMeta {
    let mut shape = t.shape.clone();
    if let Some(last) = shape.last_mut() {
        *last = last.div_ceil(FLASH_HEAD_DIM_ALIGNMENT) * FLASH_HEAD_DIM_ALIGNMENT;
    }
    TensorMeta::new(shape, t.dtype)
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

    // padded flash attention returns a slice of its padded output (`post_process_flash_output`)
    fn alias_for(&self, ctx: &OpCtx) -> Alias {
        if self.padded(ctx) {
            Alias::ViewOfExtra(0)
        } else {
            Alias::None
        }
    }

    // the fused kernels (`_efficient_attention_backward`, `_flash_attention_backward`, cuDNN's)
    // allocate dq, dk and dv together whatever `grad_input_mask` says (truth traces of LoRA on
    // Gemma3's first layer, whose k and v need none); padded flash attention's are in its
    // backward scratch program
    fn kernel_grads(&self, ctx: &OpCtx) -> u8 {
        if self.padded(ctx) || self.math(ctx) {
            0
        } else {
            3
        }
    }

    fn sdpa_backend(&self, ctx: &OpCtx) -> Option<SdpaBackend> {
        Some(self.backend(ctx))
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        match self.backend(ctx) {
            _ if self.padded(ctx) => padded_flash_extras(ctx),
            // its intermediates are the forward program's
            SdpaBackend::Math => Vec::new(),
            backend => backend_extras(backend, ctx),
        }
    }

    fn forward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        if !self.math(ctx) {
            return Vec::new();
        }
        super::attention_math::forward_scratch(ctx, &self.math_call(ctx))
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        if self.padded(ctx) {
            return padded_flash_extras(ctx);
        }
        backend_inference_extras(self.backend(ctx), ctx)
    }

    // the padded copies of q, k and v (`pad_last_dim<8>`, `constant_pad_nd`)
    fn extras_made_first(&self, ctx: &OpCtx) -> usize {
        if self.padded(ctx) {
            3
        } else {
            0
        }
    }

    // each padded copy's `ConstantPadNdBackward0` narrows its gradient after the kernel's node
    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        if self.padded(ctx) {
            return vec![
                GradIn::Narrowed(1),
                GradIn::Narrowed(2),
                GradIn::Narrowed(3),
            ];
        }
        if self.math(ctx) {
            return super::attention_math::input_grads(ctx, &self.math_call(ctx));
        }
        new_grads_for_float_inputs(ctx)
    }

    // padded flash attention: `SliceBackward0` copies the output's gradient into a zeroed padded
    // tensor and drops it; the kernel makes padded dq, dk and dv; the copy goes (truth traces)
    fn backward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        if self.math(ctx) {
            return super::attention_math::backward_scratch(ctx, &self.math_call(ctx));
        }
        if !self.padded(ctx) {
            return Vec::new();
        }
        let padded = |t: &TensorMeta| padded_last_dim(t).bytes();
        vec![
            Scratch::Alloc {
                bytes: padded(&ctx.outputs[0]),
                what: "padded output gradient",
            },
            Scratch::DropIncoming,
            Scratch::Alloc {
                bytes: padded(&ctx.inputs[0]),
                what: "padded q gradient",
            },
            Scratch::Alloc {
                bytes: padded(&ctx.inputs[1]),
                what: "padded k gradient",
            },
            Scratch::Alloc {
                bytes: padded(&ctx.inputs[2]),
                what: "padded v gradient",
            },
            Scratch::Free(0),
        ]
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        if self.padded(ctx) {
            // the flash node's saved inputs are the padded copies (key, query, value), then
            // log-sum-exp, the padded output, `rng_state` and `unused`
            return vec![
                Saved::Extra(5),
                Saved::Extra(4),
                Saved::Extra(6),
                Saved::Extra(1),
                Saved::Extra(0),
                Saved::Extra(2),
                Saved::Extra(3),
            ];
        }
        match self.backend(ctx) {
            backend @ (SdpaBackend::Efficient | SdpaBackend::Cudnn | SdpaBackend::Flash) => {
                fused_saved(None, backend)
            }
            // the math path is several autograd nodes, each keeping its own tensors
            SdpaBackend::Math => {
                super::attention_math::saved_for_backward(ctx, &self.math_call(ctx))
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

/// Padded flash attention's results ([`Alias::ViewOfExtra`]): the padded output, the kernel's
/// statistics, then the padded copies of q, k and v it made first.
fn padded_flash_extras(ctx: &OpCtx) -> Vec<TensorMeta> {
    let mut e = vec![padded_last_dim(&ctx.outputs[0])];
    e.extend(backend_extras(SdpaBackend::Flash, ctx));
    e.extend(ctx.inputs[..3].iter().map(padded_last_dim));
    e
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
        SdpaBackend::Cudnn | SdpaBackend::Flash => backend_extras(backend, ctx),
        SdpaBackend::Math => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch 2.15's own choice on the truth tool's fake H100 (`validation/sdpa_choice.py`).
    const TORCH_CHOICES: &str = include_str!("../../../../fixtures/sdpa/choice_h100.txt");

    #[test]
    fn backend_is_the_one_torch_picks_on_an_h100() {
        let mut lines = TORCH_CHOICES.lines();
        let header = lines.next().expect("a header line");
        let dims: Vec<u64> = header
            .split(':')
            .nth(1)
            .expect("`:` before the head dims")
            .split_whitespace()
            .map(|d| d.parse().expect("a head dim"))
            .collect();
        let mut checked = 0;
        for line in lines {
            let (args, codes) = line.split_once(':').expect("`:` in every row");
            let a: Vec<&str> = args.split_whitespace().collect();
            let dtype = match a[0] {
                "bf16" => DType::BF16,
                "fp16" => DType::F16,
                _ => DType::F32,
            };
            let kv_len: u64 = a[7].parse().expect("S");
            for (&d, code) in dims.iter().zip(codes.split_whitespace()) {
                let call = SdpaCall::around(d, a[1] != "0.0", a[4] != "None", a[2] == "1");
                let backend = SdpaBackend::choose(dtype, &call);
                let expected = match &code[..1] {
                    "C" => SdpaBackend::Cudnn,
                    "F" => SdpaBackend::Flash,
                    "E" => SdpaBackend::Efficient,
                    _ => SdpaBackend::Math,
                };
                assert_eq!(backend, expected, "{line} (head dim {d})");
                // flash attention pads q, k and v; mem-efficient attention a mask whose rows are
                // not a multiple of 8
                let padded = code.ends_with('p');
                match backend {
                    SdpaBackend::Efficient => assert_eq!(
                        padded,
                        call.mask && !kv_len.is_multiple_of(super::super::MEM_EFF_MASK_ALIGNMENT),
                        "{line} (head dim {d})"
                    ),
                    _ => assert_eq!(
                        padded,
                        backend.pads_head_dims(&call),
                        "{line} (head dim {d})"
                    ),
                }
                checked += 1;
            }
        }
        assert!(checked > 3000, "only {checked} choices in the table");
    }
}
