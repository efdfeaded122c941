//! `nn.MaxPool2d`: `max_pool2d_with_indices` on CUDA (int64 indices even under `no_grad`);
//! backward keeps the input and the indices.

use super::*;

/// 2-D max pooling.
#[derive(Debug, Clone)]
pub struct MaxPool2d {
    /// Kernel size.
    pub kernel: u64,
    /// Stride.
    pub stride: u64,
    /// Padding.
    pub padding: u64,
    /// `ceil_mode`.
    pub ceil_mode: bool,
}

impl MaxPool2d {
    /// Kernel k, stride s, padding p.
    pub fn new(kernel: u64, stride: u64, padding: u64) -> Self {
        MaxPool2d {
            kernel,
            stride,
            padding,
            ceil_mode: false,
        }
    }
    /// Sets `ceil_mode=True`.
    pub fn ceil(mut self) -> Self {
        self.ceil_mode = true;
        self
    }
}

impl Op for MaxPool2d {
    fn kind(&self) -> &'static str {
        "MaxPool2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("MaxPool2d", inputs, 0, 4)?;
        let h = window_out(
            "MaxPool2d",
            s[2],
            self.kernel,
            self.stride,
            self.padding,
            1,
            self.ceil_mode,
        )?;
        let w = window_out(
            "MaxPool2d",
            s[3],
            self.kernel,
            self.stride,
            self.padding,
            1,
            self.ceil_mode,
        )?;
        Ok(vec![vec![s[0], s[1], h, w]])
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        vec![TensorMeta::new(ctx.outputs[0].shape.clone(), DType::I64)]
    }

    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Extra(0)]
    }
}
