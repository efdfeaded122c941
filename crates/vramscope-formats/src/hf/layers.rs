//! Pieces shared by the transformers models, each written as the aten calls it issues (checked
//! against truth traces): embeddings, `Conv1D`, RMSNorm with its float32 upcast, rotary position
//! embeddings, the position ids and the packed-sequence check every model's mask code runs, and
//! the generation pieces: the `DynamicCache`, one forward call's context ([`Call`]) and the
//! cache-aware attention core.

use vramscope_core::ops::{
    broadcast_shapes, Activation, ActivationKind, Add, Aten, Autocast, Contiguous, DTypeRule,
    Dropout, GradIn, HeadsOf, KvCacheUpdate, LayerNorm, Linear, MatMul, MatMulCopy, Saved,
    ScaledDotProductAttention, ScaledDotProductAttentionBias, Scratch, SdpaHeadsView,
    SdpaOutputMerge, Slice, Softmax, ToDtype,
};
use vramscope_core::{DType, GraphBuilder, InitStep, TensorId};

use super::seq_cls::DecoderHead;
use super::HfInput;

/// `nn.Embedding(num, dim)` called on integer `ids`: `embedding(weight, ids)`, which saves the
/// indices; backward makes a dense `[num, dim]` gradient. Returns the output and the weight (for
/// tied heads).
pub fn embedding(
    b: &mut GraphBuilder,
    name: &str,
    num: u64,
    dim: u64,
    ids: TensorId,
) -> (TensorId, TensorId) {
    b.module(name, "Embedding", &[ids], |b| {
        let w = b.parameter("weight", vec![num, dim]);
        (embedding_lookup(b, w, ids), w)
    })
}

/// `embedding(weight, ids)` inside the current module: saves the indices; backward makes a dense
/// gradient of the weight's shape. For an `nn.Embedding` whose weight is another module's (T5's
/// `encoder.embed_tokens`, tied to `shared`) or one with a forward of its own (Gemma's scaled
/// embedding).
pub fn embedding_lookup(b: &mut GraphBuilder, weight: TensorId, ids: TensorId) -> TensorId {
    let mut shape = b.shape(ids).to_vec();
    shape.push(b.shape(weight)[1]);
    let op = Aten::new("embedding", shape)
        .dtype(DTypeRule::Like(0))
        .saves(vec![Saved::Input(1)])
        .saved_only_for(Saved::Input(1), 0)
        .grads(vec![GradIn::New, GradIn::None]);
    b.op(op, &[weight, ids])
}

/// `x[i, ...]` (advanced indexing) with `indices` index tensors giving `out`: keeps the indices; `IndexBackward0`
/// makes zeros of the source's shape `src` and returns `index_put` of the gradient into them.
pub fn advanced_index(out: Vec<u64>, src: Vec<u64>, indices: usize) -> Aten {
    let mut grads = vec![GradIn::New];
    grads.extend(std::iter::repeat_n(GradIn::None, indices));
    Aten::new("index", out)
        .dtype(DTypeRule::Like(0))
        .saves((1..=indices).map(Saved::Input).collect())
        .grads(grads)
        .backward_temporary(src, DTypeRule::Like(0))
}

/// An integer tensor op (no autograd, a fixed dtype): `generate`'s bookkeeping, a classifier's
/// index of the last token.
pub fn int_op(
    b: &mut GraphBuilder,
    name: &'static str,
    shape: Vec<u64>,
    dtype: DType,
    inputs: &[TensorId],
) -> TensorId {
    b.op(
        Aten::new(name, shape)
            .dtype(DTypeRule::Fixed(dtype))
            .not_differentiable(),
        inputs,
    )
}

/// `nn.Dropout(p)`; p = 0 returns its input.
pub fn dropout(b: &mut GraphBuilder, name: &str, p: f64, x: TensorId) -> TensorId {
    if p <= 0.0 {
        b.declare_module(name, "Dropout");
        return x;
    }
    b.layer(name, Dropout { p }, &[x])
}

/// `position_ids = arange(S) + past_seen_tokens` (int64, `[S]`): the `arange` is made before the
/// sum and freed after it (truth traces), so it is scratch, not a temporary made after the output.
pub fn position_ids(b: &mut GraphBuilder, seq: u64) -> TensorId {
    let op = Aten::new("add", vec![seq])
        .dtype(DTypeRule::Fixed(DType::I64))
        .scratch(vec![Scratch::Alloc {
            bytes: seq * DType::I64.size(),
            what: "arange",
        }])
        .not_differentiable();
    b.op(op, &[])
}

/// The temporaries of `masking_utils.find_packed_sequence_indices(position_ids)`, which every
/// model's mask code runs: `first_dummy_value = position_ids[:, :1] - 1` (`[B, 1]` int64),
/// `cat` `[B, S + 1]`, the `diff` `sub` `[B, S]` (the `cat` freed once it is taken), `ne`
/// (bool) and `cumsum` (int64); the `ne` goes when `cumsum` returns, the rest when the function
/// does (truth traces).
pub fn packed_sequence_check(b: &mut GraphBuilder, batch: u64, seq: u64) {
    let temporary = |bytes| Scratch::Alloc {
        bytes,
        what: "temporary",
    };
    let int64 = DType::I64.size();
    let mut op = Aten::new("find_packed_sequence_indices", vec![])
        .scratch(vec![
            temporary(batch * int64),
            temporary(batch * (seq + 1) * int64),
            temporary(batch * seq * int64),
            Scratch::Free(1),
            temporary(batch * seq * DType::Bool.size()),
            temporary(batch * seq * int64),
            Scratch::Free(3),
            Scratch::Free(0),
            Scratch::Free(2),
            Scratch::Free(4),
        ])
        .not_differentiable();
    op.outputs.clear();
    b.op_multi(op, &[]);
}

/// `Conv1D(nf, nx)` (GPT-2's transposed linear): `addmm(bias, x.view(-1, nx), weight)` with
/// `weight` `[nx, nf]`; the engine sums the output's gradient into the bias's after the node.
pub fn conv1d(b: &mut GraphBuilder, name: &str, nx: u64, nf: u64, x: TensorId) -> TensorId {
    let mut shape = b.shape(x).to_vec();
    if let Some(l) = shape.last_mut() {
        *l = nf;
    }
    b.module(name, "Conv1D", &[x], |b| {
        let w = b.parameter("weight", vec![nx, nf]);
        let bias = b.parameter("bias", vec![nf]);
        let op = Aten::new("addmm", shape)
            .autocast(Autocast::LowerPrecision)
            .saves(vec![Saved::Input(1), Saved::Input(2)])
            .cross_saves(1, 2)
            .grads(vec![GradIn::Reduced(0), GradIn::New, GradIn::New])
            .first_last();
        b.op(op, &[bias, x, w])
    })
}

/// `nn.Linear(i, o, bias)` as a leaf module.
pub fn linear(
    b: &mut GraphBuilder,
    name: &str,
    i: u64,
    o: u64,
    bias: bool,
    x: TensorId,
) -> TensorId {
    b.layer(
        name,
        Linear {
            in_features: i,
            out_features: o,
            bias,
        },
        &[x],
    )
}

/// An LM head tied to the embedding `weight`: `linear(x, weight)` (an `mm` without bias).
pub fn tied_head(b: &mut GraphBuilder, name: &str, weight: TensorId, x: TensorId) -> TensorId {
    b.module(name, "Linear", &[x], |b| linear_fn(b, x, weight))
}

/// `F.linear(x, weight)` without bias, called inside the current module (`weight` `[out, in]`,
/// e.g. a MoE router's own parameter): an `mm` that autocast runs in the lower precision.
pub fn linear_fn(b: &mut GraphBuilder, x: TensorId, weight: TensorId) -> TensorId {
    let mut shape = b.shape(x).to_vec();
    let out = b.shape(weight)[0];
    if let Some(l) = shape.last_mut() {
        *l = out;
    }
    // MmBackward0 releases `mat2_` (the weight) before `self_`
    let op = Aten::new("linear", shape)
        .autocast(Autocast::LowerPrecision)
        .saves(vec![Saved::Input(1), Saved::Input(0)])
        .cross_saves(0, 1)
        .right_to_left();
    b.op(op, &[x, weight])
}

/// `a + b` (out of place, same shapes).
pub fn add(b: &mut GraphBuilder, x: TensorId, y: TensorId) -> TensorId {
    b.op(Add { inplace: false }, &[x, y])
}

/// `x * scalar` (`MulBackward0` makes a new gradient, nothing saved).
pub fn mul_scalar(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    b.op(Aten::new("mul", s), &[x])
}

/// `x + scalar` (the gradient passes through).
pub fn add_scalar(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    b.op(
        Aten::new("add", s).grads(vec![GradIn::PassThrough(0)]),
        &[x],
    )
}

/// `x * y` (broadcasting) for two tensors that need gradients: saves both, each for the other's
/// gradient; `MulBackward0` computes the second operand's gradient first, then the first's, each
/// `grad * other` with the product's shape and dtype, which `validate_outputs` sums down to a
/// broadcast operand's shape and casts to a narrower operand's dtype (`weight * h` in the norms:
/// h's gradient, then the weight's full-size product).
pub fn mul(b: &mut GraphBuilder, x: TensorId, y: TensorId) -> TensorId {
    let s = broadcast_shapes(b.shape(x), b.shape(y)).unwrap_or_else(|| b.shape(x).into());
    b.op(
        Aten::new("mul", s)
            .saves(vec![Saved::Input(1), Saved::Input(0)])
            .cross_saves(0, 1)
            .right_to_left()
            .grads_like_output(),
        &[x, y],
    )
}

/// A view with a new shape (`view`, `transpose`, `split` pieces).
pub fn view(b: &mut GraphBuilder, name: &'static str, x: TensorId, shape: Vec<u64>) -> TensorId {
    b.op(Aten::view(name, shape), &[x])
}

/// `t.view(shape)` of a q or k projection (`shape` is `[B, S, H, D]`) that is then transposed,
/// rotated and handed to SDPA. With `grads_heads_first` its gradient arrives as the transpose of
/// a heads-first tensor, which `ViewBackward0` can view only for one head or one position:
/// otherwise it copies it ([`SdpaHeadsView`]). That is the case after rotary, whatever the
/// SDPA backend: the engine runs `rotate_half(x) * sin`'s branch first (made later, a higher
/// sequence number), so the two `SliceBackward0` gradients (new zero tensors, heads-first) open
/// the input's gradient buffer and `x * cos`'s gradient is added to them, in their layout (truth
/// traces of Qwen2, SmolLM2, Llama-3.2 and Gemma under float32, AMP bf16 / fp16 and pure bf16).
///
/// `sdpa`: the attention call the view feeds, `(masked, dropout_p)`, when it is SDPA's (`None`
/// for eager attention): the math fallback and padded flash attention hand every gradient back
/// heads-first, whatever `grads_heads_first` says ([`SdpaHeadsView`]).
pub fn rotated_heads_view(
    b: &mut GraphBuilder,
    t: TensorId,
    shape: Vec<u64>,
    grads_heads_first: bool,
    sdpa: Option<(bool, f64)>,
) -> TensorId {
    projection_heads_view(b, t, shape, grads_heads_first, sdpa, HeadsOf::Other)
}

/// [`rotated_heads_view`] of any projection, `of` the operand it makes ([`HeadsOf`]).
fn projection_heads_view(
    b: &mut GraphBuilder,
    t: TensorId,
    shape: Vec<u64>,
    copied: bool,
    sdpa: Option<(bool, f64)>,
    of: HeadsOf,
) -> TensorId {
    let op = SdpaHeadsView {
        shape,
        copied,
        sdpa,
        of,
    };
    b.op(op, &[t])
}

/// Which of q's, k's and v's gradients reach their projection's `.view` heads-first, so that
/// `ViewBackward0` copies them ([`rotated_heads_view`]):
/// - q's and k's: those of a training forward's SDPA (masked or not, whatever the backend, with
///   a cache or without: rotary's products give them the heads-first layout; truth traces of
///   Qwen2, SmolLM2, Llama-3.2, Gemma and of the per-token heads' base models, which fill a
///   cache while training), and those of eager attention with a cache (truth traces of Gemma2);
/// - v's too when `repeat_kv` expands k and v before SDPA (a mask, fewer KV heads than heads):
///   `ExpandBackward0` sums v's gradient into a new `[B, kv, S, D]` tensor (truth traces of
///   Mistral past its sliding window and Gemma-3-4B); and with a cache when SDPA's kernel lays
///   its gradients out like its inputs ([`sdpa_grads_like_inputs`]), here the cache's
///   concatenations, contiguous heads-first (truth traces of Llama-3.2's and Qwen2's token
///   classifiers and question answering in float32, pure bf16 and AMP);
/// - all three in eager training without a cache: bmm hands v's gradient back heads-first, and
///   rotary's products give q's and k's that layout (truth traces of Qwen2-small's step, of
///   Qwen3's with checkpointing and a padded batch, of Phi-3 and Mistral at batch 1, of eager
///   Phi-3 at batch 2, and of Llama, Mixtral and Gemma2 with as many KV heads as heads at
///   batches 2 and 4).
///
/// The same for Phi-3, whose q, k and v are slices of one `qkv_proj` and whose rotary `cat`
/// makes q and k new tensors: without a cache v's gradient reaches the slice as the kernel made
/// it, also from cuDNN (truth traces of Phi-3 mini and medium under AMP fp16 and bf16, with and
/// without checkpointing, past the window).
///
/// `like_inputs`: [`sdpa_grads_like_inputs`].
pub fn heads_first_grads(
    (cache, like_inputs): (bool, bool),
    eager: bool,
    masked: bool,
    (heads, kv_heads): (u64, u64),
) -> [bool; 3] {
    let gqa = heads > kv_heads;
    if eager && !cache {
        return [true; 3];
    }
    [true, true, (masked && gqa) || (cache && like_inputs)]
}

/// Whether SDPA's kernel returns gradients laid out like its inputs: flash and cuDNN attention
/// (half precision; with a mask cuDNN, which has no dropout), not mem-efficient attention (float32,
/// or a mask with dropout), whose gradients are `[B, S, H, D]` whatever its inputs. With a cache
/// the keys and values it is given are the cache's concatenations, contiguous `[B, H, S, D]`, so
/// their gradients reach the projections' `.view` heads-first and `ViewBackward0` copies them
/// (truth traces of the per-token heads' base models, which fill a cache while training).
pub fn sdpa_grads_like_inputs(half: bool, masked: bool, dropout_p: f64) -> bool {
    half && (!masked || dropout_p == 0.0)
}

/// `[B, S, E]` viewed as `[B, H, S, D]` (`view` then `transpose(1, 2)`), its gradient copied by
/// `ViewBackward0` when `copied` (it comes back heads-first: [`sdpa_grads_like_inputs`]) or when
/// the SDPA call `sdpa` hands it back so ([`rotated_heads_view`]).
pub fn heads_view(
    b: &mut GraphBuilder,
    t: TensorId,
    heads: u64,
    copied: bool,
    sdpa: Option<(bool, f64)>,
    of: HeadsOf,
) -> TensorId {
    let s = b.shape(t).to_vec();
    let (bsz, seq, e) = (s[0], s[1], s[2]);
    let shape = vec![bsz, seq, heads, e / heads];
    let t = projection_heads_view(b, t, shape, copied, sdpa, of);
    view(b, "transpose", t, vec![bsz, heads, seq, e / heads])
}

/// The dtype a decoder's q, k, v, gate and up projections return, fed a norm's output in the
/// parameters' `dtype`: the autocast dtype under autocast, else `dtype`; with 4-bit layers
/// (`Linear4bit` returns its input's dtype; [`super::HfInput::four_bit`]) always `dtype`.
pub fn projection_dtype(dtype: DType, autocast: Option<DType>, four_bit: bool) -> DType {
    if four_bit {
        dtype
    } else {
        autocast.unwrap_or(dtype)
    }
}

/// `x.to(dtype)` when it changes the dtype (a `_to_copy` with its own autograd node).
pub fn to_dtype(b: &mut GraphBuilder, x: TensorId, dtype: DType) -> TensorId {
    let s = b.shape(x).to_vec();
    b.op(
        Aten::new("_to_copy", s).dtype(DTypeRule::Fixed(dtype)),
        &[x],
    )
}

/// `x.to(to)` for an `x` in dtype `from`: `x` itself when the dtypes match (`Tensor.to` returns
/// `self` without a copy), else a [`to_dtype`] copy. The builder does not track dtypes, so the
/// caller says what `x` is.
pub fn cast(b: &mut GraphBuilder, x: TensorId, from: DType, to: DType) -> TensorId {
    if from == to {
        x
    } else {
        to_dtype(b, x, to)
    }
}

/// `x.pow(2)` (or `pow(x, 3)`): runs in float32 under autocast and saves its input; its backward
/// makes a `pow` and a `mul.Scalar` temporary of the input's size.
pub fn pow_fp32(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    fp32_pointwise(b, "pow", Saved::Input(0), x)
}

/// A pointwise op on the autocast float32 list (`pow`, `rsqrt`) that saves `saved` and whose
/// backward makes two temporaries of its size in its input's dtype (float32 under autocast; a
/// half model's own dtype outside it).
fn fp32_pointwise(b: &mut GraphBuilder, name: &'static str, saved: Saved, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    let like_input = DTypeRule::Like(0);
    b.op(
        Aten::new(name, s.clone())
            .autocast(Autocast::Fp32)
            .saves(vec![saved])
            .backward_temporary(s.clone(), like_input)
            .backward_temporary(s, like_input),
        &[x],
    )
}

/// `RMSNorm(hidden)` (Llama, Mistral, Qwen2/3, Phi-3): `x.to(float32)`, `variance =
/// pow(2).mean(-1, keepdim)`, `+ eps`, `rsqrt`, `x * rsqrt`, `.to(input_dtype)`, `weight * h`.
/// `dtype` is the dtype of `x`; the norm runs over its last dimension.
pub fn rms_norm(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    hidden: u64,
    dtype: DType,
    x: TensorId,
) -> TensorId {
    b.module(name, type_name, &[x], |b| {
        let w = b.parameter("weight", vec![hidden]);
        let xf = cast(b, x, dtype, DType::F32);
        let var = rms_variance(b, xf);
        let r = rsqrt_plus_eps(b, var);
        let h = times_rsqrt(b, xf, r);
        rebound(b, x, xf);
        // the float32 product (`hidden_states`) and `variance` are locals of the forward until
        // the module returns, freed in that order (CPython clears the argument first)
        b.hold(&[h, var]);
        let h = cast(b, h, DType::F32, dtype);
        // weight * h: h's gradient is allocated before the weight's full-size product, which
        // goes first (truth traces)
        mul(b, w, h)
    })
}

/// `GemmaRMSNorm(dim)` (Gemma, Gemma2, Gemma3): `output = _norm(x.float())` with `_norm(x) = x *
/// rsqrt(x.pow(2).mean(-1, keepdim) + eps)`, then `output * (1.0 + weight.float())` in float32,
/// then `.type_as(x)`. `dtype` is the dtype of `x` (a projection's output is in the autocast
/// dtype), `weight_dtype` the parameters'; the norm runs over the last dimension.
pub fn gemma_rms_norm(
    b: &mut GraphBuilder,
    name: &str,
    type_name: &str,
    dim: u64,
    (dtype, weight_dtype): (DType, DType),
    x: TensorId,
) -> TensorId {
    b.module(name, type_name, &[x], |b| {
        let w = b.parameter("weight", vec![dim]);
        let s = b.shape(x).to_vec();
        let xf = cast(b, x, dtype, DType::F32);
        // the mean is a temporary of one expression here, freed by the `+ eps`
        let h = rms_normalize(b, xf);
        // `x.float()` is `_norm`'s argument, dropped as it returns
        rebound(b, x, xf);
        // 1.0 + weight.float(): a [dim] float32 tensor
        let wf = cast(b, w, weight_dtype, DType::F32);
        let w1 = add_scalar(b, wf);
        // output * (1 + w): the weight's gradient as a full-size product first, then output's;
        // validate_outputs sums the weight's down once the node's apply has returned (after a
        // recomputed region's unpacked tensors go: truth traces of checkpointed Gemma3); none
        // for a frozen weight (truth traces of Gemma3 under LoRA)
        let out = b.op(
            Aten::new("mul", s)
                .saves(vec![Saved::Input(1), Saved::Input(0)])
                .cross_saves(0, 1)
                .grads_like_output()
                .right_to_left(),
            &[h, w1],
        );
        // `output = output * (1.0 + ...)`: the old output goes after the sum
        b.keep_until_now(&[h]);
        if dtype != DType::F32 {
            // the float32 `output` is a local until the forward returns
            b.hold(&[out]);
            to_dtype(b, out, dtype)
        } else {
            out
        }
    })
}

/// `hidden = hidden * torch.rsqrt(...)` where `hidden` was `x.to(float32)`: CPython drops the
/// expression's temporaries as the product returns, and the old `hidden` (`xf`, when the cast
/// made a copy) only when the statement rebinds the name (truth traces: `rsqrt`, then
/// `_to_copy`).
fn rebound(b: &mut GraphBuilder, x: TensorId, xf: TensorId) {
    if xf != x {
        b.keep_until_now(&[xf]);
    }
}

/// `x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` on a float32 `x`, the mean a temporary of
/// the expression (freed once `+ eps` has used it).
fn rms_normalize(b: &mut GraphBuilder, xf: TensorId) -> TensorId {
    let r = rms_rsqrt(b, xf, false);
    times_rsqrt(b, xf, r)
}

/// `x * rsqrt` on a float32 `x`: the rsqrt gradient is a full-size product summed down.
fn times_rsqrt(b: &mut GraphBuilder, xf: TensorId, r: TensorId) -> TensorId {
    let s = b.shape(xf).to_vec();
    b.op(
        Aten::new("mul", s.clone())
            .saves(vec![Saved::Input(1), Saved::Input(0)])
            .cross_saves(0, 1)
            .backward_temporary(s, DTypeRule::Fixed(DType::F32)),
        &[xf, r],
    )
}

/// `rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` on a float32 `x` (a `[..., 1]` tensor): the
/// part RMSNorm and T5LayerNorm share; `hold_variance` as in [`rms_normalize`].
pub(super) fn rms_rsqrt(b: &mut GraphBuilder, xf: TensorId, hold_variance: bool) -> TensorId {
    let var = rms_variance(b, xf);
    if hold_variance {
        b.hold(&[var]);
    }
    rsqrt_plus_eps(b, var)
}

/// `x.pow(2).mean(-1, keepdim=True)` on a float32 `x`.
fn rms_variance(b: &mut GraphBuilder, xf: TensorId) -> TensorId {
    let mut s1 = b.shape(xf).to_vec();
    if let Some(l) = s1.last_mut() {
        *l = 1;
    }
    let p = pow_fp32(b, xf);
    b.op(Aten::new("mean", s1), &[p])
}

/// `rsqrt(variance + eps)`.
fn rsqrt_plus_eps(b: &mut GraphBuilder, var: TensorId) -> TensorId {
    let var = add_scalar(b, var);
    fp32_pointwise(b, "rsqrt", Saved::Output(0), var)
}

/// How a rotary module computes its `inv_freq` at construction, and `post_init()` once more
/// (truth traces of the model phase, the same in every Llama-family, MoE and Gemma model): one
/// token per step, `A4` / `A8` / `A1` a `[rotary_dim / 2]` temporary of float32 / int64 / bool,
/// `F{i}` the free of step `i`'s temporary, `B` the next buffer (`inv_freq`, then
/// `original_inv_freq`, its clone). The default rope: `1 / base ** (arange(0, D, 2) / D)`.
pub const ROPE_INIT_DEFAULT: &str =
    "A4 A4 F0 A4 F1 A4 B F5 F3 B A4 A4 F10 A4 F11 A4 A4 F15 F13 F16";

/// [`ROPE_INIT_DEFAULT`] for `rope_type: "llama3"` (Llama 3.1 / 3.2): the default frequencies from
/// an int64 `arange`, then the wavelength-dependent smoothing, step by step.
pub const ROPE_INIT_LLAMA3: &str = "A8 A4 F0 A4 F1 A4 F3 A4 A4 F7 F5 A4 A4 F11 A1 A4 A4 F14 F15 \
    A4 A4 F19 A4 F20 A4 F22 A4 A4 F26 A4 F27 A4 A4 F29 F31 A1 A1 F35 A1 A1 F38 A1 F36 F39 B F16 \
    F8 F12 F24 F32 F41 B A8 A4 F52 A4 F53 A4 F55 A4 A4 F59 F57 A4 A4 F63 A1 A4 A4 F66 F67 A4 A4 \
    F71 A4 F72 A4 F74 A4 A4 F78 A4 F79 A4 A4 F81 F83 A1 A1 F87 A1 A1 F90 A1 F88 F91 A4 F68 F60 \
    F64 F76 F84 F93 F96";

/// [`ROPE_INIT_DEFAULT`] for `rope_type: "linear"`: the frequencies from an int64 `arange`, then
/// divided by the factor (truth traces of a Llama config with `{"rope_type": "linear"}`).
pub const ROPE_INIT_LINEAR: &str =
    "A8 A4 F0 A4 F1 A4 F3 A4 B F7 F5 B A8 A4 F12 A4 F13 A4 F15 A4 A4 F19 F17 F20";

/// [`ROPE_INIT_DEFAULT`] for `rope_type: "yarn"` (`_compute_yarn_parameters`: the
/// extrapolated and interpolated frequencies from an int64 `arange`, blended by a linear ramp
/// over the correction range; the config's factors, betas and `truncate` are Python numbers and
/// change no tensor). From the truth trace of `random_configs.py 2991` case 8.
pub const ROPE_INIT_YARN: &str = "A8 A4 F0 A4 F1 A4 F3 A4 A4 F7 A4 A4 A4 F11 F10 A4 A4 F15 A4 \
    F16 A4 F18 A4 F20 A4 A4 F24 A4 B F25 F27 F5 F8 F12 F22 B A8 A4 F36 A4 F37 A4 F39 A4 A4 F43 \
    A4 A4 A4 F47 F46 A4 A4 F51 A4 F52 A4 F54 A4 F56 A4 A4 F60 A4 A4 F61 F63 F41 F44 F48 F58 F64";

/// [`ROPE_INIT_DEFAULT`] for Gemma3's two frequency sets (full and sliding attention, no rope
/// scaling): both computed, then `post_init()` computes both again.
pub const ROPE_INIT_GEMMA3_TWO_SETS: &str = "A4 A4 F0 A4 F1 A4 B F5 F3 B A4 A4 F10 A4 F11 A4 B \
    F15 F13 B A4 A4 F20 A4 F21 A4 A4 F25 F23 A4 A4 F29 A4 F30 A4 A4 F34 F32 F26 F35";

/// [`ROPE_INIT_GEMMA3_TWO_SETS`] with `rope_type: "linear"` scaling on the full-attention set
/// (Gemma-3 4B / 12B / 27B): that set's frequencies come from an int64 `arange` (the division by
/// the factor is in place), the sliding set's as before (truth traces of Gemma-3-4B-it's model
/// phase).
pub const ROPE_INIT_GEMMA3_TWO_SETS_LINEAR: &str = "A8 A4 F0 A4 F1 A4 F3 A4 B F7 F5 B A4 A4 F12 \
    A4 F13 A4 B F17 F15 B A8 A4 F22 A4 F23 A4 F25 A4 A4 F29 F27 A4 A4 F33 A4 F34 A4 A4 F38 F36 \
    F30 F39";

/// Records a rotary module's construction program ([`ROPE_INIT_DEFAULT`]'s notation) around its
/// buffers, the first of which is `first_buffer` (a full name).
pub fn rope_init(b: &mut GraphBuilder, first_buffer: &str, half_dim: u64, program: &str) {
    let steps: Vec<InitStep> = program
        .split_whitespace()
        .filter_map(|token| match token.split_at(1) {
            ("A", "4") => Some(InitStep::Alloc(DType::F32)),
            ("A", "8") => Some(InitStep::Alloc(DType::I64)),
            ("A", "1") => Some(InitStep::Alloc(DType::Bool)),
            ("B", "") => Some(InitStep::Buffer),
            ("F", i) => i.parse().ok().map(InitStep::Free),
            _ => None,
        })
        .collect();
    b.init_program(first_buffer, vec![half_dim], &steps);
}

/// Rotary embedding (`model.rotary_emb`): `cos` and `sin` `[1, S, D]` (`[B, S, D]` for the
/// `[B, S]` position ids `generate` passes) in the dtype of `x`, under `no_grad`, with its
/// `inv_freq` buffers; the float32 frequency temporaries are freed inside.
pub fn rotary(
    b: &mut GraphBuilder,
    head_dim: u64,
    x: TensorId,
    pos: TensorId,
) -> (TensorId, TensorId) {
    rotary_with_buffers(b, ["inv_freq", "original_inv_freq"], head_dim, x, pos)
}

/// [`rotary`] whose module keeps its two `[D/2]` buffers under `buffers` (Gemma3's one module
/// holds `sliding_attention_inv_freq`, `full_attention_inv_freq`, ... and is called once per
/// layer type).
pub fn rotary_with_buffers(
    b: &mut GraphBuilder,
    buffers: [&'static str; 2],
    head_dim: u64,
    x: TensorId,
    pos: TensorId,
) -> (TensorId, TensorId) {
    let ps = b.shape(pos).to_vec();
    let (rows, seq) = match ps.as_slice() {
        [r, s] => (*r, *s),
        _ => (1, ps.first().copied().unwrap_or(1)),
    };
    let f32 = DTypeRule::Fixed(DType::F32);
    let shape = vec![rows, seq, head_dim];
    b.module("rotary_emb", "rotary_emb", &[x, pos], |b| {
        // made float32 (`arange(...).float()`): float32 in a half model too (truth traces)
        let inv_freq = b.buffer_in(buffers[0], vec![head_dim / 2], DType::F32);
        b.buffer_in(buffers[1], vec![head_dim / 2], DType::F32);
        // autocast is off inside: everything in float32, each step a local until the forward
        // returns (`freqs`, `emb`, `cos`, `sin`), except what `cos()` and `sin()` make before
        // the attention scaling (truth traces). `inv_freq @ position_ids.float()` copies the
        // positions as float32 for the matmul only.
        let positions = Scratch::Alloc {
            bytes: rows * seq * DType::F32.size(),
            what: "temporary",
        };
        let freqs = b.op(
            Aten::new("matmul", vec![rows, seq, head_dim / 2])
                .dtype(f32)
                .scratch(vec![positions])
                .not_differentiable(),
            &[inv_freq, pos],
        );
        b.hold(&[freqs]);
        let pointwise = |b: &mut GraphBuilder, name: &'static str, t: TensorId| {
            b.op(
                Aten::new(name, shape.clone())
                    .dtype(f32)
                    .not_differentiable(),
                &[t],
            )
        };
        // emb = cat((freqs, freqs), dim=-1)
        let emb = pointwise(b, "cat", freqs);
        b.hold(&[emb]);
        let mut out = [emb, emb];
        for (k, name) in ["cos", "sin"].into_iter().enumerate() {
            let raw = pointwise(b, name, emb);
            // `* self.attention_scaling`
            let scaled = pointwise(b, "mul", raw);
            b.hold(&[scaled]);
            out[k] = scaled;
        }
        // `.to(dtype=x.dtype)`: a copy only where x is not float32
        let cast = |b: &mut GraphBuilder, t: TensorId| b.op(ToDtype::like_input_1(), &[t, x]);
        (cast(b, out[0]), cast(b, out[1]))
    })
}

/// `apply_rotary_pos_emb` on one of q / k (`[B, H, S, D]`): `q * cos + rotate_half(q) * sin`,
/// `rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2])`. `amp` is whether q is in a lower
/// precision than cos/sin (autocast): the products are then float32 and their gradients are
/// cast back.
pub fn apply_rotary(
    b: &mut GraphBuilder,
    q: TensorId,
    cos: TensorId,
    sin: TensorId,
    amp: bool,
) -> TensorId {
    let s = b.shape(q).to_vec();
    let d = s[3];
    let mut half = s.clone();
    half[3] = d / 2;
    let rows = b.shape(cos)[0];
    let cos4 = view(b, "unsqueeze", cos, vec![rows, 1, s[2], d]);
    let sin4 = view(b, "unsqueeze", sin, vec![rows, 1, s[2], d]);
    let rope_mul = |b: &mut GraphBuilder, x: TensorId, c: TensorId| {
        let mut op = Aten::new("mul", s.clone())
            .saves(vec![Saved::Input(1)])
            .grads(vec![GradIn::New, GradIn::None]);
        if amp {
            op = op.backward_temporary(s.clone(), DTypeRule::Fixed(DType::F32));
        }
        b.op(op, &[x, c])
    };
    let m1 = rope_mul(b, q, cos4);
    // rotate_half takes x1 = x[..., :D/2] before x2 = x[..., D/2:] (backward visits them in
    // reverse: neg, x2's slice, then x1's)
    let x1 = b.op(
        Aten::view("slice", half.clone()).grads(vec![GradIn::New]),
        &[q],
    );
    let x2 = b.op(
        Aten::view("slice", half.clone()).grads(vec![GradIn::New]),
        &[q],
    );
    let n = b.op(Aten::new("neg", half.clone()), &[x2]);
    let rot = b.op(
        Aten::new("cat", s.clone()).grads(vec![GradIn::PassThrough(0), GradIn::PassThrough(0)]),
        &[n, x1],
    );
    let m2 = rope_mul(b, rot, sin4);
    add(b, m1, m2)
}

/// Phi-3's `apply_rotary_pos_emb` on q and k (`[B, H, S, D]`) with `rotary_dim` ≤ D rotary
/// channels: `q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]`, the same for k (an
/// alias when it is all of D, else a slice; the pass slice empty when rotary_dim = D, whose
/// `SliceBackward0` still scatters into a zero `[B, H, S, D]` gradient), then `cat([rotary(q_rot),
/// q_pass], -1)` and k's, each a new tensor even when the pass slice is empty. All four slices
/// come before the rotations, so backward runs both rotations before the slices (truth traces
/// of Phi-3 with eager attention at batch 1).
pub fn apply_rotary_sliced(
    b: &mut GraphBuilder,
    (q, k): (TensorId, TensorId),
    cos: TensorId,
    sin: TensorId,
    amp: bool,
    rotary_dim: u64,
) -> (TensorId, TensorId) {
    let split = |b: &mut GraphBuilder, x: TensorId| {
        let s = b.shape(x).to_vec();
        let d = s[3];
        let mut rot_shape = s.clone();
        rot_shape[3] = rotary_dim;
        let mut pass_shape = s;
        // saturating: after a build error `d` is a placeholder's 1
        pass_shape[3] = d.saturating_sub(rotary_dim);
        let rot = if rotary_dim == d {
            view(b, "alias", x, rot_shape)
        } else {
            b.op(Slice { shape: rot_shape }, &[x])
        };
        (rot, b.op(Slice { shape: pass_shape }, &[x]))
    };
    let (q_rot, q_pass) = split(b, q);
    let (k_rot, k_pass) = split(b, k);
    let embed = |b: &mut GraphBuilder, x: TensorId, rot: TensorId, pass: TensorId| {
        let r = apply_rotary(b, rot, cos, sin, amp);
        let s = b.shape(x).to_vec();
        // CatBackward0 hands each input a narrow of the incoming gradient, which keeps it alive
        // until the pass slice's SliceBackward0 runs (truth traces in float32); under autocast
        // the pass slice is half and the product float32, so validate_outputs casts its narrow
        // into a tensor of its own (empty for a full rotation), and the incoming gradient goes
        // once the rotation's backward is done (truth traces of Phi-3 under AMP)
        let pass_grad = if amp {
            GradIn::Reduced(0)
        } else {
            GradIn::PassThrough(0)
        };
        b.op(
            Aten::new("cat", s).grads(vec![GradIn::PassThrough(0), pass_grad]),
            &[r, pass],
        )
    };
    let q_embed = embed(b, q, q_rot, q_pass);
    (q_embed, embed(b, k, k_rot, k_pass))
}

/// `F.scaled_dot_product_attention(q, k, v, dropout_p, is_causal)` (GQA via `enable_gqa`; the
/// bidirectional encoders call it without a mask and not causal); `kv_contiguous`: k and v are a
/// cache's concatenations or `repeat_kv`'s copies, not transposed projections.
pub fn sdpa(
    b: &mut GraphBuilder,
    [q, k, v]: [TensorId; 3],
    dropout_p: f64,
    causal: bool,
    kv_contiguous: bool,
) -> TensorId {
    b.op(
        ScaledDotProductAttention {
            dropout_p,
            causal,
            row_stats_temporary: false,
            kv_contiguous,
        },
        &[q, k, v],
    )
}

/// [`sdpa`] without a mask as `sdpa_attention_forward` makes the call, then `then` on the output
/// (the caller's `transpose(1, 2)` and merge, made before the function returns): fewer key/value
/// heads than heads go in with `enable_gqa` (`use_gqa_in_sdpa`), unless a head dim is over 256,
/// where `repeat_kv` repeats k and v first (an expanded view for one key/value head, else a
/// copy), locals until the function returns. One query past that keeps `enable_gqa` here
/// (transformers packs it, `pack_gqa`; not modelled).
pub fn sdpa_then(
    b: &mut GraphBuilder,
    [q, k, v]: [TensorId; 3],
    (dropout_p, causal, kv_contiguous): (f64, bool, bool),
    then: impl FnOnce(&mut GraphBuilder, TensorId) -> TensorId,
) -> TensorId {
    let (qs, ks, vs) = (b.shape(q), b.shape(k), b.shape(v));
    let n_rep = qs[1] / ks[1].max(1);
    if n_rep > 1 && ks[3].max(vs[3]) > 256 && qs[2] > 1 {
        return b.frame(|b| {
            let k = repeat_kv(b, k, n_rep);
            let v = repeat_kv(b, v, n_rep);
            b.hold(&[k, v]);
            let o = sdpa(b, [q, k, v], dropout_p, causal, true);
            then(b, o)
        });
    }
    let o = sdpa(b, [q, k, v], dropout_p, causal, kv_contiguous);
    then(b, o)
}

/// Which pattern a transformers mask function builds (`masking_utils`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskPattern {
    /// `create_causal_mask`.
    Causal,
    /// `create_sliding_window_causal_mask(sliding_window)`.
    SlidingWindow(u64),
    /// `create_causal_mask` with Gemma3's `use_bidirectional_attention` overlay (an
    /// `or_mask_function` that is always true): every key visible, the mask still materialized.
    Bidirectional,
    /// `create_sliding_window_causal_mask(sliding_window)` with Gemma3's bidirectional window
    /// overlay (`abs(q - kv) < sliding_window`).
    BidirectionalSlidingWindow(u64),
}

impl MaskPattern {
    fn window(self) -> Option<u64> {
        match self {
            MaskPattern::SlidingWindow(w) | MaskPattern::BidirectionalSlidingWindow(w) => Some(w),
            MaskPattern::Causal | MaskPattern::Bidirectional => None,
        }
    }
}

/// `sdpa_mask`'s index vectors, locals held until it returns: batch and head (`arange`), then
/// the query and key ones (`arange(n) + offset`: the `arange` goes once the sum exists).
fn mask_index_vectors(b: &mut GraphBuilder, batch: u64, seq: u64, kv: u64) -> Vec<TensorId> {
    let i64 = DTypeRule::Fixed(DType::I64);
    let mut idx = b.op_multi(
        {
            let mut op = Aten::new("arange", vec![batch])
                .dtype(i64)
                .not_differentiable();
            op.outputs.push((vec![1], i64));
            op
        },
        &[],
    );
    for n in [seq, kv] {
        let arange = Scratch::Alloc {
            bytes: n * DType::I64.size(),
            what: "arange",
        };
        let op = Aten::new("add", vec![n])
            .dtype(i64)
            .scratch(vec![arange])
            .not_differentiable();
        idx.push(b.op(op, &[]));
    }
    b.hold(&idx);
    idx
}

/// A padded batch's `attention_mask` input (`[B, S]` int64, made after `input_ids`, as a padding
/// collator's batch is moved to the device); `None` unless `--padded`.
pub fn padding_input(b: &mut GraphBuilder, input: &HfInput) -> Option<TensorId> {
    input
        .padded
        .then(|| b.input(vec![input.batch, input.seq], DType::I64))
}

/// `create_bidirectional_mask` in an encoder's forward (after the embeddings): a padded batch's
/// mask ([`padded_attention_mask`]), a local of the forward until it returns, with the dtype SDPA
/// makes it additive in; with eager attention (`eager`) already additive, in the embeddings'
/// dtype (the parameters'). `None` for an unpadded batch (the mask is skipped).
pub fn encoder_padded_mask(
    b: &mut GraphBuilder,
    (batch, seq): (u64, u64),
    padding: Option<TensorId>,
    precision: vramscope_core::Precision,
    eager: bool,
) -> Option<(TensorId, DType)> {
    let padding = padding?;
    let additive = eager.then(|| precision.param_dtype());
    let mask = padded_attention_mask(
        b,
        batch,
        (seq, seq, seq),
        PaddedPattern::Encoder,
        padding,
        additive,
    );
    b.hold(&[mask]);
    Some((mask, precision.compute_dtype()))
}

/// `create_causal_mask` in the forward of a decoder that attends through [`cached_attention`]
/// (GPT-2, OPT), with SDPA or eager attention (`eager`: the embeddings' dtype), as
/// [`model_mask`] makes it (the decoders run their packed-sequence check themselves): a local of
/// the forward until it returns, set on `call` for every layer to attend with. Returned for the
/// layers' arguments (a checkpoint keeps it) when it is a padded batch's; `None` otherwise (an
/// unpadded batch: eager attention's causal mask, or none for SDPA's `is_causal`).
pub fn decoder_causal_mask(
    b: &mut GraphBuilder,
    call: &mut Call,
    (batch, seq): (u64, u64),
    eager: Option<DType>,
) -> Option<TensorId> {
    let cache_len = call.cache.is_some().then_some(call.past + seq);
    let code = (cache_len, false);
    let mask = model_mask(
        b,
        (batch, seq),
        MaskPattern::Causal,
        eager,
        code,
        call.padding_mask,
    )?;
    b.hold(&[mask]);
    match eager {
        Some(_) => call.eager_mask = Some(mask),
        None => call.padded_sdpa = Some(mask),
    }
    call.padding_mask.map(|_| mask)
}

/// The mask patterns transformers builds for a padded batch ([`padded_attention_mask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaddedPattern {
    /// `create_causal_mask`.
    Causal,
    /// `create_sliding_window_causal_mask(sliding_window)`.
    SlidingWindow(u64),
    /// `create_bidirectional_mask` (the encoders' `bidirectional_mask_function`, `q_idx >= 0`),
    /// which SDPA skips for an unpadded batch.
    Encoder,
    /// Gemma3's bidirectional patterns ([`MaskPattern::Bidirectional`] or
    /// [`MaskPattern::BidirectionalSlidingWindow`]): with an `or_mask_function` the mask
    /// functions run without `vmap`, on the `[S, KV]` plane ([`bidirectional_plane`]).
    Bidirectional(MaskPattern),
}

impl PaddedPattern {
    /// The padded form of a decoder's pattern.
    pub fn of(pattern: MaskPattern) -> Self {
        match pattern {
            MaskPattern::Causal => PaddedPattern::Causal,
            MaskPattern::SlidingWindow(w) => PaddedPattern::SlidingWindow(w),
            MaskPattern::Bidirectional | MaskPattern::BidirectionalSlidingWindow(_) => {
                PaddedPattern::Bidirectional(pattern)
            }
        }
    }
}

/// The `[B, 1, S, KV]` mask the mask code makes for a batch that carries an `attention_mask`
/// (`padding`, the `[B, KV]` int64 mask) with padding, as a padding data collator (or a
/// left-padding tokenizer, for `generate`) makes it; `KV` is `S` without a cache, the cached
/// positions after the update with one. `_preprocess_mask_arguments` turns it into a boolean copy
/// (freed when the mask code returns) and skips the packed-sequence check. SDPA (`eager: None`):
/// the skip checks a real run reads on the host, false with padding (`_ignore_causal_mask_sdpa`:
/// `fast_all`, a `sum` and an `==` scalar, twice over an empty cache and once over a filled one;
/// the encoders' `_ignore_bidirectional_mask_sdpa`: `padding_mask.all()`; under fake tensors
/// transformers skips them and builds the mask all the same), then [`padded_mask_function`]'s
/// boolean mask (Gemma3's bidirectional patterns, never skipped: no checks, and the `[B, S, KV]`
/// mask viewed `[B, 1, S, KV]`). Eager attention (`eager`, the embeddings' dtype, which the mask
/// and its scalars take): `eager_mask` runs no skip checks and turns the boolean mask into an
/// additive one, `where(mask, tensor(0.0), finfo.min)` (truth traces of
/// validation/padding_models.py, of left-padded generations and of EmbeddingGemma).
pub fn padded_attention_mask(
    b: &mut GraphBuilder,
    batch: u64,
    (seq, kv, total): (u64, u64, u64),
    pattern: PaddedPattern,
    padding: TensorId,
    eager: Option<DType>,
) -> TensorId {
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let i64 = DTypeRule::Fixed(DType::I64);
    b.frame(|b| {
        // the boolean copy covers every position the `[B, total]` mask has; a sliding layer's
        // mask past the window only its last `kv` (`kv_arange + kv_offset`)
        let mask_bool = mask_op(b, "_to_copy", &[batch, total], bool_, &[padding]);
        b.hold(&[mask_bool]);
        let full = vec![batch, 1, seq, kv];
        let Some(dtype) = eager else {
            match pattern {
                PaddedPattern::Encoder => {
                    mask_op(b, "all", &[], bool_, &[mask_bool]);
                }
                PaddedPattern::Bidirectional(_) => {}
                _ => {
                    for _ in 0..if kv == seq { 2 } else { 1 } {
                        let sum = mask_op(b, "sum", &[], i64, &[mask_bool]);
                        mask_op(b, "eq", &[], bool_, &[sum]);
                    }
                }
            }
            let mask = padded_mask_function(b, batch, (seq, kv), pattern, mask_bool);
            return match pattern {
                PaddedPattern::Bidirectional(_) => b.op(
                    Aten::view("expand", full).grads(vec![GradIn::None]),
                    &[mask],
                ),
                _ => mask,
            };
        };
        let mask = padded_mask_function(b, batch, (seq, kv), pattern, mask_bool);
        eager_where(b, full, mask, (None, dtype), dtype)
    })
}

/// The mask a model's mask code makes for `pattern`: a padded batch's
/// ([`padded_attention_mask`], SDPA's boolean or eager attention's additive one, over the cache
/// when there is one); otherwise [`attention_mask_checked`]'s.
pub fn model_mask(
    b: &mut GraphBuilder,
    (batch, seq): (u64, u64),
    pattern: MaskPattern,
    eager: Option<DType>,
    (cache_len, packed_check): (Option<u64>, bool),
    padding: Option<TensorId>,
) -> Option<TensorId> {
    match padding {
        Some(padding) => {
            let total = cache_len.unwrap_or(seq);
            let padded = PaddedPattern::of(pattern);
            Some(padded_attention_mask(
                b,
                batch,
                (seq, mask_kv_len(pattern, seq, cache_len), total),
                padded,
                padding,
                eager,
            ))
        }
        None => attention_mask_checked(b, batch, seq, pattern, eager, cache_len, packed_check),
    }
}

/// `sdpa_mask`'s work on a padded batch (`mask_bool`, the boolean `[B, KV]` copy): the index
/// vectors (locals until it returns), then `and_masks(pattern, padding_mask_function)`:
/// `new_ones(())`, `& pattern`, then `& padding_mask[batch_idx, kv_idx]` (`[B, 1, 1, KV]`),
/// which makes the mask `[B, 1, S, KV]` itself (Gemma3's bidirectional patterns, without vmap:
/// `[S]`, `[S, KV]`, `[B, KV]`, then `[B, S, KV]`).
fn padded_mask_function(
    b: &mut GraphBuilder,
    batch: u64,
    (seq, kv): (u64, u64),
    pattern: PaddedPattern,
    mask_bool: TensorId,
) -> TensorId {
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let plane = vec![1, 1, seq, kv];
    // with vmap the steps are `[1, 1, S, KV]` planes from a 0-d `new_ones`, the padding
    // `[B, 1, 1, KV]`; without (Gemma3's bidirectional patterns) `new_ones` is over the queries,
    // the steps `[S, KV]`, the padding `[B, KV]`, and the mask `[B, S, KV]`
    let (ones_shape, index_shape, mask_shape) = match pattern {
        PaddedPattern::Bidirectional(_) => (vec![seq], vec![batch, kv], vec![batch, seq, kv]),
        _ => (vec![], vec![batch, 1, 1, kv], vec![batch, 1, seq, kv]),
    };
    b.frame(|b| {
        let idx = mask_index_vectors(b, batch, seq, kv);
        let (q_idx, kv_idx) = (idx[2], idx[3]);
        let ones = mask_op(b, "new_ones", &ones_shape, bool_, &[]);
        // the pattern's own shape: `[1, 1, S, 1]` for the encoders' `q_idx >= 0`
        let (pattern_shape, pattern_mask) = match pattern {
            PaddedPattern::Causal => {
                let le = mask_op(b, "le", &plane, bool_, &[kv_idx, q_idx]);
                (plane, le)
            }
            PaddedPattern::Encoder => {
                let column = vec![1, 1, seq, 1];
                let ge = mask_op(b, "ge", &column, bool_, &[q_idx]);
                (column, ge)
            }
            PaddedPattern::SlidingWindow(_) => {
                (plane, sliding_window_causal(b, seq, kv, q_idx, kv_idx))
            }
            PaddedPattern::Bidirectional(p) => (
                vec![seq, kv],
                bidirectional_plane(b, (seq, kv), p, q_idx, kv_idx),
            ),
        };
        let with_pattern = combine_masks(b, "bitwise_and", &pattern_shape, ones, pattern_mask);
        let index = [mask_bool, idx[0], kv_idx];
        let padded = mask_op(b, "index", &index_shape, bool_, &index);
        combine_masks(b, "bitwise_and", &mask_shape, with_pattern, padded)
    })
}

/// `sliding_window_causal_mask_function(w)`, itself `and_masks(sliding_window_overlay, causal)`:
/// `new_ones(())`, `& (kv > q - w)`, then `& (kv <= q)` (`[1, 1, S, KV]`).
fn sliding_window_causal(
    b: &mut GraphBuilder,
    seq: u64,
    kv: u64,
    q_idx: TensorId,
    kv_idx: TensorId,
) -> TensorId {
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let square = [1, 1, seq, kv];
    let ones = mask_op(b, "new_ones", &[], bool_, &[]);
    let shifted = mask_op(
        b,
        "sub",
        &[1, 1, seq, 1],
        DTypeRule::Fixed(DType::I64),
        &[q_idx],
    );
    let gt = mask_op(b, "gt", &square, bool_, &[kv_idx, shifted]);
    let inside = combine_masks(b, "bitwise_and", &square, ones, gt);
    let le = mask_op(b, "le", &square, bool_, &[kv_idx, q_idx]);
    combine_masks(b, "bitwise_and", &square, inside, le)
}

/// One step of `and_masks` / `or_masks`: `result = result & mask(...)` (or `|`). The mask the
/// step computed is a temporary of the expression, freed when the operator returns; `result`, a
/// local, goes only when it is rebound (truth traces).
fn combine_masks(
    b: &mut GraphBuilder,
    name: &'static str,
    shape: &[u64],
    result: TensorId,
    mask: TensorId,
) -> TensorId {
    let out = mask_op(
        b,
        name,
        shape,
        DTypeRule::Fixed(DType::Bool),
        &[result, mask],
    );
    b.keep_until_now(&[result]);
    out
}

/// A mask-code op: no gradient, `dtype` output of `shape`.
fn mask_op(
    b: &mut GraphBuilder,
    name: &'static str,
    shape: &[u64],
    dtype: DTypeRule,
    inputs: &[TensorId],
) -> TensorId {
    b.op(
        Aten::new(name, shape.to_vec())
            .dtype(dtype)
            .not_differentiable(),
        inputs,
    )
}

/// The attention mask `create_causal_mask` / `create_sliding_window_causal_mask` return for a
/// `[B, S]` batch without padding, with their temporaries (the packed-sequence check first).
///
/// * `eager: None` (SDPA): `None` where SDPA can run `is_causal` instead — always for the causal
///   pattern, and for a sliding window while `KV` < the window — else the boolean `[1, 1, S, KV]`
///   mask expanded (a view) to `[B, 1, S, KV]`.
/// * `eager: Some(dtype)`: never skipped; the boolean mask turned into an additive `[B, 1, S, S]`
///   mask of `dtype` (`torch.where(mask, 0, finfo.min)`; the dtype of `inputs_embeds`).
/// * The bidirectional patterns pass an `or_mask_function`, which turns the skip off and builds
///   the mask through `torch.vmap` over the four index vectors: every step's result is the
///   `[S, KV]` plane (a `[S]` one where only the query index is in it), expanded to
///   `[B, 1, S, KV]` at the end (truth traces of EmbeddingGemma's `Gemma3TextModel`).
///
/// `cache_len`: with a cache, its length after this call's update (the masks are `[.., S, KV]`,
/// and the mask code skips the packed-sequence check; a sliding-window layer's `KV` stops at
/// `w - 1` cached positions plus this call's); `None` without one (`KV` = `S`).
///
/// `packed_check`: whether the mask code runs the packed-sequence check (only without a cache;
/// `create_masks_for_generate` called without position ids, as `Gemma3Model` does, skips it).
pub fn attention_mask_checked(
    b: &mut GraphBuilder,
    batch: u64,
    seq: u64,
    pattern: MaskPattern,
    eager: Option<DType>,
    cache_len: Option<u64>,
    packed_check: bool,
) -> Option<TensorId> {
    if packed_check {
        packed_sequence_check(b, batch, seq);
    }
    let kv = mask_kv_len(pattern, seq, cache_len);
    // SDPA skips a sliding-window mask while every key is inside the window
    let materialized = match pattern {
        MaskPattern::Causal => eager.is_some(),
        MaskPattern::SlidingWindow(w) => eager.is_some() || kv >= w,
        MaskPattern::Bidirectional | MaskPattern::BidirectionalSlidingWindow(_) => true,
    };
    if !materialized {
        return None;
    }
    let boolean = pattern_mask(b, batch, (seq, kv), pattern);
    let full = vec![batch, 1, seq, kv];
    Some(match eager {
        None => b.op(
            Aten::view("expand", full).grads(vec![GradIn::None]),
            &[boolean],
        ),
        Some(dtype) => eager_where(b, full, boolean, (None, dtype), dtype),
    })
}

/// The keys a mask of `pattern` covers for `seq` queries, `cache_len` cached positions after the
/// update (`None`: no cache): a sliding-window cache layer keeps its last `w - 1` positions, so
/// past the window the mask covers those and the new ones (`DynamicSlidingWindowLayer
/// .get_mask_sizes`); Qwen2-MoE's window-0 mask goes with full cache layers (no sliding cache for
/// a window of 0).
fn mask_kv_len(pattern: MaskPattern, seq: u64, cache_len: Option<u64>) -> u64 {
    match (pattern.window(), cache_len) {
        (Some(w), Some(total)) if w > 0 => (total - seq).min(w - 1) + seq,
        _ => cache_len.unwrap_or(seq),
    }
}

/// The boolean `[1, 1, S, KV]` mask (a `[S, KV]` plane for the bidirectional overlays) the mask
/// functions of `pattern` compute, with the index vectors they use (locals of `sdpa_mask`, freed
/// when it returns).
fn pattern_mask(
    b: &mut GraphBuilder,
    batch: u64,
    (seq, kv): (u64, u64),
    pattern: MaskPattern,
) -> TensorId {
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let square = [1, 1, seq, kv];
    b.frame(|b| {
        let idx = mask_index_vectors(b, batch, seq, kv);
        let (q_idx, kv_idx) = (idx[2], idx[3]);
        match pattern {
            MaskPattern::Causal => mask_op(b, "le", &square, bool_, &[kv_idx, q_idx]),
            MaskPattern::Bidirectional | MaskPattern::BidirectionalSlidingWindow(_) => {
                bidirectional_plane(b, (seq, kv), pattern, q_idx, kv_idx)
            }
            MaskPattern::SlidingWindow(_) => sliding_window_causal(b, seq, kv, q_idx, kv_idx),
        }
    })
}

/// Gemma3's bidirectional patterns on the `[S, KV]` plane (the mask functions run without
/// `vmap` once an `or_mask_function` is given): `or_masks(causal, lambda: torch.tensor(True))`,
/// `new_zeros | (kv <= q)` then `|` the scalar copied to the device; or, for the sliding layers,
/// `or_masks(and_masks(sliding_window_overlay, causal), abs(q - kv) < w)` (truth traces of
/// EmbeddingGemma's `Gemma3TextModel`).
fn bidirectional_plane(
    b: &mut GraphBuilder,
    (seq, kv): (u64, u64),
    pattern: MaskPattern,
    q_idx: TensorId,
    kv_idx: TensorId,
) -> TensorId {
    let i64 = DTypeRule::Fixed(DType::I64);
    let bool_ = DTypeRule::Fixed(DType::Bool);
    let plane = vec![seq, kv];
    let zeros = mask_op(b, "new_zeros", &[seq], bool_, &[]);
    if !matches!(pattern, MaskPattern::BidirectionalSlidingWindow(_)) {
        let le = mask_op(b, "le", &plane, bool_, &[kv_idx, q_idx]);
        let causal = combine_masks(b, "bitwise_or", &plane, zeros, le);
        let all = mask_op(b, "_to_copy", &[], bool_, &[]);
        return combine_masks(b, "bitwise_or", &plane, causal, all);
    }
    let ones = mask_op(b, "new_ones", &[seq], bool_, &[]);
    let shifted = mask_op(b, "sub", &[seq], i64, &[q_idx]);
    let gt = mask_op(b, "gt", &plane, bool_, &[kv_idx, shifted]);
    let inside = combine_masks(b, "bitwise_and", &plane, ones, gt);
    let le = mask_op(b, "le", &plane, bool_, &[kv_idx, q_idx]);
    let window = combine_masks(b, "bitwise_and", &plane, inside, le);
    let causal = combine_masks(b, "bitwise_or", &plane, zeros, window);
    let diff = mask_op(b, "sub", &plane, i64, &[q_idx, kv_idx]);
    let distance = mask_op(b, "abs", &plane, i64, &[diff]);
    let near = mask_op(b, "lt", &plane, bool_, &[distance]);
    combine_masks(b, "bitwise_or", &plane, causal, near)
}

/// `repeat_kv(x, n_rep)` on `[B, kv, S, D]` k or v: `x[:, :, None].expand(B, kv, n_rep, S,
/// D).reshape(B, kv·n_rep, S, D)`. With one kv head the reshape is still a view; otherwise it
/// copies. Backward sums the expanded gradient into a new `[B, kv, S, D]` tensor.
pub fn repeat_kv(b: &mut GraphBuilder, x: TensorId, n_rep: u64) -> TensorId {
    if n_rep == 1 {
        return x;
    }
    let s = b.shape(x).to_vec();
    let out = vec![s[0], s[1] * n_rep, s[2], s[3]];
    if s[1] == 1 {
        b.op(Aten::view("expand", out).grads(vec![GradIn::New]), &[x])
    } else {
        b.op(Aten::new("clone", out).dtype(DTypeRule::Like(0)), &[x])
    }
}

/// `F.scaled_dot_product_attention(q, k, v, attn_mask=mask)` as transformers' `sdpa_attention_forward`
/// calls it when the mask function returned a boolean mask: k and v repeated to all heads (no
/// `enable_gqa` with a mask), the boolean mask turned into an additive `[B, 1, L, S]` mask of
/// `dtype` (the dtype attention runs in) inside the SDPA call, and the kernel keeping it for
/// backward. One query over GQA heads (a decode step past a sliding window) is `pack_gqa`
/// instead: q viewed as `[B, H_kv, n_rep, D]`, no repeat, and the output, laid out
/// `[B, n_rep, H_kv, D]` by the kernel, reshaped back into `[B, H, 1, D]` (a copy unless there
/// is one key/value head). Returns what `then` makes of that `[B, H, L, D]` output.
///
/// `then` runs on the output before `sdpa_attention_forward` returns: its caller's
/// `attn_output.transpose(1, 2).contiguous()` (a copy for Phi-3's output, a view for the others)
/// is made while the repeated k and v are still its locals (truth traces).
///
/// `cached`: k and v are a cache's concatenations (contiguous, as `repeat_kv`'s copies are).
#[allow(clippy::too_many_arguments)]
pub fn sdpa_masked(
    b: &mut GraphBuilder,
    q: TensorId,
    (k, v, cached): (TensorId, TensorId, bool),
    mask: TensorId,
    dropout_p: f64,
    dtype: DType,
    then: impl FnOnce(&mut GraphBuilder, TensorId) -> TensorId,
) -> TensorId {
    let qs = b.shape(q).to_vec();
    let kv_heads = b.shape(k)[1].max(1);
    let n_rep = qs[1] / kv_heads;
    if qs[2] == 1 && n_rep > 1 {
        let packed = view(b, "reshape", q, vec![qs[0], kv_heads, n_rep, qs[3]]);
        let o = sdpa_with_mask(b, packed, (k, v, cached), mask, dropout_p, dtype);
        // cuDNN attention (half precision) lays its output out like the packed query, so the
        // reshape back is a view; mem-efficient attention's (float32) is `[B, n_rep, KV, D]`,
        // which the reshape copies unless there is one kv head
        let o = if kv_heads == 1 || dtype != DType::F32 {
            view(b, "reshape", o, qs)
        } else {
            b.op(
                Aten::new("clone", qs)
                    .dtype(DTypeRule::Like(0))
                    .not_differentiable(),
                &[o],
            )
        };
        return then(b, o);
    }
    // sdpa_attention_forward's `key` / `value` locals: the repeated k, v live until it returns
    b.frame(|b| {
        let k = repeat_kv(b, k, n_rep);
        let v = repeat_kv(b, v, n_rep);
        b.hold(&[k, v]);
        let contiguous = cached || n_rep > 1;
        let o = sdpa_with_mask(b, q, (k, v, contiguous), mask, dropout_p, dtype);
        then(b, o)
    })
}

fn sdpa_with_mask(
    b: &mut GraphBuilder,
    q: TensorId,
    (k, v, kv_contiguous): (TensorId, TensorId, bool),
    mask: TensorId,
    dropout_p: f64,
    dtype: DType,
) -> TensorId {
    // the autocast wrapper casts the arguments (right to left) before the kernel turns the
    // boolean mask into an additive one: under autocast, float32 q, k, v (after rotary, or a
    // cache made float32) are cast first (truth traces of EmbeddingGemma under AMP)
    let autocast_arg = |b: &mut GraphBuilder, t: TensorId| {
        let shape = b.shape(t).to_vec();
        b.op(
            Aten::view("alias", shape).autocast(Autocast::LowerPrecision),
            &[t],
        )
    };
    let v = autocast_arg(b, v);
    let k = autocast_arg(b, k);
    let q = autocast_arg(b, q);
    let shape = b.shape(mask).to_vec();
    // `where(mask, 0.0, -inf)`: the two scalars (`scalar_tensor`, 0-d in `dtype`) are made
    // before the output and freed after it (truth traces)
    let scalar = Scratch::Alloc {
        bytes: dtype.size(),
        what: "scalar_tensor",
    };
    let additive = b.op(
        Aten::new("where", shape)
            .dtype(DTypeRule::Fixed(dtype))
            .scratch(vec![scalar, scalar])
            .not_differentiable(),
        &[mask],
    );
    // the kernel sees the [B, 1, L, S] mask broadcast over the heads
    let qs = b.shape(q).to_vec();
    let ks = b.shape(k).to_vec();
    let expanded = b.op(
        Aten::view("expand", vec![qs[0], qs[1], qs[2], ks[2]]).grads(vec![GradIn::None]),
        &[additive],
    );
    b.op(
        ScaledDotProductAttentionBias {
            dropout_p,
            mask_batch: qs[0],
            mask_heads: 1,
            kv_contiguous,
        },
        &[q, k, v, expanded],
    )
}

/// `attn_output.transpose(1, 2).contiguous()` after SDPA (`[B, H, S, D]` -> `[B, S, H, D]`): a
/// view or a copy as the kernel laid the output out ([`SdpaOutputMerge`]; `q_contiguous`: q was
/// contiguous `[B, H, S, D]`, a `cat` or cast result rather than the usual transposed
/// projection; `masked`, `dropout_p`: the attention call's).
pub fn attention_output(
    b: &mut GraphBuilder,
    o: TensorId,
    q_contiguous: bool,
    (masked, dropout_p): (bool, f64),
) -> TensorId {
    let s = b.shape(o).to_vec();
    let op = SdpaOutputMerge {
        name: "clone",
        shape: vec![s[0], s[2], s[1], s[3]],
        q_contiguous,
        masked,
        dropout_p,
    };
    b.op(op, &[o])
}

/// `nn.LayerNorm(n)` as a leaf module.
pub fn layer_norm(b: &mut GraphBuilder, name: &str, n: u64, x: TensorId) -> TensorId {
    b.layer(name, LayerNorm::new(n), &[x])
}

/// A pointwise activation module (`GELUActivation`, `nn.ReLU`, ...) called as `name`.
pub fn activation(b: &mut GraphBuilder, name: &str, kind: ActivationKind, x: TensorId) -> TensorId {
    b.layer(
        name,
        Activation {
            kind,
            inplace: false,
        },
        &[x],
    )
}

/// A pointwise activation called functionally (`gelu(x)`, `torch.tanh(x)`) inside the current
/// module.
pub fn activation_fn(b: &mut GraphBuilder, kind: ActivationKind, x: TensorId) -> TensorId {
    b.op(
        Activation {
            kind,
            inplace: false,
        },
        &[x],
    )
}

/// `softmax(x, dim, dtype=torch.float32)` of an `x` in the model's `dtype`, outside autocast
/// (`autocast: false`) or under it. Under autocast a plain [`Softmax`] is that call (its
/// `fp32_set_opt_dtype` class keeps the given dtype). Outside it: a float16 `x` is read straight
/// into the float32 output (`_softmax(x, half_to_float=True)`, no copy; backward makes the half
/// gradient directly), a bfloat16 one is copied to float32 first. Keeps its output.
pub fn softmax_float32(
    b: &mut GraphBuilder,
    x: TensorId,
    dim: usize,
    dtype: DType,
    autocast: bool,
) -> TensorId {
    match dtype {
        DType::F16 if !autocast => {
            let shape = b.shape(x).to_vec();
            b.op(
                Aten::new("softmax", shape)
                    .dtype(DTypeRule::Fixed(DType::F32))
                    .saves(vec![Saved::Output(0)]),
                &[x],
            )
        }
        DType::BF16 if !autocast => {
            let x = to_dtype(b, x, DType::F32);
            b.op(Softmax { dim }, &[x])
        }
        _ => b.op(Softmax { dim }, &[x]),
    }
}

/// `nn.functional.dropout(x, p, training)` called inside the current module (no module of its
/// own); p = 0 returns its input.
pub fn dropout_fn(b: &mut GraphBuilder, p: f64, x: TensorId) -> TensorId {
    if p <= 0.0 {
        return x;
    }
    b.op(Dropout { p }, &[x])
}

/// An output projection whose weight is tied to the embedding `weight` and whose bias is `bias`
/// (BERT's `cls.predictions.decoder`, RoBERTa's `lm_head.decoder`, DistilBERT's
/// `vocab_projector`): `addmm(bias, x.view(-1, h), weight.t())`. `bias: None` registers the
/// module's own `bias`. Returns the logits and the bias.
pub fn tied_head_bias(
    b: &mut GraphBuilder,
    name: &str,
    weight: TensorId,
    bias: Option<TensorId>,
    x: TensorId,
) -> (TensorId, TensorId) {
    let mut shape = b.shape(x).to_vec();
    let vocab = b.shape(weight)[0];
    if let Some(l) = shape.last_mut() {
        *l = vocab;
    }
    b.module(name, "Linear", &[x], |b| {
        let bias = bias.unwrap_or_else(|| b.parameter("bias", vec![vocab]));
        // F.linear(x, weight, bias): autocast casts bias, weight, x; AddmmBackward0 makes the
        // gradients of x and weight, and hands the bias the output's, which the engine sums
        let op = Aten::new("addmm", shape)
            .autocast(Autocast::LowerPrecision)
            .saves(vec![Saved::Input(0), Saved::Input(1)])
            .grads(vec![GradIn::New, GradIn::New, GradIn::Reduced(0)]);
        (b.op(op, &[x, weight, bias]), bias)
    })
}

/// A bidirectional encoder's self-attention on `x` `[B, S, E]` (BERT, RoBERTa, DistilBERT): the
/// `proj` projections (`nn.Linear(E, E)` with biases), the `dropout` module, then SDPA
/// ([`attention_core`]) or, with `eager`, [`eager_attention_core`] on the [`eager_heads`] of each
/// projection. Returns the output `[B, S, E]` and, with eager attention, the weights its caller
/// keeps.
pub fn encoder_self_attention(
    b: &mut GraphBuilder,
    x: TensorId,
    proj: [&str; 3],
    (e, heads, dropout_p): (u64, u64, f64),
    eager: Option<Eager>,
    mask: Option<(TensorId, DType)>,
) -> (TensorId, Option<TensorId>) {
    let Some(eager) = eager else {
        let qkv = proj.map(|name| linear(b, name, e, e, true, x));
        // q, k and v (views of the projections) are locals of the attention's forward until it
        // returns: after DistilBERT's `out_lin`, which runs inside it (BERT's output dense is a
        // module of its own)
        b.hold(&qkv);
        b.declare_module("dropout", "Dropout");
        let o = match mask {
            // a padded batch's `[B, 1, S, S]` mask (`padded_attention_mask`), made additive in
            // the attention's dtype
            Some((mask, dtype)) => {
                let attn = Some((true, dropout_p));
                let [q, k, v] = heads_of(qkv, |t, of| heads_view(b, t, heads, false, attn, of));
                sdpa_masked(b, q, (k, v, false), mask, dropout_p, dtype, |b, o| {
                    merge_heads(b, o, (true, dropout_p))
                })
            }
            None => attention_core(b, qkv, heads, dropout_p, false),
        };
        return (o, None);
    };
    let qkv = proj.map(|name| {
        let t = linear(b, name, e, e, true, x);
        eager_heads(b, t, heads, name == proj[1])
    });
    b.declare_module("dropout", "Dropout");
    let (o, w) = eager_attention_core(b, qkv, dropout_p, eager, mask.map(|m| m.0));
    (o, Some(w))
}

/// `f(t, of)` for each of q, k and v, the `Linear` projections' outputs.
fn heads_of(qkv: [TensorId; 3], mut f: impl FnMut(TensorId, HeadsOf) -> TensorId) -> [TensorId; 3] {
    let [q, k, v] = qkv;
    [
        f(q, HeadsOf::Other),
        f(k, HeadsOf::KeyOfLinear),
        f(v, HeadsOf::Other),
    ]
}

/// Multi-head attention core shared by the encoders: q, k, v `[B, S, E]` projections are viewed
/// as `[B, H, S, D]`, attended, and the output (laid out `[B, S, H, D]` by the kernels) reshaped
/// back to `[B, S, E]`.
pub fn attention_core(
    b: &mut GraphBuilder,
    qkv: [TensorId; 3],
    heads: u64,
    dropout_p: f64,
    causal: bool,
) -> TensorId {
    let [q, k, v] = heads_of(qkv, |t, key| {
        heads_view(b, t, heads, false, Some((false, dropout_p)), key)
    });
    let o = sdpa(b, [q, k, v], dropout_p, causal, false);
    merge_heads(b, o, (false, dropout_p))
}

/// [`attention_core`] with `attn_implementation="eager"` for the bidirectional encoders (BERT,
/// RoBERTa, DistilBERT), which run it without a mask (`create_bidirectional_mask` returns `None`
/// for an unpadded batch) or with a padded batch's additive `mask`: `eager_attention_forward`, a
/// function whose locals go when it returns.
/// `qkv` are the heads [`eager_heads`] made, locals of the attention's forward (held until it
/// returns). Returns the output `[B, S, E]` and the attention weights the caller keeps.
pub fn eager_attention_core(
    b: &mut GraphBuilder,
    [q, k, v]: [TensorId; 3],
    dropout_p: f64,
    eager: Eager,
    mask: Option<TensorId>,
) -> (TensorId, TensorId) {
    b.hold(&[q, k, v]);
    let masks: Vec<TensorId> = mask.into_iter().collect();
    b.frame(|b| eager_attention(b, eager, q, k, v, &masks, dropout_p, false))
}

/// A causal decoder's (OPT's) projection `[B, S, E]` viewed as `[B, H, S, D]` (`view` then
/// `transpose(1, 2)`), for [`cached_attention`]. Eager attention's bmm gradients reach the view
/// heads-first, which it copies ([`eager_heads`]; measured without a cache: over one, k's and
/// v's go through its concatenation), while SDPA's kernels return them in the projection's layout.
pub fn decoder_heads(
    b: &mut GraphBuilder,
    t: TensorId,
    heads: u64,
    call: &Call,
    dropout_p: f64,
    of: HeadsOf,
) -> TensorId {
    if call.eager_mask.is_some() && call.cache.is_none() {
        eager_heads(b, t, heads, false)
    } else {
        // with a cache SDPA reads the cache's concatenation, not the view
        let of = if call.cache.is_some() {
            HeadsOf::Other
        } else {
            of
        };
        heads_view(b, t, heads, false, call.sdpa_view(dropout_p), of)
    }
}

/// A projection `[B, S, E]` viewed as eager attention's `[B, H, S, D]` operand (`view` then
/// `transpose(1, 2)`, right after the projection, as `self.query(x).view(...).transpose(1, 2)`
/// runs). q's and v's gradients come back from eager attention's bmm laid out `[B, H, S, D]`,
/// which `ViewBackward0` cannot view as `[B, S, E]`: it copies them (truth traces: a `[B, S, E]`
/// clone per projection, freed once the projection's backward has used it). The `key` operand's
/// is viewed, and copied by the projection's rows instead ([`eager_key_rows`]).
pub fn eager_heads(b: &mut GraphBuilder, t: TensorId, heads: u64, key: bool) -> TensorId {
    if key {
        let t = eager_key_rows(b, t);
        return heads_view(b, t, heads, false, None, HeadsOf::Other);
    }
    let s = b.shape(t).to_vec();
    let (bsz, seq, e) = (s[0], s[1], s[2]);
    let t = b.op(
        Aten::view("view", vec![bsz, seq, heads, e / heads]).grads(vec![GradIn::New]),
        &[t],
    );
    view(b, "transpose", t, vec![bsz, heads, seq, e / heads])
}

/// Eager attention's key projection `[B, S, E]` as its `Linear` returned it (made right after
/// the projection). bmm hands k's gradient (`k.transpose(-1, -2)`'s operand) back as `[B, H, D,
/// S]`: k's `ViewBackward0` views it as `[B, S, E]`, and so does the projection's `_unsafe_view`
/// to `[S, E]` rows (a transposed matrix) for one sequence; from two on the `[B * S, E]` rows are
/// no view of it and the projection's `UnsafeViewBackward0` copies it (truth traces of BERT and
/// DistilBERT at batches 1 and 2, and of OPT at batches 1, 2 and 4, whose k_proj runs before
/// v_proj and its views after both, so the copy comes after v_proj's backward).
pub fn eager_key_rows(b: &mut GraphBuilder, k: TensorId) -> TensorId {
    let s = b.shape(k).to_vec();
    if s[0] == 1 {
        return k;
    }
    b.op(Aten::view("_unsafe_view", s).grads(vec![GradIn::New]), &[k])
}

/// An attention output `[B, H, S, D]` back to `[B, S, E]` (`transpose(1, 2).reshape(...)`): a
/// view when the kernel laid it out `[B, S, H, D]`, as the usual transposed projections make it,
/// else a copy ([`SdpaOutputMerge`]; `masked`, `dropout_p`: the attention call's).
fn merge_heads(b: &mut GraphBuilder, o: TensorId, (masked, dropout_p): (bool, f64)) -> TensorId {
    let s = b.shape(o).to_vec();
    let op = SdpaOutputMerge {
        name: "reshape",
        shape: vec![s[0], s[2], s[1] * s[3]],
        q_contiguous: false,
        masked,
        dropout_p,
    };
    b.op(op, &[o])
}

/// The `DynamicCache` of a generation: per decoder layer, the key and value tensors cached so
/// far (`[B, H_kv, L, D]`, in the dtype the projections produce, so GQA caches only the KV heads).
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(TensorId, TensorId)>>,
    /// Per layer, its `sliding_window` when it is a `DynamicSlidingWindowLayer` (every layer of
    /// Mistral and Phi-3, Gemma3's sliding layers).
    windows: Vec<Option<u64>>,
    /// Their window-size tensors, moved to the device at the first update.
    window_tensors: Vec<TensorId>,
}

impl KvCache {
    /// An empty cache whose layer `i` is a sliding-window layer when `windows[i]` is set (the
    /// layer types of the config, as `DynamicCache(config=...)` reads them; past the window see
    /// [`KvCache::update`] and `generate`).
    pub fn with_windows(windows: Vec<Option<u64>>) -> Self {
        KvCache {
            layers: vec![None; windows.len()],
            windows,
            window_tensors: Vec::new(),
        }
    }

    /// `past_key_values.update(key_states, value_states, layer)`. `DynamicLayer.update`:
    /// `keys = cat([keys, k], -2)`, old keys freed, then the same for the values.
    /// `DynamicSlidingWindowLayer.update`: both concatenations first, then the old tensors go as
    /// `keys` and `values` are rebound; its first update moves the window size to the device;
    /// past the window (more than `w - 1` positions) it keeps a view of the last `w - 1`, which
    /// holds the whole concatenation until the next update. Either way the new states stay
    /// referenced by the attention's locals until both are cached. Returns the whole
    /// concatenated keys and values (what attention runs on).
    pub fn update(
        &mut self,
        b: &mut GraphBuilder,
        layer: usize,
        k: TensorId,
        v: TensorId,
    ) -> (TensorId, TensorId) {
        let old = self.layers.get(layer).copied().flatten();
        let sliding = self.windows.get(layer).copied().flatten().is_some();
        if old.is_none() && sliding {
            let op = Aten::new("_to_copy", vec![])
                .dtype(DTypeRule::Fixed(DType::I64))
                .not_differentiable();
            self.window_tensors.push(b.op(op, &[]));
        }
        let cat = |first| KvCacheUpdate {
            first,
            grow_to: None,
        };
        let (nk, nv) = b.frame(|b| {
            b.hold(&[k, v]);
            match old {
                Some((ok, ov)) => {
                    if sliding {
                        b.hold(&[ok, ov]);
                    }
                    (b.op(cat(false), &[ok, k]), b.op(cat(false), &[ov, v]))
                }
                // the first update concatenates onto empty tensors of the keys' dtype
                None => (b.op(cat(true), &[k]), b.op(cat(true), &[v, k])),
            }
        });
        // `self.keys = full_key_states[:, :, -w + 1:, :]`: past the window the layer keeps a view
        // of the last `w - 1` positions, which holds the whole new tensor
        let kept = match self.windows.get(layer).copied().flatten() {
            Some(w) if b.shape(nk)[2] > w.saturating_sub(1) => {
                (window_view(b, nk, w), window_view(b, nv, w))
            }
            _ => (nk, nv),
        };
        if let Some(slot) = self.layers.get_mut(layer) {
            *slot = Some(kept);
        }
        (nk, nv)
    }

    /// Makes every layer's cache `len` positions long at once, layer by layer (keys, then
    /// values): the jump over the decode steps a long generation does not simulate one by one.
    /// A sliding-window layer stops at the `w` positions of its last concatenation (its view of
    /// the last `w - 1` kept).
    pub fn grow_to(&mut self, b: &mut GraphBuilder, len: u64) {
        for (slot, window) in self.layers.iter_mut().zip(&self.windows) {
            if let Some((k, v)) = *slot {
                let len = window.map_or(len, |w| len.min(w));
                let grow = KvCacheUpdate {
                    first: false,
                    grow_to: Some(len),
                };
                let nk = b.op(grow.clone(), &[k]);
                let nv = b.op(grow, &[v]);
                *slot = Some(match window {
                    &Some(w) if len > w.saturating_sub(1) => {
                        (window_view(b, nk, w), window_view(b, nv, w))
                    }
                    _ => (nk, nv),
                });
            }
        }
    }

    /// Layer `i`'s cached keys and values, once it has some.
    pub fn layer(&self, i: usize) -> Option<(TensorId, TensorId)> {
        self.layers.get(i).copied().flatten()
    }

    /// The cache's tensors: layer by layer, keys before values, then the window sizes.
    pub fn tensors(&self) -> Vec<TensorId> {
        self.layers
            .iter()
            .flatten()
            .flat_map(|&(k, v)| [k, v])
            .chain(self.window_tensors.iter().copied())
            .collect()
    }

    /// [`tensors`](Self::tensors) in the order dropping the cache frees them: CPython frees a
    /// list's items from the last, so the last layer's keys and values go first.
    pub fn tensors_in_drop_order(&self) -> Vec<TensorId> {
        self.layers
            .iter()
            .rev()
            .flatten()
            .flat_map(|&(k, v)| [k, v])
            .chain(self.window_tensors.iter().copied())
            .collect()
    }
}

/// `t[:, :, -w + 1:, :]`: the last `w - 1` positions a sliding-window cache layer keeps, a view
/// that holds all of `t`.
fn window_view(b: &mut GraphBuilder, t: TensorId, w: u64) -> TensorId {
    let mut shape = b.shape(t).to_vec();
    shape[2] = w.saturating_sub(1);
    view(b, "slice", t, shape)
}

/// One call of a causal LM's forward: the plain forward of training and inference, or one
/// forward of `generate` (the prefill, or a decode step on one new token) with its KV cache.
#[derive(Debug)]
pub struct Call<'a> {
    /// Query positions in this call (`--seq-len`, the prompt, or 1).
    pub seq: u64,
    /// Positions cached before this call.
    pub past: u64,
    /// The `position_ids` `generate` passes in (`[B, seq]`); `None`: the model makes its own.
    pub position_ids: Option<TensorId>,
    /// The cache (`use_cache=True`); `None` runs without one.
    pub cache: Option<&'a mut KvCache>,
    /// `logits_to_keep=1`: the head runs on the last position only.
    pub last_logits_only: bool,
    /// The first call of the model in the graph (construction-time registrations happen once).
    pub first: bool,
    /// `attn_implementation="eager"`: the additive causal mask the model's forward made, which
    /// every layer's explicit attention adds to its scores. `None` runs SDPA.
    pub eager_mask: Option<TensorId>,
    /// The attention probabilities the last eager attention returned: the decoder layer keeps
    /// them in a local (`attn_output, attn_weights = self.attn(...)`) until it returns.
    pub attn_weights: Option<TensorId>,
    /// The boolean masks the model's mask code made for SDPA in a plain forward (one per mask
    /// function it calls; `None` where SDPA runs `is_causal`), which the layers attend with.
    pub sdpa_masks: Vec<Option<TensorId>>,
    /// The head on the last hidden state: `lm_head`, or a sequence classifier's `score`.
    pub head: DecoderHead,
    /// The batch's `attention_mask` (`[B, S]` int64, with padding) passed to the model
    /// (`--padded`); `None`: no mask passed.
    pub padding_mask: Option<TensorId>,
    /// A padded batch's mask (`padded_attention_mask`) that [`cached_attention`] attends with
    /// (GPT-2, OPT), made additive in the attention's compute dtype.
    pub padded_sdpa: Option<TensorId>,
    /// `output_router_logits`: the router logits of each sparse layer so far, which the model's
    /// output keeps until the forward returns; `None`: not kept.
    pub router_logits: Option<RouterLogits>,
    /// The caller keeps the model's output past the forward (`generate`'s `outputs`, until `del
    /// outputs`): what the output holds besides the logits goes there instead of when the
    /// forward returns; `None`: the output goes with the forward.
    pub kept_outputs: Option<KeptOutputs>,
}

/// What a kept model output holds besides its logits, in the order its fields are freed:
/// `MoeCausalLMOutputWithPast`'s auxiliary loss before the logits, the router logits after them
/// (the last layer's first).
#[derive(Debug, Clone, Default)]
pub struct KeptOutputs {
    /// Freed before the logits.
    pub before_logits: Vec<TensorId>,
    /// Freed after the logits.
    pub after_logits: Vec<TensorId>,
}

/// The router logits a Mixture-of-Experts forward keeps (`output_router_logits`).
#[derive(Debug, Clone, Default)]
pub struct RouterLogits {
    /// Each sparse layer's `[T, E]` logits, in layer order.
    pub kept: Vec<TensorId>,
}

impl Call<'_> {
    /// The plain forward over `seq` positions (no cache, `head` on every position).
    pub fn plain(seq: u64, head: DecoderHead) -> Call<'static> {
        Call {
            seq,
            past: 0,
            position_ids: None,
            cache: None,
            last_logits_only: false,
            first: true,
            eager_mask: None,
            attn_weights: None,
            sdpa_masks: Vec::new(),
            head,
            padding_mask: None,
            padded_sdpa: None,
            router_logits: None,
            kept_outputs: None,
        }
    }

    /// Whether SDPA's gradients of the cached k and v reach their projections' `.view`
    /// heads-first ([`sdpa_grads_like_inputs`]): with a cache (a per-token head's base model in
    /// training), SDPA (no eager mask) in half precision (`half`) with `dropout_p`, over the
    /// padded batch's mask when there is one.
    pub fn cached_kv_grads_heads_first(&self, half: bool, dropout_p: f64) -> bool {
        self.cache.is_some()
            && self.eager_mask.is_none()
            && sdpa_grads_like_inputs(half, self.padded_sdpa.is_some(), dropout_p)
    }

    /// The SDPA call a projection's heads view feeds, for [`heads_view`]: `(masked, dropout_p)`,
    /// or `None` when the layer attends eagerly.
    pub fn sdpa_view(&self, dropout_p: f64) -> Option<(bool, f64)> {
        self.eager_mask
            .is_none()
            .then_some((self.padded_sdpa.is_some(), dropout_p))
    }

    /// `hidden_states[:, -1:, :]` before the head when only the last logits are kept.
    pub fn head_input(&self, b: &mut GraphBuilder, h: TensorId) -> TensorId {
        if !self.last_logits_only {
            return h;
        }
        let mut s = b.shape(h).to_vec();
        if s.len() == 3 {
            s[1] = 1;
        }
        view(b, "slice", h, s)
    }
}

/// The attention core of a decoder layer, called inside the attention module: `query_states`
/// stays referenced until the module returns, `past_key_values.update` runs when there is a
/// cache, then `F.scaled_dot_product_attention` over the cached keys and values (`is_causal`
/// only with more than one query, as transformers' `sdpa_attention_forward` decides), or, with
/// an eager mask, the model family's `eager_attention_forward`. Returns the heads merged back,
/// `[B, S, H * D]`.
#[allow(clippy::too_many_arguments)]
pub fn cached_attention(
    b: &mut GraphBuilder,
    call: &mut Call,
    layer: usize,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    dropout_p: f64,
    eager: Eager,
) -> TensorId {
    b.hold(&[q]);
    let (k, v) = match call.cache.as_deref_mut() {
        Some(c) => c.update(b, layer, k, v),
        None => {
            // without a cache `key_states` and `value_states` stay locals too
            b.hold(&[k, v]);
            (k, v)
        }
    };
    if let (Some(mask), EagerFlavor::Gpt2Upcast { unit_scaling }) = (call.eager_mask, eager.flavor)
    {
        let cached = call.cache.is_some();
        let (o, weights) = b.frame(|b| {
            upcast_reordered_attention(b, eager, [q, k, v], mask, dropout_p, (cached, unit_scaling))
        });
        call.attn_weights = Some(weights);
        // `attn_output.reshape(...).contiguous()` in the attention's forward, after the
        // function's locals went
        return contiguous_heads(b, o);
    }
    if let Some(mask) = call.eager_mask {
        let cached = call.cache.is_some();
        // eager_attention_forward is a function: the repeated k and v it keeps are freed when it
        // returns
        let (o, weights) =
            b.frame(|b| eager_attention(b, eager, q, k, v, &[mask], dropout_p, cached));
        call.attn_weights = Some(weights);
        return o;
    }
    if let Some(mask) = call.padded_sdpa {
        return sdpa_masked(
            b,
            q,
            (k, v, call.cache.is_some()),
            mask,
            dropout_p,
            eager.compute_dtype(),
            |b, o| merge_heads(b, o, (true, dropout_p)),
        );
    }
    let causal = b.shape(q)[2] > 1;
    let cached = call.cache.is_some();
    sdpa_then(b, [q, k, v], (dropout_p, causal, cached), |b, o| {
        merge_heads(b, o, (false, dropout_p))
    })
}

/// How a family's `eager_attention_forward` runs, and the dtypes it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eager {
    /// The family's flavour of it.
    pub flavor: EagerFlavor,
    /// The model's dtype (pure fp16/bf16 runs add casts around the float32 softmax).
    pub dtype: DType,
    /// The autocast dtype, if any.
    pub autocast: Option<DType>,
}

impl Eager {
    /// The dtype the attention's matmuls run in: the autocast dtype, else the model's.
    pub fn compute_dtype(self) -> DType {
        self.autocast.unwrap_or(self.dtype)
    }
}

/// The `eager_attention_forward`s of the modelled families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EagerFlavor {
    /// Gemma2 (which transformers always runs eager): Llama's, with the scores soft-capped
    /// (`/ cap`, `tanh`, `* cap`) when `attn_logit_softcapping` is set.
    Gemma2 {
        /// `attn_logit_softcapping` is set.
        softcap: bool,
    },
    /// GPT-2: q, k, v are strided slices of the packed `c_attn` output (matmul copies q, k and
    /// v); `softmax` in the scores' dtype, then `.type(value.dtype)`.
    Gpt2,
    /// GPT-2 with `reorder_and_upcast_attn`: `_upcast_and_reordered_attn` instead
    /// ([`upcast_reordered_attention`]).
    Gpt2Upcast {
        /// The layer's `scaling` is 1 (neither `scale_attn_weights` nor a layer index past 0
        /// with `scale_attn_by_inverse_layer_idx`): `baddbmm`'s backward scales nothing.
        unit_scaling: bool,
    },
    /// Llama, Mistral, Qwen2: `repeat_kv` copies k and v for GQA, matmul copies the transposed
    /// keys; `softmax(dtype=float32)`, then `.to(query.dtype)` (under autocast a float32 query:
    /// the rotary embedding's float32 `cos` / `sin` promoted it, so nothing is cast).
    Llama,
    /// Phi-3: Llama's, but its rotary embedding `cat`s the rotated channels with the rest, so q
    /// and k are contiguous `[B, H, S, D]` and matmul copies neither (truth traces of padded
    /// eager Phi-3 batches).
    Phi3,
    /// OPT: Llama's without the rotary embedding, so under autocast the query is half and
    /// `.to(query.dtype)` casts the float32 probabilities.
    Opt,
    /// BERT, RoBERTa, DistilBERT and T5 (multi-head, q, k, v transposed views of their
    /// projections, so matmul copies q, the transposed keys and v): `softmax(scores)` without a
    /// dtype (autocast runs it in float32, a pure half run in half) and no cast after it; dropout
    /// runs on the probabilities as softmax made them, and autocast casts them for `probs @ v`.
    Encoder,
}

/// `eager_attention_forward`: `matmul(q, k^T) * scaling`, `+ mask` for each additive term of
/// `masks` in order (T5: its position bias, then the decoder's causal mask; none for an
/// unpadded bidirectional encoder), softmax, dropout, `matmul(probs, v)`, then
/// `transpose(1, 2).contiguous()`; returns the output `[B, S, H * D]` and the attention weights
/// it hands back to its caller.
///
/// `cached`: k and v are the cache's tensors (contiguous `[B, H_kv, L, D]`, made by `cat`), which
/// bmm takes as they are (the transposed keys too). A single query (a decode step) is viewable
/// for bmm and its output already contiguous, so neither is copied.
#[allow(clippy::too_many_arguments)]
pub fn eager_attention(
    b: &mut GraphBuilder,
    e: Eager,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    masks: &[TensorId],
    dropout_p: f64,
    cached: bool,
) -> (TensorId, TensorId) {
    let qs = b.shape(q).to_vec();
    let (bsz, heads, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let kv_heads = b.shape(k)[1];
    let sk = b.shape(k)[2];
    let (mut k, mut v) = (k, v);
    let llama_like = e.flavor != EagerFlavor::Gpt2;
    if llama_like && kv_heads != heads {
        // repeat_kv: expand + reshape copies (a view for one kv head); backward sums the
        // repeats into a new tensor
        k = repeat_kv(b, k, heads / kv_heads);
        v = repeat_kv(b, v, heads / kv_heads);
        // the repeated keys and values are locals until the function returns
        b.hold(&[k, v]);
    }
    // matmul(q, k^T): bmm needs merged batch dimensions, so it copies q (laid out [B, S, H, D]
    // by the slicing or the rotary products) and, unless repeat_kv made them contiguous, the
    // transposed keys (and in `probs @ v` the values). With a batch of one, merging it into the
    // heads is a view whatever the layout (truth traces: no copy at batch 1)
    // One kv head: repeat_kv's result is a view with a zero head stride, which bmm cannot take,
    // the cache's contiguous keys and values too (truth traces of eager Gemma and Gemma3
    // generating: a copy of each per layer and step, prefill and decode alike); but autocast's
    // cast of a float32 key (the rotary embedding's float32 `cos` promoted it) makes a
    // contiguous copy, so then matmul needs none (truth traces of eager MQA under AMP).
    // The values come from their projection in the autocast dtype: never cast, always copied;
    // except a cache's, which follow its float32 keys under AMP (`cat` with the cache's empty
    // tensor of the keys' dtype promotes them), so autocast's cast copies them
    let mqa = llama_like && kv_heads == 1 && kv_heads != heads;
    let key_cast = e.autocast.is_some_and(|low| low != e.dtype);
    let phi3 = e.flavor == EagerFlavor::Phi3;
    // one key position of a projection's own heads (T5's first decoder forward without a
    // cache): `[B, H, 1, D]` merges its batch into the heads as a view, keys and values alike
    // (truth traces); a packed projection's slice does not (GPT-2's, Phi-3's)
    let one_key = sk == 1 && llama_like && !phi3 && kv_heads == heads;
    let copy_v = bsz > 1
        && !one_key
        && if cached {
            mqa && !key_cast
        } else {
            !llama_like || kv_heads == heads || kv_heads == 1
        };
    let copy_k = copy_v && !(mqa && key_cast) && !(phi3 && kv_heads == heads);
    // a single query is viewable for bmm, except GPT-2's (a slice of the packed `c_attn`
    // output, whose batch stride is 3 × the heads'); Phi-3's is contiguous
    let copy_q = bsz > 1 && (sq > 1 || !llama_like) && !phi3;
    let kt = view(b, "transpose", k, vec![bsz, heads, d, sk]);
    let scores = if copy_q || copy_k {
        b.op(
            MatMulCopy {
                lhs: copy_q,
                rhs: copy_k,
            },
            &[q, kt],
        )
    } else {
        b.op(MatMul, &[q, kt])
    };
    let mut scores = mul_scalar(b, scores);
    if e.flavor == (EagerFlavor::Gemma2 { softcap: true }) {
        // scores / cap, tanh (keeps its output), * cap
        let shape = b.shape(scores).to_vec();
        scores = b.op(Aten::new("div", shape.clone()), &[scores]);
        scores = b.op(
            Aten::new("tanh", shape).saves(vec![Saved::Output(0)]),
            &[scores],
        );
        scores = mul_scalar(b, scores);
    }
    let scores = masks.iter().fold(scores, |x, &m| add(b, x, m));
    let half = e.dtype != DType::F32;
    let probs = match e.flavor {
        EagerFlavor::Llama | EagerFlavor::Phi3 | EagerFlavor::Opt | EagerFlavor::Gemma2 { .. } => {
            // softmax(dtype=float32), then `.to(query.dtype)`
            let p = softmax_float32(b, scores, 3, e.dtype, e.autocast.is_some());
            // `.to(query.dtype)`: the model's half dtype, or under autocast OPT's half query
            // when its float32 mask promoted the scores
            let query_dtype = match e.autocast {
                None => half.then_some(e.dtype),
                Some(low) => (e.flavor == EagerFlavor::Opt && !masks.is_empty()).then_some(low),
            };
            match query_dtype {
                Some(dtype) => {
                    let p = to_dtype(b, p, dtype);
                    // `attn_weights = softmax(attn_weights, ...).to(query.dtype)`: the scores
                    // stay referenced until the statement rebinds them
                    b.keep_until_now(&[scores]);
                    p
                }
                None => p,
            }
        }
        EagerFlavor::Encoder => b.op(Softmax { dim: 3 }, &[scores]),
        EagerFlavor::Gpt2 | EagerFlavor::Gpt2Upcast { .. } => {
            let p = b.op(Softmax { dim: 3 }, &[scores]);
            // `.type(value.dtype)`: the autocast dtype of the projections
            match e.autocast {
                Some(low) => to_dtype(b, p, low),
                None => p,
            }
        }
    };
    let probs = dropout_fn(b, dropout_p, probs);
    // v is copied unless repeat_kv made it contiguous
    let o = probs_times_values(b, probs, v, copy_v);
    (contiguous_heads(b, o), probs)
}

/// `matmul(probs, v).transpose(1, 2)` of eager attention (`copy_v`: matmul copies the strided
/// v): the output `[B, S, H, D]`, a transposed view. matmul returns bmm's product through
/// `_unsafe_view`, whose backward reshapes the incoming gradient (a transposed view, from the
/// caller's `.contiguous()`) to bmm's layout: a copy, freed once BmmBackward0 has used it (truth
/// traces: `UnsafeViewBackward0`); a view at batch 1, as the forward's reshapes are.
fn probs_times_values(
    b: &mut GraphBuilder,
    probs: TensorId,
    v: TensorId,
    copy_v: bool,
) -> TensorId {
    let s = b.shape(probs).to_vec();
    let (bsz, heads, sq) = (s[0], s[1], s[2]);
    let d = b.shape(v)[3];
    let o = if copy_v {
        b.op(
            MatMulCopy {
                lhs: false,
                rhs: true,
            },
            &[probs, v],
        )
    } else {
        b.op(MatMul, &[probs, v])
    };
    let o = b.op(
        Aten::view("_unsafe_view", vec![bsz, heads, sq, d]).grads(vec![if bsz > 1 {
            GradIn::New
        } else {
            GradIn::PassThrough(0)
        }]),
        &[o],
    );
    view(b, "transpose", o, vec![bsz, sq, heads, d])
}

/// `o.transpose(1, 2)` (`[B, S, H, D]`) made contiguous and merged to `[B, S, H * D]`: a copy
/// unless there is one position.
fn contiguous_heads(b: &mut GraphBuilder, o: TensorId) -> TensorId {
    let s = b.shape(o).to_vec();
    let (bsz, sq, heads, d) = (s[0], s[1], s[2], s[3]);
    let o = if sq > 1 {
        b.op(
            Contiguous {
                name: "clone",
                shape: vec![bsz, sq, heads, d],
            },
            &[o],
        )
    } else {
        o
    };
    view(b, "reshape", o, vec![bsz, sq, heads * d])
}

/// `x.reshape(shape)` of a strided view: a copy (`clone`, then a view of it) when `copy`, else
/// a view.
fn reshape_maybe_copy(b: &mut GraphBuilder, x: TensorId, shape: Vec<u64>, copy: bool) -> TensorId {
    if !copy {
        return view(b, "reshape", x, shape);
    }
    let s = b.shape(x).to_vec();
    let c = b.op(
        Contiguous {
            name: "clone",
            shape: s,
        },
        &[x],
    );
    view(b, "_unsafe_view", c, shape)
}

/// GPT-2's `_upcast_and_reordered_attn` (eager attention with `reorder_and_upcast_attn`), a
/// function whose locals go when it returns: `torch.empty(B * H, S, K)` in float32, then with
/// autocast off `q.reshape(-1, S, D)` and `k.transpose(-1, -2).reshape(-1, D, K)` (copies of the
/// strided `c_attn` slices from a batch of 2 on; a cache's keys are contiguous), `.float()` of
/// each (copies unless float32), `baddbmm(empty, q, k, beta=0, alpha=scaling)` (the empty tensor
/// freed as its name is rebound; `BaddbmmBackward0` keeps both operands and, unless `scaling` is 1,
/// computes each gradient as a `bmm` then scales it, freeing the product), the reshape back,
/// `+ mask`, `softmax` (float32), `.type(value.dtype)`, `attn_dropout`, `matmul(probs, v)` and
/// the transpose. Returns the output `[B, S, H, D]` (a transposed view) and the weights.
fn upcast_reordered_attention(
    b: &mut GraphBuilder,
    e: Eager,
    [q, k, v]: [TensorId; 3],
    mask: TensorId,
    dropout_p: f64,
    (cached, unit_scaling): (bool, bool),
) -> (TensorId, TensorId) {
    let qs = b.shape(q).to_vec();
    let (bsz, heads, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let sk = b.shape(k)[2];
    let f32 = DTypeRule::Fixed(DType::F32);
    let empty = b.op(
        Aten::new("empty", vec![bsz * heads, sq, sk])
            .dtype(f32)
            .not_differentiable(),
        &[],
    );
    let q3 = reshape_maybe_copy(b, q, vec![bsz * heads, sq, d], bsz > 1);
    let kt = view(b, "transpose", k, vec![bsz, heads, d, sk]);
    let k3 = reshape_maybe_copy(b, kt, vec![bsz * heads, d, sk], bsz > 1 && !cached);
    // `q, k = ...` are locals until the function returns
    b.hold(&[q3, k3]);
    let (qf, kf) = if e.compute_dtype() == DType::F32 {
        (q3, k3)
    } else {
        (to_dtype(b, q3, DType::F32), to_dtype(b, k3, DType::F32))
    };
    let (q_bytes, k_bytes) = (bsz * heads * sq * d * 4, bsz * heads * d * sk * 4);
    let mut op = Aten::new("baddbmm", vec![bsz * heads, sq, sk])
        .dtype(f32)
        .saves(vec![Saved::Input(1), Saved::Input(2)]);
    op = if unit_scaling {
        op.grads(vec![GradIn::None, GradIn::New, GradIn::New])
    } else {
        // per operand: `grad.bmm(...)`, `* alpha`, the product freed
        op.backward_scratch(vec![
            Scratch::Alloc {
                bytes: q_bytes,
                what: "bmm",
            },
            Scratch::Alloc {
                bytes: q_bytes,
                what: "mul",
            },
            Scratch::Free(0),
            Scratch::Alloc {
                bytes: k_bytes,
                what: "bmm",
            },
            Scratch::Alloc {
                bytes: k_bytes,
                what: "mul",
            },
            Scratch::Free(2),
        ])
        .grads(vec![GradIn::None, GradIn::Scratch(1), GradIn::Scratch(3)])
    };
    let scores = b.op(op, &[empty, qf, kf]);
    let scores = view(b, "view", scores, vec![bsz, heads, sq, sk]);
    let scores = add(b, scores, mask);
    let probs = b.op(Softmax { dim: 3 }, &[scores]);
    // `.type(value.dtype)`
    let value_dtype = e.compute_dtype();
    let probs = if value_dtype == DType::F32 {
        probs
    } else {
        to_dtype(b, probs, value_dtype)
    };
    let probs = dropout_fn(b, dropout_p, probs);
    // the strided `c_attn` slice of v is copied from a batch of 2 on (a cache's is contiguous)
    let o = probs_times_values(b, probs, v, bsz > 1 && !cached);
    (o, probs)
}

/// `mask = torch.where(mask, torch.tensor(0.0), min_dtype)`: the result in the dtype of the
/// embeddings `x` (`(Some(x), _)`) or in `dtype`; the `0.0` is a Python argument made before the
/// call, `min_dtype` the 0-d `scalar_tensor` the call makes and frees around its output, both
/// `scalar_dtype`; after the call the `0.0` goes, then the boolean mask when `mask` is rebound
/// (truth traces).
fn eager_where(
    b: &mut GraphBuilder,
    shape: Vec<u64>,
    mask: TensorId,
    (x, dtype): (Option<TensorId>, DType),
    scalar_dtype: DType,
) -> TensorId {
    let zero = mask_op(b, "zeros", &[], DTypeRule::Fixed(scalar_dtype), &[]);
    let rule = match x {
        Some(_) => DTypeRule::Like(2),
        None => DTypeRule::Fixed(dtype),
    };
    let inputs: Vec<TensorId> = [mask, zero].into_iter().chain(x).collect();
    let additive = b.op(
        Aten::new("where", shape)
            .dtype(rule)
            .scratch(vec![Scratch::Alloc {
                bytes: scalar_dtype.size(),
                what: "scalar_tensor",
            }])
            .not_differentiable(),
        &inputs,
    );
    b.keep_until_now(&[mask]);
    additive
}
