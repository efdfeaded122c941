//! torchvision EfficientNet B0–B7 (torchvision/models/efficientnet.py): MBConv blocks with
//! squeeze-excitation, in-place SiLU, row-wise stochastic depth whose probability grows linearly
//! with the block index (`stochastic_depth_prob = 0.2`), and an in-place dropout before the head.

use vramscope_core::ops::{
    ActivationKind, Conv2d, CopySlices, DropoutInplace, Mul, StochasticDepth,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{
    act, adaptive_avg_pool, add, conv, conv_norm_act, flatten, linear, same_conv, ZooInput,
};

/// Which EfficientNet.
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    /// efficientnet_b0
    B0,
    /// efficientnet_b1
    B1,
    /// efficientnet_b2
    B2,
    /// efficientnet_b3
    B3,
    /// efficientnet_b4
    B4,
    /// efficientnet_b5
    B5,
    /// efficientnet_b6
    B6,
    /// efficientnet_b7
    B7,
}

/// (width_mult, depth_mult, classifier dropout) of `efficientnet_bN`.
fn scaling(v: Variant) -> (f64, f64, f64) {
    match v {
        Variant::B0 => (1.0, 1.0, 0.2),
        Variant::B1 => (1.0, 1.1, 0.2),
        Variant::B2 => (1.1, 1.2, 0.3),
        Variant::B3 => (1.2, 1.4, 0.3),
        Variant::B4 => (1.4, 1.8, 0.4),
        Variant::B5 => (1.6, 2.2, 0.4),
        Variant::B6 => (1.8, 2.6, 0.5),
        Variant::B7 => (2.0, 3.1, 0.5),
    }
}

/// `torchvision.models._utils._make_divisible(v, 8)`.
pub(crate) fn make_divisible(v: f64, divisor: u64) -> u64 {
    let d = divisor as f64;
    let mut new_v = (((v + d / 2.0) as u64) / divisor * divisor).max(divisor);
    if (new_v as f64) < 0.9 * v {
        new_v += divisor;
    }
    new_v
}

/// One stage of `_efficientnet_conf`: (expand_ratio, kernel, stride, in, out, layers), before
/// width and depth scaling.
const STAGES: [(f64, u64, u64, u64, u64, u64); 7] = [
    (1.0, 3, 1, 32, 16, 1),
    (6.0, 3, 2, 16, 24, 2),
    (6.0, 5, 2, 24, 40, 2),
    (6.0, 3, 2, 40, 80, 3),
    (6.0, 5, 1, 80, 112, 3),
    (6.0, 5, 2, 112, 192, 4),
    (6.0, 3, 1, 192, 320, 1),
];

/// `Conv2dNormActivation(cin, cout, k, stride, groups, activation_layer=SiLU or None)`.
#[allow(clippy::too_many_arguments)]
fn conv_bn_act(
    b: &mut GraphBuilder,
    name: &str,
    cin: u64,
    cout: u64,
    k: u64,
    stride: u64,
    groups: u64,
    silu: bool,
    x: TensorId,
) -> TensorId {
    let a = silu.then_some(ActivationKind::SiLU);
    conv_norm_act(
        b,
        name,
        "Conv2dNormActivation",
        same_conv(cin, cout, k, stride, groups),
        a,
        x,
    )
}

/// `SqueezeExcitation(c, squeeze, activation, scale_activation)`: `scale * input`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn squeeze_excitation(
    b: &mut GraphBuilder,
    name: &str,
    c: u64,
    squeeze: u64,
    inner: ActivationKind,
    inner_inplace: bool,
    outer: ActivationKind,
    x: TensorId,
) -> TensorId {
    b.module(name, "SqueezeExcitation", &[x], |b| {
        // registration order of __init__: avgpool, fc1, fc2, activation, scale_activation
        for (n, t) in [
            ("avgpool", "AdaptiveAvgPool2d"),
            ("fc1", "Conv2d"),
            ("fc2", "Conv2d"),
            ("activation", inner.name()),
            ("scale_activation", outer.name()),
        ] {
            b.declare_module(n, t);
        }
        let mut s = adaptive_avg_pool(b, "avgpool", (1, 1), x);
        s = conv(b, "fc1", Conv2d::new(c, squeeze, 1), s);
        s = act(b, "activation", inner, inner_inplace, s);
        s = conv(b, "fc2", Conv2d::new(squeeze, c, 1), s);
        s = act(b, "scale_activation", outer, false, s);
        b.op(Mul, &[s, x])
    })
}

/// Builds an EfficientNet: returns the logits.
pub fn efficientnet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Variant) -> TensorId {
    let (width, depth, dropout) = scaling(v);
    let adjust = |c: u64| make_divisible(c as f64 * width, 8);
    let stages: Vec<(f64, u64, u64, u64, u64, u64)> = STAGES
        .iter()
        .map(|&(e, k, s, i, o, n)| {
            (
                e,
                k,
                s,
                adjust(i),
                adjust(o),
                (n as f64 * depth).ceil() as u64,
            )
        })
        .collect();
    let total_blocks: u64 = stages.iter().map(|s| s.5).sum();
    let first = stages[0].3;
    let last_in = stages[stages.len() - 1].4;
    let last_out = 4 * last_in;
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = conv_bn_act(b, "0", input.channels, first, 3, 2, 1, true, x);
        let mut block_id = 0u64;
        for (si, &(expand, k, stride, cin, cout, n)) in stages.iter().enumerate() {
            x = b.module(&(si + 1).to_string(), "Sequential", &[x], |b| {
                let mut x = x;
                for i in 0..n {
                    let (cin, stride) = if i == 0 { (cin, stride) } else { (cout, 1) };
                    // sd_prob = stochastic_depth_prob * block_id / total_stage_blocks
                    let p = 0.2 * block_id as f64 / total_blocks as f64;
                    x = b.module(&i.to_string(), "MBConv", &[x], |b| {
                        mbconv(b, x, expand, k, stride, cin, cout, p)
                    });
                    block_id += 1;
                }
                x
            });
        }
        conv_bn_act(
            b,
            &(stages.len() + 1).to_string(),
            last_in,
            last_out,
            1,
            1,
            1,
            true,
            x,
        )
    });
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    // torch.flatten(x, 1): a view of the pooled features
    x = flatten(b, x);
    b.module("classifier", "Sequential", &[x], |b| {
        // Dropout(inplace=True) on the flattened view: backward goes through CopySlices
        let y = b.layer(
            "0",
            CopySlices {
                op: DropoutInplace::new(dropout),
            },
            &[x],
        );
        linear(b, "1", last_out, input.num_classes, y)
    })
}

#[allow(clippy::too_many_arguments)]
fn mbconv(
    b: &mut GraphBuilder,
    x: TensorId,
    expand: f64,
    k: u64,
    stride: u64,
    cin: u64,
    cout: u64,
    p: f64,
) -> TensorId {
    let residual = stride == 1 && cin == cout;
    let expanded = make_divisible(cin as f64 * expand, 8);
    let squeeze = (cin / 4).max(1);
    let mut y = b.module("block", "Sequential", &[x], |b| {
        let mut y = x;
        let mut idx = 0;
        if expanded != cin {
            y = conv_bn_act(b, "0", cin, expanded, 1, 1, 1, true, y);
            idx += 1;
        }
        y = conv_bn_act(
            b,
            &idx.to_string(),
            expanded,
            expanded,
            k,
            stride,
            expanded,
            true,
            y,
        );
        y = squeeze_excitation(
            b,
            &(idx + 1).to_string(),
            expanded,
            squeeze,
            ActivationKind::SiLU,
            true,
            ActivationKind::Sigmoid,
            y,
        );
        conv_bn_act(b, &(idx + 2).to_string(), expanded, cout, 1, 1, 1, false, y)
    });
    if !residual || p == 0.0 {
        // registered either way; stochastic_depth(p=0) returns its input
        b.declare_module("stochastic_depth", "StochasticDepth");
    } else {
        y = b.layer("stochastic_depth", StochasticDepth { p }, &[y]);
    }
    if residual {
        y = add(b, y, x, true);
    }
    y
}
