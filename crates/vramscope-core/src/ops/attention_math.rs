//! The math fallback of `F.scaled_dot_product_attention` (`_scaled_dot_product_attention_math`),
//! which runs where no fused kernel takes the call ([`SdpaBackend::choose`]: a float32 head dim
//! that is not a multiple of 4, or one that is not a multiple of 8 in half precision with a mask).
//! It is a composite of aten ops, each with its autograd node, written here as the scratch
//! programs of one op (truth traces of Llama, GPT-2 and T5 in float32 and under AMP, with and
//! without a padded batch's mask):
//!
//! - forward: half-precision q, k and v are copied to float32 first (`query_.to(kFloat)`, ...);
//!   `q * sqrt(scale)`; for `is_causal` the `[L, S]` boolean `ones(...).tril()` made an additive
//!   mask (`where` with two scalar tensors); fewer key/value heads than heads (`enable_gqa`) are
//!   repeated (`repeat_interleave`); `k.transpose(-2, -1) * sqrt(scale)`; `matmul` copies an
//!   operand whose batch and head dims do not merge (the transposed projections' layout) and
//!   runs `bmm`, the scaled k going with the expression when it was copied; the mask added;
//!   `_safe_softmax`; dropout in training; `matmul` with v (copied likewise). Half precision
//!   then casts the probabilities (returned, unused) and the output back. Autograd keeps what
//!   each `bmm` read, the probabilities, and the dropout's output and mask; without grad the
//!   copies go as each `matmul` returns.
//! - backward, node by node: the output's gradient cast up and reshaped (a copy of the
//!   transposed view); `bmm`'s gradients for v and the probabilities; the dropout's and the
//!   softmax's backward (a mask that needs a gradient gets the scores' gradient as it is);
//!   `bmm`'s for k and q; each scaled operand's `MulBackward1`, k's first; repeated heads summed
//!   back (v's first); half precision's casts back (v's, k's, q's). Each node releases what it
//!   kept as it finishes.
//!
//! The mask is added out of place, as the truth tool's FakeTensors make torch do
//! (`areAnyTensorSubclassLike`); on a real GPU `attn.add_(mask)` runs in place, one `[B, H, L, S]`
//! buffer less at that moment.

use super::*;

/// What the programs depend on besides the call's shapes and dtypes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MathCall {
    /// `is_causal`: the math path makes the causal mask itself.
    pub causal: bool,
    /// An `attn_mask` is input 3.
    pub mask: bool,
    /// The mask is broadcast over the batch or the heads (input 3 is its expansion): its
    /// gradient is summed to its shape.
    pub mask_broadcast: bool,
    /// Dropout is active.
    pub dropout: bool,
    /// k and v are contiguous `[B, H, S, D]` (a cache's concatenations, `repeat_kv`'s copies)
    /// rather than transposed projections.
    pub kv_contiguous: bool,
}

/// The sizes the programs work with, in bytes of the dtype they are in.
struct Sizes {
    /// q, k, v, the output and the `[B, H, L, S]` scores in the accumulation dtype (float32
    /// for half inputs).
    q: u64,
    k: u64,
    v: u64,
    out: u64,
    scores: u64,
    /// The same in the inputs' dtype (half precision's casts back).
    q_in: u64,
    k_in: u64,
    v_in: u64,
    scores_in: u64,
    /// `[B, H, L, S]` elements (the dropout mask's bytes).
    score_elems: u64,
    /// `[L, S]` elements (the causal mask's).
    plane: u64,
    /// The accumulation dtype's size.
    acc: u64,
    /// Half inputs are copied to float32.
    upcast: bool,
    /// How many query heads share a key/value head (1: no `repeat_interleave`).
    rep: u64,
    /// `matmul` copies q (the scaled q's batch and head dims do not merge).
    q_copied: bool,
    /// ... and k, and v.
    kv_copied: bool,
    /// The output's gradient arrives as a view `reshape` cannot take as it is.
    grad_copied: bool,
}

impl Sizes {
    fn of(ctx: &OpCtx, call: &MathCall) -> Sizes {
        let (q, k, v) = (&ctx.inputs[0], &ctx.inputs[1], &ctx.inputs[2]);
        let elem = q.dtype.size().max(1);
        let upcast = matches!(q.dtype, DType::F16 | DType::BF16);
        let acc = if upcast { 4 } else { elem };
        let dim = |t: &TensorMeta, i: usize| t.shape.get(i).copied().unwrap_or(1);
        let (b, heads, l) = (dim(q, 0), dim(q, 1), dim(q, 2));
        let (kv_heads, s) = (dim(k, 1).max(1), dim(k, 2));
        let rep = (heads / kv_heads).max(1);
        let out = ctx.outputs.first().map_or(0, TensorMeta::bytes);
        let score_elems = b * heads * l * s;
        let widen = |bytes: u64| bytes / elem * acc;
        Sizes {
            q: widen(q.bytes()),
            k: widen(k.bytes()),
            v: widen(v.bytes()),
            out: widen(out),
            scores: score_elems * acc,
            q_in: q.bytes(),
            k_in: k.bytes(),
            v_in: v.bytes(),
            scores_in: score_elems * elem,
            score_elems,
            plane: l * s,
            acc,
            upcast,
            rep,
            q_copied: b > 1 && heads > 1 && l > 1,
            kv_copied: !call.kv_contiguous && rep == 1 && b > 1 && kv_heads > 1 && s > 1,
            grad_copied: b > 1 && heads > 1 && l > 1,
        }
    }
}

/// A program under construction: its allocations are numbered in order.
#[derive(Default)]
struct Program {
    steps: Vec<Scratch>,
    allocs: usize,
}

impl Program {
    fn alloc(&mut self, bytes: u64, what: &'static str) -> usize {
        self.steps.push(Scratch::Alloc { bytes, what });
        self.allocs += 1;
        self.allocs - 1
    }

    fn free(&mut self, i: usize) {
        self.steps.push(Scratch::Free(i));
    }

    fn step(&mut self, s: Scratch) {
        self.steps.push(s);
    }
}

/// What the forward program's `bmm`s, softmax and dropout keep, in [`saved_for_backward`]'s
/// order (the positions [`Scratch::ReleaseSaved`] names).
struct Kept {
    q: Saved,
    k: Saved,
    probs: Saved,
    v: Saved,
    dropped: Option<(Saved, Saved)>,
}

fn forward(ctx: &OpCtx, call: &MathCall) -> (Program, Kept) {
    let z = Sizes::of(ctx, call);
    // autograd records the call; `records`: and keeps what it saves (not in a checkpointed
    // region's forward, where the intermediates die as without grad)
    let grad = ctx.inputs_require_grad.iter().any(|&g| g);
    let records = grad && ctx.keeps_saved;
    let mut p = Program::default();
    let acc = z.upcast.then(|| {
        (
            p.alloc(z.q, "q in float32"),
            p.alloc(z.k, "k in float32"),
            p.alloc(z.v, "v in float32"),
        )
    });
    let v_acc = acc.map(|(_, _, v)| v);
    let q_scaled = p.alloc(z.q, "q * sqrt(scale)");
    let mut causal_mask = None;
    if call.causal {
        let ones = p.alloc(z.plane, "ones");
        let tril = p.alloc(z.plane, "tril");
        p.free(ones);
        let zero = p.alloc(z.acc, "scalar_tensor");
        let inf = p.alloc(z.acc, "scalar_tensor");
        causal_mask = Some(p.alloc(z.plane * z.acc, "causal mask"));
        p.free(inf);
        p.free(zero);
        p.free(tril);
    }
    let repeated = (z.rep > 1).then(|| {
        (
            p.alloc(z.k * z.rep, "repeat_interleave k"),
            p.alloc(z.v * z.rep, "repeat_interleave v"),
        )
    });
    let v_repeated = repeated.map(|(_, v)| v);
    let k_scaled = p.alloc(z.k * z.rep, "k * sqrt(scale)");
    let q_copy = z.q_copied.then(|| p.alloc(z.q, "contiguous q"));
    let k_copy = z.kv_copied.then(|| p.alloc(z.k, "contiguous k"));
    let mut scores = p.alloc(z.scores, "q @ k^T");
    if !records {
        for c in [k_copy, q_copy].into_iter().flatten() {
            p.free(c);
        }
    }
    // the scaled k goes with its expression, unless `bmm` keeps it
    if k_copy.is_some() || !records {
        p.free(k_scaled);
    }
    if call.mask || causal_mask.is_some() {
        let added = p.alloc(z.scores, "scores + mask");
        p.free(scores);
        scores = added;
    }
    let probs = p.alloc(z.scores, "softmax");
    p.free(scores);
    let dropped = (call.dropout && grad).then(|| {
        let out = p.alloc(z.scores, "dropout");
        let mask = p.alloc(z.score_elems, "dropout mask");
        if !records {
            // nothing keeps the mask, nor the probabilities once `attn` is rebound
            p.free(mask);
            p.free(probs);
        }
        (out, mask)
    });
    // `make_tuple(matmul(attn, v).to(dtype), attn.to(dtype))`, the last argument first; without
    // grad v's copy goes as `matmul` returns, before the output is cast back
    let attn_half = z
        .upcast
        .then(|| p.alloc(z.scores_in, "probabilities cast back"));
    let v_copy = z.kv_copied.then(|| p.alloc(z.v, "contiguous v"));
    let out_acc = z.upcast.then(|| p.alloc(z.out, "output in float32"));
    if let (Some(c), true, false) = (v_copy, z.upcast, records) {
        p.free(c);
    }
    p.step(Scratch::Outputs);
    // then the return expression's temporaries (the float32 output, or v's copy after the
    // output's `bmm`), the locals from the last made (`attn`, the repeats, the scaled q, the
    // causal mask, the float32 copies), and the returned weights, which the caller drops
    if let Some(o) = out_acc {
        p.free(o);
    }
    if let (Some(c), false, false) = (v_copy, z.upcast, records) {
        p.free(c);
    }
    let attn = dropped.map_or(probs, |(out, _)| out);
    if z.upcast && !records {
        p.free(attn);
    }
    if let Some((k, v)) = repeated {
        if !records {
            p.free(v);
        }
        p.free(k);
    }
    if !records || q_copy.is_some() {
        p.free(q_scaled);
    }
    if let Some(m) = causal_mask {
        p.free(m);
    }
    if let Some((q, k, v)) = acc {
        if !records || v_copy.is_some() || repeated.is_some() {
            p.free(v);
        }
        p.free(k);
        p.free(q);
    }
    match attn_half {
        Some(w) => p.free(w),
        None if !records => p.free(attn),
        None => {}
    }
    let scratch = Saved::Scratch;
    let kept = Kept {
        q: scratch(q_copy.unwrap_or(q_scaled)),
        k: scratch(k_copy.unwrap_or(k_scaled)),
        probs: scratch(probs),
        v: match (v_copy, v_repeated, v_acc) {
            (Some(c), _, _) | (None, Some(c), _) | (None, None, Some(c)) => scratch(c),
            (None, None, None) => Saved::Input(2),
        },
        dropped: dropped.map(|(o, m)| (scratch(o), scratch(m))),
    };
    (p, kept)
}

/// The forward program, the op's outputs made at its [`Scratch::Outputs`] step; what is left
/// allocated at its end is what autograd keeps.
pub(crate) fn forward_scratch(ctx: &OpCtx, call: &MathCall) -> Vec<Scratch> {
    forward(ctx, call).0.steps
}

/// What autograd keeps: what the first `bmm` read (q's copy or the scaled q, k's copy or the
/// scaled k), the probabilities (`_safe_softmax`), what the second read of v (its copy, its
/// repeat, its float32 copy or v itself), then the dropout's output and mask.
pub(crate) fn saved_for_backward(ctx: &OpCtx, call: &MathCall) -> Vec<Saved> {
    let (_, k) = forward(ctx, call);
    let mut s = vec![k.q, k.k, k.probs, k.v];
    if let Some((out, mask)) = k.dropped {
        s.extend([out, mask]);
    }
    s
}

/// The backward program, node by node (see the module docs).
pub(crate) fn backward_scratch(ctx: &OpCtx, call: &MathCall) -> Vec<Scratch> {
    backward(ctx, call).0.steps
}

/// q's, k's and v's gradients, allocations of [`backward_scratch`] handed on as they are; a
/// mask that requires grad gets the scores' gradient.
pub(crate) fn input_grads(ctx: &OpCtx, call: &MathCall) -> Vec<GradIn> {
    let (_, [q, k, v], mask) = backward(ctx, call);
    let mut g = vec![GradIn::Scratch(q), GradIn::Scratch(k), GradIn::Scratch(v)];
    if call.mask {
        g.push(mask.map_or(GradIn::None, GradIn::Scratch));
    }
    g
}

fn backward(ctx: &OpCtx, call: &MathCall) -> (Program, [usize; 3], Option<usize>) {
    let z = Sizes::of(ctx, call);
    let mask_grad = call.mask && ctx.inputs_require_grad.get(3).copied().unwrap_or(false);
    let mut p = Program::default();
    // `.to(dtype)`'s backward casts the gradient up, then `_unsafe_view`'s reshapes it
    let mut grad = None;
    if z.upcast {
        grad = Some(p.alloc(z.out, "output gradient in float32"));
        p.step(Scratch::DropIncoming);
    }
    if z.grad_copied {
        let copy = p.alloc(z.out, "reshaped output gradient");
        match grad.replace(copy) {
            Some(up) => p.free(up),
            None => p.step(Scratch::DropIncoming),
        }
    }
    let mut v = p.alloc(z.v * z.rep, "v's gradient");
    let mut probs_grad = p.alloc(z.scores, "probabilities' gradient");
    // a node's saved tensors go after its incoming gradient (`release_variables` once the
    // engine is done with it), or, recomputed under a checkpoint, before it: the node's own
    // unpacked references die as its `apply` returns, the last unpacked first
    let unpacked = ctx.saved_unpacked;
    // `bmm`: `mat2` (v's) is released before `self`, or unpacked after it
    let bmm_saved = if call.dropout { [3, 4] } else { [3, NONE] };
    let incoming = grad.map_or(Scratch::DropIncoming, Scratch::Free);
    node_end(&mut p, incoming, bmm_saved, unpacked);
    if call.dropout {
        let g = p.alloc(z.scores, "dropout backward");
        node_end(&mut p, Scratch::Free(probs_grad), [5, NONE], unpacked);
        probs_grad = g;
    }
    let scores_grad = p.alloc(z.scores, "softmax backward");
    node_end(&mut p, Scratch::Free(probs_grad), [2, NONE], unpacked);
    // the mask's gradient: `AddBackward0` hands the scores' gradient to the mask as it is, or
    // casts it to a half mask's dtype (`validate_outputs`) before `bmm` runs, which then frees
    // the scores' gradient as its incoming one (truth traces of mT5 in AMP bf16)
    let mask_cast = ctx
        .inputs
        .get(3)
        // (a broadcast mask's gradient is summed to its shape afterwards, as before)
        .filter(|m| mask_grad && !call.mask_broadcast && m.dtype.size() != z.acc)
        .map(|m| p.alloc(z.score_elems * m.dtype.size(), "mask's gradient"));
    let k_bmm = p.alloc(z.k * z.rep, "k's gradient (bmm)");
    let q_bmm = p.alloc(z.q, "q's gradient (bmm)");
    // `bmm` again: `self` is q's, `mat2` k's
    if mask_grad && mask_cast.is_none() {
        // the scores' gradient is handed on as the mask's
        for s in ordered([1, 0], unpacked) {
            p.step(Scratch::ReleaseSaved(s));
        }
    } else {
        node_end(&mut p, Scratch::Free(scores_grad), [1, 0], unpacked);
    }
    let mut k = p.alloc(z.k * z.rep, "k's gradient");
    p.free(k_bmm);
    if z.rep > 1 {
        // `ExpandBackward0` sums each repeated gradient to its input's heads, v's first
        let summed = p.alloc(z.v, "v's gradient");
        p.free(v);
        v = summed;
        let summed = p.alloc(z.k, "k's gradient");
        p.free(k);
        k = summed;
    }
    let mut q = p.alloc(z.q, "q's gradient");
    p.free(q_bmm);
    if z.upcast {
        // the float32 copies' `ToCopyBackward0`, the last made first
        for (g, bytes) in [(&mut v, z.v_in), (&mut k, z.k_in), (&mut q, z.q_in)] {
            let cast = p.alloc(bytes, "gradient cast back");
            p.free(*g);
            *g = cast;
        }
    }
    (
        p,
        [q, k, v],
        mask_grad.then_some(mask_cast.unwrap_or(scores_grad)),
    )
}

/// No second saved tensor (see [`ordered`]).
const NONE: usize = usize::MAX;

/// A node's saved positions in the order they are released: as `release_variables` resets
/// them, or reversed (their unpacking order) when they are a recomputation's.
fn ordered(saved: [usize; 2], unpacked: bool) -> impl Iterator<Item = usize> {
    let [a, b] = if unpacked {
        [saved[1], saved[0]]
    } else {
        saved
    };
    [a, b].into_iter().filter(|&s| s != NONE)
}

/// The end of a backward node: the step that releases its incoming gradient (a program
/// allocation's `Free`, or the op's own `DropIncoming`) and its `saved` tensors ([`NONE`] for a
/// second it does not have), in the order [`ordered`] describes.
fn node_end(p: &mut Program, incoming: Scratch, saved: [usize; 2], unpacked: bool) {
    if !unpacked {
        p.step(incoming);
    }
    for s in ordered(saved, unpacked) {
        p.step(Scratch::ReleaseSaved(s));
    }
    if unpacked {
        p.step(incoming);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(inputs: &'a [TensorMeta], unpacked: bool) -> OpCtx<'a> {
        OpCtx {
            inputs,
            params: &[],
            outputs: &[],
            training: true,
            inputs_require_grad: &[true, true, true, true],
            keeps_saved: true,
            saved_unpacked: unpacked,
        }
    }

    fn inputs(dtype: DType, mask: DType) -> Vec<TensorMeta> {
        vec![
            TensorMeta::new(vec![1, 2, 16, 6], dtype),
            TensorMeta::new(vec![1, 2, 32, 6], dtype),
            TensorMeta::new(vec![1, 2, 32, 6], dtype),
            TensorMeta::new(vec![1, 2, 16, 32], mask),
        ]
    }

    const CALL: MathCall = MathCall {
        causal: false,
        mask: true,
        mask_broadcast: false,
        dropout: false,
        kv_contiguous: false,
    };

    fn position(steps: &[Scratch], step: Scratch) -> usize {
        let found = steps.iter().position(|s| *s == step);
        found.unwrap_or_else(|| panic!("{step:?} not in {steps:?}"))
    }

    #[test]
    fn a_recomputed_node_releases_its_saved_tensors_before_its_incoming_gradient() {
        let x = inputs(DType::F32, DType::F32);
        let kept = backward_scratch(&ctx(&x, false), &CALL);
        let unpacked = backward_scratch(&ctx(&x, true), &CALL);
        // the first `bmm`: v (saved 3) after the incoming gradient, or before it
        assert!(position(&kept, Scratch::DropIncoming) < position(&kept, Scratch::ReleaseSaved(3)));
        assert!(
            position(&unpacked, Scratch::ReleaseSaved(3))
                < position(&unpacked, Scratch::DropIncoming)
        );
        // the second: k (`mat2`, 1) before q (`self`, 0) when the engine is done with the node,
        // q before k as the node's unpacked locals
        assert!(
            position(&kept, Scratch::ReleaseSaved(1)) < position(&kept, Scratch::ReleaseSaved(0))
        );
        assert!(
            position(&unpacked, Scratch::ReleaseSaved(0))
                < position(&unpacked, Scratch::ReleaseSaved(1))
        );
        assert_eq!(kept.len(), unpacked.len());
    }

    #[test]
    fn a_half_masks_gradient_is_cast_before_the_last_bmm() {
        // float32 mask: the scores' gradient itself; bf16 mask: a cast of it, made before k's
        // and q's `bmm` gradients
        let f32_mask = inputs(DType::BF16, DType::F32);
        let bf16_mask = inputs(DType::BF16, DType::BF16);
        let (shared, cast) = (
            input_grads(&ctx(&f32_mask, false), &CALL),
            input_grads(&ctx(&bf16_mask, false), &CALL),
        );
        let (GradIn::Scratch(cast_at), GradIn::Scratch(shared_at)) = (cast[3], shared[3]) else {
            panic!("the mask's gradient is a program allocation: {cast:?} {shared:?}")
        };
        let bytes = |x: &[TensorMeta], i: usize| {
            let steps = backward_scratch(&ctx(x, false), &CALL);
            let allocs: Vec<u64> = steps
                .iter()
                .filter_map(|s| match s {
                    Scratch::Alloc { bytes, .. } => Some(*bytes),
                    _ => None,
                })
                .collect();
            allocs[i]
        };
        // the scores' gradient, made first, is handed on, or cast after it
        assert!(cast_at > shared_at);
        // [1, 2, 16, 32] in bf16
        assert_eq!(bytes(&bf16_mask, cast_at), 2 * 16 * 32 * 2);
        assert_eq!(bytes(&f32_mask, shared_at), 2 * 16 * 32 * 4);
    }
}
