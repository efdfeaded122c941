//! Element types of tensors and the precision modes a step can run in.

use serde::Serialize;

/// A tensor element type, as PyTorch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// `torch.float32`
    F32,
    /// `torch.float16`
    F16,
    /// `torch.bfloat16`
    BF16,
    /// `torch.float64`
    F64,
    /// `torch.int64` (indices, class labels)
    I64,
    /// `torch.int32`
    I32,
    /// `torch.uint8`
    U8,
    /// `torch.bool` (masks)
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point type (autocast and autograd only touch those).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// The name PyTorch prints (`float32`, `bfloat16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Type promotion between two floating types (the wider wins; fp16 with bf16 gives fp32).
    pub fn promote(self, other: DType) -> DType {
        if self == other {
            return self;
        }
        if !self.is_float() {
            return other;
        }
        if !other.is_float() {
            return self;
        }
        let rank = |d: DType| match d {
            DType::F64 => 3,
            DType::F32 => 2,
            _ => 1,
        };
        match rank(self).cmp(&rank(other)) {
            std::cmp::Ordering::Greater => self,
            std::cmp::Ordering::Less => other,
            // fp16 vs bf16
            std::cmp::Ordering::Equal => DType::F32,
        }
    }
}

/// How the step computes: plain fp32, the whole model cast to half, or autocast (AMP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Precision {
    /// Everything in float32.
    #[serde(rename = "fp32")]
    Fp32,
    /// `model.half()`: parameters, activations and gradients in float16.
    #[serde(rename = "fp16")]
    Fp16,
    /// `model.bfloat16()`.
    #[serde(rename = "bf16")]
    Bf16,
    /// `torch.autocast("cuda", torch.float16)` with `GradScaler`.
    #[serde(rename = "amp-fp16")]
    AmpFp16,
    /// `torch.autocast("cuda", torch.bfloat16)`.
    #[serde(rename = "amp-bf16")]
    AmpBf16,
}

impl Precision {
    /// Every precision, in the order the CLI lists them.
    pub const ALL: [Precision; 5] = [
        Precision::Fp32,
        Precision::Fp16,
        Precision::Bf16,
        Precision::AmpFp16,
        Precision::AmpBf16,
    ];

    /// The CLI spelling (`amp-bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::AmpFp16 => "amp-fp16",
            Precision::AmpBf16 => "amp-bf16",
        }
    }

    /// Parses the CLI spelling.
    pub fn parse(s: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The dtype parameters are stored in.
    pub fn param_dtype(self) -> DType {
        match self {
            Precision::Fp16 => DType::F16,
            Precision::Bf16 => DType::BF16,
            _ => DType::F32,
        }
    }

    /// The autocast dtype, if autocast is on.
    pub fn autocast_dtype(self) -> Option<DType> {
        match self {
            Precision::AmpFp16 => Some(DType::F16),
            Precision::AmpBf16 => Some(DType::BF16),
            _ => None,
        }
    }

    /// The dtype autocast's lower-precision ops (matmuls, attention) run in: the autocast dtype,
    /// else the parameters'.
    pub fn compute_dtype(self) -> DType {
        self.autocast_dtype().unwrap_or(self.param_dtype())
    }

    /// Whether a `GradScaler` runs (autocast fp16).
    pub fn uses_grad_scaler(self) -> bool {
        self == Precision::AmpFp16
    }
}
