//! torchvision DenseNet-121/161/169/201 (torchvision/models/densenet.py, `memory_efficient=False`,
//! `drop_rate=0`): every `_DenseLayer` concatenates all previous features of its block with
//! `torch.cat` (a new tensor, also for the first layer's single input) and runs
//! norm1 → relu1 (in place) → conv1 (1x1) → norm2 → relu2 (in place) → conv2 (3x3); the block keeps
//! the list of features alive and returns their concatenation. The root applies
//! `F.relu(inplace=True)`, `F.adaptive_avg_pool2d(out, (1, 1))` (a `mean`) and `torch.flatten`
//! before the classifier.

use vramscope_core::ops::{
    Activation, ActivationKind, AdaptiveAvgPool2d, AvgPool2d, Cat, Conv2d, MaxPool2d,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, bn, conv, flatten, linear, ZooInput};

/// Which DenseNet.
#[derive(Debug, Clone, Copy)]
pub enum Depth {
    /// densenet121
    D121,
    /// densenet161
    D161,
    /// densenet169
    D169,
    /// densenet201
    D201,
}

const BN_SIZE: u64 = 4;

/// (growth rate, block config, initial features).
fn spec(d: Depth) -> (u64, [u64; 4], u64) {
    match d {
        Depth::D121 => (32, [6, 12, 24, 16], 64),
        Depth::D161 => (48, [6, 12, 36, 24], 96),
        Depth::D169 => (32, [6, 12, 32, 32], 64),
        Depth::D201 => (32, [6, 12, 48, 32], 64),
    }
}

fn dense_layer(b: &mut GraphBuilder, features: &[TensorId], in_c: u64, growth: u64) -> TensorId {
    let relu = ActivationKind::ReLU;
    let mid = BN_SIZE * growth;
    // bn_function: `concated_features` is a local that lives until the function returns
    let bottleneck_output = b.frame(|b| {
        let concated = b.op(Cat { dim: 1 }, features);
        b.hold(&[concated]);
        let x = bn(b, "norm1", in_c, concated);
        let x = act(b, "relu1", relu, true, x);
        conv(b, "conv1", Conv2d::new(in_c, mid, 1).bias(false), x)
    });
    // `bottleneck_output` lives until forward returns
    b.hold(&[bottleneck_output]);
    let mut x = bn(b, "norm2", mid, bottleneck_output);
    x = act(b, "relu2", relu, true, x);
    conv(
        b,
        "conv2",
        Conv2d::new(mid, growth, 3).padding(1).bias(false),
        x,
    )
}

/// Builds a DenseNet: returns the logits.
pub fn densenet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, d: Depth) -> TensorId {
    let (growth, blocks, init) = spec(d);
    let relu = ActivationKind::ReLU;
    let (x, num_features) = b.module("features", "Sequential", &[x], |b| {
        let mut x = conv(
            b,
            "conv0",
            Conv2d::new(input.channels, init, 7)
                .stride(2)
                .padding(3)
                .bias(false),
            x,
        );
        x = bn(b, "norm0", init, x);
        x = act(b, "relu0", relu, true, x);
        x = b.layer("pool0", MaxPool2d::new(3, 2, 1), &[x]);
        let mut c = init;
        for (i, &n) in blocks.iter().enumerate() {
            let block = format!("denseblock{}", i + 1);
            x = b.module(&block, "_DenseBlock", &[x], |b| {
                let mut features = vec![x];
                for j in 0..n {
                    let in_c = c + j * growth;
                    let name = format!("denselayer{}", j + 1);
                    let f = b.module(&name, "_DenseLayer", &features, |b| {
                        dense_layer(b, &features, in_c, growth)
                    });
                    features.push(f);
                }
                b.op(Cat { dim: 1 }, &features)
            });
            c += n * growth;
            if i + 1 < blocks.len() {
                let name = format!("transition{}", i + 1);
                let out_c = c / 2;
                x = b.module(&name, "_Transition", &[x], |b| {
                    let mut x = bn(b, "norm", c, x);
                    x = act(b, "relu", relu, true, x);
                    x = conv(b, "conv", Conv2d::new(c, out_c, 1).bias(false), x);
                    b.layer(
                        "pool",
                        AvgPool2d {
                            kernel: 2,
                            stride: 2,
                            padding: 0,
                            ceil_mode: false,
                        },
                        &[x],
                    )
                });
                c = out_c;
            }
        }
        (bn(b, "norm5", c, x), c)
    });
    let mut x = b.op(
        Activation {
            kind: relu,
            inplace: true,
        },
        &[x],
    );
    x = b.op(AdaptiveAvgPool2d { output: (1, 1) }, &[x]);
    x = flatten(b, x);
    linear(b, "classifier", num_features, input.num_classes, x)
}
