//! Building blocks shared by the zoo's architectures (thin wrappers over [`GraphBuilder`]).

use vramscope_core::ops::{
    Activation, ActivationKind, AdaptiveAvgPool2d, Add, BatchNorm2d, Conv2d, Dropout, Linear, View,
};
use vramscope_core::{GraphBuilder, TensorId};

/// `nn.ReLU(inplace)` etc. as a leaf module named `name`.
pub fn act(
    b: &mut GraphBuilder,
    name: &str,
    kind: ActivationKind,
    inplace: bool,
    x: TensorId,
) -> TensorId {
    b.layer(name, Activation { kind, inplace }, &[x])
}

/// `torch.flatten(x, 1)` (a view).
pub fn flatten(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    let rest: u64 = s[1..].iter().product();
    b.op(View::new("flatten", vec![s[0], rest]), &[x])
}

/// `a + b` (new tensor) or `a += b`.
pub fn add(b: &mut GraphBuilder, x: TensorId, y: TensorId, inplace: bool) -> TensorId {
    b.op(Add { inplace }, &[x, y])
}

/// `nn.Dropout(p)` as a leaf module; p = 0 is the identity in PyTorch and records nothing.
pub fn dropout(b: &mut GraphBuilder, name: &str, p: f64, x: TensorId) -> TensorId {
    if p == 0.0 {
        // still a registered module, but F.dropout(p=0) returns its input
        b.declare_module(name, "Dropout");
        return x;
    }
    b.layer(name, Dropout { p }, &[x])
}

/// `nn.AdaptiveAvgPool2d(out)` as a leaf module.
pub fn adaptive_avg_pool(
    b: &mut GraphBuilder,
    name: &str,
    out: (u64, u64),
    x: TensorId,
) -> TensorId {
    b.layer(name, AdaptiveAvgPool2d { output: out }, &[x])
}

/// `nn.Linear(in, out)` as a leaf module.
pub fn linear(b: &mut GraphBuilder, name: &str, in_f: u64, out_f: u64, x: TensorId) -> TensorId {
    b.layer(name, Linear::new(in_f, out_f), &[x])
}

/// `nn.Conv2d` as a leaf module.
pub fn conv(b: &mut GraphBuilder, name: &str, c: Conv2d, x: TensorId) -> TensorId {
    b.layer(name, c, &[x])
}

/// `nn.BatchNorm2d(c)` as a leaf module.
pub fn bn(b: &mut GraphBuilder, name: &str, c: u64, x: TensorId) -> TensorId {
    b.layer(name, BatchNorm2d::new(c), &[x])
}

/// A bias-free `k`x`k` convolution with "same" padding (`(k - 1) / 2`), as torchvision's
/// `Conv2dNormActivation` makes it.
pub fn same_conv(cin: u64, cout: u64, k: u64, stride: u64, groups: u64) -> Conv2d {
    Conv2d::new(cin, cout, k)
        .stride(stride)
        .padding((k - 1) / 2)
        .groups(groups)
        .bias(false)
}

/// torchvision's `Conv2dNormActivation` (children `0` conv, `1` batch norm, `2` an in-place
/// activation when there is one), called as child `name` with class `type_name`.
pub fn conv_norm_act(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    c: Conv2d,
    activation: Option<ActivationKind>,
    x: TensorId,
) -> TensorId {
    let cout = c.out_channels;
    b.module(name, type_name, &[x], |b| {
        let mut y = conv(b, "0", c, x);
        y = bn(b, "1", cout, y);
        if let Some(a) = activation {
            y = act(b, "2", a, true, y);
        }
        y
    })
}
