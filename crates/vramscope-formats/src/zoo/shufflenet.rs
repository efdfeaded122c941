//! torchvision ShuffleNetV2 x0.5/x1.0/x1.5/x2.0 (torchvision/models/shufflenetv2.py).
//!
//! A stride-1 `InvertedResidual` splits its input with `x.chunk(2, dim=1)` (two views), runs
//! `branch2` on the second half and concatenates; a stride-2 one concatenates `branch1(x)` and
//! `branch2(x)` (stride-1 blocks still register an empty `branch1`). Both end in
//! `channel_shuffle`: `view` → `transpose` → `.contiguous()` (a copy) → `view`; in backward the
//! first view receives the transposed gradient, so its `reshape` copies it. The root pools with
//! `x.mean([2, 3])`.

use vramscope_core::ops::{
    ActivationKind, Cat, Contiguous, Conv2d, MaxPool2d, Mean, View, ViewStridedGrad,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, bn, conv, linear, ZooInput};

/// Which ShuffleNetV2 width.
#[derive(Debug, Clone, Copy)]
pub enum Width {
    /// shufflenet_v2_x0_5
    X0_5,
    /// shufflenet_v2_x1_0
    X1_0,
    /// shufflenet_v2_x1_5
    X1_5,
    /// shufflenet_v2_x2_0
    X2_0,
}

const REPEATS: [u64; 3] = [4, 8, 4];

fn stage_out_channels(w: Width) -> [u64; 5] {
    match w {
        Width::X0_5 => [24, 48, 96, 192, 1024],
        Width::X1_0 => [24, 116, 232, 464, 1024],
        Width::X1_5 => [24, 176, 352, 704, 1024],
        Width::X2_0 => [24, 244, 488, 976, 2048],
    }
}

fn depthwise(b: &mut GraphBuilder, name: &str, c: u64, stride: u64, x: TensorId) -> TensorId {
    conv(
        b,
        name,
        Conv2d::new(c, c, 3)
            .stride(stride)
            .padding(1)
            .groups(c)
            .bias(false),
        x,
    )
}

fn pointwise(b: &mut GraphBuilder, name: &str, i: u64, o: u64, x: TensorId) -> TensorId {
    conv(b, name, Conv2d::new(i, o, 1).bias(false), x)
}

/// `channel_shuffle(x, 2)`.
fn channel_shuffle(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let [n, c, h, w] = b.shape(x)[..] else {
        return x; // unreachable after a successful build: every tensor here is NCHW
    };
    let g = 2;
    let x = b.op(
        ViewStridedGrad {
            shape: vec![n, g, c / g, h, w],
        },
        &[x],
    );
    let t = vec![n, c / g, g, h, w];
    let x = b.op(View::new("transpose", t.clone()), &[x]);
    let x = b.op(
        Contiguous {
            name: "contiguous",
            shape: t,
        },
        &[x],
    );
    b.op(View::new("view", vec![n, c, h, w]), &[x])
}

fn inverted_residual(
    b: &mut GraphBuilder,
    x: TensorId,
    inp: u64,
    oup: u64,
    stride: u64,
) -> TensorId {
    let bf = oup / 2;
    let relu = ActivationKind::ReLU;
    let branch2 = |b: &mut GraphBuilder, x: TensorId, in_c: u64| {
        b.module("branch2", "Sequential", &[x], |b| {
            let mut y = pointwise(b, "0", in_c, bf, x);
            y = bn(b, "1", bf, y);
            y = act(b, "2", relu, true, y);
            y = depthwise(b, "3", bf, stride, y);
            y = bn(b, "4", bf, y);
            y = pointwise(b, "5", bf, bf, y);
            y = bn(b, "6", bf, y);
            act(b, "7", relu, true, y)
        })
    };
    let out = if stride == 1 {
        b.declare_module("branch1", "Sequential");
        let half = match b.shape(x) {
            &[n, c, h, w] => vec![n, c / 2, h, w],
            s => s.to_vec(),
        };
        let parts = b.op_multi(
            View {
                name: "chunk",
                shapes: vec![half.clone(), half],
                expand: false,
            },
            &[x],
        );
        // after a shape error the builder hands back one placeholder; keep going with it
        let (x1, x2) = match parts[..] {
            [p, q] => (p, q),
            _ => (x, x),
        };
        let y = branch2(b, x2, bf);
        b.op(Cat { dim: 1 }, &[x1, y])
    } else {
        let y1 = b.module("branch1", "Sequential", &[x], |b| {
            let mut y = depthwise(b, "0", inp, stride, x);
            y = bn(b, "1", inp, y);
            y = pointwise(b, "2", inp, bf, y);
            y = bn(b, "3", bf, y);
            act(b, "4", relu, true, y)
        });
        let y2 = branch2(b, x, inp);
        b.op(Cat { dim: 1 }, &[y1, y2])
    };
    channel_shuffle(b, out)
}

/// Builds a ShuffleNetV2: returns the logits.
pub fn shufflenet_v2(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, w: Width) -> TensorId {
    let ch = stage_out_channels(w);
    let relu = ActivationKind::ReLU;
    let mut x = b.module("conv1", "Sequential", &[x], |b| {
        let mut x = conv(
            b,
            "0",
            Conv2d::new(input.channels, ch[0], 3)
                .stride(2)
                .padding(1)
                .bias(false),
            x,
        );
        x = bn(b, "1", ch[0], x);
        act(b, "2", relu, true, x)
    });
    x = b.layer("maxpool", MaxPool2d::new(3, 2, 1), &[x]);
    let mut in_c = ch[0];
    for (si, (&repeats, &out_c)) in REPEATS.iter().zip(&ch[1..4]).enumerate() {
        let name = format!("stage{}", si + 2);
        x = b.module(&name, "Sequential", &[x], |b| {
            let mut x = x;
            for i in 0..repeats {
                let (inp, stride) = if i == 0 { (in_c, 2) } else { (out_c, 1) };
                x = b.module(&i.to_string(), "InvertedResidual", &[x], |b| {
                    inverted_residual(b, x, inp, out_c, stride)
                });
            }
            x
        });
        in_c = out_c;
    }
    x = b.module("conv5", "Sequential", &[x], |b| {
        let mut x = pointwise(b, "0", in_c, ch[4], x);
        x = bn(b, "1", ch[4], x);
        act(b, "2", relu, true, x)
    });
    x = b.op(
        Mean {
            dims: vec![2, 3],
            keepdim: false,
        },
        &[x],
    );
    linear(b, "fc", ch[4], input.num_classes, x)
}
