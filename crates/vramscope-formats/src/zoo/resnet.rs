//! torchvision ResNet, Wide ResNet and ResNeXt (torchvision/models/resnet.py).

use vramscope_core::ops::{ActivationKind, Conv2d, MaxPool2d};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, add, bn, conv, flatten, linear, ZooInput};

/// Which ResNet.
#[derive(Debug, Clone, Copy)]
pub enum Depth {
    /// resnet18
    R18,
    /// resnet34
    R34,
    /// resnet50
    R50,
    /// resnet101
    R101,
    /// resnet152
    R152,
    /// wide_resnet50_2
    Wide50_2,
    /// wide_resnet101_2
    Wide101_2,
    /// resnext50_32x4d
    Next50_32x4d,
    /// resnext101_32x8d
    Next101_32x8d,
}

struct Spec {
    bottleneck: bool,
    layers: [u64; 4],
    groups: u64,
    width_per_group: u64,
}

fn spec(d: Depth) -> Spec {
    let (bottleneck, layers, groups, wpg) = match d {
        Depth::R18 => (false, [2, 2, 2, 2], 1, 64),
        Depth::R34 => (false, [3, 4, 6, 3], 1, 64),
        Depth::R50 => (true, [3, 4, 6, 3], 1, 64),
        Depth::R101 => (true, [3, 4, 23, 3], 1, 64),
        Depth::R152 => (true, [3, 8, 36, 3], 1, 64),
        Depth::Wide50_2 => (true, [3, 4, 6, 3], 1, 128),
        Depth::Wide101_2 => (true, [3, 4, 23, 3], 1, 128),
        Depth::Next50_32x4d => (true, [3, 4, 6, 3], 32, 4),
        Depth::Next101_32x8d => (true, [3, 4, 23, 3], 32, 8),
    };
    Spec {
        bottleneck,
        layers,
        groups,
        width_per_group: wpg,
    }
}

/// Builds a ResNet: returns the logits.
pub fn resnet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, d: Depth) -> TensorId {
    let s = spec(d);
    let expansion = if s.bottleneck { 4 } else { 1 };
    let mut x = conv(
        b,
        "conv1",
        Conv2d::new(input.channels, 64, 7)
            .stride(2)
            .padding(3)
            .bias(false),
        x,
    );
    x = bn(b, "bn1", 64, x);
    x = act(b, "relu", ActivationKind::ReLU, true, x);
    x = b.layer("maxpool", MaxPool2d::new(3, 2, 1), &[x]);
    let mut inplanes = 64;
    for (li, (&blocks, planes)) in s.layers.iter().zip([64u64, 128, 256, 512]).enumerate() {
        let stride = if li == 0 { 1 } else { 2 };
        let name = format!("layer{}", li + 1);
        x = b.module(&name, "Sequential", &[x], |b| {
            let mut x = x;
            for i in 0..blocks {
                let st = if i == 0 { stride } else { 1 };
                let down = i == 0 && (st != 1 || inplanes != planes * expansion);
                let block_type = if s.bottleneck {
                    "Bottleneck"
                } else {
                    "BasicBlock"
                };
                x = b.module(&i.to_string(), block_type, &[x], |b| {
                    let y = if s.bottleneck {
                        bottleneck(
                            b,
                            x,
                            inplanes,
                            planes,
                            st,
                            down,
                            s.groups,
                            s.width_per_group,
                        )
                    } else {
                        basic_block(b, x, inplanes, planes, st, down)
                    };
                    if down {
                        // torchvision's _make_layer builds downsample before the block
                        b.init_first("downsample");
                    }
                    y
                });
                inplanes = planes * expansion;
            }
            x
        });
    }
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    x = flatten(b, x);
    linear(b, "fc", 512 * expansion, input.num_classes, x)
}

fn downsample(b: &mut GraphBuilder, x: TensorId, inplanes: u64, out: u64, stride: u64) -> TensorId {
    b.module("downsample", "Sequential", &[x], |b| {
        let y = conv(
            b,
            "0",
            Conv2d::new(inplanes, out, 1).stride(stride).bias(false),
            x,
        );
        bn(b, "1", out, y)
    })
}

fn basic_block(
    b: &mut GraphBuilder,
    x: TensorId,
    inplanes: u64,
    planes: u64,
    stride: u64,
    down: bool,
) -> TensorId {
    let mut out = conv(
        b,
        "conv1",
        Conv2d::new(inplanes, planes, 3)
            .stride(stride)
            .padding(1)
            .bias(false),
        x,
    );
    out = bn(b, "bn1", planes, out);
    out = act(b, "relu", ActivationKind::ReLU, true, out);
    out = conv(
        b,
        "conv2",
        Conv2d::new(planes, planes, 3).padding(1).bias(false),
        out,
    );
    out = bn(b, "bn2", planes, out);
    let identity = if down {
        downsample(b, x, inplanes, planes, stride)
    } else {
        x
    };
    out = add(b, out, identity, true);
    act(b, "relu", ActivationKind::ReLU, true, out)
}

#[allow(clippy::too_many_arguments)]
fn bottleneck(
    b: &mut GraphBuilder,
    x: TensorId,
    inplanes: u64,
    planes: u64,
    stride: u64,
    down: bool,
    groups: u64,
    wpg: u64,
) -> TensorId {
    let width = planes * wpg / 64 * groups;
    let mut out = conv(b, "conv1", Conv2d::new(inplanes, width, 1).bias(false), x);
    out = bn(b, "bn1", width, out);
    out = act(b, "relu", ActivationKind::ReLU, true, out);
    out = conv(
        b,
        "conv2",
        Conv2d::new(width, width, 3)
            .stride(stride)
            .padding(1)
            .groups(groups)
            .bias(false),
        out,
    );
    out = bn(b, "bn2", width, out);
    out = act(b, "relu", ActivationKind::ReLU, true, out);
    out = conv(
        b,
        "conv3",
        Conv2d::new(width, planes * 4, 1).bias(false),
        out,
    );
    out = bn(b, "bn3", planes * 4, out);
    let identity = if down {
        downsample(b, x, inplanes, planes * 4, stride)
    } else {
        x
    };
    out = add(b, out, identity, true);
    act(b, "relu", ActivationKind::ReLU, true, out)
}
