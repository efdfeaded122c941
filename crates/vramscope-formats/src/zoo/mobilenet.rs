//! torchvision MobileNetV2 and MobileNetV3 small/large (torchvision/models/mobilenetv2.py,
//! mobilenetv3.py, width 1.0), built from `Conv2dNormActivation` (conv without bias, batch norm,
//! in-place ReLU6 / ReLU / Hardswish).
//!
//! MobileNetV2's residual is `x + self.conv(x)` (a new tensor), its pooling the functional
//! `adaptive_avg_pool2d(x, (1, 1))` (a `mean`) in the root, its classifier `Dropout(0.2), Linear`.
//! MobileNetV3's residual is `result += input` (in place); its squeeze-excitation is
//! `AdaptiveAvgPool2d(1)` → `fc1` → `ReLU` → `fc2` → `Hardsigmoid` (not in place) → `scale * input`;
//! its classifier `Linear, Hardswish(inplace), Dropout(0.2, inplace=True), Linear`.

use vramscope_core::ops::{
    ActivationKind, AdaptiveAvgPool2d, BatchNorm2d, Conv2d, DropoutInplace, Mul,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, add, conv, dropout, flatten, linear, same_conv, ZooInput};

/// torchvision's `_make_divisible(v, 8)` for integer `v`.
fn make_divisible(v: u64) -> u64 {
    let d = 8;
    let new_v = d.max((v + d / 2) / d * d);
    if 10 * new_v < 9 * v {
        new_v + d
    } else {
        new_v
    }
}

/// `Conv2dNormActivation(in, out, k, stride, groups, activation_layer=act)` called as child `name`.
#[allow(clippy::too_many_arguments)]
fn conv_norm_act(
    b: &mut GraphBuilder,
    name: &str,
    in_c: u64,
    out_c: u64,
    kernel: u64,
    stride: u64,
    groups: u64,
    activation: Option<ActivationKind>,
    x: TensorId,
) -> TensorId {
    let c = same_conv(in_c, out_c, kernel, stride, groups);
    super::conv_norm_act(b, name, "Conv2dNormActivation", c, activation, x)
}

/// Builds MobileNetV2: returns the logits.
pub fn mobilenet_v2(b: &mut GraphBuilder, x: TensorId, input: &ZooInput) -> TensorId {
    let relu6 = Some(ActivationKind::ReLU6);
    // t, c, n, s
    const SETTING: [(u64, u64, u64, u64); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let last_channel = 1280;
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = conv_norm_act(b, "0", input.channels, 32, 3, 2, 1, relu6, x);
        let mut inp = 32;
        let mut idx = 1u32;
        for (t, c, n, s) in SETTING {
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                let hidden = inp * t;
                let res = stride == 1 && inp == c;
                x = b.module(&idx.to_string(), "InvertedResidual", &[x], |b| {
                    let y = b.module("conv", "Sequential", &[x], |b| {
                        let mut y = x;
                        let mut j = 0u32;
                        if t != 1 {
                            y = conv_norm_act(b, "0", inp, hidden, 1, 1, 1, relu6, y);
                            j += 1;
                        }
                        y = conv_norm_act(
                            b,
                            &j.to_string(),
                            hidden,
                            hidden,
                            3,
                            stride,
                            hidden,
                            relu6,
                            y,
                        );
                        y = conv(
                            b,
                            &(j + 1).to_string(),
                            Conv2d::new(hidden, c, 1).bias(false),
                            y,
                        );
                        b.layer(&(j + 2).to_string(), BatchNorm2d::new(c), &[y])
                    });
                    if res {
                        add(b, x, y, false)
                    } else {
                        y
                    }
                });
                inp = c;
                idx += 1;
            }
        }
        conv_norm_act(b, &idx.to_string(), inp, last_channel, 1, 1, 1, relu6, x)
    });
    x = b.op(AdaptiveAvgPool2d { output: (1, 1) }, &[x]);
    x = flatten(b, x);
    b.module("classifier", "Sequential", &[x], |b| {
        let x = dropout(b, "0", 0.2, x);
        linear(b, "1", last_channel, input.num_classes, x)
    })
}

/// Which MobileNetV3.
#[derive(Debug, Clone, Copy)]
pub enum V3 {
    /// mobilenet_v3_small
    Small,
    /// mobilenet_v3_large
    Large,
}

/// `InvertedResidualConfig`: input, kernel, expanded, out, use_se, hardswish, stride.
type Bneck = (u64, u64, u64, u64, bool, bool, u64);

fn v3_setting(v: V3) -> (&'static [Bneck], u64) {
    const LARGE: [Bneck; 15] = [
        (16, 3, 16, 16, false, false, 1),
        (16, 3, 64, 24, false, false, 2),
        (24, 3, 72, 24, false, false, 1),
        (24, 5, 72, 40, true, false, 2),
        (40, 5, 120, 40, true, false, 1),
        (40, 5, 120, 40, true, false, 1),
        (40, 3, 240, 80, false, true, 2),
        (80, 3, 200, 80, false, true, 1),
        (80, 3, 184, 80, false, true, 1),
        (80, 3, 184, 80, false, true, 1),
        (80, 3, 480, 112, true, true, 1),
        (112, 3, 672, 112, true, true, 1),
        (112, 5, 672, 160, true, true, 2),
        (160, 5, 960, 160, true, true, 1),
        (160, 5, 960, 160, true, true, 1),
    ];
    const SMALL: [Bneck; 11] = [
        (16, 3, 16, 16, true, false, 2),
        (16, 3, 72, 24, false, false, 2),
        (24, 3, 88, 24, false, false, 1),
        (24, 5, 96, 40, true, true, 2),
        (40, 5, 240, 40, true, true, 1),
        (40, 5, 240, 40, true, true, 1),
        (40, 5, 120, 48, true, true, 1),
        (48, 5, 144, 48, true, true, 1),
        (48, 5, 288, 96, true, true, 2),
        (96, 5, 576, 96, true, true, 1),
        (96, 5, 576, 96, true, true, 1),
    ];
    match v {
        V3::Large => (&LARGE, 1280),
        V3::Small => (&SMALL, 1024),
    }
}

/// torchvision.ops.SqueezeExcitation(channels, squeeze, scale_activation=Hardsigmoid).
fn squeeze_excitation(b: &mut GraphBuilder, name: &str, c: u64, sq: u64, x: TensorId) -> TensorId {
    b.module(name, "SqueezeExcitation", &[x], |b| {
        let mut s = adaptive_avg_pool(b, "avgpool", (1, 1), x);
        s = conv(b, "fc1", Conv2d::new(c, sq, 1), s);
        s = act(b, "activation", ActivationKind::ReLU, false, s);
        s = conv(b, "fc2", Conv2d::new(sq, c, 1), s);
        s = act(b, "scale_activation", ActivationKind::Hardsigmoid, false, s);
        b.op(Mul, &[s, x])
    })
}

/// Builds MobileNetV3: returns the logits.
pub fn mobilenet_v3(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: V3) -> TensorId {
    let (setting, last_channel) = v3_setting(v);
    let hs = ActivationKind::Hardswish;
    let first = setting.first().map(|s| s.0).unwrap_or(16);
    let last_in = setting.last().map(|s| s.3).unwrap_or(16);
    let last_out = 6 * last_in;
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = conv_norm_act(b, "0", input.channels, first, 3, 2, 1, Some(hs), x);
        for (i, &(inp, k, exp, out, se, use_hs, stride)) in setting.iter().enumerate() {
            let a = Some(if use_hs { hs } else { ActivationKind::ReLU });
            let res = stride == 1 && inp == out;
            x = b.module(&(i + 1).to_string(), "InvertedResidual", &[x], |b| {
                let y = b.module("block", "Sequential", &[x], |b| {
                    let mut y = x;
                    let mut j = 0u32;
                    let mut name = || {
                        j += 1;
                        (j - 1).to_string()
                    };
                    if exp != inp {
                        y = conv_norm_act(b, &name(), inp, exp, 1, 1, 1, a, y);
                    }
                    y = conv_norm_act(b, &name(), exp, exp, k, stride, exp, a, y);
                    if se {
                        y = squeeze_excitation(b, &name(), exp, make_divisible(exp / 4), y);
                    }
                    conv_norm_act(b, &name(), exp, out, 1, 1, 1, None, y)
                });
                if res {
                    add(b, y, x, true)
                } else {
                    y
                }
            });
        }
        let idx = (setting.len() + 1).to_string();
        conv_norm_act(b, &idx, last_in, last_out, 1, 1, 1, Some(hs), x)
    });
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    x = flatten(b, x);
    b.module("classifier", "Sequential", &[x], |b| {
        let mut x = linear(b, "0", last_out, last_channel, x);
        x = act(b, "1", hs, true, x);
        x = b.layer("2", DropoutInplace::new(0.2), &[x]);
        linear(b, "3", last_channel, input.num_classes, x)
    })
}
