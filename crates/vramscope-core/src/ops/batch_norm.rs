//! `nn.BatchNorm2d`: `cudnn_batch_norm` in training (output, save_mean, save_invstd, reserve),
//! the inference kernel in eval mode. `num_batches_tracked += 1` is in place.

use super::*;

/// Batch normalisation over channels of an NCHW tensor.
#[derive(Debug, Clone)]
pub struct BatchNorm2d {
    /// Channels.
    pub num_features: u64,
    /// `affine=True`: weight and bias parameters.
    pub affine: bool,
}

impl BatchNorm2d {
    /// An affine batch norm with running statistics (PyTorch's defaults).
    pub fn new(num_features: u64) -> Self {
        BatchNorm2d {
            num_features,
            affine: true,
        }
    }
}

impl Op for BatchNorm2d {
    fn kind(&self) -> &'static str {
        "BatchNorm2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("BatchNorm2d", inputs, 0, 4)?;
        if s[1] != self.num_features {
            return Err(ShapeError::new(
                "BatchNorm2d",
                format!(
                    "input has {} channels, expected {}",
                    s[1], self.num_features
                ),
            ));
        }
        Ok(vec![s.to_vec()])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let c = self.num_features;
        let mut p = Vec::new();
        if self.affine {
            p.push(ParamSpec::param("weight", vec![c]));
            p.push(ParamSpec::param("bias", vec![c]));
        }
        p.push(ParamSpec::buffer("running_mean", vec![c]));
        p.push(ParamSpec::buffer("running_var", vec![c]));
        p.push(ParamSpec {
            name: "num_batches_tracked",
            shape: vec![],
            is_buffer: true,
            fixed_dtype: Some(DType::I64),
        });
        p
    }

    // save_mean and save_invstd are fp32 [C]; cuDNN's reserve space is empty for NCHW batch norm.
    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        if !ctx.training {
            return Vec::new();
        }
        let c = self.num_features;
        vec![
            TensorMeta::new(vec![c], DType::F32),
            TensorMeta::new(vec![c], DType::F32),
            TensorMeta::new(vec![0], DType::U8),
        ]
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        if !ctx.training {
            return vec![Saved::Input(0)];
        }
        vec![
            Saved::Input(0),
            Saved::Extra(0),
            Saved::Extra(1),
            Saved::Extra(2),
        ]
    }
}
