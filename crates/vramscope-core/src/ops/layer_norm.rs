//! `nn.LayerNorm`: `native_layer_norm` returns output, mean and rstd (fp32, one per row); backward
//! keeps input, weight, bias, mean and rstd. Autocast runs it in fp32.

use super::*;

/// Layer normalisation over the last dimension(s).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// The normalised trailing shape.
    pub normalized_shape: Shape,
    /// `elementwise_affine`.
    pub affine: bool,
    /// Whether the affine part has a bias.
    pub bias: bool,
}

impl LayerNorm {
    /// LayerNorm over the last dimension of size `n`, with weight and bias.
    pub fn new(n: u64) -> Self {
        LayerNorm {
            normalized_shape: vec![n],
            affine: true,
            bias: true,
        }
    }
}

impl Op for LayerNorm {
    fn kind(&self) -> &'static str {
        "LayerNorm"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs[0];
        let k = self.normalized_shape.len();
        if s.len() < k || s[s.len() - k..] != self.normalized_shape[..] {
            return Err(ShapeError::new(
                "LayerNorm",
                format!(
                    "input has shape {s:?}, expected it to end with {:?}",
                    self.normalized_shape
                ),
            ));
        }
        Ok(vec![s.to_vec()])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let mut p = Vec::new();
        if self.affine {
            p.push(ParamSpec::param("weight", self.normalized_shape.clone()));
            if self.bias {
                p.push(ParamSpec::param("bias", self.normalized_shape.clone()));
            }
        }
        p
    }

    fn autocast(&self) -> Autocast {
        Autocast::Fp32
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let s = &ctx.inputs[0].shape;
        let k = self.normalized_shape.len();
        let mut stat = s[..s.len() - k].to_vec();
        stat.extend(std::iter::repeat_n(1, k));
        vec![
            TensorMeta::new(stat.clone(), DType::F32),
            TensorMeta::new(stat, DType::F32),
        ]
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Extra(0), Saved::Extra(1)]
    }
}
