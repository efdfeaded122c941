//! GPT-2 (`GPT2LMHeadModel`, transformers/models/gpt2/modeling_gpt2.py): token and position
//! embeddings, `drop`, pre-norm blocks (`ln_1`, `attn` with a packed `Conv1D` `c_attn` split into
//! q, k, v, SDPA with `attn_pdrop`, `c_proj`, `resid_dropout`; `ln_2`, `mlp` with `c_fc`,
//! `gelu_new` written out as its pointwise ops, `c_proj`, `dropout`), `ln_f`, and an `lm_head` tied
//! to `wte`.

use vramscope_core::ir::Task;
use vramscope_core::ops::{Aten, Autocast, DTypeRule, LayerNorm, Saved};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::layers::{
    add, add_scalar, conv1d, dropout, embedding, mul, mul_scalar, packed_sequence_check,
    position_ids, sdpa, tied_head, view,
};
use super::{build_error, HfConfig, HfError, HfInput};

struct Spec {
    vocab: u64,
    positions: u64,
    hidden: u64,
    layers: u64,
    heads: u64,
    inner: u64,
    embd_pdrop: f64,
    attn_pdrop: f64,
    resid_pdrop: f64,
    tied: bool,
}

fn spec(cfg: &HfConfig) -> Result<Spec, HfError> {
    let hidden = cfg.u64(&["n_embd", "hidden_size"])?;
    let heads = cfg.u64(&["n_head", "num_attention_heads"])?;
    if hidden % heads != 0 {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "n_head".into(),
            expected: format!("a divisor of n_embd = {hidden}"),
        });
    }
    if let Some(act) = cfg.str("activation_function")? {
        if act != "gelu_new" {
            return Err(HfError::Field {
                path: cfg.path.clone(),
                field: "activation_function".into(),
                expected: "\"gelu_new\" (the only GPT-2 activation modelled)".into(),
            });
        }
    }
    Ok(Spec {
        vocab: cfg.u64(&["vocab_size"])?,
        positions: cfg.u64(&["n_positions", "max_position_embeddings"])?,
        hidden,
        layers: cfg.u64(&["n_layer", "num_hidden_layers"])?,
        heads,
        inner: cfg.opt_u64(&["n_inner"])?.unwrap_or(4 * hidden),
        embd_pdrop: cfg.f64_or("embd_pdrop", 0.1)?,
        attn_pdrop: cfg.f64_or("attn_pdrop", 0.1)?,
        resid_pdrop: cfg.f64_or("resid_pdrop", 0.1)?,
        tied: cfg.bool_or("tie_word_embeddings", true)?,
    })
}

/// Builds `GPT2LMHeadModel`; returns the graph and the checkpointed layers (`transformer.h.N`).
pub fn build(
    cfg: &HfConfig,
    input: &HfInput,
    _dtype: DType,
) -> Result<(Graph, Vec<String>), HfError> {
    let s = spec(cfg)?;
    if input.seq > s.positions {
        return Err(HfError::BadInput(format!(
            "{}: --seq-len {} exceeds n_positions = {}",
            cfg.path, input.seq, s.positions
        )));
    }
    let (bsz, seq) = (input.batch, input.seq);
    let mut b = GraphBuilder::new("gpt2", "GPT2LMHeadModel");
    let ids = b.input(vec![bsz, seq], DType::I64);
    let (h, wte) = b.module("transformer", "GPT2Model", &[ids], |b| {
        let (tok, wte) = embedding(b, "wte", s.vocab, s.hidden, ids);
        let pos = position_ids(b, seq);
        let pos = view(b, "unsqueeze", pos, vec![1, seq]);
        let (pe, _) = embedding(b, "wpe", s.positions, s.hidden, pos);
        let x = add(b, tok, pe);
        packed_sequence_check(b, bsz, seq);
        let mut x = dropout(b, "drop", s.embd_pdrop, x);
        b.module("h", "ModuleList", &[], |b| {
            for i in 0..s.layers {
                x = b.module(&i.to_string(), "GPT2Block", &[x], |b| {
                    block(b, &s, bsz, seq, x)
                });
            }
        });
        (b.layer("ln_f", LayerNorm::new(s.hidden), &[x]), wte)
    });
    let logits = if s.tied {
        // post_init drops the head's own weight for the embedding's
        b.tie_at_init(&[vec![s.vocab, s.hidden]], 1, None);
        tied_head(&mut b, "lm_head", wte, h)
    } else {
        super::layers::linear(&mut b, "lm_head", s.hidden, s.vocab, false, h)
    };
    let graph = b
        .finish(&[logits], Task::CausalLm { vocab: s.vocab })
        .map_err(build_error(cfg))?;
    let layers = (0..s.layers)
        .map(|i| format!("transformer.h.{i}"))
        .collect();
    Ok((graph, layers))
}

fn block(b: &mut GraphBuilder, s: &Spec, bsz: u64, seq: u64, input: TensorId) -> TensorId {
    let e = s.hidden;
    let x = b.layer("ln_1", LayerNorm::new(e), &[input]);
    let a = b.module("attn", "GPT2Attention", &[x], |b| {
        // SDPA applies the attention dropout itself; the module exists but is never called
        b.declare_module("attn_dropout", "Dropout");
        let qkv = conv1d(b, "c_attn", e, 3 * e, x);
        let parts = b.op_multi(
            vramscope_core::ops::View {
                name: "split",
                shapes: vec![vec![bsz, seq, e]; 3],
                expand: false,
            },
            &[qkv],
        );
        let d = e / s.heads;
        let heads: Vec<TensorId> = parts
            .iter()
            .map(|&t| {
                let t = view(b, "view", t, vec![bsz, seq, s.heads, d]);
                view(b, "transpose", t, vec![bsz, s.heads, seq, d])
            })
            .collect();
        let o = sdpa(b, heads[0], heads[1], heads[2], s.attn_pdrop, true);
        // transpose(1, 2).contiguous(): the kernels lay the output out as [B, S, H, D]
        let o = view(b, "transpose", o, vec![bsz, seq, s.heads, d]);
        let o = view(b, "reshape", o, vec![bsz, seq, e]);
        let o = conv1d(b, "c_proj", e, e, o);
        dropout(b, "resid_dropout", s.resid_pdrop, o)
    });
    let x = add(b, a, input);
    let y = b.layer("ln_2", LayerNorm::new(e), &[x]);
    let y = b.module("mlp", "GPT2MLP", &[y], |b| {
        let h = conv1d(b, "c_fc", e, s.inner, y);
        let h = b.module("act", "NewGELUActivation", &[h], |b| gelu_new(b, h));
        let h = conv1d(b, "c_proj", s.inner, e, h);
        dropout(b, "dropout", s.resid_pdrop, h)
    });
    add(b, x, y)
}

/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))`, op by op (`pow` runs in
/// float32 under autocast, so the rest is promoted to float32).
pub(super) fn gelu_new(b: &mut GraphBuilder, x: TensorId) -> TensorId {
    let s = b.shape(x).to_vec();
    let half = mul_scalar(b, x);
    let f32 = DTypeRule::Fixed(DType::F32);
    let p = b.op(
        Aten::new("pow", s.clone())
            .autocast(Autocast::Fp32)
            .saves(vec![Saved::Input(0)])
            .backward_temporary(s.clone(), f32)
            .backward_temporary(s.clone(), f32),
        &[x],
    );
    let p = mul_scalar(b, p);
    let inner = add(b, x, p);
    let inner = mul_scalar(b, inner);
    let t = b.op(
        Aten::new("tanh", s.clone()).saves(vec![Saved::Output(0)]),
        &[inner],
    );
    let t = add_scalar(b, t);
    mul(b, half, t)
}
