//! Pointwise activations (ReLU, ReLU6, SiLU, GELU, Hardswish, Hardsigmoid, Sigmoid, Tanh) and their
//! `inplace=True` variants.
//!
//! What backward needs decides memory: ReLU, Sigmoid and Tanh keep their *output*; the others keep
//! their *input*. An in-place op whose formula needs the input (`silu_`, `hardswish_`, `gelu_`,
//! and `hardtanh_` = `ReLU6(inplace=True)`, whose `HardtanhBackward0` keeps `self` in torch 2.15)
//! makes autograd save a clone of the original (`original_self`), so in-place saves nothing there.

use super::*;

/// Which activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationKind {
    /// `nn.ReLU`
    ReLU,
    /// `nn.ReLU6` (hardtanh 0..6)
    ReLU6,
    /// `nn.SiLU`
    SiLU,
    /// `nn.GELU`
    GELU,
    /// `nn.Hardswish`
    Hardswish,
    /// `nn.Hardsigmoid`
    Hardsigmoid,
    /// `nn.Sigmoid`
    Sigmoid,
    /// `nn.Tanh`
    Tanh,
}

impl ActivationKind {
    /// The module class name.
    pub fn name(self) -> &'static str {
        match self {
            ActivationKind::ReLU => "ReLU",
            ActivationKind::ReLU6 => "ReLU6",
            ActivationKind::SiLU => "SiLU",
            ActivationKind::GELU => "GELU",
            ActivationKind::Hardswish => "Hardswish",
            ActivationKind::Hardsigmoid => "Hardsigmoid",
            ActivationKind::Sigmoid => "Sigmoid",
            ActivationKind::Tanh => "Tanh",
        }
    }

    /// Whether the backward formula reads the output (else it reads the input).
    fn saves_output(self) -> bool {
        matches!(
            self,
            ActivationKind::ReLU | ActivationKind::Sigmoid | ActivationKind::Tanh
        )
    }
}

/// A pointwise activation.
#[derive(Debug, Clone)]
pub struct Activation {
    /// Which one.
    pub kind: ActivationKind,
    /// `inplace=True`.
    pub inplace: bool,
}

impl Op for Activation {
    fn kind(&self) -> &'static str {
        self.kind.name()
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![inputs[0].to_vec()])
    }

    fn alias(&self) -> Alias {
        if self.inplace {
            Alias::InPlace(0)
        } else {
            Alias::None
        }
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        // in-place ops whose backward reads the input clone it first
        if self.inplace && !self.kind.saves_output() {
            vec![ctx.inputs[0].clone()]
        } else {
            Vec::new()
        }
    }

    fn inplace_variant(&self) -> Option<std::sync::Arc<dyn Op>> {
        // nn.GELU, nn.Sigmoid and nn.Tanh have no `inplace` argument
        let has_inplace = matches!(
            self.kind,
            ActivationKind::ReLU
                | ActivationKind::ReLU6
                | ActivationKind::SiLU
                | ActivationKind::Hardswish
                | ActivationKind::Hardsigmoid
        );
        (has_inplace && !self.inplace).then(|| {
            std::sync::Arc::new(Activation {
                kind: self.kind,
                inplace: true,
            }) as std::sync::Arc<dyn Op>
        })
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        if self.kind.saves_output() {
            vec![Saved::Output(0)]
        } else if self.inplace {
            vec![Saved::Extra(0)]
        } else {
            vec![Saved::Input(0)]
        }
    }
}
