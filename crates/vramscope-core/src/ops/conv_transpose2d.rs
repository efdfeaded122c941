//! `nn.ConvTranspose2d`: one `convolution(transposed=True)`; backward reads input and weight.

use super::*;

/// A 2-D transposed convolution (square kernel, symmetric padding).
#[derive(Debug, Clone)]
pub struct ConvTranspose2d {
    /// Input channels.
    pub in_channels: u64,
    /// Output channels.
    pub out_channels: u64,
    /// Kernel size.
    pub kernel: u64,
    /// Stride.
    pub stride: u64,
    /// Padding.
    pub padding: u64,
    /// Extra size added to one side of the output.
    pub output_padding: u64,
    /// Dilation.
    pub dilation: u64,
    /// Groups.
    pub groups: u64,
    /// Whether there is a bias.
    pub bias: bool,
}

impl Op for ConvTranspose2d {
    fn kind(&self) -> &'static str {
        "ConvTranspose2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("ConvTranspose2d", inputs, 0, 4)?;
        if s[1] != self.in_channels || self.groups == 0 || self.kernel == 0 {
            return Err(ShapeError::new(
                "ConvTranspose2d",
                format!("input {s:?}: expected {} channels", self.in_channels),
            ));
        }
        let size = |x: u64| -> Result<u64, ShapeError> {
            let full = (x as i128 - 1) * self.stride as i128
                + self.dilation as i128 * (self.kernel as i128 - 1)
                + self.output_padding as i128
                + 1
                - 2 * self.padding as i128;
            if full < 1 {
                return Err(ShapeError::new(
                    "ConvTranspose2d",
                    format!("input {s:?} gives an empty output"),
                ));
            }
            Ok(full as u64)
        };
        Ok(vec![vec![
            s[0],
            self.out_channels,
            size(s[2])?,
            size(s[3])?,
        ]])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let mut p = vec![ParamSpec::param(
            "weight",
            vec![
                self.in_channels,
                self.out_channels / self.groups.max(1),
                self.kernel,
                self.kernel,
            ],
        )];
        if self.bias {
            p.push(ParamSpec::param("bias", vec![self.out_channels]));
        }
        p
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Param(0)]
    }
}
