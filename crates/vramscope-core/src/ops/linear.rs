//! `nn.Linear`: `addmm(bias, x, W.t())` for 2-D input, the flattened addmm for contiguous 3-D input,
//! `matmul` + in-place bias add otherwise. All save the input and the weight.

use super::*;

/// A fully connected layer.
#[derive(Debug, Clone)]
pub struct Linear {
    /// Input features.
    pub in_features: u64,
    /// Output features.
    pub out_features: u64,
    /// Whether there is a bias.
    pub bias: bool,
}

impl Linear {
    /// A linear layer with a bias.
    pub fn new(in_features: u64, out_features: u64) -> Self {
        Linear {
            in_features,
            out_features,
            bias: true,
        }
    }
}

/// The shape rule of a linear map `[..., in] -> [..., out]` (`Linear`, `MatMul4Bit`).
pub(crate) fn linear_shape(
    kind: &'static str,
    s: &[u64],
    in_features: u64,
    out_features: u64,
) -> Result<Vec<Shape>, ShapeError> {
    match s.last() {
        Some(&k) if k == in_features => {
            let mut o = s.to_vec();
            if let Some(last) = o.last_mut() {
                *last = out_features;
            }
            Ok(vec![o])
        }
        _ => Err(ShapeError::new(
            kind,
            format!("input has shape {s:?}, expected the last dimension to be {in_features}"),
        )),
    }
}

impl Op for Linear {
    fn kind(&self) -> &'static str {
        "Linear"
    }

    // addmm (with a bias) computes the input's gradient first; a bias-free linear is an `mm`,
    // whose backward computes mat2's (the weight's) first
    fn grad_order(&self) -> GradOrder {
        if self.bias {
            GradOrder::LeftToRight
        } else {
            GradOrder::RightToLeft
        }
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        linear_shape("Linear", inputs[0], self.in_features, self.out_features)
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let mut p = vec![ParamSpec::param(
            "weight",
            vec![self.out_features, self.in_features],
        )];
        if self.bias {
            p.push(ParamSpec::param("bias", vec![self.out_features]));
        }
        p
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // autograd releases a node's saved tensors in the order of their names: `AddmmBackward0`
    // mat1 (the input) then mat2 (the weight), `MmBackward0` mat2 then self (truth traces: under
    // autocast a bias-free head frees its weight's cast before its input's)
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        if self.bias {
            vec![Saved::Input(0), Saved::Param(0)]
        } else {
            vec![Saved::Param(0), Saved::Input(0)]
        }
    }

    // addmm hands its `self` (the broadcast bias) the output's gradient; the engine sums it to
    // the bias's shape (truth traces: the `sum` after the node's recomputed input is freed)
    fn param_grads(&self, _ctx: &OpCtx) -> Vec<GradIn> {
        if self.bias {
            vec![GradIn::New, GradIn::Reduced(0)]
        } else {
            Vec::new()
        }
    }

    // addmm / mm: the input is kept for the weight's gradient, the weight for the input's
    fn saved_only_for(&self, s: Saved) -> Option<usize> {
        match s {
            Saved::Input(0) => Some(1),
            Saved::Param(0) => Some(0),
            _ => None,
        }
    }
}
