//! transformers' activations by their config name (`ACT2FN` in `activations.py`), as the
//! families read them: `hidden_act`, `activation_function`, `activation`, `hidden_activation`
//! and the last part of T5's `feed_forward_proj`. Each is a module of transformers' class; the
//! pointwise ones are one aten op, the others are written out op by op in the order Python
//! evaluates them (what each keeps for backward decides the memory).

use vramscope_core::ops::{Activation, ActivationKind, Aten, Saved};
use vramscope_core::{GraphBuilder, TensorId};

use super::layers::{add, add_scalar, mul, mul_scalar, pow_fp32};
use super::{HfConfig, HfError};

/// The names [`HfActivation::parse`] knows, for error messages.
pub const SUPPORTED: &str = "gelu, gelu_pytorch_tanh, gelu_new, gelu_accurate, gelu_python_tanh, \
    gelu_fast, quick_gelu, relu, relu2, relu6, silu, swish, sigmoid, tanh, hardswish, linear";

/// The activation a config's `field` names (`default` when it is absent or null).
pub fn from_config(cfg: &HfConfig, field: &str, default: &str) -> Result<HfActivation, HfError> {
    let name = cfg.str(field)?.unwrap_or(default);
    HfActivation::parse(name).ok_or_else(|| HfError::Field {
        path: cfg.path.clone(),
        field: field.into(),
        expected: format!("one of {SUPPORTED} (got {name:?})"),
    })
}

/// One of transformers' activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfActivation {
    /// One pointwise aten op (`F.gelu`, `F.silu`, `nn.ReLU`, ...) inside the module `class`.
    Pointwise {
        /// The op.
        kind: ActivationKind,
        /// transformers' module class.
        class: &'static str,
    },
    /// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))`: `gelu_new`,
    /// `gelu_accurate`, `gelu_python_tanh` (the same ops in the same order).
    TanhGeluWithPow {
        /// transformers' module class.
        class: &'static str,
    },
    /// `FastGELUActivation`: `0.5 * x * (1 + tanh(x * 0.7978845608 * (1 + 0.044715 * x * x)))`.
    FastGelu,
    /// `QuickGELUActivation`: `x * sigmoid(1.702 * x)`.
    QuickGelu,
    /// `ReLUSquaredActivation`: `square(relu(x))`.
    ReluSquared,
    /// `LinearActivation`: returns its input.
    Linear,
}

impl HfActivation {
    /// `silu` (`SiLUActivation`), the Llama family's.
    pub const SILU: HfActivation = HfActivation::Pointwise {
        kind: ActivationKind::SiLU,
        class: "SiLUActivation",
    };

    /// `gelu_pytorch_tanh` (`GELUTanh`), Gemma's.
    pub const GELU_TANH: HfActivation = HfActivation::Pointwise {
        kind: ActivationKind::GELU,
        class: "GELUTanh",
    };

    /// The activation `ACT2FN[name]` builds, if modelled.
    pub fn parse(name: &str) -> Option<HfActivation> {
        let pointwise = |kind, class| Some(HfActivation::Pointwise { kind, class });
        match name {
            "gelu" => pointwise(ActivationKind::GELU, "GELUActivation"),
            "gelu_pytorch_tanh" => pointwise(ActivationKind::GELU, "GELUTanh"),
            "relu" => pointwise(ActivationKind::ReLU, "ReLU"),
            "relu6" => pointwise(ActivationKind::ReLU6, "ReLU6"),
            "silu" => pointwise(ActivationKind::SiLU, "SiLUActivation"),
            "swish" => pointwise(ActivationKind::SiLU, "SiLU"),
            "sigmoid" => pointwise(ActivationKind::Sigmoid, "Sigmoid"),
            "tanh" => pointwise(ActivationKind::Tanh, "Tanh"),
            "hardswish" => pointwise(ActivationKind::Hardswish, "Hardswish"),
            "gelu_new" => Some(HfActivation::TanhGeluWithPow {
                class: "NewGELUActivation",
            }),
            "gelu_accurate" => Some(HfActivation::TanhGeluWithPow {
                class: "AccurateGELUActivation",
            }),
            "gelu_python_tanh" => Some(HfActivation::TanhGeluWithPow { class: "GELUTanh" }),
            "gelu_fast" => Some(HfActivation::FastGelu),
            "quick_gelu" => Some(HfActivation::QuickGelu),
            "relu2" => Some(HfActivation::ReluSquared),
            "linear" => Some(HfActivation::Linear),
            _ => None,
        }
    }

    /// transformers' module class.
    pub fn class(self) -> &'static str {
        match self {
            HfActivation::Pointwise { class, .. } | HfActivation::TanhGeluWithPow { class } => {
                class
            }
            HfActivation::FastGelu => "FastGELUActivation",
            HfActivation::QuickGelu => "QuickGELUActivation",
            HfActivation::ReluSquared => "ReLUSquaredActivation",
            HfActivation::Linear => "LinearActivation",
        }
    }

    /// Whether autocast leaves the output in float32 (a `pow` on the autocast float32 list
    /// promotes what follows it).
    pub fn float32_under_autocast(self) -> bool {
        matches!(
            self,
            HfActivation::TanhGeluWithPow { .. } | HfActivation::ReluSquared
        )
    }

    /// The activation called as the module `name` on `x`.
    pub fn module(self, b: &mut GraphBuilder, name: &str, x: TensorId) -> TensorId {
        b.module(name, self.class(), &[x], |b| self.ops(b, x))
    }

    /// The ops of the activation on `x` inside the current module.
    pub fn ops(self, b: &mut GraphBuilder, x: TensorId) -> TensorId {
        match self {
            HfActivation::Pointwise { kind, .. } => pointwise(b, kind, x),
            HfActivation::TanhGeluWithPow { .. } => tanh_gelu_with_pow(b, x),
            HfActivation::FastGelu => {
                let half = mul_scalar(b, x);
                let scaled = mul_scalar(b, x);
                let c = mul_scalar(b, x);
                let c = mul(b, c, x);
                let c = add_scalar(b, c);
                let inner = mul(b, scaled, c);
                let t = tanh(b, inner);
                let t = add_scalar(b, t);
                mul(b, half, t)
            }
            HfActivation::QuickGelu => {
                let scaled = mul_scalar(b, x);
                let s = pointwise(b, ActivationKind::Sigmoid, scaled);
                mul(b, x, s)
            }
            HfActivation::ReluSquared => {
                let r = pointwise(b, ActivationKind::ReLU, x);
                // torch.square is pow(x, 2): on autocast's float32 list
                pow_fp32(b, r)
            }
            HfActivation::Linear => x,
        }
    }
}

/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))`, op by op (`pow` runs in
/// float32 under autocast, so the rest is promoted to float32).
pub fn tanh_gelu_with_pow(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let half = mul_scalar(b, x);
    let p = pow_fp32(b, x);
    let p = mul_scalar(b, p);
    let inner = add(b, x, p);
    let inner = mul_scalar(b, inner);
    let t = tanh(b, inner);
    let t = add_scalar(b, t);
    mul(b, half, t)
}

/// `torch.tanh(x)`: keeps its output for backward.
fn tanh(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    b.op(Aten::new("tanh", s).saves(vec![Saved::Output(0)]), &[x])
}

fn pointwise(b: &mut GraphBuilder, kind: ActivationKind, x: TensorId) -> TensorId {
    b.op(
        Activation {
            kind,
            inplace: false,
        },
        &[x],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_name_parses_and_nothing_else() {
        for name in SUPPORTED.split(',').map(str::trim) {
            assert!(HfActivation::parse(name).is_some(), "{name}");
        }
        for name in ["mish", "gelu_10", "leaky_relu", "GELU", ""] {
            assert_eq!(HfActivation::parse(name), None, "{name}");
        }
    }
}
