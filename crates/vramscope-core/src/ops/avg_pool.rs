//! `nn.AvgPool2d`: `avg_pool2d`; backward keeps the input.

use super::*;

/// 2-D average pooling.
#[derive(Debug, Clone)]
pub struct AvgPool2d {
    /// Kernel size.
    pub kernel: u64,
    /// Stride.
    pub stride: u64,
    /// Padding.
    pub padding: u64,
    /// `ceil_mode`.
    pub ceil_mode: bool,
}

impl Op for AvgPool2d {
    fn kind(&self) -> &'static str {
        "AvgPool2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("AvgPool2d", inputs, 0, 4)?;
        let h = window_out(
            "AvgPool2d",
            s[2],
            self.kernel,
            self.stride,
            self.padding,
            1,
            self.ceil_mode,
        )?;
        let w = window_out(
            "AvgPool2d",
            s[3],
            self.kernel,
            self.stride,
            self.padding,
            1,
            self.ceil_mode,
        )?;
        Ok(vec![vec![s[0], s[1], h, w]])
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0)]
    }
}
