//! torchvision ConvNeXt tiny / small / base (torchvision/models/convnext.py): a 4x4 patchify stem
//! with `LayerNorm2d`, stages of `CNBlock`s (depthwise 7x7 conv, permute to channels-last,
//! LayerNorm, Linear 4x, GELU, Linear, permute back, `layer_scale *` (a `[C,1,1]` parameter of
//! the block), row-wise stochastic depth whose probability grows linearly from 0, in-place
//! residual add), `LayerNorm2d` + 2x2 conv downsampling, and a LayerNorm2d / Flatten / Linear head.
//!
//! LayerNorm runs on the permuted (non-contiguous) tensor: `native_layer_norm` saves that view, so
//! the conv output it comes from stays alive for backward. (On a real GPU the CUDA kernel also
//! makes a transient contiguous copy of it, which the op-level trace does not see.)

use vramscope_core::ops::{
    ActivationKind, Conv2d, LayerNorm, Mul, StochasticDepth, View, ViewStridedGrad,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, add, conv, linear, ZooInput};

/// Which ConvNeXt.
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    /// convnext_tiny
    Tiny,
    /// convnext_small
    Small,
    /// convnext_base
    Base,
}

/// (stage widths, stage depths, stochastic_depth_prob) of the builder.
fn spec(v: Variant) -> ([u64; 4], [u64; 4], f64) {
    match v {
        Variant::Tiny => ([96, 192, 384, 768], [3, 3, 9, 3], 0.1),
        Variant::Small => ([96, 192, 384, 768], [3, 3, 27, 3], 0.4),
        Variant::Base => ([128, 256, 512, 1024], [3, 3, 27, 3], 0.5),
    }
}

/// `x.permute(dims)` as a view.
fn permute(b: &mut GraphBuilder, x: TensorId, dims: [usize; 4]) -> TensorId {
    let s = b.shape(x).to_vec();
    let shape = dims.iter().map(|&d| s[d]).collect();
    b.op(View::new("permute", shape), &[x])
}

/// `LayerNorm2d(c, eps=1e-6)` named `name`: permute to NHWC, layer norm with the module's weight
/// and bias, permute back (the permutes are views).
fn layer_norm_2d(b: &mut GraphBuilder, name: &str, c: u64, x: TensorId) -> TensorId {
    // one call, recorded as three pieces so that the weight and bias belong to `name` itself
    let y = b.module(name, "LayerNorm2d", &[x], |b| permute(b, x, [0, 2, 3, 1]));
    let y = b.layer(name, LayerNorm::new(c), &[y]);
    b.module(name, "LayerNorm2d", &[y], |b| permute(b, y, [0, 3, 1, 2]))
}

/// `nn.Permute(dims)` as a leaf module named `name`. With `strided_grad`, the gradient reaching it
/// is NCHW-contiguous, so the permuted gradient it hands back is not, and the `_unsafe_view` of
/// the Linear before it copies it (`UnsafeViewBackward0`'s clone): a new gradient of its size.
fn permute_module(
    b: &mut GraphBuilder,
    name: &str,
    x: TensorId,
    dims: [usize; 4],
    strided_grad: bool,
) -> TensorId {
    b.declare_module(name, "Permute");
    let s = b.shape(x).to_vec();
    let shape: Vec<u64> = dims.iter().map(|&d| s[d]).collect();
    if strided_grad {
        b.layer(name, ViewStridedGrad { shape }, &[x])
    } else {
        b.layer(name, View::new("permute", shape), &[x])
    }
}

/// Builds a ConvNeXt: returns the logits.
pub fn convnext(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Variant) -> TensorId {
    let (widths, depths, sd_prob) = spec(v);
    let total: u64 = depths.iter().sum();
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = b.module("0", "Conv2dNormActivation", &[x], |b| {
            let y = conv(
                b,
                "0",
                Conv2d::new(input.channels, widths[0], 4).stride(4),
                x,
            );
            layer_norm_2d(b, "1", widths[0], y)
        });
        let mut block_id = 0u64;
        let mut idx = 1;
        for (si, (&dim, &n)) in widths.iter().zip(&depths).enumerate() {
            // the last stage's gradient comes from the pooling head in NCHW order; the others'
            // from the downsampling conv, channels-last like the activations
            let last_stage = si + 1 == widths.len();
            x = b.module(&idx.to_string(), "Sequential", &[x], |b| {
                let mut x = x;
                for i in 0..n {
                    // sd_prob * stage_block_id / (total_stage_blocks - 1.0)
                    let p = sd_prob * block_id as f64 / (total as f64 - 1.0);
                    x = b.module(&i.to_string(), "CNBlock", &[x], |b| {
                        cn_block(b, x, dim, p, last_stage)
                    });
                    block_id += 1;
                }
                x
            });
            idx += 1;
            if let Some(&out) = widths.get(si + 1) {
                x = b.module(&idx.to_string(), "Sequential", &[x], |b| {
                    let y = layer_norm_2d(b, "0", dim, x);
                    conv(b, "1", Conv2d::new(dim, out, 2).stride(2), y)
                });
                idx += 1;
            }
        }
        x
    });
    let last = widths[3];
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    // on a channels-last input, adaptive_avg_pool2d(1) is `mean` restrided with `as_strided`,
    // whose backward (AsStridedBackward1) scatters the gradient into a new tensor
    let s = b.shape(x).to_vec();
    x = b.op(ViewStridedGrad { shape: s }, &[x]);
    b.module("classifier", "Sequential", &[x], |b| {
        let y = layer_norm_2d(b, "0", last, x);
        let s = b.shape(y).to_vec();
        b.declare_module("1", "Flatten");
        let y = b.layer(
            "1",
            View::new("flatten", vec![s[0], s[1..].iter().product()]),
            &[y],
        );
        linear(b, "2", last, input.num_classes, y)
    })
}

fn cn_block(b: &mut GraphBuilder, x: TensorId, dim: u64, p: f64, last_stage: bool) -> TensorId {
    let y = b.module("block", "Sequential", &[x], |b| {
        let mut y = conv(b, "0", Conv2d::new(dim, dim, 7).padding(3).groups(dim), x);
        y = permute_module(b, "1", y, [0, 2, 3, 1], false);
        y = b.layer("2", LayerNorm::new(dim), &[y]);
        y = linear(b, "3", dim, 4 * dim, y);
        y = act(b, "4", ActivationKind::GELU, false, y);
        y = linear(b, "5", 4 * dim, dim, y);
        permute_module(b, "6", y, [0, 3, 1, 2], last_stage)
    });
    let scale = b.parameter("layer_scale", vec![dim, 1, 1]);
    let mut r = b.op(Mul, &[scale, y]);
    if p == 0.0 {
        // registered either way; stochastic_depth(p=0) returns its input
        b.declare_module("stochastic_depth", "StochasticDepth");
    } else {
        r = b.layer("stochastic_depth", StochasticDepth { p }, &[r]);
    }
    add(b, r, x, true)
}
