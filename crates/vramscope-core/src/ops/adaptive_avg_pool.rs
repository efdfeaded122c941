//! `nn.AdaptiveAvgPool2d`: an output of 1x1 is computed as `mean(dim=(-2,-1), keepdim=True)` (saves
//! nothing); other sizes call `_adaptive_avg_pool2d`, which keeps its input.

use super::*;

/// Adaptive average pooling to a fixed output size.
#[derive(Debug, Clone)]
pub struct AdaptiveAvgPool2d {
    /// Output (height, width).
    pub output: (u64, u64),
}

impl Op for AdaptiveAvgPool2d {
    fn kind(&self) -> &'static str {
        "AdaptiveAvgPool2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("AdaptiveAvgPool2d", inputs, 0, 4)?;
        Ok(vec![vec![s[0], s[1], self.output.0, self.output.1]])
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        if self.output == (1, 1) {
            Vec::new()
        } else {
            vec![Saved::Input(0)]
        }
    }
}
