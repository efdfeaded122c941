//! The math fallback of `F.scaled_dot_product_attention` (`_scaled_dot_product_attention_math`),
//! which runs where no fused kernel takes the call ([`SdpaBackend::choose`]: a float32 head dim
//! that is not a multiple of 4, say). It is a composite of aten ops, each with its autograd node,
//! written here as the scratch programs of one op (truth traces of a Llama and a GPT-2 in
//! float32):
//!
//! - forward: `q * sqrt(scale)`; for `is_causal` the `[L, S]` boolean `ones(...).tril()` made an
//!   additive mask (`where` with two scalar tensors); `k.transpose(-2, -1) * sqrt(scale)`;
//!   `matmul` copies both scaled operands (they keep the transposed projections' layout) and
//!   runs `bmm`, the scaled k going with the expression; the mask added; `_safe_softmax`;
//!   dropout in training; `matmul` with a contiguous copy of v. The output is the last `bmm`'s.
//!   Autograd keeps the two copies, the probabilities (and the dropout's output and mask) and
//!   v's copy; without grad the copies go as each `matmul` returns.
//! - backward, node by node: the output's gradient reshaped (a copy of the transposed view);
//!   `bmm`'s gradients for v's copy (v's gradient, handed on as it is) and the probabilities;
//!   the dropout's and the softmax's backward; `bmm`'s for the copies of k and q; then each
//!   scaled operand's `MulBackward1`, k's first. Each node releases what it kept as it finishes.
//!
//! Keys and values with fewer heads than the queries (`enable_gqa`) are repeated first
//! (`repeat_interleave`: k's, then v's copy, locals until the call returns); the repeated k
//! scaled and v's repeat are contiguous, so `bmm` keeps them as they are, and backward sums each
//! repeated gradient back to its input's heads (`ExpandBackward0`, v's first).

use super::*;

/// The sizes the programs work with.
struct Sizes {
    q: u64,
    k: u64,
    v: u64,
    out: u64,
    scores: u64,
    plane: u64,
    elem: u64,
    /// Whether the output's gradient arrives as a view `reshape` cannot take as it is.
    grad_copied: bool,
    /// How many query heads share a key/value head (1: no `enable_gqa` repeat).
    rep: u64,
}

impl Sizes {
    fn of(ctx: &OpCtx) -> Sizes {
        let (q, k) = (&ctx.inputs[0], &ctx.inputs[1]);
        let elem = q.dtype.size();
        let dim = |t: &TensorMeta, i: usize| t.shape.get(i).copied().unwrap_or(1);
        let (heads, l, s) = (dim(q, 1), dim(q, 2), dim(k, 2));
        Sizes {
            q: q.bytes(),
            k: k.bytes(),
            v: ctx.inputs[2].bytes(),
            out: ctx.outputs.first().map_or(0, TensorMeta::bytes),
            scores: dim(q, 0) * heads * l * s * elem,
            plane: l * s,
            elem,
            grad_copied: heads > 1 && l > 1,
            rep: (heads / dim(k, 1).max(1)).max(1),
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
}

/// Where the forward program's kept tensors are (allocation indices): what the two `bmm`s
/// read (a copy of the scaled q, the scaled k or its copy, v's copy or repeat), the
/// probabilities, the dropout's output and mask.
struct Kept {
    q_copy: usize,
    k_copy: usize,
    probs: usize,
    dropped: Option<(usize, usize)>,
    v_copy: usize,
}

fn forward(ctx: &OpCtx, causal: bool, dropout: bool) -> (Program, Kept) {
    let z = Sizes::of(ctx);
    let records = ctx.inputs_require_grad.iter().any(|&g| g);
    let mut p = Program::default();
    p.alloc(z.q, "q * sqrt(scale)");
    let mut mask = None;
    if causal {
        let ones = p.alloc(z.plane, "ones");
        let tril = p.alloc(z.plane, "tril");
        p.free(ones);
        let zero = p.alloc(z.elem, "scalar_tensor");
        let inf = p.alloc(z.elem, "scalar_tensor");
        mask = Some(p.alloc(z.plane * z.elem, "causal mask"));
        p.free(inf);
        p.free(zero);
        p.free(tril);
    }
    let gqa = z.rep > 1;
    let v_repeated = gqa.then(|| {
        p.alloc(z.k * z.rep, "repeat_interleave k");
        p.alloc(z.v * z.rep, "repeat_interleave v")
    });
    let k_scaled = p.alloc(z.k * z.rep, "k * sqrt(scale)");
    let q_copy = p.alloc(z.q, "contiguous q");
    // the repeated k is contiguous: its scaled transpose needs no copy
    let k_copy = if gqa {
        k_scaled
    } else {
        p.alloc(z.k, "contiguous k")
    };
    let mut scores = p.alloc(z.scores, "q @ k^T");
    if !records {
        if !gqa {
            p.free(k_copy);
        }
        p.free(q_copy);
    }
    // the scaled k goes with its expression, unless `bmm` keeps it (the repeated k's)
    if !gqa || !records {
        p.free(k_scaled);
    }
    if mask.is_some() {
        let added = p.alloc(z.scores, "scores + mask");
        p.free(scores);
        scores = added;
    }
    let probs = p.alloc(z.scores, "softmax");
    p.free(scores);
    let dropped = (dropout && records).then(|| {
        let out = p.alloc(z.scores, "dropout");
        (out, p.alloc(z.scores / z.elem, "dropout mask"))
    });
    let v_copy = match v_repeated {
        Some(v) => v,
        None => p.alloc(z.v, "contiguous v"),
    };
    let kept = Kept {
        q_copy,
        k_copy,
        probs,
        dropped,
        v_copy,
    };
    (p, kept)
}

/// The forward program: its leftovers (the scaled q, the mask, and without grad the
/// probabilities and v's copy) go once the output exists.
pub(crate) fn forward_scratch(ctx: &OpCtx, causal: bool, dropout: bool) -> Vec<Scratch> {
    forward(ctx, causal, dropout).0.steps
}

/// What autograd keeps: the copies of q and k (`bmm`), the probabilities (`_safe_softmax`), v's
/// copy (`bmm`), then the dropout's output and mask; [`backward_scratch`] releases them by these
/// positions.
pub(crate) fn saved_for_backward(ctx: &OpCtx, causal: bool, dropout: bool) -> Vec<Saved> {
    let (_, k) = forward(ctx, causal, dropout);
    let mut s = vec![
        Saved::Scratch(k.q_copy),
        Saved::Scratch(k.k_copy),
        Saved::Scratch(k.probs),
        Saved::Scratch(k.v_copy),
    ];
    if let Some((out, mask)) = k.dropped {
        s.extend([Saved::Scratch(out), Saved::Scratch(mask)]);
    }
    s
}

/// The backward program, node by node (see the module docs); the gradients of q, k and v are
/// its allocations [`input_grads`] names.
pub(crate) fn backward_scratch(ctx: &OpCtx, dropout: bool) -> Vec<Scratch> {
    backward(ctx, dropout).0.steps
}

/// q's, k's and v's gradients: allocations of [`backward_scratch`], handed on as they are.
pub(crate) fn input_grads(ctx: &OpCtx, dropout: bool) -> Vec<GradIn> {
    let (_, [q, k, v]) = backward(ctx, dropout);
    vec![GradIn::Scratch(q), GradIn::Scratch(k), GradIn::Scratch(v)]
}

fn backward(ctx: &OpCtx, dropout: bool) -> (Program, [usize; 3]) {
    let z = Sizes::of(ctx);
    let mut p = Program::default();
    let grad = z
        .grad_copied
        .then(|| p.alloc(z.out, "reshaped output gradient"));
    p.steps.push(Scratch::DropIncoming);
    let mut v = p.alloc(z.v * z.rep, "v's gradient");
    let mut probs_grad = p.alloc(z.scores, "probabilities' gradient");
    if let Some(g) = grad {
        p.free(g);
    }
    // `bmm` releases `mat2` (v's copy), then `self`
    p.steps.push(Scratch::ReleaseSaved(3));
    if dropout {
        p.steps.push(Scratch::ReleaseSaved(4));
        let g = p.alloc(z.scores, "dropout backward");
        p.free(probs_grad);
        p.steps.push(Scratch::ReleaseSaved(5));
        probs_grad = g;
    }
    let scores_grad = p.alloc(z.scores, "softmax backward");
    p.free(probs_grad);
    p.steps.push(Scratch::ReleaseSaved(2));
    let k_copy = p.alloc(z.k * z.rep, "contiguous k's gradient");
    let q_copy = p.alloc(z.q, "contiguous q's gradient");
    p.free(scores_grad);
    p.steps.push(Scratch::ReleaseSaved(1));
    p.steps.push(Scratch::ReleaseSaved(0));
    let mut k = p.alloc(z.k * z.rep, "k's gradient");
    p.free(k_copy);
    if z.rep > 1 {
        // `ExpandBackward0` sums each repeated gradient to its input's heads, v's first
        let summed = p.alloc(z.v, "v's gradient");
        p.free(v);
        v = summed;
        let summed = p.alloc(z.k, "k's gradient");
        p.free(k);
        k = summed;
    }
    let q = p.alloc(z.q, "q's gradient");
    p.free(q_copy);
    (p, [q, k, v])
}
