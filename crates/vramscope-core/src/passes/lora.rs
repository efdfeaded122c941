//! LoRA fine-tuning and parameter freezing as graph passes.
//!
//! [`apply_lora`] does what PEFT 0.21's `get_peft_model(model, LoraConfig(r, lora_alpha,
//! lora_dropout, target_modules))` does to the module tree: every parameter of the base model is
//! frozen, and each target `nn.Linear` (or transformers' `Conv1D`, GPT-2's projections with their
//! `[in, out]` weight, which PEFT wraps in the same `lora.Linear` with `fan_in_fan_out=True`: the
//! flag only transposes the weight delta when merging, the forward is the same) is replaced by a
//! LoRA layer holding the original as
//! `base_layer` plus `lora_dropout.default` (`nn.Identity` for p = 0), `lora_A.default` (in → r,
//! no bias) and `lora_B.default` (r → out, no bias), whose forward is
//! `result = base_layer(x); result = result + lora_B(lora_A(dropout(x))) * scaling`.
//! The simulator then follows from `ParamDef::trainable`: frozen weights get no gradient and no
//! optimizer state, and a frozen `Linear` keeps its input for backward only when its weight needs a
//! gradient (never), its weight only when its input needs one (every layer after the first LoRA
//! layer: under autocast that is the weight's low-precision copy, which the autocast cache does not
//! hold for frozen weights).
//!
//! [`freeze`] is `p.requires_grad_(False)` on every parameter whose name contains a pattern.

use std::sync::Arc;

use crate::dtype::DType;
use crate::ir::{Graph, ModuleDef, ModuleId, Node, NodeId, ParamDef, ParamId, ParamKind, Scope};
use crate::ir::{TensorDef, TensorId};
use crate::ops::{Add, Aten, DTypeRule, Dropout, GradIn, Linear, MulScalar, Op, ToDtype};

use super::load_4bit::{convertible, CONV1D, FOUR_BIT_LINEAR};

/// What `LoraConfig` PEFT is given.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank r.
    pub rank: u64,
    /// `lora_alpha` (PEFT's default is 8; the scaling is alpha / r and changes no memory).
    pub alpha: f64,
    /// `lora_dropout` (PEFT's default 0.0: `nn.Identity`).
    pub dropout: f64,
    /// `target_modules`: names of the `nn.Linear` (or `Conv1D`) modules to adapt (the last
    /// component of their path, `q_proj`), or full paths; `None`: the defaults for the graph's
    /// model type ([`default_targets`](Self::default_targets) of `Graph::name`).
    pub targets: Option<Vec<String>>,
    /// Whether the step runs under `torch.autocast`: PEFT's LoRA layer around a 4-bit
    /// `Linear4bit` casts its input to the adapters' float32, and their output back, only
    /// without it.
    pub autocast: bool,
    /// The dtype the model's parameters are created in (`Precision::param_dtype`): the adapters'
    /// dtype unless they are upcast, which PEFT casts each adapted layer's input to
    /// (`lora_A.weight.dtype`). 4-bit layers' adapters are float32 whatever this is.
    pub param_dtype: DType,
    /// `get_peft_model(..., autocast_adapter_dtype=True)`, PEFT's default: the adapters of a
    /// bfloat16 / float16 model are float32. Each adapted layer then casts its input to float32,
    /// runs the adapters in float32, adds their output to the base layer's (the sum is float32)
    /// and casts the sum back (`result.to(torch_result_dtype)`).
    pub upcast_adapters: bool,
}

impl LoraConfig {
    /// The dtype the (non-4-bit) adapters are held in, when it is not the model's.
    fn upcast_dtype(&self) -> Option<DType> {
        (self.upcast_adapters && matches!(self.param_dtype, DType::BF16 | DType::F16))
            .then_some(DType::F32)
    }

    /// The default target modules for a transformers `model_type`: PEFT's
    /// (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`: the query and value projections)
    /// where it has an entry. PEFT has none for `distilbert`, `camembert`, `phi3` and `umt5` and
    /// asks for `target_modules`; their attention's projections stand in: DistilBERT's `q_lin` and
    /// `v_lin`, CamemBERT's `query` and `value` (as for RoBERTa), Phi-3's fused `qkv_proj`, UMT5's
    /// `q` and `v` (as for T5).
    pub fn default_targets(model_type: &str) -> Vec<String> {
        let t: &[&str] = match model_type {
            "gpt2" => &["c_attn"],
            "opt" => &["q_proj", "v_proj"],
            "bert" | "roberta" | "xlm-roberta" | "camembert" => &["query", "value"],
            "distilbert" => &["q_lin", "v_lin"],
            "t5" | "mt5" | "umt5" => &["q", "v"],
            "phi3" => &["qkv_proj"],
            _ => &["q_proj", "v_proj"],
        };
        t.iter().map(|s| s.to_string()).collect()
    }
}

/// An error of a graph pass: a bad option, named as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    /// `--lora-targets` names no `nn.Linear` (or `Conv1D`) of the model.
    #[error("--lora-targets {targets}: no nn.Linear or Conv1D module of the model matches; its Linear / Conv1D modules are named: {available}")]
    NoLoraTarget {
        /// The targets given.
        targets: String,
        /// The distinct last path components of the model's Linear and Conv1D modules.
        available: String,
    },
    /// The default targets of the model type name no `nn.Linear` (or `Conv1D`) of the model.
    #[error("--lora: the default targets for model type `{model_type}` ({targets}) match no nn.Linear or Conv1D module; name them with --lora-targets (its Linear / Conv1D modules are named: {available})")]
    NoDefaultLoraTarget {
        /// The graph's model type.
        model_type: String,
        /// The default targets.
        targets: String,
        /// The distinct last path components of the model's Linear and Conv1D modules.
        available: String,
    },
    /// Targets that the forward never calls and that come after called ones, or are not plain
    /// `nn.Linear`s: PEFT would give them adapters in an order that is not modelled.
    #[error("--lora: {count} target module(s) are never called by the forward ({example}, ...) and are not all plain nn.Linear layers built before the called targets: PEFT would wrap them too, which is not modelled; name the called modules with --lora-targets by their full paths")]
    UncalledLoraTarget {
        /// How many.
        count: usize,
        /// The first one's path.
        example: String,
    },
    /// A bad rank or dropout.
    #[error("{0}")]
    BadOption(String),
    /// `--freeze PATTERN` matches no parameter.
    #[error("--freeze {pattern}: no parameter name contains `{pattern}`; parameters are named like {example}")]
    NoFreezeMatch {
        /// The pattern.
        pattern: String,
        /// A few parameter names.
        example: String,
    },
}

/// Marks every parameter whose name contains one of `patterns` as frozen; returns how many
/// parameters each pattern froze. A pattern that matches nothing is an error.
pub fn freeze(g: &mut Graph, patterns: &[String]) -> Result<Vec<usize>, PassError> {
    let mut counts = Vec::new();
    for pat in patterns {
        let mut n = 0;
        for p in g.params.iter_mut() {
            if p.kind == ParamKind::Parameter && p.name.contains(pat.as_str()) {
                p.trainable = false;
                n += 1;
            }
        }
        if n == 0 {
            let example = g
                .params
                .iter()
                .filter(|p| p.kind == ParamKind::Parameter)
                .take(3)
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(PassError::NoFreezeMatch {
                pattern: pat.clone(),
                example,
            });
        }
        counts.push(n);
    }
    Ok(counts)
}

fn last_component(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// Injects LoRA adapters into the target `nn.Linear` / `Conv1D` modules of `g` and freezes the
/// base model.
pub fn apply_lora(g: &Graph, cfg: &LoraConfig) -> Result<Graph, PassError> {
    if cfg.rank == 0 {
        return Err(PassError::BadOption(
            "--lora: the rank r must be a positive integer".into(),
        ));
    }
    if !(0.0..1.0).contains(&cfg.dropout) {
        return Err(PassError::BadOption(format!(
            "--lora-dropout {}: expected a probability in [0, 1)",
            cfg.dropout
        )));
    }
    let defaults;
    let wanted = match &cfg.targets {
        Some(t) => t,
        None => {
            defaults = LoraConfig::default_targets(&g.name);
            &defaults
        }
    };
    let is_linear = |m: &ModuleDef| matches!(&*m.type_name, "Linear" | FOUR_BIT_LINEAR | CONV1D);
    let is_target = |m: ModuleId| {
        let md = &g.modules[m.0 as usize];
        is_linear(md)
            && wanted
                .iter()
                .any(|t| t == &md.path || t == last_component(&md.path))
    };
    // target calls, marked at their last node: the whole forward of a target leaf module (one
    // Linear op, a Conv1D's addmm, or a Linear4bit's cast / MatMul4Bit / cast), with the input it
    // was called on
    let mut targets: Vec<Option<TensorId>> = vec![None; g.nodes.len()];
    for s in &g.scopes {
        let (first, end) = (s.first as usize, s.end as usize);
        if end <= first || !is_target(s.module) {
            continue;
        }
        let nodes = &g.nodes[first..end];
        let whole = nodes.iter().all(|n| n.module == s.module)
            && if end - first > 1 {
                nodes.iter().any(|n| !n.params.is_empty())
            } else {
                convertible(g, &nodes[0]).is_some()
            };
        if let (true, Some(&x)) = (whole, s.inputs.first()) {
            targets[end - 1] = Some(x);
        }
    }
    // target modules that own parameters but are never called (a vision tower run on text
    // alone): PEFT wraps them too, in `named_modules()` order. Modelled when they all come before
    // the called targets (their adapters are then created first)
    let uncalled: Vec<(ModuleId, Option<(u64, u64)>)> = super::idle_modules(g)
        .iter()
        .filter(|m| is_target(m.id))
        .map(|m| (m.id, idle_linear_features(g, m)))
        .collect();
    let first_called = g
        .scopes
        .iter()
        .map(|s| s.module)
        .filter(|&id| is_target(id))
        .min_by_key(|id| id.0);
    if let Some(&(last, _)) = uncalled.last() {
        let plain = uncalled.iter().all(|(_, features)| features.is_some());
        if !plain || first_called.is_some_and(|f| f.0 < last.0) {
            return Err(PassError::UncalledLoraTarget {
                count: uncalled.len(),
                example: g.modules[uncalled[0].0 .0 as usize].path.clone(),
            });
        }
    }
    if !targets.iter().any(Option::is_some) {
        let mut names: Vec<&str> = g
            .modules
            .iter()
            .filter(|m| is_linear(m))
            .map(|m| last_component(&m.path))
            .collect();
        names.sort_unstable();
        names.dedup();
        let (targets, available) = (wanted.join(","), names.join(", "));
        return Err(match cfg.targets {
            Some(_) => PassError::NoLoraTarget { targets, available },
            None => PassError::NoDefaultLoraTarget {
                model_type: g.name.clone(),
                targets,
                available,
            },
        });
    }
    let mut out = g.clone();
    for p in out.params.iter_mut() {
        p.trainable = false;
    }
    out.nodes.clear();
    let mut new_index: Vec<u32> = Vec::with_capacity(g.nodes.len() + 1);
    let mut subst: Vec<TensorId> = (0..g.tensors.len() as u32).map(TensorId).collect();
    let mut new_scopes: Vec<Scope> = Vec::new();
    let mut adapted: Vec<ModuleId> = Vec::new();
    // locals of the LoRA layers' forwards, in the new node numbering
    let mut new_holds: Vec<(TensorId, u32)> = Vec::new();
    // the adapters of plain (not 4-bit) layers, which a half model's upcast casts after creation
    let mut upcast_adapters: Vec<ParamId> = Vec::new();
    for &(m, features) in &uncalled {
        if let Some(features) = features {
            // as for a called target: a 4-bit layer's adapters are float32
            let four_bit = &*g.modules[m.0 as usize].type_name == FOUR_BIT_LINEAR;
            let dtype = if four_bit {
                Some(DType::F32)
            } else {
                cfg.upcast_dtype()
            };
            let w = wrap_target(&mut out, m, &mut adapted, features, cfg, dtype);
            if !four_bit {
                upcast_adapters.extend([w.a.1, w.b.1]);
            }
        }
    }
    for (i, node) in g.nodes.iter().enumerate() {
        new_index.push(out.nodes.len() as u32);
        let mut n = node.clone();
        for t in n.inputs.iter_mut() {
            *t = subst[t.0 as usize];
        }
        let base_id = NodeId(out.nodes.len() as u32);
        for t in &n.outputs {
            out.tensors[t.0 as usize].producer = Some(base_id);
        }
        let Some(x_in_g) = targets[i] else {
            out.nodes.push(n);
            continue;
        };
        let m = n.module;
        // the input as this pass rewrote it: another target's LoRA output when the two layers
        // are chained (an identity activation between them); its shape is the original's
        let x = subst[x_in_g.0 as usize];
        let base_out = n.outputs[0];
        let four_bit = &*g.modules[m.0 as usize].type_name == FOUR_BIT_LINEAR;
        let (in_f, out_f) = {
            let last = |t: TensorId| g.tensors[t.0 as usize].shape.last().copied();
            (last(x_in_g).unwrap_or(0), last(base_out).unwrap_or(0))
        };
        // the LoRA layer's call starts where its base layer's call starts
        let first = g
            .scopes
            .iter()
            .filter(|s| s.module == m && s.end as usize == i + 1)
            .map(|s| new_index[s.first as usize])
            .min()
            .unwrap_or(out.nodes.len() as u32);
        out.nodes.push(n);
        // peft.tuners.lora.bnb.Linear4bit: `result = result.clone()` (a defensive copy), and
        // without autocast `x.to(lora_A.weight.dtype)` (float32) and `output.to(result.dtype)`
        let upcast_to = if four_bit { None } else { cfg.upcast_dtype() };
        let adapters_dtype = if four_bit {
            Some(DType::F32)
        } else {
            upcast_to
        };
        let convert = four_bit && !cfg.autocast;
        let Wrapped {
            lora_mod,
            dropout_mod,
            a: (a_mod, a_weight, a_op),
            b: (b_mod, b_weight, b_op),
        } = wrap_target(
            &mut out,
            m,
            &mut adapted,
            (in_f, out_f),
            cfg,
            adapters_dtype,
        );
        if !four_bit {
            upcast_adapters.extend([a_weight, b_weight]);
        }
        let result = if four_bit {
            let shape = g.tensors[base_out.0 as usize].shape.clone();
            let clone = Aten::new("clone", shape.to_vec())
                .dtype(DTypeRule::Like(0))
                .grads(vec![GradIn::PassThrough(0)]);
            push_node(
                &mut out,
                lora_mod,
                Arc::new(clone),
                vec![base_out],
                Vec::new(),
            )
        } else {
            base_out
        };
        let cast = if convert {
            push_node(
                &mut out,
                lora_mod,
                Arc::new(ToDtype::fixed(DType::F32)),
                vec![x],
                Vec::new(),
            )
        } else if four_bit {
            x
        } else {
            // `x = self._cast_input_dtype(x, lora_A.weight.dtype)`: a copy when they differ (under
            // autocast, an input an earlier low-precision op made: the attention output, an MLP
            // activation), `x` itself when they agree
            push_node(
                &mut out,
                lora_mod,
                Arc::new(ToDtype::fixed(upcast_to.unwrap_or(cfg.param_dtype))),
                vec![x],
                Vec::new(),
            )
        };
        let mut cur = cast;
        if cfg.dropout > 0.0 {
            cur = push_leaf(
                &mut out,
                &mut new_scopes,
                dropout_mod,
                Arc::new(Dropout { p: cfg.dropout }),
                cur,
                Vec::new(),
            );
        }
        let a = push_leaf(
            &mut out,
            &mut new_scopes,
            a_mod,
            Arc::new(a_op),
            cur,
            vec![a_weight],
        );
        let bo = push_leaf(
            &mut out,
            &mut new_scopes,
            b_mod,
            Arc::new(b_op),
            a,
            vec![b_weight],
        );
        let mut scaled = push_node(
            &mut out,
            lora_mod,
            Arc::new(MulScalar),
            vec![bo],
            Vec::new(),
        );
        if convert {
            scaled = push_node(
                &mut out,
                lora_mod,
                Arc::new(ToDtype::like_input_1()),
                vec![scaled, result],
                Vec::new(),
            );
        }
        let mut sum = push_node(
            &mut out,
            lora_mod,
            Arc::new(Add { inplace: false }),
            vec![result, scaled],
            Vec::new(),
        );
        // `result = result + ...`: the scaled adapters' output, a temporary, goes first, the old
        // `result` as the name is rebound (truth traces of a checkpointed LoRA GPT-2)
        new_holds.push((result, out.nodes.len() as u32));
        if upcast_to.is_some() {
            // the low-precision result plus the float32 adapters' output is float32:
            // `result = result.to(torch_result_dtype)`
            sum = push_node(
                &mut out,
                lora_mod,
                Arc::new(ToDtype::fixed(cfg.param_dtype)),
                vec![sum],
                Vec::new(),
            );
        }
        subst[base_out.0 as usize] = sum;
        new_scopes.push(Scope {
            module: lora_mod,
            first,
            end: out.nodes.len() as u32,
            inputs: [x].into_iter().collect(),
        });
        // the cast input is the local `x` until forward returns (a dropout after it does not
        // free it)
        if cast != x {
            new_holds.push((cast, out.nodes.len() as u32));
        }
    }
    new_index.push(out.nodes.len() as u32);
    let map = |k: u32| new_index[k as usize];
    for s in out.scopes.iter_mut() {
        // a target's own call (now the LoRA layer's base_layer) ends with its last node
        let base_call = s.end > s.first
            && targets[s.end as usize - 1].is_some()
            && g.nodes[s.end as usize - 1].module == s.module;
        s.end = if base_call {
            new_index[s.end as usize - 1] + 1
        } else {
            map(s.end)
        };
        s.first = map(s.first);
        for t in s.inputs.iter_mut() {
            *t = subst[t.0 as usize];
        }
    }
    out.scopes.extend(new_scopes);
    for h in out.holds.iter_mut() {
        // a local of a target's own forward (Linear4bit's `x = x.to(...)`) goes when the base
        // layer returns, before the adapters run
        let base_local = h.1 > 0
            && targets[h.1 as usize - 1].is_some()
            && g.tensors[h.0 .0 as usize]
                .producer
                .is_some_and(|p| g.nodes[p.0 as usize].module == g.nodes[h.1 as usize - 1].module);
        h.1 = if base_local {
            new_index[h.1 as usize - 1] + 1
        } else {
            map(h.1)
        };
        h.0 = subst[h.0 .0 as usize];
    }
    out.holds.extend(new_holds);
    for d in out.dropped_graphs.iter_mut() {
        d.nodes = map(d.nodes.start)..map(d.nodes.end);
        d.after = subst[d.after.0 as usize];
    }
    for t in out.outputs.iter_mut() {
        *t = subst[t.0 as usize];
    }
    if cfg.upcast_dtype().is_some() {
        upcast_adapters_after_creation(&mut out, &upcast_adapters, cfg.param_dtype);
    }
    Ok(out)
}

/// `get_peft_model(..., autocast_adapter_dtype=True)` makes every adapter in the model's dtype
/// `made`, then casts them one by one (`_cast_adapter_dtype`: the float32 copy, then the half one
/// freed; truth traces of the model phase of LoRA on Qwen2, Mistral and GPT-2 held in bfloat16):
/// each of `adapters` (plain layers' adapters, float32, allocated after the model's own
/// parameters) gets a half-precision construction temporary, all made before the first adapter
/// and each freed once its adapter is. 4-bit layers' adapters are made in float32 directly.
fn upcast_adapters_after_creation(out: &mut Graph, adapters: &[ParamId], made: DType) {
    // a parameter's position: how many parameters and buffers are allocated before it (the
    // simulator allocates them in init_rank order, as load_4bit's loading order does)
    let mut order: Vec<usize> = (0..out.params.len()).collect();
    order.sort_by_key(|&i| out.params[i].init_rank);
    let mut position = vec![0u32; order.len()];
    for (k, &i) in order.iter().enumerate() {
        position[i] = k as u32;
    }
    let mut adapters: Vec<usize> = adapters.iter().map(|p| p.0 as usize).collect();
    adapters.sort_by_key(|&i| position[i]);
    let Some(&first) = adapters.first() else {
        return;
    };
    let start = position[first];
    for i in adapters {
        let def = &out.params[i];
        let temporary = crate::ir::InitTemporary {
            shape: def.shape.to_vec(),
            dtype: Some(made),
            alloc_at: start,
            free_at: position[i] + 1,
            freed_after_allocations: false,
            allocated_after_frees: true,
            module: def.module,
            order: None,
        };
        out.init_temporaries.push(temporary);
    }
}

/// `(in_features, out_features)` of an idle Linear module (plain or 4-bit; `None` for other
/// types), from its weight (`[out, in]`); a 4-bit one's weight is packed, so its bias gives `out`
/// (`None` without one).
fn idle_linear_features(g: &Graph, m: &super::IdleModule) -> Option<(u64, u64)> {
    let (_, weight) = m.param("weight")?;
    match &*g.modules[m.id.0 as usize].type_name {
        "Linear" => match weight.shape[..] {
            [o, i] => Some((i, o)),
            _ => None,
        },
        FOUR_BIT_LINEAR => {
            let out = *m.param("bias")?.1.shape.first()?;
            let n = 2 * weight.shape.first()?;
            (out > 0 && n % out == 0).then_some((n / out, out))
        }
        _ => None,
    }
}

/// What [`wrap_target`] made.
struct Wrapped {
    lora_mod: ModuleId,
    dropout_mod: ModuleId,
    a: (ModuleId, ParamId, Linear),
    b: (ModuleId, ParamId, Linear),
}

/// Turns target `m` into PEFT's `lora.Linear` (the original module its `base_layer`, its
/// parameters renamed) with the `lora_dropout`, `lora_A` and `lora_B` module dicts
/// `update_layer` builds, and the two adapter weights (appended to the parameters, so created
/// after the model's own).
fn wrap_target(
    out: &mut Graph,
    m: ModuleId,
    adapted: &mut Vec<ModuleId>,
    (in_f, out_f): (u64, u64),
    cfg: &LoraConfig,
    adapters_dtype: Option<DType>,
) -> Wrapped {
    let path = out.modules[m.0 as usize]
        .path
        .strip_suffix(".base_layer")
        .filter(|_| adapted.contains(&m))
        .map(str::to_string)
        .unwrap_or_else(|| out.modules[m.0 as usize].path.clone());
    let parent = if adapted.contains(&m) {
        out.modules[m.0 as usize]
            .parent
            .and_then(|l| out.modules[l.0 as usize].parent)
    } else {
        out.modules[m.0 as usize].parent
    };
    let lora_mod = add_module(out, &path, "lora.Linear", parent);
    if !adapted.contains(&m) {
        adapted.push(m);
        out.modules[m.0 as usize].path = format!("{path}.base_layer");
        out.modules[m.0 as usize].parent = Some(lora_mod);
        for p in out.params.iter_mut().filter(|p| p.module == m) {
            let attr = last_component(&p.name).to_string();
            p.name = format!("{path}.base_layer.{attr}");
        }
    }
    let dropout_dict = add_module(
        out,
        &format!("{path}.lora_dropout"),
        "ModuleDict",
        Some(lora_mod),
    );
    let dropout_type = if cfg.dropout > 0.0 {
        "Dropout"
    } else {
        "Identity"
    };
    let dropout_mod = add_module(
        out,
        &format!("{path}.lora_dropout.default"),
        dropout_type,
        Some(dropout_dict),
    );
    let mut adapter = |name: &str, i: u64, o: u64| {
        let dict = add_module(out, &format!("{path}.{name}"), "ModuleDict", Some(lora_mod));
        let lm = add_module(out, &format!("{path}.{name}.default"), "Linear", Some(dict));
        let pid = ParamId(out.params.len() as u32);
        out.params.push(ParamDef {
            name: format!("{path}.{name}.default.weight"),
            shape: [o, i].into_iter().collect(),
            dtype: DType::F32,
            stored_dtype: adapters_dtype,
            kind: ParamKind::Parameter,
            trainable: true,
            module: lm,
            init_rank: pid.0,
        });
        let op = Linear {
            in_features: i,
            out_features: o,
            bias: false,
        };
        (lm, pid, op)
    };
    let a = adapter("lora_A", in_f, cfg.rank);
    let b = adapter("lora_B", cfg.rank, out_f);
    Wrapped {
        lora_mod,
        dropout_mod,
        a,
        b,
    }
}

/// Appends a module to the tree.
pub(super) fn add_module(
    g: &mut Graph,
    path: &str,
    type_name: &str,
    parent: Option<ModuleId>,
) -> ModuleId {
    g.modules.push(ModuleDef {
        path: path.to_string(),
        type_name: type_name.into(),
        parent,
    });
    ModuleId(g.modules.len() as u32 - 1)
}

/// Appends a node with one output whose shape and dtype follow the op's rules.
pub(super) fn push_node(
    g: &mut Graph,
    module: ModuleId,
    op: Arc<dyn Op>,
    inputs: Vec<TensorId>,
    params: Vec<ParamId>,
) -> TensorId {
    let shapes: Vec<&[u64]> = inputs
        .iter()
        .map(|t| g.tensors[t.0 as usize].shape.as_slice())
        .collect();
    // the shapes are those of a Linear the graph already checked
    let shape = op
        .output_shapes(&shapes)
        .ok()
        .and_then(|mut v| v.drain(..).next())
        .unwrap_or_default();
    let dtypes: Vec<DType> = inputs
        .iter()
        .map(|t| g.tensors[t.0 as usize].dtype)
        .collect();
    let dtype = op.output_dtypes(&dtypes, 1)[0];
    let node = NodeId(g.nodes.len() as u32);
    g.tensors.push(TensorDef {
        shape: shape.into(),
        dtype,
        producer: Some(node),
        param: None,
    });
    let t = TensorId(g.tensors.len() as u32 - 1);
    g.nodes.push(Node {
        op,
        module,
        inputs: inputs.into(),
        params: params.into(),
        outputs: [t].into_iter().collect(),
    });
    t
}

/// Appends a leaf module call (one node, its own scope).
fn push_leaf(
    g: &mut Graph,
    scopes: &mut Vec<Scope>,
    module: ModuleId,
    op: Arc<dyn Op>,
    x: TensorId,
    params: Vec<ParamId>,
) -> TensorId {
    let first = g.nodes.len() as u32;
    let t = push_node(g, module, op, vec![x], params);
    scopes.push(Scope {
        module,
        first,
        end: first + 1,
        inputs: [x].into_iter().collect(),
    });
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Task;
    use crate::optim::Optimizer;
    use crate::passes::test_util::{op_kinds, param};
    use crate::sim::{simulate, StepConfig};
    use crate::GraphBuilder;

    /// x [2, 8, 16] -> block.q_proj (16 -> 16) -> relu-free -> block.o_proj (16 -> 4), logits [2, 4]
    fn tiny() -> Graph {
        let mut b = GraphBuilder::new("tiny", "Tiny");
        let x = b.input(vec![16, 16], DType::F32);
        let y = b.module("block", "Block", &[x], |b| {
            let q = b.layer("q_proj", Linear::new(16, 16), &[x]);
            b.layer("o_proj", Linear::new(16, 4), &[q])
        });
        b.finish(&[y], Task::Classification { num_classes: 4 })
            .expect("tiny graph")
    }

    fn cfg(targets: &[&str]) -> LoraConfig {
        LoraConfig {
            rank: 2,
            alpha: 8.0,
            dropout: 0.0,
            targets: Some(targets.iter().map(|s| s.to_string()).collect()),
            autocast: false,
            param_dtype: DType::F32,
            upcast_adapters: true,
        }
    }

    /// A target the forward never calls (a vision tower run on text) is wrapped too, its
    /// adapters created before the called targets'; one declared after a called target is not
    /// modelled and is refused.
    #[test]
    fn never_called_targets_get_adapters_first() {
        let idle_tower = |before: bool| {
            let mut b = GraphBuilder::new("tiny", "Tiny");
            let x = b.input(vec![16, 16], DType::F32);
            let tower = |b: &mut GraphBuilder| {
                b.declare("tower", "Tower", |b| {
                    b.declare_layer("q_proj", &Linear::new(8, 8))
                })
            };
            if before {
                tower(&mut b);
            }
            let y = b.module("block", "Block", &[x], |b| {
                let q = b.layer("q_proj", Linear::new(16, 16), &[x]);
                b.layer("o_proj", Linear::new(16, 4), &[q])
            });
            if !before {
                tower(&mut b);
            }
            b.finish(&[y], Task::Classification { num_classes: 4 })
                .expect("graph")
        };
        let g = apply_lora(&idle_tower(true), &cfg(&["q_proj"])).expect("modelled");
        let adapters: Vec<&str> = g
            .params
            .iter()
            .filter(|p| p.trainable)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            adapters,
            [
                "tower.q_proj.lora_A.default.weight",
                "tower.q_proj.lora_B.default.weight",
                "block.q_proj.lora_A.default.weight",
                "block.q_proj.lora_B.default.weight",
            ]
        );
        assert!(g
            .params
            .iter()
            .any(|p| p.name == "tower.q_proj.base_layer.weight"));
        let e = apply_lora(&idle_tower(false), &cfg(&["q_proj"])).unwrap_err();
        assert!(
            matches!(&e, PassError::UncalledLoraTarget { example, .. } if example == "tower.q_proj"),
            "{e}"
        );
    }

    /// PEFT's `autocast_adapter_dtype`: a bf16 model's adapters are float32, and the layer ends
    /// with a cast of the float32 sum back to bf16; without it they follow the model.
    #[test]
    fn adapters_of_a_bf16_model_are_upcast_unless_asked_not_to() {
        let bf16 = LoraConfig {
            param_dtype: DType::BF16,
            ..cfg(&["q_proj"])
        };
        let up = apply_lora(&tiny(), &bf16).expect("lora");
        let a = param(&up, "block.q_proj.lora_A.default.weight");
        assert_eq!(a.stored_dtype, Some(DType::F32));
        let kept = LoraConfig {
            upcast_adapters: false,
            ..bf16
        };
        let same = apply_lora(&tiny(), &kept).expect("lora");
        let a = param(&same, "block.q_proj.lora_A.default.weight");
        assert_eq!(a.stored_dtype, None);
        // the upcast layer has one node more: `result.to(torch_result_dtype)`
        assert_eq!(up.nodes.len(), same.nodes.len() + 1);
    }

    #[test]
    fn lora_renames_like_peft_and_trains_only_the_adapters() {
        let g = apply_lora(&tiny(), &cfg(&["q_proj"])).expect("lora");
        let names: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
        assert!(names.contains(&"block.q_proj.base_layer.weight"));
        assert!(names.contains(&"block.q_proj.lora_A.default.weight"));
        assert!(names.contains(&"block.q_proj.lora_B.default.weight"));
        assert!(names.contains(&"block.o_proj.weight"));
        assert_eq!(g.trainable_parameter_count(), 2 * 16 + 16 * 2);
        assert_eq!(g.parameter_count(), tiny().parameter_count() + 64);
        assert!(g.find_module("block.q_proj.lora_dropout.default").is_some());
        // o_proj now reads the LoRA sum
        let o = g
            .nodes
            .iter()
            .find(|n| g.module_path(n.module) == "block.o_proj")
            .expect("o_proj node");
        let producer = g.tensor(o.inputs[0]).producer.expect("produced");
        assert_eq!(g.nodes[producer.0 as usize].op.kind(), "add");
    }

    #[test]
    fn frozen_weights_get_no_gradients_and_no_optimizer_state() {
        let g = apply_lora(&tiny(), &cfg(&["q_proj"])).expect("lora");
        let step = StepConfig {
            optimizer: Optimizer::AdamW,
            ..StepConfig::default()
        };
        let s = simulate(&g, &step).expect("simulate");
        // fp32: the adapters' 64 weights, one gradient each, AdamW's two states each
        assert_eq!(s.gradient_bytes, 64 * 4);
        assert_eq!(s.optimizer_state_bytes, 2 * 64 * 4);
    }

    #[test]
    fn a_frozen_linear_before_any_trainable_one_saves_nothing() {
        let mut g = tiny();
        freeze(&mut g, &["q_proj".to_string()]).expect("freeze");
        let s = simulate(&g, &StepConfig::default()).expect("simulate");
        let q = s
            .layers
            .iter()
            .find(|l| l.name(&g) == "block.q_proj")
            .expect("q");
        assert_eq!(q.saved_bytes, 0);
        // o_proj keeps its input (q_proj's output) for its own weight's gradient
        let o = s
            .layers
            .iter()
            .find(|l| l.name(&g) == "block.o_proj")
            .expect("o");
        assert_eq!(o.saved_bytes, 16 * 16 * 4);
    }

    /// GPT-2's `c_attn`: transformers' `Conv1D`, `addmm(bias, x, weight)` with weight `[in, out]`
    fn gpt2_block() -> Graph {
        let mut b = GraphBuilder::new("gpt2", "GPT2LMHeadModel");
        let x = b.input(vec![2, 8, 16], DType::F32);
        let y = b.module("c_attn", CONV1D, &[x], |b| {
            let w = b.parameter("weight", vec![16, 48]);
            let bias = b.parameter("bias", vec![48]);
            let op = Aten::new("addmm", vec![2, 8, 48])
                .autocast(crate::ops::Autocast::LowerPrecision)
                .saves(vec![
                    crate::ops::Saved::Input(1),
                    crate::ops::Saved::Input(2),
                ])
                .cross_saves(1, 2);
            b.op(op, &[bias, x, w])
        });
        let y = b.layer("lm_head", Linear::new(48, 4), &[y]);
        b.finish(&[y], Task::Classification { num_classes: 4 })
            .expect("gpt2 block")
    }

    #[test]
    fn conv1d_layers_are_adapted_with_their_in_out_features() {
        let g = apply_lora(&gpt2_block(), &cfg(&["c_attn"])).expect("lora");
        let shape = |name: &str| param(&g, name).shape.to_vec();
        // the Conv1D weight stays [in, out]; the adapters are nn.Linear (in -> r -> out)
        assert_eq!(shape("c_attn.base_layer.weight"), vec![16, 48]);
        assert_eq!(shape("c_attn.lora_A.default.weight"), vec![2, 16]);
        assert_eq!(shape("c_attn.lora_B.default.weight"), vec![48, 2]);
        assert_eq!(g.trainable_parameter_count(), 2 * 16 + 48 * 2);
        let m = g.find_module("c_attn").expect("lora layer");
        assert_eq!(&*g.modules[m.0 as usize].type_name, "lora.Linear");
        // lm_head reads the LoRA sum
        let head = g
            .nodes
            .iter()
            .find(|n| g.module_path(n.module) == "lm_head")
            .expect("lm_head");
        let producer = g.tensor(head.inputs[0]).producer.expect("produced");
        assert_eq!(g.nodes[producer.0 as usize].op.kind(), "add");
    }

    #[test]
    fn adapters_cast_their_input_to_their_dtype_as_a_forward_local() {
        // c_attn's output (bf16 under autocast) feeds lm_head: adapting lm_head copies it to the
        // float32 adapters' dtype (a view when it already is), a local of the LoRA forward
        let mut c = cfg(&["lm_head"]);
        c.autocast = true;
        let g = apply_lora(&gpt2_block(), &c).expect("lora");
        let m = g.find_module("lm_head").expect("lora layer");
        let kinds = op_kinds(&g, m);
        assert_eq!(kinds, ["_to_copy", "mul", "add"]);
        let cast = g
            .nodes
            .iter()
            .find(|n| n.module == m)
            .map(|n| n.outputs[0])
            .expect("cast");
        assert!(g.holds.iter().any(|h| h.0 == cast));
        let step = StepConfig {
            precision: crate::dtype::Precision::AmpBf16,
            ..StepConfig::default()
        };
        simulate(&g, &step).expect("simulate");
    }

    #[test]
    fn bad_targets_and_patterns_are_named() {
        let e = apply_lora(&tiny(), &cfg(&["c_attn"])).unwrap_err();
        assert!(e.to_string().contains("o_proj, q_proj"), "{e}");
        let e = freeze(&mut tiny(), &["nope".to_string()]).unwrap_err();
        assert!(e.to_string().contains("`nope`"), "{e}");
        let mut c = cfg(&["q_proj"]);
        c.rank = 0;
        assert!(apply_lora(&tiny(), &c).is_err());
    }
}
