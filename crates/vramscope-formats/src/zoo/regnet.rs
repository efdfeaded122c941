//! torchvision RegNetY-400MF (torchvision/models/regnet.py): a `SimpleStemIN`, four `AnyStage`s of
//! `ResBottleneckBlock`s (1x1, grouped 3x3, squeeze-excitation, 1x1, projection shortcut) whose
//! widths, depths and groups come from `BlockParams.from_init_params`, computed here the same way.

use vramscope_core::ops::ActivationKind;
use vramscope_core::{GraphBuilder, TensorId};

use super::efficientnet::{make_divisible, squeeze_excitation};
use super::{act, adaptive_avg_pool, add, conv_norm_act, flatten, linear, same_conv, ZooInput};

/// Per-stage settings: (width, stride, depth, group width, bottleneck multiplier).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockParams {
    pub stages: Vec<(u64, u64, u64, u64, f64)>,
    pub se_ratio: Option<f64>,
}

/// Round half to even, as `torch.round` does.
fn round_even(x: f32) -> f32 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

impl BlockParams {
    /// `BlockParams.from_init_params(depth, w_0, w_a, w_m, group_width, bottleneck_multiplier,
    /// se_ratio)`: the quantized linear widths in log space, computed in float32 like torch.
    pub(crate) fn from_init_params(
        depth: u64,
        w_0: u64,
        w_a: f64,
        w_m: f64,
        group_width: u64,
        bottleneck_multiplier: f64,
        se_ratio: Option<f64>,
    ) -> Self {
        let log_wm = libm::log(w_m);
        let block_widths: Vec<u64> = (0..depth)
            .map(|i| {
                let cont = i as f32 * w_a as f32 + w_0 as f32;
                let capacity = round_even((libm::logf(cont / w_0 as f32) as f64 / log_wm) as f32);
                let w = w_0 as f32 * libm::powf(w_m as f32, capacity);
                (round_even(w / 8.0) * 8.0) as u64
            })
            .collect();
        // a new stage starts where the width changes
        let mut widths = Vec::new();
        let mut depths = Vec::new();
        for (i, &w) in block_widths.iter().enumerate() {
            if i == 0 || w != block_widths[i - 1] {
                widths.push(w);
                depths.push(1);
            } else if let Some(d) = depths.last_mut() {
                *d += 1;
            }
        }
        // _adjust_widths_groups_compatibilty
        let stages = widths
            .iter()
            .zip(&depths)
            .map(|(&w, &d)| {
                let w_bot = (w as f64 * bottleneck_multiplier) as u64;
                let g = group_width.min(w_bot);
                let w_bot = make_divisible(w_bot as f64, g);
                let w = (w_bot as f64 / bottleneck_multiplier) as u64;
                (w, 2, d, g, bottleneck_multiplier)
            })
            .collect();
        BlockParams { stages, se_ratio }
    }
}

/// Which RegNet.
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    /// regnet_y_400mf
    Y400Mf,
}

fn params(v: Variant) -> BlockParams {
    match v {
        Variant::Y400Mf => BlockParams::from_init_params(16, 48, 27.89, 2.09, 8, 1.0, Some(0.25)),
    }
}

/// `Conv2dNormActivation` (class `type_name`) with ReLU(inplace=True) or no activation.
#[allow(clippy::too_many_arguments)]
fn conv_bn_act(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    cin: u64,
    cout: u64,
    k: u64,
    stride: u64,
    groups: u64,
    relu: bool,
    x: TensorId,
) -> TensorId {
    let a = relu.then_some(ActivationKind::ReLU);
    conv_norm_act(
        b,
        name,
        type_name,
        same_conv(cin, cout, k, stride, groups),
        a,
        x,
    )
}

/// Builds a RegNet: returns the logits.
pub fn regnet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Variant) -> TensorId {
    let p = params(v);
    let stem_width = 32;
    let mut x = conv_bn_act(
        b,
        "stem",
        "SimpleStemIN",
        input.channels,
        stem_width,
        3,
        2,
        1,
        true,
        x,
    );
    let mut width_in = stem_width;
    x = b.module("trunk_output", "Sequential", &[x], |b| {
        let mut x = x;
        for (si, &(w, stride, depth, gw, bm)) in p.stages.iter().enumerate() {
            let stage = si + 1;
            x = b.module(&format!("block{stage}"), "AnyStage", &[x], |b| {
                let mut x = x;
                for i in 0..depth {
                    let (cin, st) = if i == 0 { (width_in, stride) } else { (w, 1) };
                    x = b.module(
                        &format!("block{stage}-{i}"),
                        "ResBottleneckBlock",
                        &[x],
                        |b| res_bottleneck(b, x, cin, w, st, gw, bm, p.se_ratio),
                    );
                }
                x
            });
            width_in = w;
        }
        x
    });
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    x = flatten(b, x);
    linear(b, "fc", width_in, input.num_classes, x)
}

#[allow(clippy::too_many_arguments)]
fn res_bottleneck(
    b: &mut GraphBuilder,
    x: TensorId,
    cin: u64,
    cout: u64,
    stride: u64,
    group_width: u64,
    bottleneck: f64,
    se_ratio: Option<f64>,
) -> TensorId {
    let proj = if cin != cout || stride != 1 {
        Some(conv_bn_act(
            b,
            "proj",
            "Conv2dNormActivation",
            cin,
            cout,
            1,
            stride,
            1,
            false,
            x,
        ))
    } else {
        None
    };
    let w_b = (cout as f64 * bottleneck).round() as u64;
    let groups = w_b / group_width;
    let f = b.module("f", "BottleneckTransform", &[x], |b| {
        let cna = "Conv2dNormActivation";
        let mut y = conv_bn_act(b, "a", cna, cin, w_b, 1, 1, 1, true, x);
        y = conv_bn_act(b, "b", cna, w_b, w_b, 3, stride, groups, true, y);
        if let Some(r) = se_ratio {
            let se = (r * cin as f64).round() as u64;
            // the SE's activation is `activation_layer()`: nn.ReLU without inplace
            y = squeeze_excitation(
                b,
                "se",
                w_b,
                se,
                ActivationKind::ReLU,
                false,
                ActivationKind::Sigmoid,
                y,
            );
        }
        conv_bn_act(b, "c", cna, w_b, cout, 1, 1, 1, false, y)
    });
    // proj(x) + f(x) or x + f(x): a new tensor, then ReLU(inplace=True)
    let y = match proj {
        Some(p) => add(b, p, f, false),
        None => add(b, x, f, false),
    };
    act(b, "activation", ActivationKind::ReLU, true, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regnet_y_400mf_block_params_match_torchvision() {
        // BlockParams.from_init_params(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8,
        // se_ratio=0.25) in torchvision 0.29.2: depths [1, 3, 6, 6], widths [48, 104, 208, 440]
        let p = params(Variant::Y400Mf);
        let widths: Vec<u64> = p.stages.iter().map(|s| s.0).collect();
        let depths: Vec<u64> = p.stages.iter().map(|s| s.2).collect();
        let groups: Vec<u64> = p.stages.iter().map(|s| s.3).collect();
        assert_eq!(widths, [48, 104, 208, 440]);
        assert_eq!(depths, [1, 3, 6, 6]);
        assert_eq!(groups, [8, 8, 8, 8]);
    }
}
