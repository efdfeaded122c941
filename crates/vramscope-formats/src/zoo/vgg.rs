//! torchvision VGG 11/13/16/19, with and without batch norm (torchvision/models/vgg.py): a
//! `features` Sequential of 3x3 convolutions, in-place ReLUs and 2x2 max pools,
//! `AdaptiveAvgPool2d((7, 7))` (the `_adaptive_avg_pool2d` kernel, which keeps its input), a
//! root-level `torch.flatten` and a classifier of three linear layers with in-place ReLUs and two
//! `Dropout(0.5)`.

use vramscope_core::ops::{ActivationKind, BatchNorm2d, Conv2d, MaxPool2d};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, conv, dropout, flatten, linear, ZooInput};

/// Which VGG configuration (`cfgs` in torchvision).
#[derive(Debug, Clone, Copy)]
pub enum Config {
    /// "A": vgg11
    A,
    /// "B": vgg13
    B,
    /// "D": vgg16
    D,
    /// "E": vgg19
    E,
}

/// `None` is a max pool, `Some(c)` a 3x3 convolution to `c` channels.
fn layers(c: Config) -> &'static [Option<u64>] {
    const M: Option<u64> = None;
    match c {
        Config::A => &[
            Some(64),
            M,
            Some(128),
            M,
            Some(256),
            Some(256),
            M,
            Some(512),
            Some(512),
            M,
            Some(512),
            Some(512),
            M,
        ],
        Config::B => &[
            Some(64),
            Some(64),
            M,
            Some(128),
            Some(128),
            M,
            Some(256),
            Some(256),
            M,
            Some(512),
            Some(512),
            M,
            Some(512),
            Some(512),
            M,
        ],
        Config::D => &[
            Some(64),
            Some(64),
            M,
            Some(128),
            Some(128),
            M,
            Some(256),
            Some(256),
            Some(256),
            M,
            Some(512),
            Some(512),
            Some(512),
            M,
            Some(512),
            Some(512),
            Some(512),
            M,
        ],
        Config::E => &[
            Some(64),
            Some(64),
            M,
            Some(128),
            Some(128),
            M,
            Some(256),
            Some(256),
            Some(256),
            Some(256),
            M,
            Some(512),
            Some(512),
            Some(512),
            Some(512),
            M,
            Some(512),
            Some(512),
            Some(512),
            Some(512),
            M,
        ],
    }
}

/// Builds a VGG (`batch_norm` selects the `_bn` variant): returns the logits.
pub fn vgg(
    b: &mut GraphBuilder,
    x: TensorId,
    input: &ZooInput,
    cfg: Config,
    batch_norm: bool,
) -> TensorId {
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = x;
        let mut idx = 0u32;
        let mut name = || {
            idx += 1;
            (idx - 1).to_string()
        };
        let mut in_c = input.channels;
        for &v in layers(cfg) {
            match v {
                None => x = b.layer(&name(), MaxPool2d::new(2, 2, 0), &[x]),
                Some(c) => {
                    x = conv(b, &name(), Conv2d::new(in_c, c, 3).padding(1), x);
                    if batch_norm {
                        x = b.layer(&name(), BatchNorm2d::new(c), &[x]);
                    }
                    x = act(b, &name(), ActivationKind::ReLU, true, x);
                    in_c = c;
                }
            }
        }
        x
    });
    x = adaptive_avg_pool(b, "avgpool", (7, 7), x);
    x = flatten(b, x);
    b.module("classifier", "Sequential", &[x], |b| {
        let mut x = linear(b, "0", 512 * 7 * 7, 4096, x);
        x = act(b, "1", ActivationKind::ReLU, true, x);
        x = dropout(b, "2", 0.5, x);
        x = linear(b, "3", 4096, 4096, x);
        x = act(b, "4", ActivationKind::ReLU, true, x);
        x = dropout(b, "5", 0.5, x);
        linear(b, "6", 4096, input.num_classes, x)
    })
}
