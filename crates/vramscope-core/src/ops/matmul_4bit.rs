//! bitsandbytes' `MatMul4Bit` (`bnb.matmul_4bit`, the core of `bnb.nn.Linear4bit`): the weight is
//! held as NF4 codes packed two to a byte, and each call dequantizes it into a transient `[out, in]`
//! tensor in the dtype it was quantized from (`quant_state.dtype`), casts that to the input's dtype
//! if they differ, and runs `F.linear`. Autograd keeps only the packed weight (a parameter: no
//! memory); backward dequantizes again for the input's gradient. With double quantization the
//! float32 block scales are themselves rebuilt first (`dequantize_blockwise`, a float32 tensor of
//! one value per 64 weights) and dropped once the weight is out. A single token without autograd
//! takes the fused `gemv_4bit` kernel instead: no dequantized weight.

use super::*;

/// How a weight is quantized: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
/// bnb_4bit_use_double_quant)` with bitsandbytes' block sizes, and the dtype the weight had when
/// it was quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FourBitQuant {
    /// `bnb_4bit_use_double_quant` (`compress_statistics`): the float32 block scales are
    /// quantized to uint8 in blocks of 256, with a float32 scale per block and an offset.
    pub double_quant: bool,
    /// The dtype of the loaded weight that was quantized (`quant_state.dtype`): what
    /// `dequantize_4bit` produces.
    pub quant_dtype: DType,
}

impl FourBitQuant {
    /// Elements per scale (`blocksize`, bitsandbytes' default on CUDA).
    pub const BLOCKSIZE: u64 = 64;
    /// Block scales per second-level scale with double quantization.
    pub const NESTED_BLOCKSIZE: u64 = 256;

    /// Number of 64-element blocks of a weight of `n` elements.
    pub fn blocks(n: u64) -> u64 {
        n.div_ceil(Self::BLOCKSIZE)
    }

    /// The packed weight's shape: `[(n + 1) // 2, 1]` uint8.
    pub fn packed_shape(n: u64) -> Shape {
        vec![n.div_ceil(2), 1]
    }

    /// `dequantize_4bit(B, quant_state)` and the cast to `dtype`, as a scratch program whose
    /// last allocation is the weight `F.linear` / `matmul` reads.
    pub fn dequantize(&self, n: u64, dtype: DType) -> Vec<Scratch> {
        let mut p = Vec::new();
        if self.double_quant {
            p.push(Scratch::Alloc {
                bytes: Self::blocks(n) * 4,
                what: "dequantized absmax",
            });
        }
        let w = p.len();
        p.push(Scratch::Alloc {
            bytes: n * self.quant_dtype.size(),
            what: "dequantized weight",
        });
        if self.double_quant {
            p.push(Scratch::Free(0));
        }
        if dtype != self.quant_dtype {
            p.push(Scratch::Alloc {
                bytes: n * dtype.size(),
                what: "dequantized weight cast",
            });
            p.push(Scratch::Free(w));
        }
        p
    }
}

/// `MatMul4Bit.apply(x, weight.t(), bias, quant_state)`: inputs `x` and, with a bias, the bias
/// (already cast to the compute dtype); parameter 0 is the packed weight.
#[derive(Debug, Clone)]
pub struct MatMul4Bit {
    /// Input features.
    pub in_features: u64,
    /// Output features.
    pub out_features: u64,
    /// Whether input 1 is a bias.
    pub bias: bool,
    /// The quantization.
    pub quant: FourBitQuant,
}

impl MatMul4Bit {
    fn numel(&self) -> u64 {
        self.in_features * self.out_features
    }

    /// `matmul_4bit` takes `gemv_4bit` for one token that needs no gradient (and an input size
    /// that is a multiple of the block size); an input not known to need none is taken to need it.
    fn gemv(&self, ctx: &OpCtx) -> bool {
        let x = ctx.inputs.first();
        let x_requires_grad = ctx.inputs_require_grad.first().copied().unwrap_or(true);
        !x_requires_grad
            && x.is_some_and(|x| {
                crate::ir::numel(&x.shape) == self.in_features
                    && self.in_features.is_multiple_of(FourBitQuant::BLOCKSIZE)
            })
    }
}

impl Op for MatMul4Bit {
    fn kind(&self) -> &'static str {
        "MatMul4Bit"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        super::linear::linear_shape("MatMul4Bit", inputs[0], self.in_features, self.out_features)
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![inputs.first().copied().unwrap_or(DType::BF16); n]
    }

    fn forward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        if self.gemv(ctx) {
            return Vec::new();
        }
        let dtype = ctx.inputs.first().map_or(DType::BF16, |x| x.dtype);
        self.quant.dequantize(self.numel(), dtype)
    }

    // ctx.tensors = (None, B): the packed weight, a parameter
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        Vec::new()
    }

    // matmul(grad_output, dequantize_4bit(B, state).to(grad_output.dtype).t())
    fn backward_scratch(&self, ctx: &OpCtx) -> Vec<Scratch> {
        let dtype = ctx.outputs.first().map_or(DType::BF16, |y| y.dtype);
        self.quant.dequantize(self.numel(), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(double_quant: bool, quant_dtype: DType) -> MatMul4Bit {
        MatMul4Bit {
            in_features: 128,
            out_features: 64,
            bias: false,
            quant: FourBitQuant {
                double_quant,
                quant_dtype,
            },
        }
    }

    fn ctx<'a>(x: &'a [TensorMeta], requires_grad: &'a [bool]) -> OpCtx<'a> {
        OpCtx {
            inputs: x,
            params: &[],
            outputs: &[],
            training: true,
            inputs_require_grad: requires_grad,
            keeps_saved: true,
            saved_unpacked: false,
        }
    }

    #[test]
    fn the_weight_is_dequantized_in_its_own_dtype_then_cast() {
        let x = [TensorMeta::new(vec![2, 5, 128], DType::BF16)];
        let n = 128 * 64;
        let plain = op(false, DType::BF16).forward_scratch(&ctx(&x, &[true]));
        assert_eq!(
            plain,
            vec![Scratch::Alloc {
                bytes: n * 2,
                what: "dequantized weight"
            }]
        );
        // double quantization rebuilds the float32 scales first; a float32 checkpoint's weight is
        // dequantized to float32, then cast to the bf16 input's dtype
        let p = op(true, DType::F32).forward_scratch(&ctx(&x, &[true]));
        let bytes: Vec<u64> = p
            .iter()
            .filter_map(|s| match s {
                Scratch::Alloc { bytes, .. } => Some(*bytes),
                Scratch::Free(_)
                | Scratch::DropIncoming
                | Scratch::ReleaseSaved(_)
                | Scratch::Outputs => None,
            })
            .collect();
        assert_eq!(bytes, vec![n / 64 * 4, n * 4, n * 2]);
        assert!(p.contains(&Scratch::Free(0)) && p.contains(&Scratch::Free(1)));
    }

    #[test]
    fn one_token_without_grad_takes_the_gemv_kernel() {
        let x = [TensorMeta::new(vec![1, 1, 128], DType::BF16)];
        assert!(op(true, DType::BF16)
            .forward_scratch(&ctx(&x, &[false]))
            .is_empty());
        assert!(!op(true, DType::BF16)
            .forward_scratch(&ctx(&x, &[true]))
            .is_empty());
    }
}
