//! `nn.GroupNorm` (`native_group_norm`: output, fp32 mean and rstd of shape [N, G]; backward reads
//! the input, mean, rstd and weight). ONNX InstanceNormalization is mapped onto it with G = C.

use super::*;

/// Group normalization over `groups` groups of `channels` channels (affine).
#[derive(Debug, Clone)]
pub struct GroupNorm {
    /// Channels C (dimension 1).
    pub channels: u64,
    /// Groups G.
    pub groups: u64,
}

impl Op for GroupNorm {
    fn kind(&self) -> &'static str {
        "GroupNorm"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs
            .first()
            .ok_or_else(|| ShapeError::new("GroupNorm", "missing input"))?;
        if s.len() < 2 || s[1] != self.channels {
            return Err(ShapeError::new(
                "GroupNorm",
                format!(
                    "input {s:?} must have {} channels in dimension 1",
                    self.channels
                ),
            ));
        }
        if self.groups == 0 || !self.channels.is_multiple_of(self.groups) {
            return Err(ShapeError::new(
                "GroupNorm",
                format!(
                    "{} groups must divide {} channels",
                    self.groups, self.channels
                ),
            ));
        }
        Ok(vec![s.to_vec()])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        vec![
            ParamSpec::param("weight", vec![self.channels]),
            ParamSpec::param("bias", vec![self.channels]),
        ]
    }

    fn autocast(&self) -> Autocast {
        Autocast::Fp32
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let n = ctx.inputs[0].shape[0];
        vec![
            TensorMeta::new(vec![n, self.groups], DType::F32),
            TensorMeta::new(vec![n, self.groups], DType::F32),
        ]
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![
            Saved::Input(0),
            Saved::Extra(0),
            Saved::Extra(1),
            Saved::Param(0),
        ]
    }
}
