//! The Mixture-of-Experts decoders (`MixtralForCausalLM`, `Qwen2MoeForCausalLM`,
//! `Qwen3MoeForCausalLM`: transformers/models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py): the
//! Llama-family decoder of `llama.rs` (Qwen3-MoE with `q_norm` / `k_norm`) whose MLP is, in every
//! sparse layer, a `SparseMoeBlock`: a top-k router (`gate`, with its own `weight`) and the experts
//! stored as two 3-D parameters (`experts.gate_up_proj` `[E, 2I, H]`, `experts.down_proj`
//! `[E, H, I]`); Qwen2-MoE adds a dense `shared_expert` scaled by `sigmoid(shared_expert_gate(x))`.
//! Qwen layers listed in `mlp_only_layers`, or off the `decoder_sparse_step` grid, keep a dense MLP.
//!
//! The experts run as transformers 5.23 runs them by default (`experts_implementation =
//! "grouped_mm"`, integrations/moe.py): the `T*k` (token, expert) pairs are sorted by expert,
//! gathered, pushed through two `torch._grouped_mm` calls with per-expert offsets, weighted,
//! put back in token order and summed over k. Every tensor on that path has a size fixed by `T*k`,
//! so its memory does not depend on how the router spreads the tokens: balanced or skewed routing
//! allocates the same bytes. `_grouped_mm` is not an autocast op and the experts' input is the
//! float32 residual stream, so under AMP the experts run in float32.
//!
//! `generate` ([`Model`]) runs its decode steps with `experts_implementation = "batched_mm"`
//! instead (`_optimize_model_for_decode`): each (token, expert) pair gathers its expert's weight
//! matrices and multiplies its token by them with `bmm` ([`batched_experts`]), so a decode step
//! holds `T*k` copies of one expert's weights; the prefill keeps `grouped_mm`.
//!
//! With `output_router_logits: true` the output keeps every layer's router logits (`[T, E]`) and
//! the causal LM adds the load-balancing loss (`router_logits_output`); by default (`false` in all
//! three configs) the loss is the plain causal-LM loss.
//!
//! A sliding window (`use_sliding_window` for Qwen): Mixtral and Qwen3-MoE attend with the
//! sliding-window mask on every layer; Qwen2-MoE makes the causal and the sliding-window masks
//! every forward and its `layer_types` say which one each layer attends with (and which cache
//! layers slide).

use vramscope_core::ops::{
    ActivationKind, Alias, Aten, DTypeRule, DropoutInplace, GradIn, MatMul, Saved, Scratch,
    Softmax, ToDtype, View,
};
use vramscope_core::{DType, Graph, GraphBuilder, TensorId};

use super::activation::HfActivation;
use super::config::MAX_EXPERTS;
use super::generate::{rotary_kv_dtypes, CausalLm};
use super::layers::{
    activation_fn, add, cast, linear, linear_fn, mul, mul_scalar, softmax_float32, to_dtype, view,
    Call, KeptOutputs, MaskPattern, RouterLogits,
};
use super::llama::{act_module, causal_lm, decoder_layer, forward, mlp, sdpa_masks, spec, Spec};
use super::seq_cls::DecoderHead;
use super::{check_positions, AttnImplementation, HfConfig, HfError, HfInput};

/// Which MoE family a `model_type` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Mixtral,
    Qwen2Moe,
    Qwen3Moe,
}

impl Flavor {
    /// The family of `model_type`.
    fn of(model_type: &str) -> Option<Flavor> {
        match model_type {
            "mixtral" => Some(Flavor::Mixtral),
            "qwen2_moe" => Some(Flavor::Qwen2Moe),
            "qwen3_moe" => Some(Flavor::Qwen3Moe),
            _ => None,
        }
    }

    /// The class-name prefix (`MixtralSparseMoeBlock`, `Qwen2MoeExperts`, ...).
    fn prefix(self) -> &'static str {
        match self {
            Flavor::Mixtral => "Mixtral",
            Flavor::Qwen2Moe => "Qwen2Moe",
            Flavor::Qwen3Moe => "Qwen3Moe",
        }
    }
}

/// Whether `model_type` (or a lower-cased class name) is one of the MoE families built here.
pub fn is_moe(model_type: &str) -> bool {
    Flavor::of(model_type).is_some()
}

/// The sparse part of a config.
struct Moe {
    /// `num_local_experts` / `num_experts`
    experts: u64,
    /// `num_experts_per_tok`
    top_k: u64,
    /// each expert's intermediate size (`intermediate_size` for Mixtral, `moe_intermediate_size`)
    expert_intermediate: u64,
    /// Qwen2-MoE's `shared_expert_intermediate_size`
    shared_intermediate: Option<u64>,
    /// whether the top-k weights are renormalised to sum to 1 (Mixtral always; `norm_topk_prob`)
    normalize: bool,
    /// per layer: a sparse block (else the dense `intermediate_size` MLP)
    sparse: Vec<bool>,
    /// the sliding window `create_sliding_window_causal_mask` uses, when the model calls it
    /// (Qwen2-MoE always calls it, besides `create_causal_mask`)
    sliding_window: Option<u64>,
    /// Qwen2-MoE: per layer, whether it attends with the sliding-window mask (`layer_types`;
    /// by default, with `use_sliding_window`, the even-indexed layers below `max_window_layers`)
    sliding_layers: Vec<bool>,
    /// Mixtral and Qwen3-MoE: with a window, every layer attends with the sliding-window mask
    all_layers_slide: bool,
    /// Mixtral's `router_jitter_noise`: in training the block's input is multiplied in place by
    /// uniform noise in `[1 - j, 1 + j]`, which backward keeps
    jitter: f64,
}

fn field_error(cfg: &HfConfig, field: &str, expected: String) -> HfError {
    HfError::Field {
        path: cfg.path.clone(),
        field: field.into(),
        expected,
    }
}

/// A count that may be 0 but must be present (`num_experts`: 0 means every layer is dense).
fn count(cfg: &HfConfig, keys: &[&str]) -> Result<u64, HfError> {
    cfg.opt_u64(keys)?.ok_or_else(|| {
        field_error(
            cfg,
            keys[0],
            "a non-negative integer (the field is missing)".into(),
        )
    })
}

fn moe_spec(cfg: &HfConfig, flavor: Flavor, layers: u64) -> Result<Moe, HfError> {
    let experts_keys: &[&str] = match flavor {
        Flavor::Mixtral => &["num_local_experts", "num_experts"],
        Flavor::Qwen2Moe => &["num_experts"],
        Flavor::Qwen3Moe => &["num_experts", "num_local_experts"],
    };
    let experts = count(cfg, experts_keys)?;
    let experts = cfg.at_most(
        cfg.first_present(experts_keys),
        experts,
        MAX_EXPERTS,
        "experts",
    )?;
    let top_k = if experts > 0 {
        cfg.u64(&["num_experts_per_tok"])?
    } else {
        0
    };
    if top_k > experts {
        return Err(field_error(
            cfg,
            "num_experts_per_tok",
            format!("at most the number of experts ({experts})"),
        ));
    }
    let mut moe = Moe {
        experts,
        top_k,
        expert_intermediate: 0,
        shared_intermediate: None,
        normalize: true,
        sparse: vec![true; layers as usize],
        sliding_window: None,
        sliding_layers: vec![false; layers as usize],
        all_layers_slide: false,
        jitter: 0.0,
    };
    match flavor {
        Flavor::Mixtral => {
            moe.jitter = cfg.prob_or("router_jitter_noise", 0.0)?;
            if experts == 0 {
                return Err(field_error(
                    cfg,
                    experts_keys[0],
                    "a positive integer".into(),
                ));
            }
            moe.expert_intermediate = cfg.u64(&["intermediate_size"])?;
            moe.sliding_window = cfg.opt_u64(&["sliding_window"])?;
            moe.all_layers_slide = true;
        }
        Flavor::Qwen2Moe | Flavor::Qwen3Moe => {
            if experts > 0 {
                moe.expert_intermediate = cfg.u64(&["moe_intermediate_size"])?;
            }
            if flavor == Flavor::Qwen2Moe && experts > 0 {
                moe.shared_intermediate = Some(cfg.u64(&["shared_expert_intermediate_size"])?);
            }
            moe.normalize = cfg.bool_or("norm_topk_prob", false)?;
            let step = cfg.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1);
            if step == 0 {
                return Err(field_error(
                    cfg,
                    "decoder_sparse_step",
                    "a positive integer".into(),
                ));
            }
            let dense_only = cfg.opt_u64_list("mlp_only_layers")?.unwrap_or_default();
            moe.sparse = (0..layers)
                .map(|i| !dense_only.contains(&i) && experts > 0 && (i + 1) % step == 0)
                .collect();
            // the configs' __post_init__: without use_sliding_window, Qwen2-MoE's window is 0
            // and Qwen3-MoE's is None; with it, a null one stays None (not the default 4096)
            let null_window = cfg.is_null("sliding_window");
            let window = cfg.opt_u64(&["sliding_window"])?.unwrap_or(4096);
            let sliding = cfg.bool_or("use_sliding_window", false)?;
            moe.sliding_window = match (flavor, sliding) {
                (Flavor::Qwen2Moe, true) if null_window => {
                    // its decoder builds the sliding-window mask whatever its layers use
                    return Err(field_error(
                        cfg,
                        "sliding_window",
                        "a positive integer with use_sliding_window: Qwen2-MoE builds a \
                         sliding-window mask from it, which fails on null in transformers (\
                         \"Could not find a `sliding_window` argument in the config\"); set it, or \
                         use_sliding_window false"
                            .into(),
                    ));
                }
                // Qwen3-MoE: no window, the causal mask (`create_causal_mask` when it is None)
                (_, true) if null_window => None,
                (_, true) => Some(window),
                (Flavor::Qwen2Moe, false) => Some(0),
                _ => None,
            };
            if flavor == Flavor::Qwen2Moe {
                moe.sliding_layers = qwen2_moe_sliding_layers(cfg, layers, sliding)?;
                if (window == 0 || !sliding) && moe.sliding_layers.contains(&true) {
                    return Err(field_error(
                        cfg,
                        "layer_types",
                        "no \"sliding_attention\" layer without use_sliding_window and a positive sliding_window (their window would be 0)".into(),
                    ));
                }
            } else {
                moe.all_layers_slide = sliding;
                if sliding && window == 0 {
                    return Err(field_error(
                        cfg,
                        "sliding_window",
                        "a positive integer with use_sliding_window".into(),
                    ));
                }
            }
        }
    }
    Ok(moe)
}

/// Qwen2MoeConfig's `layer_types`: as given (one per layer), else, with `use_sliding_window`,
/// `sliding_attention` for the layers `i` with `i + 1` odd below `max_window_layers` (default 28).
fn qwen2_moe_sliding_layers(
    cfg: &HfConfig,
    layers: u64,
    sliding: bool,
) -> Result<Vec<bool>, HfError> {
    Ok(match cfg.str_list("layer_types")? {
        Some(list) if list.len() as u64 == layers => {
            list.iter().map(|t| t == "sliding_attention").collect()
        }
        Some(_) => {
            return Err(field_error(
                cfg,
                "layer_types",
                format!("one entry per layer (num_hidden_layers = {layers})"),
            ))
        }
        None => {
            let below = cfg.opt_u64(&["max_window_layers"])?.unwrap_or(28);
            (0..layers)
                .map(|i| sliding && (i + 1) % 2 == 1 && i < below)
                .collect()
        }
    })
}

/// What the build needs besides the config: shapes and precisions.
struct Ctx {
    flavor: Flavor,
    bsz: u64,
    seq: u64,
    hidden: u64,
    /// the parameters' (and the residual stream's) dtype
    dtype: DType,
    /// the dtype the router's linear runs in when it is not float32 (autocast, or half weights)
    low: Option<DType>,
    /// the autocast dtype, under AMP
    autocast: Option<DType>,
    /// how the experts run
    experts: ExpertsImpl,
    /// the experts' and MLPs' `act_fn`
    act: HfActivation,
}

/// transformers' `experts_implementation` for the experts of one forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpertsImpl {
    /// `grouped_mm`, the default: the (token, expert) pairs sorted by expert, two grouped GEMMs.
    GroupedMm,
    /// `batched_mm`: each (token, expert) pair gathers its expert's weights and runs `bmm`.
    BatchedMm,
}

/// Builds `{Mixtral,Qwen2Moe,Qwen3Moe}ForCausalLM`; returns the graph and the checkpointed layers.
pub fn build(
    cfg: &HfConfig,
    model_type: &str,
    input: &HfInput,
    dtype: DType,
    head: DecoderHead,
) -> Result<(Graph, Vec<String>), HfError> {
    let (flavor, mut s, m) = specs(cfg, model_type)?;
    s.four_bit = input.four_bit;
    if head == DecoderHead::Lm {
        check_aux_loss(cfg, &s, &m)?;
    }
    let (bsz, seq) = (input.batch, input.seq);
    let autocast = input.precision.autocast_dtype();
    let c = Ctx {
        flavor,
        bsz,
        seq,
        hidden: s.hidden,
        dtype,
        low: low_dtype(dtype, autocast),
        autocast,
        experts: ExpertsImpl::GroupedMm,
        act: s.act,
    };
    let p = flavor.prefix();
    let eager = (input.attn == AttnImplementation::Eager).then_some(dtype);
    let masks = |b: &mut GraphBuilder, cache_len, padding| {
        sdpa_masks(b, &s, (bsz, seq, eager), cache_len, padding)
    };
    causal_lm(
        cfg,
        &s,
        (p, head),
        model_type,
        input,
        &masks,
        (
            &mut |b, i, x, cos, sin, call| layer(b, (&s, &m, &c), autocast, i, x, (cos, sin), call),
            // sparse and dense layers of one mask pattern each record one program
            &|i| layer_kind(&s, &m, i),
        ),
    )
}

/// The causal LM computes `load_balancing_loss_func` from the router logits of every sparse
/// layer with `output_router_logits`; without one it fails (`gate_logits[0]` of an empty tuple:
/// Qwen's `mlp_only_layers` or `decoder_sparse_step` can leave every layer dense).
fn check_aux_loss(cfg: &HfConfig, s: &Spec, m: &Moe) -> Result<(), HfError> {
    if s.router_aux_top_k.is_some() && !m.sparse.contains(&true) {
        return Err(field_error(
            cfg,
            "output_router_logits",
            "false when no layer is sparse (transformers' load_balancing_loss_func fails on the empty tuple of router logits)".into(),
        ));
    }
    Ok(())
}

/// The program a layer records: sparse or dense, and the mask pattern it attends with.
fn layer_kind(s: &Spec, m: &Moe, i: u64) -> u64 {
    u64::from(m.sparse[i as usize]) | (s.mask_of_layer(i as usize) as u64) << 1
}

/// The dtype the router's linear runs in when it is not float32 (autocast, or half weights).
fn low_dtype(dtype: DType, autocast: Option<DType>) -> Option<DType> {
    autocast.or((dtype != DType::F32).then_some(dtype))
}

/// The flavor, the Llama-family spec with the family's biases and q/k norms, and the sparse part.
fn specs(cfg: &HfConfig, model_type: &str) -> Result<(Flavor, Spec, Moe), HfError> {
    let flavor = Flavor::of(model_type).ok_or_else(|| HfError::Unsupported {
        path: cfg.path.clone(),
        model_type: model_type.to_string(),
        architectures: cfg.architectures().unwrap_or_default(),
        supported: super::SUPPORTED.join(", "),
    })?;
    let mut s = spec(cfg, model_type)?;
    // the experts and MLPs of these families have no biases; Qwen2-MoE's q/k/v follow `qkv_bias`
    s.mlp_bias = false;
    match flavor {
        // MixtralAttention: no biases whatever the config says
        Flavor::Mixtral => {
            s.qkv_bias = false;
            s.o_bias = false;
        }
        Flavor::Qwen2Moe => {
            s.qkv_bias = cfg.bool_or("qkv_bias", true)?;
            s.o_bias = false;
        }
        Flavor::Qwen3Moe => s.qk_norm = true,
    }
    let m = moe_spec(cfg, flavor, s.layers)?;
    // the masks the model's mask code makes (llama.rs's `sdpa_masks`: their packed-sequence
    // checks without a cache, the masks SDPA cannot skip, every one additive with eager
    // attention or on a padded batch) and the one each layer attends with. Mixtral and Qwen3-MoE
    // with a window: only `create_sliding_window_causal_mask`, on every layer. Otherwise
    // `create_causal_mask`, and Qwen2-MoE's `create_sliding_window_causal_mask` too, whatever
    // its layers use (a window of 0 without `use_sliding_window`: its mask is never skipped,
    // and a cached forward sizes it over the whole cache, `[1, 1, S, past + S]`)
    match (m.sliding_window, flavor) {
        (Some(w), Flavor::Qwen2Moe) => s.set_masks(
            vec![MaskPattern::Causal, MaskPattern::SlidingWindow(w)],
            m.sliding_layers.iter().map(|&x| usize::from(x)).collect(),
        ),
        (Some(w), _) if m.all_layers_slide && w > 0 => s.set_masks(
            vec![MaskPattern::SlidingWindow(w)],
            vec![0; s.layers as usize],
        ),
        _ => s.set_masks(vec![MaskPattern::Causal], vec![0; s.layers as usize]),
    }
    if cfg.bool_or("output_router_logits", false)? {
        s.router_aux_top_k = Some(m.top_k);
    }
    Ok((flavor, s, m))
}

/// Decoder layer `i` (`model.layers.{i}`): the Llama-family layer whose feed-forward is the
/// sparse block, or the dense MLP in a Qwen layer off the sparse grid.
fn layer(
    b: &mut GraphBuilder,
    (s, m, c): (&Spec, &Moe, &Ctx),
    autocast: Option<DType>,
    i: u64,
    x: TensorId,
    cos_sin: (TensorId, TensorId),
    call: &mut Call,
) -> TensorId {
    let p = c.flavor.prefix();
    let sparse = m.sparse[i as usize];
    let mut router_logits = None;
    let out = decoder_layer(
        b,
        s,
        p,
        (c.dtype, autocast),
        x,
        cos_sin,
        (i as usize, call),
        &mut |b, y| {
            if sparse {
                let (out, logits) = sparse_block(b, m, c, y);
                router_logits = Some(logits);
                out
            } else {
                mlp(
                    b,
                    "mlp",
                    &format!("{p}MLP"),
                    (s.hidden, s.intermediate),
                    (false, s.act),
                    y,
                )
            }
        },
    );
    // output_router_logits: the output keeps them until the forward returns
    if let (Some(l), Some(kept)) = (router_logits, call.router_logits.as_mut()) {
        kept.kept.push(l);
    }
    out
}

/// A Mixtral or Qwen3-MoE model ready to record one forward per generation step.
pub struct Model {
    flavor: Flavor,
    spec: Spec,
    moe: Moe,
    dtype: DType,
    autocast: Option<DType>,
    eager: bool,
}

impl Model {
    /// Reads the config and checks the input against it.
    pub fn new(
        cfg: &HfConfig,
        model_type: &str,
        input: &HfInput,
        dtype: DType,
    ) -> Result<Model, HfError> {
        let (flavor, mut spec, moe) = specs(cfg, model_type)?;
        spec.four_bit = input.four_bit;
        check_aux_loss(cfg, &spec, &moe)?;
        if let Some(mp) = spec.max_positions {
            check_positions(cfg, input, "max_position_embeddings", mp)?;
        }
        // with a cache the mask covers every position and the router logits only the new ones:
        // transformers' load_balancing_loss_func fails on a padded generation
        if input.padded && spec.router_aux_top_k.is_some() {
            return Err(HfError::Field {
                path: cfg.path.clone(),
                field: "output_router_logits".into(),
                expected: "false for a padded --mode generate (transformers' load-balancing loss fails on the cache's attention mask)".into(),
            });
        }
        Ok(Model {
            flavor,
            spec,
            moe,
            dtype,
            autocast: input.precision.autocast_dtype(),
            eager: input.attn == AttnImplementation::Eager,
        })
    }
}

impl CausalLm for Model {
    fn forward(&self, b: &mut GraphBuilder, ids: TensorId, call: &mut Call) -> TensorId {
        let (s, m) = (&self.spec, &self.moe);
        let c = Ctx {
            flavor: self.flavor,
            bsz: b.shape(ids)[0],
            seq: call.seq,
            hidden: s.hidden,
            dtype: self.dtype,
            low: low_dtype(self.dtype, self.autocast),
            autocast: self.autocast,
            // `generate` runs its decode steps (every forward after the prefill) inside
            // `_optimize_model_for_decode`, which swaps `grouped_mm` for `batched_mm` on any
            // device but the CPU
            experts: if call.first {
                ExpertsImpl::GroupedMm
            } else {
                ExpertsImpl::BatchedMm
            },
            act: s.act,
        };
        let p = self.flavor.prefix();
        let autocast = self.autocast;
        let eager = self.eager.then_some(self.dtype);
        let masks = |b: &mut GraphBuilder, cache_len, padding| {
            sdpa_masks(b, s, (c.bsz, c.seq, eager), cache_len, padding)
        };
        forward(
            b,
            (s, p, self.dtype, self.eager),
            ids,
            call,
            &masks,
            &mut |b, i, x, cos, sin, call| layer(b, (s, m, &c), autocast, i, x, (cos, sin), call),
            Some(&|i| layer_kind(s, m, i)),
        )[0]
    }

    fn layers(&self) -> usize {
        self.spec.layers as usize
    }

    // Mixtral's and Qwen3-MoE's window makes every cache layer a sliding one, as Mistral's does;
    // Qwen2-MoE's `sliding_attention` layers get one each (without `use_sliding_window` its
    // window is 0 and every cache layer is a full one): the windows of the masks they attend with
    fn cache_windows(&self) -> Vec<Option<u64>> {
        self.spec.cache_windows()
    }

    fn vocab(&self) -> u64 {
        self.spec.vocab
    }

    fn kv_width(&self) -> u64 {
        self.spec.kv_heads * self.spec.head_dim
    }

    // as the Llama family's: under autocast the rotary products promote the keys (Qwen3-MoE's
    // q/k norms promote them already), the values follow the keys
    fn kv_dtypes(&self, param: DType, autocast: Option<DType>) -> (DType, DType) {
        rotary_kv_dtypes(param, autocast)
    }
}

/// `mlp` = `{p}SparseMoeBlock` on `[B, S, H]`: flattened to `[T, H]`, (Qwen2-MoE: the shared
/// expert), the router, the experts, (Qwen2-MoE: plus the gated shared expert), reshaped back.
/// Returns the output and the router logits `[T, E]`.
fn sparse_block(b: &mut GraphBuilder, m: &Moe, c: &Ctx, x: TensorId) -> (TensorId, TensorId) {
    let p = c.flavor.prefix();
    let (t, h) = (c.bsz * c.seq, c.hidden);
    b.module("mlp", &format!("{p}SparseMoeBlock"), &[x], |b| {
        // __init__ creates gate, experts (Qwen3-MoE: experts, then gate), then the shared
        // expert, which forward calls first
        let gate = |b: &mut GraphBuilder| {
            b.declare("gate", &format!("{p}TopKRouter"), |b| {
                b.parameter("weight", vec![m.experts, h]);
            });
        };
        if c.flavor != Flavor::Qwen3Moe {
            gate(b);
        }
        b.declare("experts", &format!("{p}Experts"), |b| {
            b.parameter(
                "gate_up_proj",
                vec![m.experts, 2 * m.expert_intermediate, h],
            );
            b.parameter("down_proj", vec![m.experts, h, m.expert_intermediate]);
        });
        if c.flavor == Flavor::Qwen3Moe {
            gate(b);
        }
        let x = if m.jitter > 0.0 {
            b.op(DropoutInplace::jitter(m.jitter), &[x])
        } else {
            x
        };
        let flat = view(b, "view", x, vec![t, h]);
        let shared = m.shared_intermediate.map(|si| {
            mlp(
                b,
                "shared_expert",
                &format!("{p}MLP"),
                (h, si),
                (false, c.act),
                flat,
            )
        });
        let (logits, weights, index) = router(b, m, c, flat);
        let out = experts(b, m, c, flat, index, weights);
        let out = match shared {
            Some(se) => {
                let g = linear(b, "shared_expert_gate", h, 1, false, flat);
                let g = activation_fn(b, ActivationKind::Sigmoid, g);
                // sigmoid(gate) [T, 1] * shared [T, H]: the gate's gradient is a full-size
                // product summed down once `apply` has returned
                let scaled = mul(b, g, se);
                // `shared_expert_output` is a local until the block returns
                b.hold(&[scaled]);
                add(b, out, scaled)
            }
            None => out,
        };
        // `_` (the router logits), the weights and the indices are locals until it returns
        b.hold(&[logits, weights, index]);
        (view(b, "reshape", out, vec![c.bsz, c.seq, h]), logits)
    })
}

/// `gate` = `{p}TopKRouter` on `[T, H]`: `linear(x, weight)` `[T, E]`, softmax in float32, top-k,
/// (renormalised: `w /= w.sum(-1, keepdim)`, in place, which makes autograd keep a copy of the
/// un-normalised weights), (Qwen: cast back to the logits' dtype). Returns (logits, weights
/// `[T, k]`, expert indices `[T, k]` int64).
fn router(b: &mut GraphBuilder, m: &Moe, c: &Ctx, x: TensorId) -> (TensorId, TensorId, TensorId) {
    let (t, h, e, k) = (c.bsz * c.seq, c.hidden, m.experts, m.top_k);
    let like = DTypeRule::Like(0);
    b.module(
        "gate",
        &format!("{}TopKRouter", c.flavor.prefix()),
        &[x],
        |b| {
            let w = b.parameter("weight", vec![e, h]);
            let x = view(b, "reshape", x, vec![t, h]);
            let logits = linear_fn(b, x, w);
            // Mixtral's `logits.float()`: a float32 copy of half logits (the linear's output is
            // in the autocast dtype under autocast), then softmax. Qwen's `softmax(logits,
            // dtype=float)`
            let probs = if c.flavor == Flavor::Mixtral {
                let src = cast(b, logits, c.low.unwrap_or(c.dtype), DType::F32);
                b.op(Softmax { dim: 1 }, &[src])
            } else {
                softmax_float32(b, logits, 1, c.dtype, c.autocast.is_some())
            };
            // TopkBackward keeps the indices and scatters into a zero [T, E]
            let mut topk = Aten::new("topk", vec![t, k])
                .dtype(like)
                .saves(vec![Saved::Output(1)])
                .grads(vec![GradIn::New])
                .backward_temporary(vec![t, e], like);
            topk.outputs
                .push((vec![t, k], DTypeRule::Fixed(DType::I64)));
            let top = b.op_multi(topk, &[probs]);
            let (mut weights, index) = (top[0], top[1]);
            if m.normalize {
                // the sum's gradient is an expanded view of the incoming one
                let sum = b.op(
                    Aten::new("sum", vec![t, 1]).grads(vec![GradIn::PassThrough(0)]),
                    &[weights],
                );
                // div_ needs the original weights for the divisor's gradient: a clone. Its
                // backward computes the divisor's gradient -grad * ((w / s) / s) as [T, k] float32
                // pieces (the two quotients and -grad die with the expression, the last made
                // first), then w's, grad / s; once `apply` has returned (and dropped the unpacked
                // saved tensors of a recomputed region) the engine sums the divisor's down to
                // [T, 1] and drops the [T, k] one (truth traces of Mixtral and Qwen-MoE); with one
                // expert per token the shapes agree and the piece is the gradient as it is
                let divisor_grad = if k == 1 {
                    GradIn::Scratch(3)
                } else {
                    GradIn::ReducedScratch(3)
                };
                let piece = Scratch::Alloc {
                    bytes: t * k * DType::F32.size(),
                    what: "backward temporary",
                };
                let div = Aten {
                    alias: Alias::InPlace(0),
                    ..Aten::new("div_", vec![t, k])
                }
                .extra(vec![t, k], like)
                .saves(vec![Saved::Input(1), Saved::Extra(0)])
                .grads(vec![GradIn::New, divisor_grad])
                .backward_scratch(vec![
                    piece,
                    piece,
                    piece,
                    piece,
                    Scratch::Free(2),
                    Scratch::Free(1),
                    Scratch::Free(0),
                ]);
                weights = b.op(div, &[weights, sum]);
            }
            if c.flavor != Flavor::Mixtral {
                // router_top_value.to(router_logits.dtype)
                if let Some(low) = c.low {
                    weights = to_dtype(b, weights, low);
                }
            }
            // router_probs is a local until the router returns
            b.hold(&[probs]);
            (logits, weights, index)
        },
    )
}

/// `x[idx]` (advanced indexing along dim 0) giving `out`: keeps the indices; backward scatters
/// the gradient into zeros of the source's shape `src` (`index_put` into `new_zeros`).
fn gather(out: Vec<u64>, src: Vec<u64>) -> Aten {
    super::layers::advanced_index(out, src, 1)
}

/// What `output_router_logits` adds once the `head` has run on the base model's `hidden` states
/// (`kept`: each sparse layer's router logits `[T, E]`, which the output keeps; a per-token
/// head, built after, keeps them until the forward returns): the causal LM computes
/// `load_balancing_loss_func` from them, the hidden states still a local; then
/// the output goes (the caller keeps only the logits, and no loss reads the auxiliary one),
/// with the autograd graph of the auxiliary loss, and the router logits, the last layer's first
/// (a tuple frees its items from the end). A caller that keeps the output (`kept`: `generate`)
/// gets the auxiliary loss and the router logits to free with the logits.
pub(super) fn router_logits_output(
    b: &mut GraphBuilder,
    (hidden, padding): (TensorId, Option<TensorId>),
    logits: &RouterLogits,
    top_k: u64,
    head: DecoderHead,
    kept_outputs: Option<&mut KeptOutputs>,
) {
    let kept = &logits.kept;
    let Some(&first_logits) = kept.first() else {
        return;
    };
    if head.per_token() {
        // the caller builds the head next; the base model's output goes when the forward returns
        let last_first: Vec<TensorId> = kept.iter().rev().copied().collect();
        b.hold(&last_first);
        return;
    }
    let aux = head == DecoderHead::Lm;
    let start = b.node_count();
    let aux_loss = aux.then(|| load_balancing_loss(b, logits, (first_logits, padding), top_k));
    // the hidden states (a local of the forward) go first, then the output: its auxiliary loss's
    // graph, the loss, the router logits
    if aux_loss.is_some() {
        b.drop_graph_since(start, hidden);
    }
    let mut dropped = vec![hidden];
    match kept_outputs {
        Some(out) => {
            out.before_logits.extend(aux_loss);
            out.after_logits.extend(kept.iter().rev());
        }
        None => {
            dropped.extend(aux_loss);
            dropped.extend(kept.iter().rev());
        }
    }
    b.keep_until_now(&dropped);
}

/// transformers' `load_balancing_loss_func(router_logits, num_experts, top_k, attention_mask)`:
/// per layer, `softmax` (float32 under autocast) and `topk`; then without a mask the indices'
/// `histc` (int32 on the GPU) into a running count and the probabilities' `.float().sum(0)`
/// into a running sum; with a padded batch's mask (`[B, S]`, as float32 `[T]`) a
/// `scatter_add_` of the repeated mask into zeros, the masked probabilities' sum and a running
/// row count. Then `sum(tokens / rows * (probs / rows).unsqueeze(0)) * num_experts`. The
/// softmaxes (and the mask, in the masked product) are saved for an autograd graph nothing runs
/// backward (dropped with the output); the rest are locals, each freed once rebound, the rest
/// when the function returns.
fn load_balancing_loss(
    b: &mut GraphBuilder,
    logits: &RouterLogits,
    (first_logits, padding): (TensorId, Option<TensorId>),
    top_k: u64,
) -> TensorId {
    let (t, e) = match b.shape(first_logits) {
        [t, e] => (*t, *e),
        _ => return first_logits,
    };
    let f32 = DTypeRule::Fixed(DType::F32);
    b.frame(|b| {
        let zeros = |b: &mut GraphBuilder| {
            b.op(
                Aten::new("zeros", vec![e]).dtype(f32).not_differentiable(),
                &[],
            )
        };
        let mut tokens = zeros(b);
        let mut probs = zeros(b);
        // attention_mask.reshape(-1).to(float32)
        let flat_mask = padding.map(|m| {
            let flat = view(b, "reshape", m, vec![t]);
            b.op(
                Aten::new("_to_copy", vec![t])
                    .dtype(f32)
                    .not_differentiable(),
                &[flat],
            )
        });
        let mut rows: Option<TensorId> = None;
        let mut last: Option<(TensorId, TensorId, TensorId)> = None;
        for &layer_logits in &logits.kept {
            // autocast gives softmax dtype=float32 (float16 logits are read as they are)
            let routing = b.op(Softmax { dim: 1 }, &[layer_logits]);
            // `routing_weights` rebound: the previous layer's goes (unless the graph keeps it)
            if let Some((prev, _, _)) = last {
                b.keep_until_now(&[prev]);
            }
            let mut topk = Aten::new("topk", vec![t, top_k])
                .dtype(DTypeRule::Like(0))
                .not_differentiable();
            topk.outputs
                .push((vec![t, top_k], DTypeRule::Fixed(DType::I64)));
            let top = b.op_multi(topk, &[routing]);
            let (values, selected) = (top[0], top[1]);
            // `_, selected_experts` rebound
            if let Some((_, v, s)) = last {
                b.keep_until_now(&[v, s]);
            }
            let flat = view(b, "reshape", selected, vec![t * top_k]);
            let counts = match flat_mask {
                None => {
                    let as_i32 = b.op(
                        Aten::new("_to_copy", vec![t * top_k])
                            .dtype(DTypeRule::Fixed(DType::I32))
                            .not_differentiable(),
                        &[flat],
                    );
                    b.op(
                        Aten::new("histc", vec![e])
                            .dtype(DTypeRule::Like(0))
                            .not_differentiable(),
                        &[as_i32],
                    )
                }
                Some(mask) => {
                    // zeros(E).scatter_add_(0, indices, mask.repeat_interleave(top_k))
                    let target = zeros(b);
                    let repeated = b.op(
                        Aten::new("clone", vec![t, top_k])
                            .dtype(DTypeRule::Like(0))
                            .not_differentiable(),
                        &[mask],
                    );
                    let scatter = Aten {
                        alias: Alias::InPlace(0),
                        ..Aten::new("scatter_add_", vec![e])
                    }
                    .not_differentiable();
                    b.op(scatter, &[target, flat, repeated])
                }
            };
            // the running sums rebound: each goes after the new one (and the count) exists
            let old = tokens;
            tokens = add(b, tokens, counts);
            b.keep_until_now(&[old]);
            // `.float()` returns the softmax itself when it is float32
            let as_f32 = b.op(ToDtype::fixed(DType::F32), &[routing]);
            let summed = match flat_mask {
                None => as_f32,
                Some(mask) => {
                    let column = view(b, "unsqueeze", mask, vec![t, 1]);
                    mul(b, as_f32, column)
                }
            };
            let sum = b.op(Aten::new("sum", vec![e]), &[summed]);
            let old = probs;
            probs = add(b, probs, sum);
            b.keep_until_now(&[old]);
            if let Some(mask) = flat_mask {
                // total_rows + flat_mask.sum() (the first from the float 0.0)
                let n = b.op(
                    Aten::new("sum", vec![]).dtype(f32).not_differentiable(),
                    &[mask],
                );
                rows = Some(match rows {
                    None => b.op(Aten::new("add", vec![]).not_differentiable(), &[n]),
                    Some(r) => {
                        let total = add(b, r, n);
                        b.keep_until_now(&[r]);
                        total
                    }
                });
            }
            last = Some((routing, values, selected));
        }
        // divided by the row count: a Python number, or the masked count (which the divisor's
        // gradient keeps)
        let (per_expert, prob_per_expert) = match rows {
            None => (
                b.op(Aten::new("div", vec![e]).not_differentiable(), &[tokens]),
                b.op(Aten::new("div", vec![e]), &[probs]),
            ),
            Some(r) => (
                b.op(Aten::new("div", vec![e]).not_differentiable(), &[tokens, r]),
                b.op(
                    Aten::new("div", vec![e]).saves(vec![Saved::Input(1)]),
                    &[probs, r],
                ),
            ),
        };
        let row = view(b, "unsqueeze", prob_per_expert, vec![1, e]);
        let product = mul(b, per_expert, row);
        let overall = b.op(Aten::new("sum", vec![]), &[product]);
        let aux = mul_scalar(b, overall);
        // the locals go as the function returns, in the order they were first bound
        let mut locals = vec![tokens, probs];
        locals.extend(rows);
        locals.extend(flat_mask);
        if let Some((routing, values, selected)) = last {
            locals.extend([routing, values, selected]);
        }
        locals.extend([per_expert, prob_per_expert, overall]);
        b.hold(&locals);
        aux
    })
}

/// `torch._grouped_mm(a, weight.transpose(-2, -1), offs)` giving `out`: keeps the offsets, and
/// `a` only for the weight's gradient (frozen experts keep no input), the weight only for `a`'s;
/// backward makes the weight's gradient, then `a`'s.
fn grouped_mm(out: Vec<u64>) -> Aten {
    Aten::new("_grouped_mm", out)
        .dtype(DTypeRule::Like(0))
        .saves(vec![Saved::Input(2), Saved::Input(0), Saved::Input(1)])
        .cross_saves(0, 1)
        .grads(vec![GradIn::New, GradIn::New, GradIn::None])
        .right_to_left()
}

/// `_apply_gate` of both experts implementations: `gate, up = proj.chunk(2, dim=-1)`, then
/// `act_fn(gate) * up`, on the `[S, 2I]` gate/up projection; returns `[S, I]`.
fn apply_gate(b: &mut GraphBuilder, c: &Ctx, proj: TensorId, (s, i): (u64, u64)) -> TensorId {
    let halves = b.op_multi(
        View {
            name: "chunk",
            shapes: vec![vec![s, i]; 2],
            expand: false,
        },
        &[proj],
    );
    let g = act_module(b, c.act, "act_fn", halves[0]);
    mul(b, g, halves[1])
}

/// One experts call as both kernels read it.
struct ExpertsCall {
    /// tokens `T`, hidden size `H`, experts `E`, top-k and the experts' intermediate size `I`
    sizes: (u64, u64, u64, u64, u64),
    /// the `[T, H]` input, the router's `[T, k]` indices and weights, `gate_up_proj`, `down_proj`
    tensors: [TensorId; 5],
}

/// `experts` = `{p}Experts` on `[T, H]` with the router's `[T, k]` indices and weights, by the
/// kernel `c.experts` names; returns `[T, H]`.
fn experts(
    b: &mut GraphBuilder,
    m: &Moe,
    c: &Ctx,
    x: TensorId,
    index: TensorId,
    weights: TensorId,
) -> TensorId {
    let (h, e, i) = (c.hidden, m.experts, m.expert_intermediate);
    let class = format!("{}Experts", c.flavor.prefix());
    b.module("experts", &class, &[x, index, weights], |b| {
        let gate_up = b.parameter("gate_up_proj", vec![e, 2 * i, h]);
        let down = b.parameter("down_proj", vec![e, h, i]);
        let call = ExpertsCall {
            sizes: (c.bsz * c.seq, h, e, m.top_k, i),
            tensors: [x, index, weights, gate_up, down],
        };
        match c.experts {
            ExpertsImpl::GroupedMm => grouped_mm_experts(b, c, &call),
            ExpertsImpl::BatchedMm => batched_mm_experts(b, c, &call),
        }
    })
}

/// The experts as `grouped_mm_experts_forward` runs them.
fn grouped_mm_experts(b: &mut GraphBuilder, c: &Ctx, call: &ExpertsCall) -> TensorId {
    let (t, h, e, k, i) = call.sizes;
    let [x, index, weights, gate_up, down] = call.tensors;
    let s = t * k;
    let i32 = DTypeRule::Fixed(DType::I32);
    let i64 = DTypeRule::Fixed(DType::I64);
    let sample_weights = view(b, "reshape", weights, vec![s]);
    let expert_ids = view(b, "reshape", index, vec![s]);
    // sort by expert: sorted ids and the permutation
    let mut sort = Aten::new("sort", vec![s])
        .dtype(DTypeRule::Like(0))
        .not_differentiable();
    sort.outputs.push((vec![s], i64));
    let sorted = b.op_multi(sort, &[expert_ids]);
    let (expert_ids_g, perm) = (sorted[0], sorted[1]);
    let token = b.op(
        Aten::new("floor_divide", vec![s]).not_differentiable(),
        &[perm],
    );
    let selected = b.op(gather(vec![s, h], vec![t, h]), &[x, token]);
    let sample_weights_g = b.op(gather(vec![s], vec![s]), &[sample_weights, perm]);
    // tokens per expert: histc over the ids as int32, then their cumulative offsets
    let int_ids = b.op(
        Aten::new("_to_copy", vec![s])
            .dtype(i32)
            .not_differentiable(),
        &[expert_ids_g],
    );
    let per_expert = b.op(
        Aten::new("histc", vec![e]).dtype(i32).not_differentiable(),
        &[int_ids],
    );
    let offsets = b.op(
        Aten::new("cumsum", vec![e]).dtype(i32).not_differentiable(),
        &[per_expert],
    );
    let w = view(b, "transpose", gate_up, vec![e, h, 2 * i]);
    let proj = b.op(grouped_mm(vec![s, 2 * i]), &[selected, w, offsets]);
    let proj = apply_gate(b, c, proj, (s, i));
    let w = view(b, "transpose", down, vec![e, i, h]);
    let proj = b.op(grouped_mm(vec![s, h]), &[proj, w, offsets]);
    // proj * sample_weights_g.unsqueeze(-1): the weights' gradient is a full-size product (made
    // first), which validate_outputs sums down and casts to the weights' dtype
    let per_row = view(b, "unsqueeze", sample_weights_g, vec![s, 1]);
    let weighted = b.op(
        Aten::new("mul", vec![s, h])
            .saves(vec![Saved::Input(1), Saved::Input(0)])
            .cross_saves(0, 1)
            .grads_like_output()
            .right_to_left(),
        &[proj, per_row],
    );
    // inv_perm = empty_like(perm); inv_perm[perm] = arange(S)
    let inv_perm = b.op(
        Aten::new("empty_like", vec![s])
            .dtype(i64)
            .temporary(vec![s], i64)
            .not_differentiable(),
        &[],
    );
    let restored = b.op(gather(vec![s, h], vec![s, h]), &[weighted, inv_perm]);
    let per_token = view(b, "view", restored, vec![t, k, h]);
    // sum over k; backward expands the gradient, which the view's backward must copy (with one
    // expert per token the expanded dimension has size 1: both are views)
    let sum_grad = if k == 1 {
        GradIn::PassThrough(0)
    } else {
        GradIn::New
    };
    let out = b.op(
        Aten::new("sum", vec![t, h]).grads(vec![sum_grad]),
        &[per_token],
    );
    // .to(hidden_states.dtype): Mixtral's float32 routing weights promote half experts
    let converted =
        (c.flavor == Flavor::Mixtral && c.dtype != DType::F32).then(|| to_dtype(b, out, c.dtype));
    // the function's locals, alive until it returns, freed in the order they were first bound
    // (`weighted_out` before `inv_perm`; `final_hidden_states` last, when `.to` copied it)
    b.hold(&[
        expert_ids_g,
        perm,
        selected,
        sample_weights_g,
        int_ids,
        per_expert,
        offsets,
        proj,
        restored,
        inv_perm,
    ]);
    if converted.is_some() {
        b.hold(&[out]);
    }
    converted.unwrap_or(out)
}

/// The experts as `batched_mm_experts_forward` runs them (what `generate`'s decode steps run). Each
/// (token, expert) pair gathers its expert's weights (`gate_up_proj[expert_ids]`, `[T*k, 2I, H]`,
/// then `down_proj[expert_ids]`, `[T*k, H, I]`) and multiplies its token by them with `bmm`: the
/// gathered copies, not the activations, are the memory, and under autocast `bmm` casts each one
/// to the low dtype too. Their size is set by `T*k`, whatever the routing.
fn batched_mm_experts(b: &mut GraphBuilder, c: &Ctx, call: &ExpertsCall) -> TensorId {
    let (t, h, e, k, i) = call.sizes;
    let [x, index, weights, gate_up, down] = call.tensors;
    let s = t * k;
    // repeat_interleave(k, dim=0): unsqueeze and expand (views), a contiguous clone, flatten
    let selected = b.op(
        Aten::new("clone", vec![t, k, h]).dtype(DTypeRule::Like(0)),
        &[x],
    );
    let selected = view(b, "flatten", selected, vec![s, h]);
    let sample_weights = view(b, "reshape", weights, vec![s]);
    let expert_ids = view(b, "reshape", index, vec![s]);
    let selected_weights = b.op(
        gather(vec![s, 2 * i, h], vec![e, 2 * i, h]),
        &[gate_up, expert_ids],
    );
    // _batched_linear: bmm(weight, input.unsqueeze(-1)).squeeze(-1)
    let column = view(b, "unsqueeze", selected, vec![s, h, 1]);
    let proj = b.op(MatMul, &[selected_weights, column]);
    let proj = view(b, "squeeze", proj, vec![s, 2 * i]);
    let proj = apply_gate(b, c, proj, (s, i));
    let down_weights = b.op(gather(vec![s, h, i], vec![e, h, i]), &[down, expert_ids]);
    // `selected_weights` is rebound: the gathered gate/up weights go now
    b.keep_until_now(&[selected_weights]);
    let column = view(b, "unsqueeze", proj, vec![s, i, 1]);
    let proj = b.op(MatMul, &[down_weights, column]);
    let proj = view(b, "squeeze", proj, vec![s, h]);
    // proj_out * sample_weights.unsqueeze(-1): Mixtral's float32 routing weights promote
    let per_row = view(b, "unsqueeze", sample_weights, vec![s, 1]);
    let weighted = b.op(Aten::new("mul", vec![s, h]), &[proj, per_row]);
    let per_token = view(b, "view", weighted, vec![t, k, h]);
    // autocast runs `sum` in float32 through its dtype argument (`fp32_set_opt_dtype`): a
    // half input is read as it is (no cast copy) and the sum is float32
    let sum_dtype = match c.autocast {
        Some(_) => DTypeRule::Fixed(DType::F32),
        None => DTypeRule::Like(0),
    };
    let summed = b.op(Aten::new("sum", vec![t, h]).dtype(sum_dtype), &[per_token]);
    // .to(hidden_states.dtype): a copy where the product is wider than the residual stream
    // (Mixtral's float32 routing weights on half experts)
    let out = b.op(ToDtype::like_input_1(), &[summed, x]);
    // the function's locals, alive until it returns (in their order)
    b.hold(&[selected, down_weights, proj, weighted, summed]);
    out
}

#[cfg(test)]
mod tests {
    use crate::hf::{self, Generation, HfConfig, HfInput};
    use vramscope_core::{DType, Precision};

    use super::Model;
    use crate::hf::generate::CausalLm;

    fn generation(batch: u64, new_tokens: u64) -> HfInput {
        HfInput {
            batch,
            seq: 8,
            task: None,
            precision: Precision::Fp32,
            generate: Some(Generation { new_tokens }),
            attn: Default::default(),
            target_seq: None,
            gradient_checkpointing: false,
            padded: false,
            four_bit: false,
        }
    }

    fn config(extra: &str) -> HfConfig {
        let text = format!(
            r#"{{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100,
            "eos_token_id": 2{extra}}}"#
        );
        HfConfig::parse("mixtral.json", &text).expect("parses")
    }

    /// Shapes of the expert weights gathered per (token, expert) pair (`index` ops on a
    /// parameter), in graph order.
    fn gathered_weights(cfg: &HfConfig, input: &HfInput) -> Vec<Vec<u64>> {
        let g = hf::build(cfg, input).expect("builds").graph;
        g.nodes
            .iter()
            .filter(|n| n.op.kind() == "index" && g.tensors[n.inputs[0].0 as usize].param.is_some())
            .map(|n| g.tensors[n.outputs[0].0 as usize].shape.to_vec())
            .collect()
    }

    #[test]
    fn only_the_decode_steps_gather_expert_weights() {
        // batch 3, top-2: 6 (token, expert) pairs per decode step; 2I = 192, H = 64
        let cfg = config("");
        assert!(gathered_weights(&cfg, &generation(3, 1)).is_empty());
        let shapes = gathered_weights(&cfg, &generation(3, 4));
        // 3 decode steps x 2 layers x (gate_up, down)
        assert_eq!(shapes.len(), 12);
        assert_eq!(shapes[0], [6, 192, 64]);
        assert_eq!(shapes[1], [6, 64, 96]);
    }

    #[test]
    fn sliding_windows_of_the_qwen_moe_decoders_and_qwen2_moe_masks_the_cache() {
        let input = generation(1, 4);
        // Mixtral's sliding-window cache inside the window and past it (both measured)
        let mixtral = config(r#", "sliding_window": 64"#);
        hf::build(&mixtral, &input).expect("inside the window");
        hf::build(&mixtral, &generation(1, 60)).expect("past the window");
        let qwen3 = HfConfig::parse(
            "qwen3_moe.json",
            r#"{"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96,
            "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2,
            "vocab_size": 100, "use_sliding_window": true, "sliding_window": 64}"#,
        )
        .expect("parses");
        // every layer slides (measured: fixtures/truth/hf_moe_sliding.jsonl)
        let m = Model::new(&qwen3, "qwen3_moe", &input, DType::F32).expect("generates");
        assert_eq!(m.cache_windows(), vec![Some(64); 2]);
        hf::build(&qwen3, &generation(1, 70)).expect("past the window");
        let qwen2_moe = |layers: u64, extra: &str| {
            let text = format!(
                r#"{{"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 96,
                "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": {layers},
                "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100, {extra}}}"#
            );
            HfConfig::parse("qwen2_moe.json", &text).expect("parses")
        };
        // Qwen2-MoE: by default the layers i with i + 1 odd below max_window_layers slide
        let qwen2_sliding = qwen2_moe(
            4,
            r#""use_sliding_window": true, "sliding_window": 64, "max_window_layers": 3"#,
        );
        let m = Model::new(&qwen2_sliding, "qwen2_moe", &input, DType::F32).expect("generates");
        assert_eq!(m.cache_windows(), vec![Some(64), None, Some(64), None]);
        // a sliding layer named without use_sliding_window would have a window of 0
        let zero = qwen2_moe(
            2,
            r#""layer_types": ["sliding_attention", "full_attention"]"#,
        );
        let err = hf::build(&zero, &input).expect_err("window 0");
        assert!(err.to_string().contains("layer_types"), "{err}");
        let qwen2 = HfConfig::parse(
            "qwen2_moe.json",
            r#"{"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 96,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100}"#,
        )
        .expect("parses");
        // Qwen2-MoE generates (measured: fixtures/truth/hf_generate_moe_more.jsonl); each cached
        // forward makes its window-0 sliding-window mask over the whole cache
        let g = hf::build(&qwen2, &input)
            .expect("qwen2_moe generates")
            .graph;
        let masks: Vec<Vec<u64>> = g
            .nodes
            .iter()
            .filter(|n| n.op.kind() == "bitwise_and")
            .map(|n| g.tensor(n.outputs[0]).shape.to_vec())
            .collect();
        assert!(masks.contains(&vec![1, 1, 1, 9]), "{masks:?}");
    }
}
