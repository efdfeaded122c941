//! `nn.Conv1d` / `nn.Conv3d` (and any other number of spatial dims): one aten `convolution`, like
//! [`Conv2d`](super::Conv2d), over `[N, C, *spatial]`. cuDNN runs 1-D convolutions as 2-D ones on
//! a view; autograd keeps the input and the weight either way.

use super::*;

/// An N-d convolution (`kernel.len()` spatial dims) with per-dim stride, padding and dilation.
#[derive(Debug, Clone)]
pub struct ConvNd {
    /// Input channels.
    pub in_channels: u64,
    /// Output channels.
    pub out_channels: u64,
    /// Kernel size per spatial dim.
    pub kernel: Vec<u64>,
    /// Stride per spatial dim.
    pub stride: Vec<u64>,
    /// Zero padding per spatial dim (both sides).
    pub padding: Vec<u64>,
    /// Dilation per spatial dim.
    pub dilation: Vec<u64>,
    /// Groups.
    pub groups: u64,
    /// Whether the module has a bias.
    pub bias: bool,
}

impl ConvNd {
    fn kind_name(&self) -> &'static str {
        match self.kernel.len() {
            1 => "Conv1d",
            3 => "Conv3d",
            _ => "ConvNd",
        }
    }
}

impl Op for ConvNd {
    fn kind(&self) -> &'static str {
        self.kind_name()
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let op = self.kind_name();
        let d = self.kernel.len();
        let s = expect_rank(op, inputs, 0, d + 2)?;
        if [&self.stride, &self.padding, &self.dilation]
            .iter()
            .any(|v| v.len() != d)
        {
            return Err(ShapeError::new(
                op,
                format!("kernel {:?}, stride {:?}, padding {:?} and dilation {:?} must have one entry per spatial dim", self.kernel, self.stride, self.padding, self.dilation),
            ));
        }
        if s[1] != self.in_channels {
            return Err(ShapeError::new(
                op,
                format!("input has {} channels, expected {}", s[1], self.in_channels),
            ));
        }
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(ShapeError::new(
                op,
                format!("groups {} must divide the channels", self.groups),
            ));
        }
        let mut out = vec![s[0], self.out_channels];
        for i in 0..d {
            out.push(window_out(
                op,
                s[2 + i],
                self.kernel[i],
                self.stride[i],
                self.padding[i],
                self.dilation[i],
                false,
            )?);
        }
        Ok(vec![out])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let mut w = vec![self.out_channels, self.in_channels / self.groups.max(1)];
        w.extend(&self.kernel);
        let mut p = vec![ParamSpec::param("weight", w)];
        if self.bias {
            p.push(ParamSpec::param("bias", vec![self.out_channels]));
        }
        p
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    // ConvolutionBackward0 saves input and weight (derivatives.yaml: convolution).
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Param(0)]
    }
}
