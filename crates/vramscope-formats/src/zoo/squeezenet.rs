//! torchvision SqueezeNet 1.0 and 1.1 (torchvision/models/squeezenet.py): `Fire` modules (1x1
//! squeeze, then 1x1 and 3x3 expands, each with an in-place ReLU, concatenated by `torch.cat`),
//! `ceil_mode` max pools, and a classifier `Dropout(0.5)`, 1x1 conv, in-place ReLU,
//! `AdaptiveAvgPool2d((1, 1))` (a `mean`), followed by a root-level `torch.flatten`.

use vramscope_core::ops::{ActivationKind, Cat, Conv2d, MaxPool2d};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, conv, dropout, flatten, ZooInput};

/// Which SqueezeNet.
#[derive(Debug, Clone, Copy)]
pub enum Version {
    /// squeezenet1_0
    V1_0,
    /// squeezenet1_1
    V1_1,
}

/// One entry of `features`.
enum Layer {
    /// `Conv2d(in, out, k, stride=2)` + in-place ReLU (two entries).
    Stem(u64, u64),
    /// `MaxPool2d(3, 2, ceil_mode=True)`.
    Pool,
    /// `Fire(inplanes, squeeze, expand1x1, expand3x3)`.
    Fire(u64, u64, u64, u64),
}

fn features(v: Version) -> Vec<Layer> {
    use Layer::{Fire, Pool, Stem};
    match v {
        Version::V1_0 => vec![
            Stem(96, 7),
            Pool,
            Fire(96, 16, 64, 64),
            Fire(128, 16, 64, 64),
            Fire(128, 32, 128, 128),
            Pool,
            Fire(256, 32, 128, 128),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            Pool,
            Fire(512, 64, 256, 256),
        ],
        Version::V1_1 => vec![
            Stem(64, 3),
            Pool,
            Fire(64, 16, 64, 64),
            Fire(128, 16, 64, 64),
            Pool,
            Fire(128, 32, 128, 128),
            Fire(256, 32, 128, 128),
            Pool,
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256),
        ],
    }
}

fn fire(b: &mut GraphBuilder, x: TensorId, inp: u64, sq: u64, e1: u64, e3: u64) -> TensorId {
    let relu = ActivationKind::ReLU;
    let mut s = conv(b, "squeeze", Conv2d::new(inp, sq, 1), x);
    s = act(b, "squeeze_activation", relu, true, s);
    let mut a = conv(b, "expand1x1", Conv2d::new(sq, e1, 1), s);
    a = act(b, "expand1x1_activation", relu, true, a);
    let mut c = conv(b, "expand3x3", Conv2d::new(sq, e3, 3).padding(1), s);
    c = act(b, "expand3x3_activation", relu, true, c);
    b.op(Cat { dim: 1 }, &[a, c])
}

/// Builds a SqueezeNet: returns the logits.
pub fn squeezenet(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Version) -> TensorId {
    let x = b.module("features", "Sequential", &[x], |b| {
        let mut x = x;
        let mut idx = 0u32;
        for layer in features(v) {
            match layer {
                Layer::Stem(out, k) => {
                    x = conv(
                        b,
                        &idx.to_string(),
                        Conv2d::new(input.channels, out, k).stride(2),
                        x,
                    );
                    x = act(b, &(idx + 1).to_string(), ActivationKind::ReLU, true, x);
                    idx += 2;
                }
                Layer::Pool => {
                    x = b.layer(&idx.to_string(), MaxPool2d::new(3, 2, 0).ceil(), &[x]);
                    idx += 1;
                }
                Layer::Fire(inp, sq, e1, e3) => {
                    x = b.module(&idx.to_string(), "Fire", &[x], |b| {
                        fire(b, x, inp, sq, e1, e3)
                    });
                    idx += 1;
                }
            }
        }
        x
    });
    let x = b.module("classifier", "Sequential", &[x], |b| {
        let mut x = dropout(b, "0", 0.5, x);
        x = conv(b, "1", Conv2d::new(512, input.num_classes, 1), x);
        x = act(b, "2", ActivationKind::ReLU, true, x);
        adaptive_avg_pool(b, "3", (1, 1), x)
    });
    flatten(b, x)
}
