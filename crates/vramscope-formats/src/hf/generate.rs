//! `model.generate(input_ids, do_sample=False, max_new_tokens=N)` of transformers 5.23 with its
//! default `DynamicCache`, recorded as one inference graph: `generate`'s own tensor ops (the
//! special-token tensors, the inferred attention mask and `position_ids`, the stopping-criteria
//! bookkeeping), the prefill (the model's forward over the prompt, `logits_to_keep=1`), then per
//! new token `_sample`'s loop body: the float32 copy of the last logits, `argmax`, the
//! `input_ids` / `position_ids` concatenations, and one decode forward on one token whose
//! attention concatenates each layer's cache (`torch.cat`, old cache freed after the new one is
//! made: one layer's keys or values exist twice for a moment). Python's lifetimes are kept:
//! `outputs` lives until `del outputs`, `next_token_logits` and the model inputs until rebound,
//! the prompt's `position_ids` and the cache until `generate` returns. The simulator's inference
//! mode then frees every tensor at its last use, as in the measured program
//! (`validation/generate_models.py`).
//!
//! A long generation is not recorded step by step: when the whole graph would exceed
//! [`STEP_BUDGET`] nodes, the first [`HEAD_STEPS`] decode steps are recorded op by op, then only
//! the cache growth of the steps in between (every layer's keys and values, `input_ids`,
//! `position_ids` concatenated one position further per step, or several positions per growth
//! when that would exceed [`SKELETON_BUDGET`] nodes, or at once when even one growth would),
//! then the last [`TAIL_STEPS`] steps op by op. Every tensor alive in those last steps has its
//! true size, so the peak allocated (reached in the last decode step or in the prefill, as the
//! cache only grows) and the cache at the end are those of the full run, up to the caching
//! allocator's unsplit large blocks (a request served by a cached block less than 1 MiB larger
//! counts whole, and which blocks are cached depends on the history). The recorded growth gives
//! the allocator the history of the large blocks position by position, as in the real run: the
//! cache tensors, and each skipped step's logits and their float32 copy, which outlives the
//! step (without them GPT-2 XL's reserved memory, batch 8, 512 + 128 tokens, was 2.9% low; with
//! them it is exact). What it leaves out are the skipped steps' other transient tensors and,
//! with a stride or a jump, part of the history, so the reserved memory is then approximate
//! (lower: the fragmentation of a cache that grows by small steps is what it misses).
//!
//! Without a cache (`use_cache: false`) nothing outlives a step but the ids, and every step is a
//! forward over the whole sequence so far: each one's blocks are a little larger than the last
//! one's, which is what fragments the caching allocator (a 700-token GPT-2 generation reserves
//! 4.9 GB for a 1.0 GB peak). A long one records whole steps in between its first and last ones,
//! one in every `stride`, within [`NO_CACHE_BUDGET`] nodes, the ids jumping to each recorded
//! step's length.

use vramscope_core::ir::Task;
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::layers::{int_op, view, Call, KeptOutputs, KvCache};
use super::seq_cls::DecoderHead;
use super::{build_error, HfConfig, HfError};

/// Decode steps recorded one by one before a long generation's jump.
pub const HEAD_STEPS: u64 = 2;
/// Decode steps recorded one by one after the jump (the last ones).
pub const TAIL_STEPS: u64 = 2;
/// Graph nodes up to which every decode step is recorded (a few tens of milliseconds to
/// simulate).
pub const STEP_BUDGET: usize = 50_000;
/// Graph nodes up to which the decode steps not recorded one by one still grow the cache (two
/// nodes per layer and growth): one position at a time, or several where the budget is short.
pub const SKELETON_BUDGET: usize = 60_000;
/// Graph nodes up to which a long generation without a cache records whole decode steps in
/// between its first and last ones (one in every `stride`). On GPT-2 (batch 8, 256 + 700
/// tokens, 4.86 GB reserved when every step is simulated) a jump over them left the reserved
/// memory 74% low; one step in 3 (this budget, 0.12 s) is 0.8% high; on Llama-3-8B (batch 4,
/// 512 + 256) one in 5 is exact.
pub const NO_CACHE_BUDGET: usize = 100_000;

/// The node budgets past which a long generation's decode steps are not all recorded op by op
/// (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Every step op by op up to this many nodes ([`STEP_BUDGET`]).
    pub steps: usize,
    /// With a cache: its growth through the skipped steps ([`SKELETON_BUDGET`]).
    pub skeleton: usize,
    /// Without a cache: whole steps with a stride ([`NO_CACHE_BUDGET`]).
    pub no_cache: usize,
}

impl Budgets {
    /// The budgets `vramscope estimate` uses.
    pub const DEFAULT: Budgets = Budgets {
        steps: STEP_BUDGET,
        skeleton: SKELETON_BUDGET,
        no_cache: NO_CACHE_BUDGET,
    };
}

/// `max_new_tokens`: greedy decoding of this many tokens after the prompt (`--seq-len` is the
/// prompt length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation {
    /// New tokens (`max_new_tokens`; no sequence stops early at an EOS token).
    pub new_tokens: u64,
}

/// What a generation graph covers, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationInfo {
    /// Prompt tokens (the prefill's length).
    pub prompt_len: u64,
    /// New tokens.
    pub new_tokens: u64,
    /// Decode forwards of the generation (`new_tokens - 1`: the prefill makes the first token).
    pub decode_steps: u64,
    /// Decode forwards recorded one by one (all of them unless the generation is long).
    pub simulated_decode_steps: u64,
    /// Decode steps between those whose cache growth alone is recorded; 0 when the cache jumps
    /// over the skipped steps at once.
    pub skeleton_decode_steps: u64,
    /// Positions the cache grows by per recorded growth through the skipped steps (1: position
    /// by position, as the real run); 0 without skipped steps. Without a cache: one step in
    /// this many is recorded between the first and the last ones (0: the ids jump).
    pub skeleton_stride: u64,
    /// Key and value tensors, one pair per decoder layer.
    pub kv_layers: u64,
    /// Elements of one layer's keys (or values) per cached position: `batch × KV heads ×
    /// head_dim`.
    pub kv_elements_per_position: u64,
    /// Dtypes of the cached keys and values.
    pub kv_dtypes: (DType, DType),
    /// An encoder-decoder's cross-attention cache (its keys and values over the prompt, made
    /// by the first decoder forward and read by every later one); `None` for a causal LM.
    pub cross_attention: Option<CrossAttentionCache>,
}

/// The cross-attention part of an encoder-decoder's `EncoderDecoderCache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossAttentionCache {
    /// Bytes of every decoder layer's cross-attention keys and values.
    pub bytes: u64,
}

impl GenerationInfo {
    /// `use_cache` false: generate() keeps no cache, every step reruns the whole sequence.
    pub fn keeps_no_cache(&self) -> bool {
        self.kv_layers == 0
    }

    /// Self-attention positions cached at the end: a causal LM's `prompt + new_tokens - 1` (the
    /// last token is never fed back), an encoder-decoder's `new_tokens` (the decoder starts from
    /// its start token).
    pub fn final_positions(&self) -> u64 {
        let fed = if self.cross_attention.is_some() {
            1
        } else {
            self.prompt_len
        };
        fed + self.decode_steps
    }

    /// Bytes of the whole self-attention cache per cached position.
    pub fn kv_bytes_per_position(&self) -> u64 {
        self.kv_layers
            * self.kv_elements_per_position
            * (self.kv_dtypes.0.size() + self.kv_dtypes.1.size())
    }

    /// Bytes of the cache at the end of the generation (the cross-attention cache included).
    pub fn final_kv_bytes(&self) -> u64 {
        self.kv_bytes_per_position() * self.final_positions()
            + self.cross_attention.map_or(0, |c| c.bytes)
    }
}

/// A causal LM that can record one call of its forward (the families implement it).
pub trait CausalLm {
    /// Records one call on `ids` and returns the logits.
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId;
    /// Decoder layers (each has a cache layer).
    fn layers(&self) -> usize;
    /// Vocabulary size.
    fn vocab(&self) -> u64;
    /// Elements of one layer's cached keys per position and batch row (`KV heads × head_dim`).
    fn kv_width(&self) -> u64;
    /// Dtypes of the cached keys and values for a model in `param` dtype run under autocast to
    /// `autocast` (if any); by default the projections' output dtype (GPT-2, OPT: nothing between
    /// the projection and the cache changes it).
    fn kv_dtypes(&self, param: DType, autocast: Option<DType>) -> (DType, DType) {
        let d = autocast.unwrap_or(param);
        (d, d)
    }
    /// Per decoder layer, the window of its sliding-window cache layer (`None`: a full layer);
    /// by default every layer a full one (GPT-2, OPT).
    fn cache_windows(&self) -> Vec<Option<u64>> {
        vec![None; self.layers()]
    }
}

/// The special tokens of the generation config (`GenerationConfig.from_model_config`): each
/// present one becomes a device tensor in `_prepare_special_tokens`.
#[derive(Debug, Clone, Copy)]
struct Tokens {
    bos: bool,
    /// Number of EOS ids (a list in Llama 3 configs); 0 when unset.
    eos: u64,
    pad: bool,
    /// `decoder_start_token_id` (an encoder-decoder's first decoder input).
    decoder_start: bool,
}

fn tokens(cfg: &HfConfig) -> Result<Tokens, HfError> {
    Ok(Tokens {
        bos: cfg.token_ids("bos_token_id")? > 0,
        eos: cfg.token_ids("eos_token_id")?,
        pad: cfg.token_ids("pad_token_id")? > 0,
        decoder_start: cfg.token_ids("decoder_start_token_id")? > 0,
    })
}

/// The device tensors `_prepare_special_tokens` makes, each present token's in the order it
/// makes them (bos, eos, pad, then an encoder-decoder's decoder start), and its sanity checks
/// on the eos tensor. Returns the tensors (`eos` among them).
struct SpecialTokens {
    tensors: Vec<TensorId>,
    eos: Option<TensorId>,
}

impl SpecialTokens {
    /// What goes when `generate` returns, after `_sample`'s locals (truth traces of causal LMs
    /// and T5): `generation_config`'s token tensors but eos, then `model_kwargs` (the prompt's
    /// `position_ids` or the encoder outputs, then the cache), then generate's own locals
    /// (`has_right_padding`, an encoder-decoder's start ids), then eos, which the stopping
    /// criteria hold.
    fn generate_ends(
        &self,
        model_kwargs: &[TensorId],
        cache: Vec<TensorId>,
        local: Option<TensorId>,
    ) -> Vec<TensorId> {
        let mut out: Vec<TensorId> = self
            .tensors
            .iter()
            .copied()
            .filter(|&t| Some(t) != self.eos)
            .collect();
        out.extend(model_kwargs);
        out.extend(cache);
        out.extend(local);
        out.extend(self.eos);
        out
    }
}

fn special_tokens(b: &mut GraphBuilder, t: Tokens, encoder_decoder: bool) -> SpecialTokens {
    let (i64, bool_) = (DType::I64, DType::Bool);
    let mut tokens = SpecialTokens {
        tensors: Vec::new(),
        eos: None,
    };
    let decoder_start = encoder_decoder && t.decoder_start;
    for (present, n, is_eos) in [
        (t.bos, 0, false),
        (t.eos > 0, t.eos, true),
        (t.pad, 0, false),
        (decoder_start, 0, false),
    ] {
        if present {
            let shape = if n > 1 { vec![n] } else { vec![] };
            let tensor = int_op(b, "lift_fresh", shape, i64, &[]);
            tokens.tensors.push(tensor);
            if is_eos {
                tokens.eos = Some(tensor);
            }
        }
    }
    // an unset pad token becomes eos[0] (a view); the sanity checks run on the eos tensor
    if t.eos > 0 {
        for check in ["isin", "lt"] {
            let m = int_op(b, check, vec![t.eos.max(1)], bool_, &[]);
            int_op(b, "any", vec![], bool_, &[m]);
        }
    }
    tokens
}

/// [`CausalLm::kv_dtypes`] of the rotary families (Llama, Gemma): under autocast the rotary
/// products promote the keys to the model's dtype (cos/sin keep it), and the values are cached in
/// the keys' dtype (the empty cache tensors take it).
pub(super) fn rotary_kv_dtypes(param: DType, autocast: Option<DType>) -> (DType, DType) {
    let d = autocast.map_or(param, |low| DType::promote(low, param));
    (d, d)
}

/// Builds the graph of `model.generate(input_ids [batch, prompt], max_new_tokens)`.
#[allow(clippy::too_many_arguments)]
pub fn build(
    cfg: &HfConfig,
    model: &dyn CausalLm,
    name: &str,
    class: &str,
    batch: u64,
    prompt: u64,
    gen: Generation,
    precision: vramscope_core::Precision,
    padded: bool,
) -> Result<(Graph, GenerationInfo), HfError> {
    build_within(
        cfg,
        model,
        (name, class),
        (batch, prompt, padded),
        gen,
        precision,
        Budgets::DEFAULT,
    )
}

/// [`build`] with the node budgets past which decode steps are skipped (recording only their
/// cache growth), and past which the skipped steps are one jump.
fn build_within(
    cfg: &HfConfig,
    model: &dyn CausalLm,
    (name, class): (&str, &str),
    (batch, prompt, padded): (u64, u64, bool),
    gen: Generation,
    precision: vramscope_core::Precision,
    budgets: Budgets,
) -> Result<(Graph, GenerationInfo), HfError> {
    if gen.new_tokens == 0 {
        return Err(HfError::BadInput(
            "--new-tokens must be at least 1".to_string(),
        ));
    }
    let t = tokens(cfg)?;
    // GenerationConfig.from_model_config takes the config's `use_cache`: false makes generate()
    // keep no cache, every forward over the whole sequence so far
    let use_cache = cfg.bool_or("use_cache", true)?;
    let (i64, bool_) = (DType::I64, DType::Bool);
    let mut b = GraphBuilder::new(name, class);
    let ids = b.input(vec![batch, prompt], i64);
    // a left-padded batch: `generate(input_ids, attention_mask=...)`, the mask a tokenizer made
    let padding = padded.then(|| b.input(vec![batch, prompt], i64));
    // _prepare_special_tokens: torch.tensor(bos / eos / pad) on the device
    let special = special_tokens(&mut b, t, false);
    // generate's `has_right_padding` local
    let mut right_padding = None;
    let pad = t.pad || t.eos > 0;
    let eos_shape = vec![t.eos.max(1)];
    // generate: the right-padding check of a batch, on the attention mask when one is passed
    // (`any(attention_mask[:, -1] == 0).item()`), else `sum(input_ids[:, -1] == pad) > 0`
    if pad && batch > 1 {
        match padding {
            Some(m) => {
                let eq = int_op(&mut b, "eq", vec![batch], bool_, &[m]);
                int_op(&mut b, "any", vec![], bool_, &[eq]);
            }
            None => {
                let eq = int_op(&mut b, "eq", vec![batch], bool_, &[ids]);
                let sum = int_op(&mut b, "sum", vec![], i64, &[eq]);
                right_padding = Some(int_op(&mut b, "gt", vec![], bool_, &[sum]));
            }
        }
    }
    // _prepare_attention_mask_for_generation (no mask passed): ones, or the mask inferred from
    // pad tokens
    let bp = vec![batch, prompt];
    let mask = if let Some(m) = padding {
        m
    } else if pad {
        let ones = int_op(&mut b, "ones", bp.clone(), i64, &[]);
        b.frame(|b| {
            let isin = int_op(b, "isin", bp.clone(), bool_, &[ids]);
            let pad_in = int_op(b, "any", vec![], bool_, &[isin]);
            let not_eos = if t.eos > 0 {
                let isin = int_op(b, "isin", eos_shape.clone(), bool_, &[]);
                let any = int_op(b, "any", vec![], bool_, &[isin]);
                Some(int_op(b, "bitwise_not", vec![], bool_, &[any]))
            } else {
                None
            };
            let mut can_in = vec![pad_in];
            can_in.extend(not_eos);
            let can = int_op(b, "mul", vec![], bool_, &can_in);
            let ne = int_op(b, "ne", bp.clone(), bool_, &[ids]);
            let from_pad = int_op(b, "_to_copy", bp.clone(), i64, &[ne]);
            let a = int_op(b, "mul", bp.clone(), i64, &[from_pad, can]);
            let not_can = int_op(b, "bitwise_not", vec![], bool_, &[can]);
            let c = int_op(b, "mul", bp.clone(), i64, &[ones, not_can]);
            // the function's locals live until it returns, freed in the order they were bound
            let mut locals = vec![ones, pad_in];
            locals.extend(not_eos);
            locals.extend([can, from_pad]);
            b.hold(&locals);
            int_op(b, "add", bp.clone(), i64, &[a, c])
        })
    } else {
        int_op(&mut b, "ones", bp.clone(), i64, &[])
    };
    // _prepare_position_ids_for_generation: mask.cumsum(-1) - 1, masked_fill(mask == 0, 0)
    let cs = int_op(&mut b, "cumsum", bp.clone(), i64, &[mask]);
    let sub = int_op(&mut b, "sub", bp.clone(), i64, &[cs]);
    let eq = int_op(&mut b, "eq", bp.clone(), bool_, &[mask]);
    let prompt_pos = int_op(&mut b, "masked_fill", bp.clone(), i64, &[sub, eq]);
    // the mask expression goes with the call, `position_ids` when it is rebound
    b.keep_until_now(&[sub]);
    // `(attention_mask == 1).all()`: without padding the mask is dropped; a padded batch's is
    // passed to every forward, one position longer each step
    let eq = int_op(&mut b, "eq", bp.clone(), bool_, &[mask]);
    int_op(&mut b, "all", vec![], bool_, &[eq]);
    if padding.is_none() {
        b.keep_until_now(&[mask]);
    }
    // _get_logits_processor: `(input_ids < 0).any()`
    let lt = int_op(&mut b, "lt", bp.clone(), bool_, &[ids]);
    int_op(&mut b, "any", vec![], bool_, &[lt]);
    let vocab = model.vocab();
    // _sample
    let mut state = Loop::new(
        &mut b,
        (batch, vocab, t.eos, precision.compute_dtype()),
        ids,
        prompt,
    );
    state.position_ids = Some(prompt_pos);
    state.attention_mask = padding;
    // a sliding layer past its window: the masks cover and the cache keeps only its last `w - 1`
    // positions and the new ones (layers.rs)
    let mut cache = KvCache::with_windows(model.cache_windows());
    let decode_steps = gen.new_tokens - 1;

    // the prefill: prepare_inputs_for_generation clones input_ids; its model inputs die with
    // `_prefill`'s frame, right after the forward
    let clone = int_op(&mut b, "clone", bp.clone(), i64, &[ids]);
    b.begin_layer_table();
    let mut call = Call {
        seq: prompt,
        past: 0,
        position_ids: Some(prompt_pos),
        cache: use_cache.then_some(&mut cache),
        last_logits_only: true,
        first: true,
        eager_mask: None,
        attn_weights: None,
        sdpa_masks: Vec::new(),
        head: DecoderHead::Lm,
        padding_mask: padding,
        padded_sdpa: None,
        router_logits: None,
        kept_outputs: Some(KeptOutputs::default()),
    };
    let mut logits = model.forward(&mut b, clone, &mut call);
    let mut outputs = call.kept_outputs.take().unwrap_or_default();
    b.keep_until_now(&[clone]);
    b.end_layer_table();

    state.after_forward(&mut b, logits, &outputs);

    let mut steps = Steps::new(&b, use_cache, decode_steps, budgets);
    let mut step = 1;
    while step <= decode_steps {
        state.catch_up(&mut b, step);
        // cached positions before this step: prompt + step - 1
        let past = prompt + step - 1;
        // with the cache, the last token and its position (sliced, copied); without it the
        // whole sequence so far, and the positions as they are
        let (seq, ids1, pos1) = if use_cache {
            let ids1 = int_op(&mut b, "clone", vec![batch, 1], i64, &[state.input_ids]);
            let positions: Vec<TensorId> = state.position_ids.into_iter().collect();
            let pos1 = int_op(&mut b, "clone", vec![batch, 1], i64, &positions);
            (1, ids1, Some(pos1))
        } else {
            let len = state.len;
            let ids = int_op(&mut b, "clone", vec![batch, len], i64, &[state.input_ids]);
            (len, ids, state.position_ids)
        };
        // the previous step's model inputs are rebound (a padded batch's mask among them)
        b.keep_until_now(&std::mem::take(&mut state.model_inputs));
        state.model_inputs = std::iter::once(ids1)
            .chain(pos1)
            .chain(state.attention_mask)
            .collect();
        let mut call = Call {
            seq,
            past: if use_cache { past } else { 0 },
            position_ids: pos1,
            cache: use_cache.then_some(&mut cache),
            last_logits_only: true,
            first: false,
            eager_mask: None,
            attn_weights: None,
            sdpa_masks: Vec::new(),
            head: DecoderHead::Lm,
            padding_mask: state.attention_mask,
            padded_sdpa: None,
            router_logits: None,
            kept_outputs: Some(KeptOutputs::default()),
        };
        logits = model.forward(&mut b, ids1, &mut call);
        outputs = call.kept_outputs.take().unwrap_or_default();
        state.after_forward(&mut b, logits, &outputs);
        // every layer's keys and values and the ids: one cache growth
        let per_growth = 2 * model.layers() + 4;
        let grow = |b: &mut GraphBuilder, s: u64| {
            state.jump(b, batch, prompt + s + 1, |b| cache.grow_to(b, prompt + s));
        };
        match steps.after(&mut b, step, per_growth, grow) {
            Some(next) => step = next,
            None => break,
        }
    }
    // `generate` returns `input_ids`: everything else goes with `_sample`'s and its frames
    let mut rest: Vec<TensorId> = state.position_ids.into_iter().collect();
    rest.push(state.unfinished);
    rest.extend(state.attention_mask);
    rest.extend(state.model_inputs);
    rest.extend(state.next_token_logits);
    rest.extend(state.next_tokens);
    rest.extend(special.generate_ends(&[prompt_pos], cache.tensors_in_drop_order(), right_padding));
    b.keep_until_now(&rest);
    let graph = b
        .finish(&[state.input_ids], Task::CausalLm { vocab })
        .map_err(build_error(cfg))?;
    let autocast = precision.autocast_dtype();
    let info = GenerationInfo {
        prompt_len: prompt,
        new_tokens: gen.new_tokens,
        decode_steps,
        simulated_decode_steps: steps.simulated,
        skeleton_decode_steps: steps.skeleton_steps,
        skeleton_stride: steps.skeleton_stride,
        // no cache without `use_cache`
        kv_layers: if use_cache { model.layers() as u64 } else { 0 },
        kv_elements_per_position: batch * model.kv_width(),
        kv_dtypes: model.kv_dtypes(precision.param_dtype(), autocast),
        cross_attention: None,
    };
    Ok((graph, info))
}

/// An encoder-decoder LM whose `generate` [`build_seq2seq`] records (T5): its encoder runs once
/// on the prompt, its decoder on one token per forward with an `EncoderDecoderCache` (the
/// self-attention cache grows per token; the cross-attention keys and values over the prompt are
/// made by the first forward and read by the others).
pub trait Seq2SeqLm {
    /// Declares every parameter (in `__init__` order: allocated before the inputs).
    fn declare(&self, b: &mut GraphBuilder);
    /// Records `encoder(input_ids, attention_mask)`; returns its last hidden state.
    fn encode(&self, b: &mut GraphBuilder, ids: TensorId, padding: Option<TensorId>) -> TensorId;
    /// Records one forward on the decoder's `[B, 1]` ids with `past` positions cached; returns
    /// the logits.
    fn decode(
        &self,
        b: &mut GraphBuilder,
        ids: TensorId,
        encoded: (TensorId, Option<TensorId>),
        past: u64,
    ) -> TensorId;
    /// Grows every self-attention cache layer to `len` positions at once (skipped steps).
    fn grow_cache_to(&self, b: &mut GraphBuilder, len: u64);
    /// The cache's tensors in the order dropping it frees them: the self-attention cache's,
    /// then the cross-attention cache's.
    fn cache_tensors_in_drop_order(&self) -> Vec<TensorId>;
    /// Decoder layers (each has a self- and a cross-attention cache layer).
    fn layers(&self) -> usize;
    /// Vocabulary size.
    fn vocab(&self) -> u64;
    /// Elements of one layer's cached keys per position and batch row.
    fn kv_width(&self) -> u64;
    /// Dtypes of the cached keys and values (the projections' output dtype).
    fn kv_dtypes(&self, param: DType, autocast: Option<DType>) -> (DType, DType) {
        let d = autocast.unwrap_or(param);
        (d, d)
    }
}

/// Builds the graph of an encoder-decoder's `model.generate(input_ids [batch, prompt],
/// max_new_tokens)`: `_prepare_special_tokens` (the decoder start token's tensor too), the
/// encoder on the prompt (`_prepare_encoder_decoder_kwargs_for_generation`; no attention mask is
/// inferred and there are no `position_ids`), `decoder_input_ids = ones((B, 1)) * start`, then
/// `_sample` as for a causal LM with the decoder's one-token forwards. A padded batch passes its
/// `attention_mask` to the encoder and to every decoder forward's cross-attention.
#[allow(clippy::too_many_arguments)]
pub fn build_seq2seq(
    cfg: &HfConfig,
    model: &dyn Seq2SeqLm,
    (name, class): (&str, &str),
    (batch, prompt, padded): (u64, u64, bool),
    gen: Generation,
    precision: vramscope_core::Precision,
    budgets: Budgets,
) -> Result<(Graph, GenerationInfo), HfError> {
    if gen.new_tokens == 0 {
        return Err(HfError::BadInput(
            "--new-tokens must be at least 1".to_string(),
        ));
    }
    let t = tokens(cfg)?;
    if !t.decoder_start && !t.bos {
        return Err(HfError::Field {
            path: cfg.path.clone(),
            field: "decoder_start_token_id".to_string(),
            expected: "an integer: generate() starts the decoder from it (or from bos_token_id), and raises without both (T5 checkpoints set 0)".to_string(),
        });
    }
    // as for a causal LM: `use_cache` false keeps no cache, and every decoder forward runs over
    // the whole decoder sequence so far (the encoder's outputs are reused)
    let use_cache = cfg.bool_or("use_cache", true)?;
    let (i64, bool_) = (DType::I64, DType::Bool);
    let mut b = GraphBuilder::new(name, class);
    model.declare(&mut b);
    let ids = b.input(vec![batch, prompt], i64);
    let padding = padded.then(|| b.input(vec![batch, prompt], i64));
    let special = special_tokens(&mut b, t, true);
    b.begin_layer_table();
    // _prepare_encoder_decoder_kwargs_for_generation: `encoder_outputs` stay in model_kwargs
    // until generate returns
    let enc = model.encode(&mut b, ids, padding);
    // _prepare_decoder_input_ids_for_generation: a local of generate until it returns
    let ones = int_op(&mut b, "ones", vec![batch, 1], i64, &[]);
    let start_ids = int_op(&mut b, "mul", vec![batch, 1], i64, &[ones]);
    // _get_logits_processor: `(encoder_input_ids < 0).any()`
    let lt = int_op(&mut b, "lt", vec![batch, prompt], bool_, &[ids]);
    int_op(&mut b, "any", vec![], bool_, &[lt]);
    let vocab = model.vocab();
    let mut state = Loop::new(
        &mut b,
        (batch, vocab, t.eos, precision.compute_dtype()),
        start_ids,
        1,
    );
    let decode_steps = gen.new_tokens - 1;
    // the first forward, on the start token: its model inputs die with `_prefill`'s frame
    let clone = int_op(&mut b, "clone", vec![batch, 1], i64, &[start_ids]);
    let logits = model.decode(&mut b, clone, (enc, padding), 0);
    b.keep_until_now(&[clone]);
    b.end_layer_table();
    let no_outputs = KeptOutputs::default();
    state.after_forward(&mut b, logits, &no_outputs);
    let mut steps = Steps::new(&b, use_cache, decode_steps, budgets);
    let mut step = 1;
    while step <= decode_steps {
        state.catch_up(&mut b, step);
        // with the cache, the last token (the decoder has cached the start token and `step - 1`
        // more); without it, the whole decoder sequence so far
        let (len, past) = if use_cache { (1, step) } else { (state.len, 0) };
        let ids1 = int_op(&mut b, "clone", vec![batch, len], i64, &[state.input_ids]);
        b.keep_until_now(&std::mem::take(&mut state.model_inputs));
        state.model_inputs = vec![ids1];
        let logits = model.decode(&mut b, ids1, (enc, padding), past);
        state.after_forward(&mut b, logits, &no_outputs);
        // before decode step `s + 1` the decoder has cached its start token and `s` tokens, and
        // `input_ids` holds one more: every self-attention layer's keys and values and the ids
        let per_growth = 2 * model.layers() + 3;
        let grow = |b: &mut GraphBuilder, s: u64| {
            state.jump(b, batch, s + 2, |b| model.grow_cache_to(b, s + 1));
        };
        match steps.after(&mut b, step, per_growth, grow) {
            Some(next) => step = next,
            None => break,
        }
    }
    // what generate and `_sample` hold until they return (truth traces of T5): `_sample`'s
    // locals, the special tokens but eos, the encoder outputs, the cache, generate's
    // `input_ids` (the start tokens), the eos tensor last
    let mut rest = vec![state.unfinished];
    rest.extend(state.model_inputs);
    rest.extend(state.next_token_logits);
    rest.extend(state.next_tokens);
    rest.extend(special.generate_ends(
        &[enc],
        model.cache_tensors_in_drop_order(),
        Some(start_ids),
    ));
    b.keep_until_now(&rest);
    let graph = b
        .finish(&[state.input_ids], Task::CausalLm { vocab })
        .map_err(build_error(cfg))?;
    let kv_dtypes = model.kv_dtypes(precision.param_dtype(), precision.autocast_dtype());
    let kv_elements_per_position = batch * model.kv_width();
    let cross_bytes = model.layers() as u64
        * kv_elements_per_position
        * prompt
        * (kv_dtypes.0.size() + kv_dtypes.1.size());
    let info = GenerationInfo {
        prompt_len: prompt,
        new_tokens: gen.new_tokens,
        decode_steps,
        simulated_decode_steps: steps.simulated,
        skeleton_decode_steps: steps.skeleton_steps,
        skeleton_stride: steps.skeleton_stride,
        kv_layers: if use_cache { model.layers() as u64 } else { 0 },
        kv_elements_per_position,
        kv_dtypes,
        cross_attention: use_cache.then_some(CrossAttentionCache { bytes: cross_bytes }),
    };
    Ok((graph, info))
}

/// `_sample`'s variables across loop iterations.
struct Loop {
    batch: u64,
    vocab: u64,
    /// Number of EOS ids (0: no eos token, no EOS stopping criterion).
    eos_ids: u64,
    /// `unfinished_sequences`.
    unfinished: TensorId,
    input_ids: TensorId,
    /// A causal LM's `position_ids` (an encoder-decoder's decoder has none).
    position_ids: Option<TensorId>,
    /// A padded batch's `attention_mask`, grown by one position per step.
    attention_mask: Option<TensorId>,
    /// Length of `input_ids` before the first forward (a causal LM's prompt, an
    /// encoder-decoder's start token): before decode step `s` it is `start + s`.
    start: u64,
    /// Length of `input_ids` (and `position_ids`).
    len: u64,
    next_token_logits: Option<TensorId>,
    next_tokens: Option<TensorId>,
    model_inputs: Vec<TensorId>,
    /// The shape of the last forward's logits, which a skipped step's have too.
    logits_shape: Option<Vec<u64>>,
    /// The dtype the head computes the logits in (`Precision::compute_dtype`: the graph's
    /// dtypes are float32, the simulator applies the precision).
    logits_dtype: DType,
}

impl Loop {
    /// `_sample`'s start: `unfinished_sequences = torch.ones(batch)`; `input_ids` of length
    /// `len` (a causal LM's prompt, an encoder-decoder's start tokens).
    fn new(
        b: &mut GraphBuilder,
        (batch, vocab, eos_ids, logits_dtype): (u64, u64, u64, DType),
        input_ids: TensorId,
        len: u64,
    ) -> Loop {
        let unfinished = int_op(b, "ones", vec![batch], DType::I64, &[]);
        Loop {
            batch,
            vocab,
            eos_ids,
            unfinished,
            input_ids,
            position_ids: None,
            attention_mask: None,
            start: len,
            len,
            next_token_logits: None,
            next_tokens: None,
            model_inputs: Vec::new(),
            logits_shape: None,
            logits_dtype,
        }
    }

    /// The loop body after a forward: `_update_model_kwargs_for_generation`, the float32 copy
    /// of the last logits, `argmax`, the padding of finished rows, `input_ids` grown by one,
    /// the stopping criteria, the stop check and `del outputs`.
    #[allow(clippy::too_many_arguments)]
    fn after_forward(&mut self, b: &mut GraphBuilder, logits: TensorId, outputs: &KeptOutputs) {
        let (i64, bool_) = (DType::I64, DType::Bool);
        let (batch, vocab, eos_ids) = (self.batch, self.vocab, self.eos_ids);
        let has_eos = eos_ids > 0;
        let len = self.len + 1;
        // position_ids = cat([position_ids, arange(1).view(1, -1) + position_ids[..., -1:] + 1])
        if let Some(positions) = self.position_ids {
            let ar = int_op(b, "arange", vec![1], i64, &[]);
            let a1 = int_op(b, "add", vec![batch, 1], i64, &[ar, positions]);
            let a2 = int_op(b, "add", vec![batch, 1], i64, &[a1]);
            self.position_ids = Some(int_op(b, "cat", vec![batch, len], i64, &[positions, a2]));
            // attention_mask = cat([attention_mask, new_ones(B, 1)]): the old mask stays with
            // the step's model inputs, the old positions with the function's local until it
            // returns
            if let Some(mask) = self.attention_mask {
                let ones = int_op(b, "new_ones", vec![batch, 1], i64, &[]);
                self.attention_mask = Some(int_op(b, "cat", vec![batch, len], i64, &[mask, ones]));
                b.keep_until_now(&[positions]);
            }
        }
        self.logits_shape = Some(b.shape(logits).to_vec());
        let last = view(b, "select", logits, vec![batch, vocab]);
        let ntl = self.copy_next_token_logits(b, last);
        let am = int_op(b, "argmax", vec![batch], i64, &[ntl]);
        if let Some(old) = self.next_tokens.take() {
            b.keep_until_now(&[old]);
        }
        // finished rows get the pad token: next * unfinished + pad * (1 - unfinished)
        let next = if has_eos {
            let m1 = int_op(b, "mul", vec![batch], i64, &[am, self.unfinished]);
            let r = int_op(b, "rsub", vec![batch], i64, &[self.unfinished]);
            let m2 = int_op(b, "mul", vec![batch], i64, &[r]);
            let next = int_op(b, "add", vec![batch], i64, &[m1, m2]);
            // the argmax goes when `next_tokens` is rebound
            b.keep_until_now(&[am]);
            next
        } else {
            am
        };
        self.next_tokens = Some(next);
        self.input_ids = int_op(b, "cat", vec![batch, len], i64, &[self.input_ids, next]);
        self.len = len;
        // unfinished & ~stopping_criteria(input_ids): full(False) | MaxLength's full(...) | EOS
        let b1 = vec![batch];
        let init = int_op(b, "full", b1.clone(), bool_, &[]);
        let max_len = int_op(b, "full", b1.clone(), bool_, &[]);
        let mut done = int_op(b, "bitwise_or", b1.clone(), bool_, &[init, max_len]);
        if eos_ids > 0 {
            let isin = int_op(b, "isin", vec![batch, 1], bool_, &[self.input_ids]);
            let any = int_op(b, "any", b1.clone(), bool_, &[isin]);
            done = int_op(b, "bitwise_or", b1.clone(), bool_, &[done, any]);
        }
        let not = int_op(b, "bitwise_not", b1.clone(), bool_, &[done]);
        // `unfinished & ~done`: the `~done` temporary goes before the old `unfinished`
        self.unfinished = int_op(b, "bitwise_and", b1, i64, &[not, self.unfinished]);
        // StopCheck: unfinished.max() == 0
        let mx = int_op(b, "max", vec![], i64, &[self.unfinished]);
        int_op(b, "eq", vec![], bool_, &[mx]);
        // del outputs: its fields in order (a MoE output's auxiliary loss, the logits, the
        // router logits)
        let mut fields = outputs.before_logits.clone();
        fields.push(logits);
        fields.extend(&outputs.after_logits);
        b.keep_until_now(&fields);
    }

    /// `next_token_logits = outputs.logits[:, -1].to(copy=True, dtype=float32)` from the last
    /// position's logits: the previous step's copy goes once the new one is made.
    fn copy_next_token_logits(&mut self, b: &mut GraphBuilder, last: TensorId) -> TensorId {
        let copy = int_op(
            b,
            "_to_copy",
            vec![self.batch, self.vocab],
            DType::F32,
            &[last],
        );
        if let Some(old) = self.next_token_logits.replace(copy) {
            b.keep_until_now(&[old]);
        }
        copy
    }

    /// A skipped step's growth: the cache (`grow_cache`: every layer's keys and values), then
    /// the ids to `len` positions. With them go the step's largest transients: its logits and
    /// their float32 copy, which replaces the previous step's (kept until the next step's copy)
    /// and so sits among the cache's blocks (on GPT-2 XL, batch 8, 512 + 128 tokens, the
    /// reserved memory was 2.9% low without them). In the loop body's order: the cache, the
    /// logits, `position_ids` (and a padded batch's mask), the copy, `input_ids`, then
    /// `del outputs`.
    fn jump(
        &mut self,
        b: &mut GraphBuilder,
        batch: u64,
        len: u64,
        grow_cache: impl FnOnce(&mut GraphBuilder),
    ) {
        grow_cache(b);
        let logits = self
            .logits_shape
            .clone()
            .map(|shape| int_op(b, "linear", shape, self.logits_dtype, &[]));
        self.grow_positions(b, batch, len);
        if let Some(logits) = logits {
            self.copy_next_token_logits(b, logits);
        }
        self.grow_ids(b, batch, len);
        b.keep_until_now(&Vec::from_iter(logits));
    }

    /// Before decode step `step`: where steps were skipped without a cache (nothing but the ids
    /// outlives a step), the ids jump to the step's length; otherwise nothing (the steps before
    /// grew them, or the cache growth through skipped steps did).
    fn catch_up(&mut self, b: &mut GraphBuilder, step: u64) {
        if self.len < self.start + step {
            self.grow(b, self.batch, self.start + step);
        }
    }

    /// Grows `position_ids` (a causal LM's), a padded batch's mask and `input_ids` to `len`
    /// positions at once.
    fn grow(&mut self, b: &mut GraphBuilder, batch: u64, len: u64) {
        self.grow_positions(b, batch, len);
        self.grow_ids(b, batch, len);
    }

    /// [`grow`](Self::grow)'s `position_ids` and padded batch's mask.
    fn grow_positions(&mut self, b: &mut GraphBuilder, batch: u64, len: u64) {
        if let Some(positions) = self.position_ids {
            self.position_ids = Some(int_op(b, "cat", vec![batch, len], DType::I64, &[positions]));
        }
        if let Some(mask) = self.attention_mask {
            self.attention_mask = Some(int_op(b, "cat", vec![batch, len], DType::I64, &[mask]));
        }
    }

    /// [`grow`](Self::grow)'s `input_ids`.
    fn grow_ids(&mut self, b: &mut GraphBuilder, batch: u64, len: u64) {
        self.input_ids = int_op(b, "cat", vec![batch, len], DType::I64, &[self.input_ids]);
        self.len = len;
    }
}

/// How a long generation skips decode steps (see the module docs): decided after the first
/// [`HEAD_STEPS`] steps from the nodes they took, when the whole graph would exceed the step
/// budget.
struct Skip {
    /// The decode step recorded op by op next (the last [`TAIL_STEPS`] are).
    resume: u64,
    /// The steps whose cache growth is recorded, each as the cache length before the step
    /// after it (position by position, `stride` apart, or one jump to `resume - 1`).
    growths: Vec<u64>,
    /// Steps between the head and the tail (0 for one jump).
    skeleton_steps: u64,
    /// Positions per growth (0 for one jump).
    stride: u64,
}

impl Skip {
    /// The plan after step [`HEAD_STEPS`] of `decode_steps`, the head's steps having taken the
    /// nodes since `nodes_before`; `per_growth`: nodes one growth of every cache tensor and the
    /// ids takes. `None`: every step fits the budget (or there are too few to skip).
    fn plan(
        b: &GraphBuilder,
        nodes_before: usize,
        decode_steps: u64,
        per_growth: usize,
        (budget, skeleton_budget): (usize, usize),
    ) -> Option<Skip> {
        let step = HEAD_STEPS;
        if decode_steps <= HEAD_STEPS + TAIL_STEPS {
            return None;
        }
        let per_step = (b.node_count() - nodes_before) / HEAD_STEPS as usize;
        let total = b.node_count() + per_step * (decode_steps - step) as usize;
        if total <= budget {
            return None;
        }
        let resume = decode_steps - TAIL_STEPS + 1;
        // the skipped steps' cache growth alone: every cache tensor and the ids grow position
        // by position (the allocator sees the real sequence of large blocks come and go), or
        // `stride` positions at a time where the budget is short
        let skipped = resume - step - 1;
        let room = skeleton_budget.saturating_sub(b.node_count() + TAIL_STEPS as usize * per_step);
        let growths = (room / per_growth) as u64;
        if growths == 0 {
            return Some(Skip {
                resume,
                growths: vec![resume - 1],
                skeleton_steps: 0,
                stride: 0,
            });
        }
        let stride = skipped.div_ceil(growths).max(1);
        let mut points = Vec::new();
        let mut s = step;
        while s + 1 < resume {
            s = (s + stride).min(resume - 1);
            points.push(s);
        }
        Some(Skip {
            resume,
            growths: points,
            skeleton_steps: skipped,
            stride,
        })
    }
}

/// Which decode steps a generation records op by op (module docs), decided after the first
/// [`HEAD_STEPS`] from the nodes they took: every one within the step budget; past it, with a
/// cache, the first and the last ones and the cache's growth through those in between ([`Skip`]);
/// without one, the first, the last, and one in every `stride` in between within
/// [`Budgets::no_cache`] nodes (a [`Skip`] whose growth is a whole step).
struct Steps {
    use_cache: bool,
    decode_steps: u64,
    budgets: Budgets,
    /// Nodes before the first decode step.
    nodes_before: usize,
    /// Without a cache, past the step budget: the steps still to record, in order.
    planned: Option<std::vec::IntoIter<u64>>,
    /// Decode steps recorded op by op.
    simulated: u64,
    /// [`GenerationInfo::skeleton_decode_steps`].
    skeleton_steps: u64,
    /// [`GenerationInfo::skeleton_stride`].
    skeleton_stride: u64,
}

impl Steps {
    /// Before the first decode step.
    fn new(b: &GraphBuilder, use_cache: bool, decode_steps: u64, budgets: Budgets) -> Steps {
        Steps {
            use_cache,
            decode_steps,
            budgets,
            nodes_before: b.node_count(),
            planned: None,
            simulated: 0,
            skeleton_steps: 0,
            skeleton_stride: 0,
        }
    }

    /// After recording decode step `step`: the next one to record (`None`: that was the last).
    /// After step [`HEAD_STEPS`] it plans the rest; with a cache past the step budget
    /// `grow(b, s)` records the cache's growth to where it stands before decode step `s + 1`
    /// (`per_growth` nodes each).
    fn after(
        &mut self,
        b: &mut GraphBuilder,
        step: u64,
        per_growth: usize,
        mut grow: impl FnMut(&mut GraphBuilder, u64),
    ) -> Option<u64> {
        self.simulated += 1;
        if step == HEAD_STEPS && self.use_cache {
            let budgets = (self.budgets.steps, self.budgets.skeleton);
            let skip = Skip::plan(b, self.nodes_before, self.decode_steps, per_growth, budgets);
            if let Some(skip) = skip {
                for &s in &skip.growths {
                    grow(b, s);
                }
                self.skeleton_steps = skip.skeleton_steps;
                self.skeleton_stride = skip.stride;
                return Some(skip.resume);
            }
        } else if step == HEAD_STEPS {
            self.plan_without_cache(b);
        }
        match &mut self.planned {
            Some(steps) => steps.next(),
            None => Some(step + 1),
        }
    }

    /// Without a cache, past the step budget: the steps recorded after the first ones, the
    /// growth points of a [`Skip`] whose growth is a whole step (each recorded at its length),
    /// then the last [`TAIL_STEPS`].
    fn plan_without_cache(&mut self, b: &GraphBuilder) {
        let per_step = (b.node_count() - self.nodes_before) / HEAD_STEPS as usize;
        let budgets = (self.budgets.steps, self.budgets.no_cache);
        let Some(skip) = Skip::plan(
            b,
            self.nodes_before,
            self.decode_steps,
            per_step.max(1),
            budgets,
        ) else {
            return;
        };
        // a skip without growths (not one step fits) still names the last skipped position
        let mut steps: Vec<u64> = if skip.skeleton_steps == 0 {
            Vec::new()
        } else {
            skip.growths
                .iter()
                .copied()
                .filter(|&s| s < skip.resume)
                .collect()
        };
        steps.extend(skip.resume..skip.resume + TAIL_STEPS);
        self.planned = Some(steps.into_iter());
        self.skeleton_stride = skip.stride;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::{llama, HfInput};
    use vramscope_core::sim::{simulate, Category, Mode, Simulation, StepConfig};
    use vramscope_core::Precision;

    /// Every decode step op by op.
    const FULL: Budgets = Budgets {
        steps: usize::MAX,
        skeleton: 0,
        no_cache: 0,
    };

    /// Past the step budget at once, with these skeleton budgets.
    fn skipping(skeleton: usize, no_cache: usize) -> Budgets {
        Budgets {
            steps: 1,
            skeleton,
            no_cache,
        }
    }

    fn llama_cfg(hidden: u64, kv_heads: u64, layers: u64) -> HfConfig {
        let text = format!(
            r#"{{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": {hidden},
            "num_attention_heads": 8, "num_key_value_heads": {kv_heads}, "num_hidden_layers": {layers},
            "intermediate_size": {}, "vocab_size": 1000, "max_position_embeddings": 100000,
            "bos_token_id": 1, "eos_token_id": 2}}"#,
            hidden * 3
        );
        HfConfig::parse("test.json", &text).expect("parses")
    }

    /// The `HfInput` of a bf16 generation of `new_tokens` after a `[batch, prompt]` prompt.
    fn bf16_generation(batch: u64, prompt: u64, new_tokens: u64) -> HfInput {
        HfInput {
            batch,
            seq: prompt,
            task: None,
            precision: Precision::Bf16,
            generate: Some(Generation { new_tokens }),
            attn: Default::default(),
            target_seq: None,
            gradient_checkpointing: false,
            padded: false,
            four_bit: false,
        }
    }

    fn simulate_generation(g: &Graph) -> Simulation {
        let step = StepConfig {
            mode: Mode::Generate,
            precision: Precision::Bf16,
            ..StepConfig::default()
        };
        simulate(g, &step).expect("simulates")
    }

    fn run(
        cfg: &HfConfig,
        batch: u64,
        prompt: u64,
        new_tokens: u64,
        budgets: Budgets,
    ) -> (Simulation, GenerationInfo) {
        let input = bf16_generation(batch, prompt, new_tokens);
        let m = llama::Model::new(cfg, "llama", &input, DType::BF16).expect("model");
        let (g, info) = build_within(
            cfg,
            &m,
            ("llama", "LlamaForCausalLM"),
            (batch, prompt, false),
            Generation { new_tokens },
            input.precision,
            budgets,
        )
        .expect("builds");
        (simulate_generation(&g), info)
    }

    #[test]
    fn every_step_is_recorded_within_the_budget() {
        let (sim, info) = run(&llama_cfg(256, 2, 2), 2, 32, 20, Budgets::DEFAULT);
        assert_eq!(info.decode_steps, 19);
        assert_eq!(info.simulated_decode_steps, 19);
        assert_eq!(info.final_positions(), 51);
        // 2 layers x (keys + values) x batch 2 x 2 KV heads x 32 dims x bf16
        assert_eq!(info.kv_bytes_per_position(), 2 * 2 * 2 * 2 * 32 * 2);
        let peak = sim.breakdown_at_peak.get(Category::KvCache);
        assert!(peak > 0 && peak <= info.final_kv_bytes() + 4096, "{peak}");
    }

    /// Skipping decode steps keeps the peak allocated and every phase's end state of the
    /// step-by-step run: exactly when every cache tensor is a small-pool block, and to within the
    /// caching allocator's unsplit large blocks (under 1 MiB each) when they are large. Growing
    /// the cache position by position through the skipped steps keeps the reserved memory close
    /// (the allocator sees the same large blocks come and go); one jump does not.
    #[test]
    fn skipping_decode_steps_keeps_the_peak() {
        for (hidden, batch, prompt, new_tokens, slack, reserved_slack) in [
            (256, 2, 40, 60, 0u64, 0.0),
            (1024, 4, 600, 80, 4 << 20, 0.01),
            (1024, 16, 8, 200, 4 << 20, 0.03),
        ] {
            let cfg = llama_cfg(hidden, 8, 2);
            let (full, fi) = run(&cfg, batch, prompt, new_tokens, FULL);
            let (skel, si) = run(
                &cfg,
                batch,
                prompt,
                new_tokens,
                skipping(usize::MAX, usize::MAX),
            );
            let (jump, ji) = run(&cfg, batch, prompt, new_tokens, skipping(1, 1));
            assert_eq!(fi.simulated_decode_steps, new_tokens - 1);
            for info in [&si, &ji] {
                assert_eq!(info.simulated_decode_steps, HEAD_STEPS + TAIL_STEPS);
            }
            assert_eq!(
                si.skeleton_decode_steps,
                new_tokens - 1 - HEAD_STEPS - TAIL_STEPS
            );
            assert_eq!(ji.skeleton_decode_steps, 0);
            eprintln!(
                "hidden {hidden} batch {batch}: peak allocated {} / {} / {}, reserved {} / {} / {} (step by step / cache growth / jump)",
                full.peak_allocated,
                skel.peak_allocated,
                jump.peak_allocated,
                full.peak_reserved,
                skel.peak_reserved,
                jump.peak_reserved
            );
            for s in [&skel, &jump] {
                assert!(
                    full.peak_allocated.abs_diff(s.peak_allocated) <= slack,
                    "hidden {hidden}: peak {} step by step, {} skipping",
                    full.peak_allocated,
                    s.peak_allocated
                );
                for (a, b) in full.phases.iter().zip(&s.phases) {
                    assert_eq!(a.name, b.name);
                    assert_eq!(a.allocated_after, b.allocated_after, "{}", a.name);
                }
            }
            let rel =
                skel.peak_reserved.abs_diff(full.peak_reserved) as f64 / full.peak_reserved as f64;
            assert!(
                rel <= reserved_slack,
                "hidden {hidden}: reserved off by {rel}"
            );
        }
    }

    /// Without a cache: the full run, one jump of the ids over the steps between the first and
    /// the last ones, and whole steps with a stride within `strided_budget` nodes keep the peak
    /// and every phase's end (nothing outlives a step but the ids); returns the full run.
    fn check_skipping_without_a_cache(
        run: impl Fn(Budgets) -> (Simulation, GenerationInfo),
        decode_steps: u64,
        strided_budget: usize,
    ) -> Simulation {
        let (full, fi) = run(FULL);
        let (jump, ji) = run(skipping(0, 0));
        let (strided, si) = run(skipping(0, strided_budget));
        assert_eq!(fi.simulated_decode_steps, decode_steps);
        assert_eq!(ji.simulated_decode_steps, HEAD_STEPS + TAIL_STEPS);
        assert_eq!(ji.skeleton_stride, 0);
        assert!(
            si.simulated_decode_steps > HEAD_STEPS + TAIL_STEPS
                && si.simulated_decode_steps < decode_steps
                && si.skeleton_stride > 1,
            "{si:?}"
        );
        assert_eq!(fi.final_kv_bytes(), 0);
        assert_eq!(full.breakdown_at_peak.get(Category::KvCache), 0);
        for skipped in [&jump, &strided] {
            assert_eq!(full.peak_allocated, skipped.peak_allocated);
            for (a, b) in full.phases.iter().zip(&skipped.phases) {
                assert_eq!(a.allocated_after, b.allocated_after, "{}", a.name);
            }
        }
        full
    }

    /// Without a cache (`use_cache: false`) every step reruns the whole sequence: nothing
    /// outlives a step but the ids and positions, and the peak is the last step's.
    #[test]
    fn generation_without_a_cache_reruns_the_sequence() {
        let text = r#"{"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 768,
            "vocab_size": 1000, "bos_token_id": 1, "eos_token_id": 2, "use_cache": false}"#;
        let cfg = HfConfig::parse("no_cache.json", text).expect("parses");
        let full = check_skipping_without_a_cache(|b| run(&cfg, 2, 40, 30, b), 29, 3_000);
        // the same model with its cache peaks lower: the last step attends one query
        let cached =
            HfConfig::parse("cached.json", &text.replace("false", "true")).expect("parses");
        let (with_cache, _) = run(&cached, 2, 40, 30, FULL);
        assert!(with_cache.peak_allocated < full.peak_allocated);
    }

    fn t5_cfg(d_model: u64) -> HfConfig {
        let text = format!(
            r#"{{"model_type": "t5", "d_model": {d_model}, "d_kv": 64, "d_ff": {}, "num_heads": {},
            "num_layers": 2, "vocab_size": 1000, "decoder_start_token_id": 0}}"#,
            d_model * 4,
            d_model / 64
        );
        HfConfig::parse("t5.json", &text).expect("parses")
    }

    /// An encoder-decoder without a cache (`use_cache: false`): no self- nor cross-attention
    /// cache, each decoder forward over the whole decoder sequence so far.
    #[test]
    fn encoder_decoder_without_a_cache_reruns_the_decoder() {
        let cfg = t5_cfg(128).with_value("use_cache", false.into());
        let (_, info) = run_t5(&cfg, 2, 48, 30, FULL);
        assert!(info.cross_attention.is_none());
        check_skipping_without_a_cache(|b| run_t5(&cfg, 2, 48, 30, b), 29, 3_000);
        // a short prompt and a long generation: with its cache each step runs one decoder
        // position, and the forward phase peaks lower than the last no-cache step's forward
        // over every position
        let forward_peak = |cfg: &HfConfig| {
            let (sim, info) = run_t5(cfg, 2, 8, 60, FULL);
            let phase = sim.phases.iter().find(|p| p.name == "it1.forward");
            (phase.expect("a forward phase").peak_allocated, info)
        };
        let ((cached_peak, ci), (uncached_peak, _)) =
            (forward_peak(&t5_cfg(128)), forward_peak(&cfg));
        assert!(ci.cross_attention.is_some());
        assert!(cached_peak < uncached_peak, "{cached_peak} {uncached_peak}");
    }

    fn run_t5(
        cfg: &HfConfig,
        batch: u64,
        prompt: u64,
        new_tokens: u64,
        budgets: Budgets,
    ) -> (Simulation, GenerationInfo) {
        let input = bf16_generation(batch, prompt, new_tokens);
        let m = crate::hf::t5::Generator::new(cfg, "t5", &input).expect("model");
        let (g, info) = build_seq2seq(
            cfg,
            &m,
            ("t5", "T5ForConditionalGeneration"),
            (batch, prompt, false),
            Generation { new_tokens },
            input.precision,
            budgets,
        )
        .expect("builds");
        (simulate_generation(&g), info)
    }

    /// An encoder-decoder's cache: the decoder caches its start token and every token fed back
    /// (`new_tokens` positions), plus each layer's cross-attention keys and values over the
    /// prompt, which are there from the first decoder forward on.
    #[test]
    fn encoder_decoder_cache_covers_the_decoder_positions_and_the_prompt() {
        let (sim, info) = run_t5(&t5_cfg(128), 2, 48, 10, Budgets::DEFAULT);
        assert_eq!(info.final_positions(), 10);
        assert_eq!(info.simulated_decode_steps, 9);
        // 2 layers x (keys + values) x batch 2 x 128 x bf16, per decoder position
        assert_eq!(info.kv_bytes_per_position(), 2 * 2 * 2 * 128 * 2);
        let cross = info.cross_attention.expect("cross-attention").bytes;
        assert_eq!(cross, 2 * 2 * 2 * 128 * 48 * 2);
        assert_eq!(
            info.final_kv_bytes(),
            info.kv_bytes_per_position() * 10 + cross
        );
        let at_peak = sim.breakdown_at_peak.get(Category::KvCache);
        assert!(at_peak <= info.final_kv_bytes() + 4096, "{at_peak}");
    }

    /// Skipping an encoder-decoder's decode steps keeps the step-by-step run's peak and every
    /// phase's end state, as for a causal LM (the self-attention cache grows through the skipped
    /// steps; the cross-attention cache does not change).
    #[test]
    fn encoder_decoder_skipping_keeps_the_peak() {
        for (d_model, batch, prompt, new_tokens, slack) in
            [(128, 2, 40, 30, 0u64), (1024, 16, 300, 60, 4 << 20)]
        {
            let cfg = t5_cfg(d_model);
            let (full, fi) = run_t5(&cfg, batch, prompt, new_tokens, FULL);
            let (skel, si) = run_t5(
                &cfg,
                batch,
                prompt,
                new_tokens,
                skipping(usize::MAX, usize::MAX),
            );
            let (jump, ji) = run_t5(&cfg, batch, prompt, new_tokens, skipping(1, 1));
            assert_eq!(fi.simulated_decode_steps, new_tokens - 1);
            assert_eq!(si.simulated_decode_steps, HEAD_STEPS + TAIL_STEPS);
            assert_eq!(si.skeleton_stride, 1);
            assert_eq!(ji.skeleton_decode_steps, 0);
            for s in [&skel, &jump] {
                assert!(
                    full.peak_allocated.abs_diff(s.peak_allocated) <= slack,
                    "d_model {d_model}: peak {} step by step, {} skipping",
                    full.peak_allocated,
                    s.peak_allocated
                );
                for (a, b) in full.phases.iter().zip(&s.phases) {
                    assert_eq!(a.allocated_after, b.allocated_after, "{}", a.name);
                }
            }
        }
    }

    #[test]
    fn sliding_window_generation_past_the_window() {
        let text = r#"{"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 8,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 512,
            "vocab_size": 1000, "sliding_window": 64, "eos_token_id": 2}"#;
        let cfg = HfConfig::parse("mistral.json", text).expect("parses");
        let input = HfInput {
            batch: 1,
            seq: 60,
            task: None,
            precision: Precision::Fp32,
            generate: Some(Generation { new_tokens: 10 }),
            attn: Default::default(),
            target_seq: None,
            gradient_checkpointing: false,
            padded: false,
            four_bit: false,
        };
        // the shape of the last node's output whose op passes `is`
        let last_output = |input: &HfInput, is: &dyn Fn(&dyn vramscope_core::ops::Op) -> bool| {
            let m = crate::hf::build(&cfg, input).expect("past the window");
            let node = m.graph.nodes.iter().rev().find(|n| is(&*n.op)).expect("op");
            m.graph.tensor(node.outputs[0]).shape.clone()
        };
        // SDPA: the cache keeps views of the last 63 positions, each holding a 64-position tensor
        let cat = last_output(&input, &|op| op.kind() == "cat" && op.is_kv_cache());
        assert_eq!(cat[2], 64);
        // eager attention: the last decode step's scores cover the window (the cache's last 63
        // positions and the new one), not all 69 positions
        let eager = HfInput {
            attn: crate::hf::AttnImplementation::Eager,
            ..input
        };
        let scores = last_output(&eager, &|op| op.kind() == "softmax");
        assert_eq!(scores[..], [1, 8, 1, 64]);
    }

    /// A special token config.json sets to `null` is None (no device tensor), not the config
    /// class's default (Phi-3's 32000 pad and eos).
    #[test]
    fn null_special_tokens_are_none() {
        let phi3 = |tokens: &str| {
            HfConfig::parse(
                "p.json",
                &format!(
                    r#"{{"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
                    "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 1000 {tokens}}}"#
                ),
            )
            .expect("parses")
        };
        let t = tokens(&phi3("")).expect("tokens");
        assert!(t.bos && t.eos == 1 && t.pad, "{t:?}");
        let nulls = r#", "bos_token_id": null, "eos_token_id": null, "pad_token_id": null"#;
        let t = tokens(&phi3(nulls)).expect("tokens");
        assert!(!t.bos && t.eos == 0 && !t.pad, "{t:?}");
    }
}
