//! `nn.Conv2d`: one aten `convolution` (cuDNN on CUDA; depthwise kernels for groups == channels).

use super::*;

/// A 2-D convolution with its hyper-parameters.
#[derive(Debug, Clone)]
pub struct Conv2d {
    /// Input channels.
    pub in_channels: u64,
    /// Output channels.
    pub out_channels: u64,
    /// Kernel (height, width).
    pub kernel: (u64, u64),
    /// Stride (height, width).
    pub stride: (u64, u64),
    /// Zero padding (height, width).
    pub padding: (u64, u64),
    /// Dilation (height, width).
    pub dilation: (u64, u64),
    /// Groups (in_channels for depthwise).
    pub groups: u64,
    /// Whether the module has a bias.
    pub bias: bool,
}

impl Conv2d {
    /// A square-kernel convolution with stride 1, no padding, one group and a bias (PyTorch's defaults).
    pub fn new(in_channels: u64, out_channels: u64, kernel: u64) -> Self {
        Conv2d {
            in_channels,
            out_channels,
            kernel: (kernel, kernel),
            stride: (1, 1),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
            bias: true,
        }
    }
    /// Sets a square stride.
    pub fn stride(mut self, s: u64) -> Self {
        self.stride = (s, s);
        self
    }
    /// Sets a square padding.
    pub fn padding(mut self, p: u64) -> Self {
        self.padding = (p, p);
        self
    }
    /// Sets a square dilation.
    pub fn dilation(mut self, d: u64) -> Self {
        self.dilation = (d, d);
        self
    }
    /// Sets the groups.
    pub fn groups(mut self, g: u64) -> Self {
        self.groups = g;
        self
    }
    /// Sets whether there is a bias.
    pub fn bias(mut self, b: bool) -> Self {
        self.bias = b;
        self
    }
}

impl Op for Conv2d {
    fn kind(&self) -> &'static str {
        "Conv2d"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = expect_rank("Conv2d", inputs, 0, 4)?;
        if s[1] != self.in_channels {
            return Err(ShapeError::new(
                "Conv2d",
                format!("input has {} channels, expected {}", s[1], self.in_channels),
            ));
        }
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(ShapeError::new(
                "Conv2d",
                format!("groups {} must divide the channels", self.groups),
            ));
        }
        let h = window_out(
            "Conv2d",
            s[2],
            self.kernel.0,
            self.stride.0,
            self.padding.0,
            self.dilation.0,
            false,
        )?;
        let w = window_out(
            "Conv2d",
            s[3],
            self.kernel.1,
            self.stride.1,
            self.padding.1,
            self.dilation.1,
            false,
        )?;
        Ok(vec![vec![s[0], self.out_channels, h, w]])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let mut p = vec![ParamSpec::param(
            "weight",
            vec![
                self.out_channels,
                self.in_channels / self.groups,
                self.kernel.0,
                self.kernel.1,
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

    // ConvolutionBackward0 saves input and weight (derivatives.yaml: convolution).
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(0), Saved::Param(0)]
    }
}
