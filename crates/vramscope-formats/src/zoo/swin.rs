//! torchvision Swin-T (torchvision/models/swin_transformer.py, V1): a 4x4 patchify conv, permute to
//! channels-last and LayerNorm; four stages of `SwinTransformerBlock`s (pre-norm shifted-window
//! attention and MLP, each added back through the block's row-wise stochastic depth, whose
//! probability grows linearly from 0 to 0.2), `PatchMerging` between stages; then LayerNorm,
//! permute, average pooling, flatten and the head.
//!
//! `shifted_window_attention` is written out as it executes: the relative-position-bias gather and
//! its `contiguous` copy, `F.pad` (a copy even with zero padding), `torch.roll` for shifted blocks
//! (a stage whose padded map fits in one window does not shift), the window partition
//! (`view → permute → reshape`, a copy unless there is a single window), `F.linear` for q/k/v,
//! `q * scale`, the copies `matmul` makes of q, kᵀ and v, the bias add, the shifted-window mask,
//! softmax, `attn @ v`, the head merge copy, the projection, the window merge copy and the roll
//! back. Python locals (`qkv`, the scaled q, the mask, the bias, the block input) stay alive until
//! the function returns; the window copy until `x` is reassigned.
//!
//! In backward, the views the gradient reaches in a permuted layout copy it (`ViewStridedGrad`);
//! in the last stage the gradient coming from the pooling head is in NCHW order, so the
//! `_unsafe_view` after every `Linear` that writes the residual stream copies it too.

use vramscope_core::ops::{
    ActivationKind, Add, Cat, ConstantPad, Contiguous, Conv2d, LayerNorm, Linear, MatMul,
    MatMulCopy, MulScalar, RelativePositionBias, Roll, Select, ShiftedWindowMask, Slice, Softmax,
    StochasticDepth, View, ViewStridedGrad,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, adaptive_avg_pool, dropout, linear, ZooInput};

/// Which Swin Transformer.
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    /// swin_t
    T,
}

struct Spec {
    patch: u64,
    embed: u64,
    depths: [u64; 4],
    heads: [u64; 4],
    window: u64,
    sd_prob: f64,
}

fn spec(v: Variant) -> Spec {
    match v {
        Variant::T => Spec {
            patch: 4,
            embed: 96,
            depths: [2, 2, 6, 2],
            heads: [3, 6, 12, 24],
            window: 7,
            sd_prob: 0.2,
        },
    }
}

fn view(b: &mut GraphBuilder, name: &'static str, x: TensorId, shape: Vec<u64>) -> TensorId {
    b.op(View::new(name, shape), &[x])
}

fn strided_grad_view(b: &mut GraphBuilder, x: TensorId, shape: Vec<u64>) -> TensorId {
    b.op(ViewStridedGrad { shape }, &[x])
}

/// `nn.Permute(dims)` as a leaf module named `name`.
fn permute_module(b: &mut GraphBuilder, name: &str, x: TensorId, dims: [usize; 4]) -> TensorId {
    b.declare_module(name, "Permute");
    let s = b.shape(x).to_vec();
    let shape = dims.iter().map(|&d| s[d]).collect();
    b.layer(name, View::new("permute", shape), &[x])
}

/// Builds a Swin Transformer: returns the logits.
pub fn swin(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Variant) -> TensorId {
    let s = spec(v);
    let total: u64 = s.depths.iter().sum();
    let last_dim = s.embed << (s.depths.len() - 1);
    let mut x = b.module("features", "Sequential", &[x], |b| {
        let mut x = b.module("0", "Sequential", &[x], |b| {
            let c = Conv2d::new(input.channels, s.embed, s.patch).stride(s.patch);
            let y = b.layer("0", c, &[x]);
            let y = permute_module(b, "1", y, [0, 2, 3, 1]);
            b.layer("2", LayerNorm::new(s.embed), &[y])
        });
        let mut block_id = 0u64;
        let mut idx = 1;
        for (si, (&depth, &heads)) in s.depths.iter().zip(&s.heads).enumerate() {
            let dim = s.embed << si;
            let last_stage = si + 1 == s.depths.len();
            x = b.module(&idx.to_string(), "Sequential", &[x], |b| {
                let mut x = x;
                for i in 0..depth {
                    // sd_prob * stage_block_id / (total_stage_blocks - 1)
                    let p = s.sd_prob * block_id as f64 / (total as f64 - 1.0);
                    let shift = if i % 2 == 0 { 0 } else { s.window / 2 };
                    let cfg = BlockCfg {
                        dim,
                        heads,
                        window: s.window,
                        shift,
                        p,
                        last_stage,
                    };
                    x = b.module(&i.to_string(), "SwinTransformerBlock", &[x], |b| {
                        swin_block(b, x, &cfg)
                    });
                    block_id += 1;
                }
                x
            });
            idx += 1;
            if si + 1 < s.depths.len() {
                // the next stage is the last one: its gradient reaches this reduction in NCHW order
                let next_last = si + 2 == s.depths.len();
                x = b.module(&idx.to_string(), "PatchMerging", &[x], |b| {
                    patch_merging(b, x, dim, next_last)
                });
                idx += 1;
            }
        }
        x
    });
    x = b.layer("norm", LayerNorm::new(last_dim), &[x]);
    x = permute_module(b, "permute", x, [0, 3, 1, 2]);
    x = adaptive_avg_pool(b, "avgpool", (1, 1), x);
    // on a channels-last input, adaptive_avg_pool2d(1) is `mean` restrided with `as_strided`,
    // whose backward (AsStridedBackward1) scatters the gradient into a new tensor
    let ps = b.shape(x).to_vec();
    x = strided_grad_view(b, x, ps.clone());
    b.declare_module("flatten", "Flatten");
    x = b.layer(
        "flatten",
        View::new("flatten", vec![ps[0], ps[1..].iter().product()]),
        &[x],
    );
    linear(b, "head", last_dim, input.num_classes, x)
}

/// `PatchMerging(dim)`: pad (a copy), four strided slices concatenated, LayerNorm(4·dim), and a
/// bias-free reduction to 2·dim.
fn patch_merging(b: &mut GraphBuilder, x: TensorId, dim: u64, strided_grad: bool) -> TensorId {
    let s = b.shape(x).to_vec();
    let (n, h, w) = (s[0], s[1], s[2]);
    let (ph, pw) = (h + h % 2, w + w % 2);
    let x = b.op(
        ConstantPad {
            pads: vec![(0, 0), (0, w % 2), (0, h % 2)],
        },
        &[x],
    );
    // x[..., a::2, b::2, :] for (a, b) in (0,0), (1,0), (0,1), (1,1): a slice of H, then of W
    let parts: Vec<TensorId> = [(0, 0), (1, 0), (0, 1), (1, 1)]
        .iter()
        .map(|&(a, c)| {
            let hs = (ph - a).div_ceil(2);
            let ws = (pw - c).div_ceil(2);
            let y = b.op(
                Slice {
                    shape: vec![n, hs, pw, dim],
                },
                &[x],
            );
            b.op(
                Slice {
                    shape: vec![n, hs, ws, dim],
                },
                &[y],
            )
        })
        .collect();
    let x = b.op(Cat { dim: 3 }, &parts);
    // __init__ registers (and creates) reduction before norm
    b.declare_module("reduction", "Linear");
    let x = b.layer("norm", LayerNorm::new(4 * dim), &[x]);
    let mut lin = Linear::new(4 * dim, 2 * dim);
    lin.bias = false;
    let y = b.layer("reduction", lin, &[x]);
    b.init_first("reduction");
    if strided_grad {
        let shape = b.shape(y).to_vec();
        strided_grad_view(b, y, shape)
    } else {
        y
    }
}

struct BlockCfg {
    dim: u64,
    heads: u64,
    window: u64,
    shift: u64,
    p: f64,
    last_stage: bool,
}

/// `x + sd(attn(norm1(x)))`, then `x + sd(mlp(norm2(x)))`.
fn swin_block(b: &mut GraphBuilder, x: TensorId, c: &BlockCfg) -> TensorId {
    // registration order of __init__: norm1, attn, stochastic_depth, norm2, mlp
    for (name, class) in [
        ("norm1", "LayerNorm"),
        ("attn", "ShiftedWindowAttention"),
        ("stochastic_depth", "StochasticDepth"),
        ("norm2", "LayerNorm"),
        ("mlp", "MLP"),
    ] {
        b.declare_module(name, class);
    }
    let n1 = b.layer("norm1", LayerNorm::new(c.dim), &[x]);
    // get_relative_position_bias(): table[index] on the attention module's own tensors
    let bias = b.layer(
        "attn",
        RelativePositionBias {
            window: (c.window, c.window),
            heads: c.heads,
        },
        &[],
    );
    let a = b.module("attn", "ShiftedWindowAttention", &[n1], |b| {
        shifted_window_attention(b, n1, bias, c)
    });
    let a = stochastic_depth(b, c.p, a);
    let x = b.op(Add { inplace: false }, &[x, a]);
    let y = b.layer("norm2", LayerNorm::new(c.dim), &[x]);
    let y = b.module("mlp", "MLP", &[y], |b| {
        let mut y = linear(b, "0", c.dim, 4 * c.dim, y);
        y = act(b, "1", ActivationKind::GELU, false, y);
        y = dropout(b, "2", 0.0, y);
        y = linear(b, "3", 4 * c.dim, c.dim, y);
        if c.last_stage {
            let shape = b.shape(y).to_vec();
            y = strided_grad_view(b, y, shape);
        }
        dropout(b, "4", 0.0, y)
    });
    let y = stochastic_depth(b, c.p, y);
    b.op(Add { inplace: false }, &[x, y])
}

fn stochastic_depth(b: &mut GraphBuilder, p: f64, x: TensorId) -> TensorId {
    if p == 0.0 {
        // stochastic_depth(p=0) returns its input
        x
    } else {
        b.layer("stochastic_depth", StochasticDepth { p }, &[x])
    }
}

/// The body of `shifted_window_attention` (inside the `attn` module).
fn shifted_window_attention(
    b: &mut GraphBuilder,
    input: TensorId,
    bias: TensorId,
    c: &BlockCfg,
) -> TensorId {
    let s = b.shape(input).to_vec();
    let (n, h, w, dim) = (s[0], s[1], s[2], s[3]);
    let ws = c.window;
    let heads = c.heads;
    let d = dim / heads;
    let nn = ws * ws;
    // relative_position_bias.view(N, N, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
    let rb = view(b, "view", bias, vec![nn, nn, heads]);
    let rb = view(b, "permute", rb, vec![heads, nn, nn]);
    let rb = b.op(
        Contiguous {
            name: "contiguous",
            shape: vec![heads, nn, nn],
        },
        &[rb],
    );
    let rb = view(b, "unsqueeze", rb, vec![1, heads, nn, nn]);
    b.hold(&[rb]);

    let pad_r = (ws - w % ws) % ws;
    let pad_b = (ws - h % ws) % ws;
    let (ph, pw) = (h + pad_b, w + pad_r);
    let mut x = b.op(
        ConstantPad {
            pads: vec![(0, 0), (0, pad_r), (0, pad_b)],
        },
        &[input],
    );
    let shift_h = if ws >= ph { 0 } else { c.shift };
    let shift_w = if ws >= pw { 0 } else { c.shift };
    let shifted = shift_h + shift_w > 0;
    if shifted {
        x = b.op(Roll, &[x]);
    }
    let (nwh, nww) = (ph / ws, pw / ws);
    let nw = nwh * nww;
    let bw = n * nw;
    // the window partition: a copy unless there is only one window
    let part = if nw > 1 {
        let v = strided_grad_view(b, x, vec![n, nwh, ws, nww, ws, dim]);
        let v = view(b, "permute", v, vec![n, nwh, nww, ws, ws, dim]);
        b.op(
            Contiguous {
                name: "reshape",
                shape: vec![bw, nn, dim],
            },
            &[v],
        )
    } else {
        let v = view(b, "view", x, vec![n, nwh, ws, nww, ws, dim]);
        let v = view(b, "permute", v, vec![n, nwh, nww, ws, ws, dim]);
        view(b, "reshape", v, vec![bw, nn, dim])
    };
    // `x` (the windows) is reassigned after `attn @ v`: held until then
    let (o, locals) = b.frame(|b| {
        b.hold(&[part]);
        // F.linear(x, self.qkv.weight, self.qkv.bias)
        let qkv = b.layer("qkv", Linear::new(dim, 3 * dim), &[part]);
        let mut locals = vec![qkv];
        let r = strided_grad_view(b, qkv, vec![bw, nn, 3, heads, d]);
        let r = view(b, "permute", r, vec![3, bw, heads, nn, d]);
        let qkv3: Vec<TensorId> = (0..3).map(|_| b.op(Select { dim: 0 }, &[r])).collect();
        let q = b.op(MulScalar, &[qkv3[0]]);
        locals.push(q);
        // q.matmul(k.transpose(-2, -1)): matmul copies both operands for bmm
        let kt = view(b, "transpose", qkv3[1], vec![bw, heads, d, nn]);
        let qc = b.op(
            Contiguous {
                name: "reshape",
                shape: vec![bw, heads, nn, d],
            },
            &[q],
        );
        let kc = b.op(
            Contiguous {
                name: "reshape",
                shape: vec![bw, heads, d, nn],
            },
            &[kt],
        );
        let mut attn = b.op(MatMul, &[qc, kc]);
        attn = b.op(Add { inplace: false }, &[attn, rb]);
        if shifted {
            let mask = b.op(
                ShiftedWindowMask {
                    padded: (ph, pw),
                    window: (ws, ws),
                },
                &[part],
            );
            locals.push(mask);
            let a5 = view(b, "view", attn, vec![n, nw, heads, nn, nn]);
            let m5 = view(b, "unsqueeze", mask, vec![1, nw, 1, nn, nn]);
            attn = b.op(Add { inplace: false }, &[a5, m5]);
            attn = view(b, "view", attn, vec![bw, heads, nn, nn]);
        }
        attn = b.op(Softmax { dim: 3 }, &[attn]);
        // attn.matmul(v).transpose(1, 2).reshape(B*nW, N, C); matmul copies v (after casting)
        let o = b.op(
            MatMulCopy {
                lhs: false,
                rhs: true,
            },
            &[attn, qkv3[2]],
        );
        let o = strided_grad_view(b, o, vec![bw, heads, nn, d]);
        let o = view(b, "transpose", o, vec![bw, nn, heads, d]);
        let o = b.op(
            Contiguous {
                name: "reshape",
                shape: vec![bw, nn, dim],
            },
            &[o],
        );
        (o, locals)
    });
    // qkv (through k and v), the scaled q and the mask live until the function returns
    b.hold(&locals);
    // F.linear(x, self.proj.weight, self.proj.bias)
    let p = b.layer("proj", Linear::new(dim, dim), &[o]);
    // x.view(B, nWh, nWw, ws, ws, C): its gradient arrives permuted (or, in the last stage, in
    // NCHW order) and is copied
    let v = strided_grad_view(b, p, vec![n, nwh, nww, ws, ws, dim]);
    let v = view(b, "permute", v, vec![n, nwh, ws, nww, ws, dim]);
    let mut x = if nw > 1 {
        b.op(
            Contiguous {
                name: "reshape",
                shape: vec![n, ph, pw, dim],
            },
            &[v],
        )
    } else {
        view(b, "reshape", v, vec![n, ph, pw, dim])
    };
    if shifted {
        x = b.op(Roll, &[x]);
    }
    if ph != h || pw != w {
        // x[:, :H, :W, :].contiguous()
        let y = b.op(
            Slice {
                shape: vec![n, h, w, dim],
            },
            &[x],
        );
        x = b.op(
            Contiguous {
                name: "contiguous",
                shape: vec![n, h, w, dim],
            },
            &[y],
        );
    }
    // __init__ creates qkv and proj before the bias table
    b.init_first("proj");
    b.init_first("qkv");
    x
}
