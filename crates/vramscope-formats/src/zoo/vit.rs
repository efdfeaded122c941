//! torchvision Vision Transformer B/16, B/32 and L/16 (torchvision/models/vision_transformer.py).
//!
//! The patch embedding is a strided conv, reshaped and permuted to `[B, L, E]`; the class token (a
//! parameter of the model) is expanded and concatenated in front; `encoder.pos_embedding` is added;
//! each `EncoderBlock` is pre-norm `nn.MultiheadAttention` + MLP with out-of-place residual adds.
//! Dropout is 0.0 everywhere, which is the identity. The head reads `x[:, 0]`.
//!
//! `nn.MultiheadAttention(batch_first=True)` in training mode runs
//! `F.multi_head_attention_forward` on `query.transpose(1, 0)`, exactly as written there:
//! - the packed in-projection `linear(q, in_proj_weight, in_proj_bias)` on the non-contiguous
//!   `[L, B, E]` input takes the `matmul` path ([`LinearStrided`]: a saved contiguous copy, `mm`,
//!   an out-of-place bias add);
//! - `unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()` copies the
//!   projection into `[3, L, B, E]`; q, k and v are `select`s of it, viewed as `[L, B·H, d]`,
//!   transposed and viewed again as `[B, H, L, d]`;
//! - `scaled_dot_product_attention` (mem-efficient attention in fp32, cuDNN in fp16/bf16);
//! - `permute(2, 0, 1, 3).reshape(B·L, E)` (a copy after mem-efficient attention, a view after
//!   cuDNN attention: [`AttentionHeadsMerge`]), `out_proj` is an `addmm`, and the result is viewed
//!   as `[L, B, E]` and transposed back.
//!
//! In backward several of those views receive a non-contiguous gradient and their `reshape`
//! copies it ([`ViewStridedGrad`], [`AttentionHeadsView`] in fp32); each `select` makes a
//! full-size zero tensor and the three are summed.

use vramscope_core::builder::RepeatedModule;
use vramscope_core::ops::{
    ActivationKind, Add, AttentionHeadsMerge, AttentionHeadsView, Cat, Contiguous, Conv2d,
    LayerNorm, Linear, LinearStrided, ScaledDotProductAttention, Select, View, ViewStridedGrad,
};
use vramscope_core::{GraphBuilder, TensorId};

use super::{act, dropout, linear, ZooInput};

/// Which ViT.
#[derive(Debug, Clone, Copy)]
pub enum Variant {
    /// vit_b_16
    B16,
    /// vit_b_32
    B32,
    /// vit_l_16
    L16,
}

struct Spec {
    patch: u64,
    layers: u64,
    heads: u64,
    hidden: u64,
    mlp: u64,
}

fn spec(v: Variant) -> Spec {
    let (patch, layers, heads, hidden, mlp) = match v {
        Variant::B16 => (16, 12, 12, 768, 3072),
        Variant::B32 => (32, 12, 12, 768, 3072),
        Variant::L16 => (16, 24, 16, 1024, 4096),
    };
    Spec {
        patch,
        layers,
        heads,
        hidden,
        mlp,
    }
}

fn view(b: &mut GraphBuilder, name: &'static str, x: TensorId, shape: Vec<u64>) -> TensorId {
    b.op(View::new(name, shape), &[x])
}

/// Builds a ViT for `input` (torchvision builds it for `image_size=224`; another square size
/// gives the model `vit_*(image_size=H)` would build, with a longer position embedding).
pub fn vit(b: &mut GraphBuilder, x: TensorId, input: &ZooInput, v: Variant) -> TensorId {
    let s = spec(v);
    let e = s.hidden;
    let n = input.batch;
    // _process_input: conv_proj, reshape(n, hidden, n_h * n_w), permute(0, 2, 1)
    let p = b.layer(
        "conv_proj",
        Conv2d::new(input.channels, e, s.patch).stride(s.patch),
        &[x],
    );
    let ps = b.shape(p).to_vec();
    let patches = ps[2] * ps[3];
    let mut x = view(b, "reshape", p, vec![n, e, patches]);
    x = view(b, "permute", x, vec![n, patches, e]);
    let seq = patches + 1;
    // torch.cat([class_token.expand(n, -1, -1), x], dim=1)
    let class_token = b.parameter("class_token", vec![1, 1, e]);
    let cls = b.op(
        View {
            name: "expand",
            shapes: vec![vec![n, 1, e]],
            expand: true,
        },
        &[class_token],
    );
    x = b.op(Cat { dim: 1 }, &[cls, x]);
    x = b.module("encoder", "Encoder", &[x], |b| {
        let pos = b.parameter("pos_embedding", vec![1, seq, e]);
        let mut x = b.op(Add { inplace: false }, &[x, pos]);
        x = dropout(b, "dropout", 0.0, x);
        x = b.module("layers", "Sequential", &[x], |b| {
            let mut x = x;
            // every block records the same program: the builder copies the first
            let mut blocks = RepeatedModule::with_calls(s.layers as u32);
            for i in 0..s.layers {
                let name = format!("encoder_layer_{i}");
                x = b.module_repeated(&mut blocks, &name, "EncoderBlock", &[x], |b| {
                    encoder_block(b, x, &s, n, seq)
                });
            }
            x
        });
        b.layer("ln", LayerNorm::new(e), &[x])
    });
    // x[:, 0]
    x = b.op(Select { dim: 1 }, &[x]);
    b.module("heads", "Sequential", &[x], |b| {
        linear(b, "head", e, input.num_classes, x)
    })
}

fn encoder_block(b: &mut GraphBuilder, input: TensorId, s: &Spec, n: u64, seq: u64) -> TensorId {
    let e = s.hidden;
    let x = b.layer("ln_1", LayerNorm::new(e), &[input]);
    let x = b.module("self_attention", "MultiheadAttention", &[x], |b| {
        multi_head_attention(b, x, e, s.heads, n, seq, 0.0)
    });
    let x = dropout(b, "dropout", 0.0, x);
    let x = b.op(Add { inplace: false }, &[x, input]);
    let y = b.layer("ln_2", LayerNorm::new(e), &[x]);
    let y = b.module("mlp", "MLPBlock", &[y], |b| {
        let mut y = linear(b, "0", e, s.mlp, y);
        y = act(b, "1", ActivationKind::GELU, false, y);
        y = dropout(b, "2", 0.0, y);
        y = linear(b, "3", s.mlp, e, y);
        dropout(b, "4", 0.0, y)
    });
    b.op(Add { inplace: false }, &[x, y])
}

/// `nn.MultiheadAttention(e, heads, dropout=dropout_p, batch_first=True)(x, x, x,
/// need_weights=False)` on `x` `[n, l, e]` (also what the ONNX front-end lowers such a module's
/// exported nodes to).
pub(crate) fn multi_head_attention(
    b: &mut GraphBuilder,
    x: TensorId,
    e: u64,
    heads: u64,
    n: u64,
    l: u64,
    dropout_p: f64,
) -> TensorId {
    let d = e / heads;
    let w = b.parameter("in_proj_weight", vec![3 * e, e]);
    let bias = b.parameter("in_proj_bias", vec![3 * e]);
    b.declare_module("out_proj", "NonDynamicallyQuantizableLinear");
    // query = key = value = x.transpose(1, 0)
    let q = view(b, "transpose", x, vec![l, n, e]);
    let outs = b.op_multi(
        LinearStrided {
            in_features: e,
            out_features: 3 * e,
        },
        &[q, w, bias],
    );
    let proj = outs[outs.len() - 1];
    // unflatten(-1, (3, E)): its gradient comes back permuted and is copied
    let mut p = b.op(
        ViewStridedGrad {
            shape: vec![l, n, 3, e],
        },
        &[proj],
    );
    p = view(b, "unsqueeze", p, vec![1, l, n, 3, e]);
    p = view(b, "transpose", p, vec![3, l, n, 1, e]);
    p = view(b, "squeeze", p, vec![3, l, n, e]);
    let packed = b.op(
        Contiguous {
            name: "contiguous",
            shape: vec![3, l, n, e],
        },
        &[p],
    );
    let qkv: Vec<TensorId> = (0..3).map(|_| b.op(Select { dim: 0 }, &[packed])).collect();
    // q.view(L, B*H, d).transpose(0, 1), then k, then v
    let heads_first: Vec<TensorId> = qkv
        .iter()
        .map(|&t| {
            let t = b.op(
                AttentionHeadsView {
                    shape: vec![l, n * heads, d],
                },
                &[t],
            );
            view(b, "transpose", t, vec![n * heads, l, d])
        })
        .collect();
    // q.view(B, H, L, d) ...
    let bhld: Vec<TensorId> = heads_first
        .iter()
        .map(|&t| {
            b.op(
                AttentionHeadsView {
                    shape: vec![n, heads, l, d],
                },
                &[t],
            )
        })
        .collect();
    let a = b.op(
        ScaledDotProductAttention {
            dropout_p,
            causal: false,
            row_stats_temporary: true,
            kv_contiguous: false,
        },
        &bhld,
    );
    // attn_output.permute(2, 0, 1, 3).reshape(B * L, E): a copy unless cuDNN attention ran
    let a = b.op(AttentionHeadsMerge, &[a]);
    let o = b.layer("out_proj", Linear::new(e, e), &[a]);
    // .view(L, B, E): its gradient arrives transposed and is copied; then transpose(1, 0)
    let o = b.op(
        ViewStridedGrad {
            shape: vec![l, n, e],
        },
        &[o],
    );
    view(b, "transpose", o, vec![n, l, e])
}
