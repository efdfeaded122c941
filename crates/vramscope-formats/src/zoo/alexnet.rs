//! torchvision AlexNet (torchvision/models/alexnet.py, the "one weird trick" variant): five
//! convolutions with in-place ReLUs and three 3x3/2 max pools, `AdaptiveAvgPool2d((6, 6))` (the
//! `_adaptive_avg_pool2d` kernel, which keeps its input), a root-level `torch.flatten` and a
//! classifier `Dropout(0.5), Linear, ReLU, Dropout(0.5), Linear, ReLU, Linear`.

use vramscope_core::ops::{ActivationKind, Conv2d, MaxPool2d};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, conv, dropout, flatten, linear, ZooInput};

/// Builds AlexNet: returns the logits.
pub fn alexnet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput) -> TensorId {
    let relu = ActivationKind::ReLU;
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = conv(
            b,
            "0",
            Conv2d::new(input.channels, 64, 11).stride(4).padding(2),
            x,
        );
        x = act(b, "1", relu, true, x);
        x = b.layer("2", MaxPool2d::new(3, 2, 0), &[x]);
        x = conv(b, "3", Conv2d::new(64, 192, 5).padding(2), x);
        x = act(b, "4", relu, true, x);
        x = b.layer("5", MaxPool2d::new(3, 2, 0), &[x]);
        x = conv(b, "6", Conv2d::new(192, 384, 3).padding(1), x);
        x = act(b, "7", relu, true, x);
        x = conv(b, "8", Conv2d::new(384, 256, 3).padding(1), x);
        x = act(b, "9", relu, true, x);
        x = conv(b, "10", Conv2d::new(256, 256, 3).padding(1), x);
        x = act(b, "11", relu, true, x);
        b.layer("12", MaxPool2d::new(3, 2, 0), &[x])
    });
    x = adaptive_avg_pool(b, "avgpool", (6, 6), x);
    x = flatten(b, x);
    b.module("classifier", "Sequential", &[x], |b| {
        let mut x = dropout(b, "0", 0.5, x);
        x = linear(b, "1", 256 * 6 * 6, 4096, x);
        x = act(b, "2", relu, true, x);
        x = dropout(b, "3", 0.5, x);
        x = linear(b, "4", 4096, 4096, x);
        x = act(b, "5", relu, true, x);
        linear(b, "6", 4096, input.num_classes, x)
    })
}
