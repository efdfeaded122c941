//! 4-bit loading as a graph pass: what `from_pretrained(..., quantization_config=
//! BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant,
//! bnb_4bit_compute_dtype))` does with transformers 5.23 and bitsandbytes.
//!
//! Every `nn.Linear` (and GPT-2's `Conv1D`, whose `[in, out]` weight is transposed first) but the
//! output head (transformers' `get_keys_to_not_convert`: the output embeddings, tied weights and the
//! module of the last parameter) becomes a `Linear4bit`:
//! - its weight is a frozen `Params4bit`, uint8 `[(n + 1) // 2, 1]` (two NF4 codes a byte), with
//!   its quantization state beside it (listed as buffers named after `QuantState.as_dict`):
//!   `absmax` (float32, one per 64 weights) and `quant_map` (the 16 NF4 values); with double
//!   quantization `absmax` is uint8, plus `nested_absmax` (float32, one per 256 blocks),
//!   `nested_quant_map` (a copy of bitsandbytes' 256-entry dynamic map, itself created once) and
//!   `nested_offset`;
//! - its forward is `x.to(compute_dtype)`, `bias.to(compute_dtype)`, `MatMul4Bit` (see
//!   [`MatMul4Bit`](crate::ops::MatMul4Bit)), then `.to(x.dtype)`.
//!
//! Loading replaces construction in the `model` phase: parameters and buffers are materialised in
//! `init_rank` order with no construction temporaries (a tied head's own weight is never created),
//! and each quantized weight is loaded in the model's dtype, quantized on the device
//! (`quantize_4bit`: the float32 scales, the packed codes, the NF4 table with its `abs().max()`
//! temporaries; with double quantization the mean offset, `absmax - offset`, then
//! `quantize_blockwise` of it) and freed before the next tensor loads. Modelling assumption:
//! exactly one loaded weight is on the device at a time.

use std::sync::Arc;

use crate::dtype::{DType, Precision};
use crate::ir::{
    Graph, InitTemporary, ModuleId, ParamDef, ParamId, ParamKind, TensorDef, TensorId,
};
use crate::ops::{FourBitQuant, MatMul4Bit, ToDtype};

use super::lora::{push_node, PassError};

/// The module class of a 4-bit linear layer.
pub const FOUR_BIT_LINEAR: &str = "Linear4bit";

/// What `BitsAndBytesConfig` and `from_pretrained` are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FourBitConfig {
    /// `bnb_4bit_use_double_quant`.
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype`: the dtype the matmuls run in.
    pub compute_dtype: DType,
    /// `from_pretrained(dtype=...)`: what the weights are loaded in before quantization, and what
    /// they dequantize to.
    pub load_dtype: DType,
    /// The checkpoint was saved quantized (its config.json has a bitsandbytes
    /// `quantization_config`): `Params4bit.from_prequantized` moves the packed weights and their
    /// saved quantization state to the device, so nothing is quantized there (no weight in
    /// `load_dtype`, no quantization temporaries, no global dynamic map).
    pub pre_quantized: bool,
}

impl FourBitConfig {
    /// The usual recipe for a step precision: weights loaded in the precision's parameter dtype,
    /// computed in bfloat16 (float16 for the float16 precisions, as on GPUs without bfloat16).
    pub fn for_precision(precision: Precision, double_quant: bool) -> Self {
        let compute_dtype = match precision {
            Precision::Fp16 | Precision::AmpFp16 => DType::F16,
            _ => DType::BF16,
        };
        FourBitConfig {
            double_quant,
            compute_dtype,
            load_dtype: precision.param_dtype(),
            pre_quantized: false,
        }
    }
}

/// The module class of transformers' `Conv1D` (GPT-2's projections, weight `[in, out]`).
pub const CONV1D: &str = "Conv1D";

/// A linear layer to quantize (or to adapt with LoRA): its node, weight and bias.
pub(super) struct Convert {
    weight: ParamId,
    bias: Option<ParamId>,
    in_features: u64,
    out_features: u64,
    /// which node input is the layer's input
    x_input: usize,
    /// a `Conv1D` weight `[in, out]`, transposed (and made contiguous: a copy) before quantizing
    transposed: bool,
}

/// The layer a node is the whole forward of, if 4-bit loading converts it: an `nn.Linear`
/// (`Linear` op with its weight and bias), or GPT-2's `Conv1D` (`addmm(bias, x, weight)` with
/// weight `[in, out]`).
pub(super) fn convertible(g: &Graph, node: &crate::ir::Node) -> Option<Convert> {
    let md = &g.modules[node.module.0 as usize];
    match (node.op.kind(), &*md.type_name) {
        ("Linear", "Linear") => {
            let weight = *node.params.first()?;
            let [out_features, in_features] = g.param(weight).shape[..] else {
                return None;
            };
            Some(Convert {
                weight,
                bias: node.params.get(1).copied(),
                in_features,
                out_features,
                x_input: 0,
                transposed: false,
            })
        }
        ("addmm", CONV1D) if node.inputs.len() == 3 => {
            let param = |i: usize| g.tensors[node.inputs[i].0 as usize].param;
            let weight = param(2)?;
            let [in_features, out_features] = g.param(weight).shape[..] else {
                return None;
            };
            Some(Convert {
                weight,
                bias: param(0),
                in_features,
                out_features,
                x_input: 1,
                transposed: true,
            })
        }
        _ => None,
    }
}

/// The quantization state tensors of one weight, in the order `quantize_4bit` allocates them
/// around the packed weight (`None` marks the packed weight itself).
fn state_tensors(
    n: u64,
    double_quant: bool,
    first: bool,
) -> Vec<Option<(&'static str, Vec<u64>, DType)>> {
    let blocks = FourBitQuant::blocks(n);
    if !double_quant {
        return vec![
            Some(("absmax", vec![blocks], DType::F32)),
            None,
            Some(("quant_map", vec![16], DType::F32)),
        ];
    }
    let mut v = vec![
        None,
        Some(("quant_map", vec![16], DType::F32)),
        Some(("nested_offset", vec![], DType::F32)),
    ];
    if first {
        v.push(Some(("dynamic_map", vec![256], DType::F32)));
    }
    v.extend([
        Some((
            "nested_absmax",
            vec![blocks.div_ceil(FourBitQuant::NESTED_BLOCKSIZE)],
            DType::F32,
        )),
        Some(("absmax", vec![blocks], DType::U8)),
        Some(("nested_quant_map", vec![256], DType::F32)),
    ]);
    v
}

/// Quantizes every convertible `nn.Linear` of `g` to 4 bits.
pub fn load_in_4bit(g: &Graph, cfg: &FourBitConfig) -> Result<Graph, PassError> {
    // get_keys_to_not_convert names the last parameter without its `.weight`: a module whose
    // weight is last stays unquantized; a last bias (`fc2.bias`) names no module
    let last_param = g
        .params
        .iter()
        .rev()
        .find(|p| p.kind == ParamKind::Parameter)
        .filter(|p| p.name == "weight" || p.name.ends_with(".weight"))
        .map(|p| p.module);
    let mut convert: Vec<Option<Convert>> = (0..g.nodes.len()).map(|_| None).collect();
    for s in &g.scopes {
        let (first, end) = (s.first as usize, s.end as usize);
        if end != first + 1 {
            continue;
        }
        let node = &g.nodes[first];
        let head =
            Some(node.module) == last_param || node.outputs.iter().any(|t| g.outputs.contains(t));
        if !head && node.module == s.module {
            convert[first] = convertible(g, node);
        }
    }
    // nn.Linear layers the forward never calls (a vision tower run on text alone): bitsandbytes
    // quantizes them while loading all the same
    let idle: Vec<(ModuleId, ParamId)> = super::idle_modules(g)
        .iter()
        .filter(|m| &*g.modules[m.id.0 as usize].type_name == "Linear" && Some(m.id) != last_param)
        .filter_map(|m| {
            let (weight, _) = m.param("weight").filter(|(_, w)| w.shape.len() == 2)?;
            Some((m.id, weight))
        })
        .collect();
    if convert.iter().all(Option::is_none) {
        return Err(PassError::BadOption(
            "--load-in-4bit / --qlora: the model has no nn.Linear layer to quantize (the output head stays unquantized)".into(),
        ));
    }
    let quant = FourBitQuant {
        double_quant: cfg.double_quant,
        quant_dtype: cfg.load_dtype,
    };
    let mut out = g.clone();
    out.nodes.clear();
    // loading constructs nothing: no tied head weight is created and dropped
    out.init_temporaries.clear();
    let mut new_index: Vec<u32> = Vec::with_capacity(g.nodes.len() + 1);
    let mut subst: Vec<TensorId> = (0..g.tensors.len() as u32).map(TensorId).collect();
    let mut quantized: Vec<Option<(ModuleId, bool)>> = vec![None; g.params.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        new_index.push(out.nodes.len() as u32);
        let mut n = node.clone();
        for t in n.inputs.iter_mut() {
            *t = subst[t.0 as usize];
        }
        let id = crate::ir::NodeId(out.nodes.len() as u32);
        for t in &n.outputs {
            out.tensors[t.0 as usize].producer = Some(id);
        }
        let Some(c) = &convert[i] else {
            out.nodes.push(n);
            continue;
        };
        let m = n.module;
        let x = n.inputs[c.x_input];
        quantized[c.weight.0 as usize] = Some((m, c.transposed));
        out.modules[m.0 as usize].type_name = FOUR_BIT_LINEAR.into();
        let to_compute = || Arc::new(ToDtype::fixed(cfg.compute_dtype));
        let xc = push_node(&mut out, m, to_compute(), vec![x], Vec::new());
        let mut inputs = vec![xc];
        if let Some(b) = c.bias {
            out.tensors.push(TensorDef {
                shape: [c.out_features].into_iter().collect(),
                dtype: DType::F32,
                producer: None,
                param: Some(b),
            });
            let bt = TensorId(out.tensors.len() as u32 - 1);
            // `if self.bias.dtype != x.dtype: self.bias.data = self.bias.data.to(x.dtype)`, then
            // `self.bias.to(compute_dtype)` (the recast comes before `x.to(compute_dtype)`, which
            // copies nothing whenever the recast happens: x is then in the compute dtype)
            let cast = Arc::new(ToDtype::fixed_after_recast(cfg.compute_dtype));
            inputs.push(push_node(&mut out, m, cast, vec![bt, x], Vec::new()));
        }
        let op = MatMul4Bit {
            in_features: c.in_features,
            out_features: c.out_features,
            bias: c.bias.is_some(),
            quant,
        };
        let inputs_held = inputs.clone();
        let y = push_node(&mut out, m, Arc::new(op), inputs, vec![c.weight]);
        let back = push_node(
            &mut out,
            m,
            Arc::new(ToDtype::like_input_1()),
            vec![y, x],
            Vec::new(),
        );
        // `x = x.to(compute_dtype)` and `bias = ...` are locals until forward returns
        let end = out.nodes.len() as u32;
        out.holds.extend(inputs_held.into_iter().map(|t| (t, end)));
        subst[node.outputs[0].0 as usize] = back;
    }
    for &(m, weight) in &idle {
        quantized[weight.0 as usize] = Some((m, false));
        out.modules[m.0 as usize].type_name = FOUR_BIT_LINEAR.into();
    }
    new_index.push(out.nodes.len() as u32);
    let map = |k: u32| new_index[k as usize];
    for s in out.scopes.iter_mut() {
        s.first = map(s.first);
        s.end = map(s.end);
        for t in s.inputs.iter_mut() {
            *t = subst[t.0 as usize];
        }
    }
    let original = g.holds.len();
    for h in out.holds.iter_mut().take(original) {
        h.0 = subst[h.0 .0 as usize];
        h.1 = map(h.1);
    }
    for d in out.dropped_graphs.iter_mut() {
        d.nodes = map(d.nodes.start)..map(d.nodes.end);
        d.after = subst[d.after.0 as usize];
    }
    for t in out.outputs.iter_mut() {
        *t = subst[t.0 as usize];
    }
    reorder_loading(&mut out, &quantized, cfg);
    Ok(out)
}

/// Turns the quantized weights into packed uint8 parameters, adds their quantization state and
/// writes the loading order: `init_rank`s and the loaded weights and quantization temporaries as
/// construction temporaries.
fn reorder_loading(g: &mut Graph, quantized: &[Option<(ModuleId, bool)>], cfg: &FourBitConfig) {
    let mut order: Vec<ParamId> = (0..g.params.len() as u32).map(ParamId).collect();
    order.sort_by_key(|p| g.params[p.0 as usize].init_rank);
    let mut loaded: Vec<ParamId> = Vec::new();
    let mut temps: Vec<InitTemporary> = Vec::new();
    let mut first_nested = true;
    for pid in order {
        let Some((m, transposed)) = quantized[pid.0 as usize] else {
            loaded.push(pid);
            continue;
        };
        let (name, shape) = {
            let p = &g.params[pid.0 as usize];
            (p.name.clone(), p.shape.clone())
        };
        let n: u64 = shape.iter().product();
        let blocks = FourBitQuant::blocks(n);
        let start = loaded.len() as u32;
        let mut group_temps = vec![InitTemporary {
            shape: shape.to_vec(),
            dtype: Some(cfg.load_dtype),
            alloc_at: start,
            free_at: 0,
            freed_after_allocations: false,
            allocated_after_frees: false,
            module: m,
            order: None,
        }];
        if transposed {
            // Bnb4bitQuantize passes `value.T`; `_quantize` makes it contiguous: a copy
            group_temps.push(InitTemporary {
                shape: shape.iter().rev().copied().collect(),
                dtype: Some(cfg.load_dtype),
                alloc_at: start,
                free_at: 0,
                freed_after_allocations: false,
                allocated_after_frees: false,
                module: m,
                order: None,
            });
        }
        if cfg.double_quant {
            // quantize_4bit's float32 scales, dropped once quantize_blockwise has compressed them
            group_temps.push(InitTemporary {
                shape: vec![blocks],
                dtype: Some(DType::F32),
                alloc_at: start,
                free_at: 0,
                freed_after_allocations: false,
                allocated_after_frees: false,
                module: m,
                order: None,
            });
        }
        let state = state_tensors(n, cfg.double_quant, first_nested && !cfg.pre_quantized);
        if cfg.double_quant {
            first_nested = false;
        }
        for t in state {
            let at = loaded.len() as u32;
            match t {
                None => {
                    let p = &mut g.params[pid.0 as usize];
                    p.shape = FourBitQuant::packed_shape(n).into();
                    p.dtype = DType::U8;
                    p.stored_dtype = Some(DType::U8);
                    p.trainable = false;
                    loaded.push(pid);
                }
                Some((attr, shape, dtype)) => {
                    if attr == "quant_map" {
                        // get_4bit_type: data.div_(data.abs().max()) once the table exists:
                        // `abs` and `max`, freed in that order, before the loaded weight goes
                        for (s, order) in [(vec![16], (0, 2)), (vec![], (1, 3))] {
                            group_temps.push(InitTemporary {
                                shape: s,
                                dtype: Some(DType::F32),
                                alloc_at: at + 1,
                                free_at: at + 1,
                                freed_after_allocations: false,
                                allocated_after_frees: false,
                                module: m,
                                order: Some(order),
                            });
                        }
                    }
                    let (module, pname) = if attr == "dynamic_map" {
                        (ModuleId(0), "bitsandbytes.name2qmap.dynamic".to_string())
                    } else {
                        (m, format!("{name}.{attr}"))
                    };
                    let id = ParamId(g.params.len() as u32);
                    g.params.push(ParamDef {
                        name: pname,
                        shape: shape.into(),
                        dtype,
                        stored_dtype: Some(dtype),
                        kind: ParamKind::Buffer,
                        trainable: false,
                        module,
                        init_rank: 0,
                    });
                    loaded.push(id);
                    if attr == "nested_offset" {
                        // quantize_blockwise(absmax - offset): the difference lives until it
                        // returns
                        group_temps.push(InitTemporary {
                            shape: vec![blocks],
                            dtype: Some(DType::F32),
                            alloc_at: loaded.len() as u32,
                            free_at: 0,
                            freed_after_allocations: false,
                            allocated_after_frees: false,
                            module: m,
                            order: None,
                        });
                    }
                }
            }
        }
        if cfg.pre_quantized {
            // loaded as saved: nothing is quantized on the device
            group_temps.clear();
        }
        let end = loaded.len() as u32;
        for mut t in group_temps {
            if t.free_at == 0 {
                t.free_at = end;
            }
            temps.push(t);
        }
    }
    for (rank, pid) in loaded.iter().enumerate() {
        g.params[pid.0 as usize].init_rank = rank as u32;
    }
    g.init_temporaries = temps;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Task;
    use crate::ops::Linear;
    use crate::passes::test_util::{op_kinds, param};
    use crate::passes::{apply_lora, LoraConfig};
    use crate::sim::{simulate, Mode, StepConfig};
    use crate::GraphBuilder;

    /// x [2, 8, 64] -> block.q_proj (64 -> 64, bias) -> lm_head (64 -> 10): lm_head is the head
    fn tiny() -> Graph {
        let mut b = GraphBuilder::new("tiny", "Tiny");
        let x = b.input(vec![2, 8, 64], DType::F32);
        let y = b.module("block", "Block", &[x], |b| {
            b.layer("q_proj", Linear::new(64, 64), &[x])
        });
        let y = b.layer("lm_head", Linear::new(64, 10), &[y]);
        b.finish(&[y], Task::Classification { num_classes: 10 })
            .expect("tiny graph")
    }

    fn cfg(double_quant: bool) -> FourBitConfig {
        FourBitConfig::for_precision(Precision::Bf16, double_quant)
    }

    #[test]
    fn linear_layers_but_the_head_become_packed_uint8_with_their_quant_state() {
        let g = load_in_4bit(&tiny(), &cfg(false)).expect("4-bit");
        let w = param(&g, "block.q_proj.weight");
        assert_eq!(w.shape.to_vec(), vec![64 * 64 / 2, 1]);
        assert_eq!(w.stored_dtype, Some(DType::U8));
        assert!(!w.trainable);
        assert_eq!(
            param(&g, "block.q_proj.weight.absmax").shape.to_vec(),
            vec![64]
        );
        assert_eq!(
            param(&g, "block.q_proj.weight.quant_map").stored_dtype,
            Some(DType::F32)
        );
        // the head keeps its float weight; the bias stays a float parameter
        assert_eq!(param(&g, "lm_head.weight").stored_dtype, None);
        assert_eq!(param(&g, "block.q_proj.bias").stored_dtype, None);
        let q = g.find_module("block.q_proj").expect("q_proj");
        assert_eq!(&*g.modules[q.0 as usize].type_name, FOUR_BIT_LINEAR);
        let kinds = op_kinds(&g, q);
        assert_eq!(kinds, ["_to_copy", "_to_copy", "MatMul4Bit", "_to_copy"]);
    }

    #[test]
    fn double_quantization_compresses_the_scales() {
        let g = load_in_4bit(&tiny(), &cfg(true)).expect("4-bit");
        let absmax = param(&g, "block.q_proj.weight.absmax");
        assert_eq!((absmax.shape.to_vec(), absmax.dtype), (vec![64], DType::U8));
        assert_eq!(
            param(&g, "block.q_proj.weight.nested_absmax")
                .shape
                .to_vec(),
            vec![1]
        );
        assert_eq!(
            param(&g, "block.q_proj.weight.nested_quant_map")
                .shape
                .to_vec(),
            vec![256]
        );
        assert_eq!(
            param(&g, "bitsandbytes.name2qmap.dynamic").shape.to_vec(),
            vec![256]
        );
        // quantize-on-load: the loaded bf16 weight, the float32 scales, absmax - offset, and
        // get_4bit_type's abs/max, all gone once the model is loaded
        let shapes: Vec<(Vec<u64>, Option<DType>)> = g
            .init_temporaries
            .iter()
            .map(|t| (t.shape.clone(), t.dtype))
            .collect();
        assert!(shapes.contains(&(vec![64, 64], Some(DType::BF16))));
        assert_eq!(
            shapes
                .iter()
                .filter(|s| s.0 == vec![64] && s.1 == Some(DType::F32))
                .count(),
            2
        );
    }

    #[test]
    fn a_pre_quantized_checkpoint_loads_its_state_without_quantizing() {
        let saved = FourBitConfig {
            pre_quantized: true,
            ..cfg(true)
        };
        let g = load_in_4bit(&tiny(), &saved).expect("4-bit");
        let fresh = load_in_4bit(&tiny(), &cfg(true)).expect("4-bit");
        assert!(g.init_temporaries.is_empty());
        assert!(!fresh.init_temporaries.is_empty());
        // the same packed weight and saved state, but no dynamic map made by quantize_blockwise
        let names =
            |g: &Graph| -> Vec<String> { g.params.iter().map(|p| p.name.clone()).collect() };
        let mut expected = names(&fresh);
        expected.retain(|n| n != "bitsandbytes.name2qmap.dynamic");
        assert_eq!(names(&g), expected);
        assert_eq!(
            param(&g, "block.q_proj.weight.absmax").stored_dtype,
            Some(DType::U8)
        );
    }

    #[test]
    fn a_4bit_model_holds_its_packed_weights_after_loading() {
        let g = load_in_4bit(&tiny(), &cfg(false)).expect("4-bit");
        let step = StepConfig {
            mode: Mode::Infer,
            precision: Precision::Bf16,
            ..StepConfig::default()
        };
        let s = simulate(&g, &step).expect("simulate");
        let model = &s.phases[1];
        // every tensor is one 512-byte block: packed (2048 B -> 2048), absmax (256 B), quant
        // map, bias, lm_head weight (1280 B -> 1536), lm_head bias
        let blocks = [2048, 512, 512, 512, 1536, 512];
        assert_eq!(model.allocated_after, blocks.iter().sum::<u64>());
        // at the peak of loading: the loaded bf16 weight (8 KiB), absmax, the packed weight, the
        // NF4 table and its abs() and max() temporaries (made once it exists, as truth traces)
        assert_eq!(model.peak_allocated, 8192 + 512 + 2048 + 512 + 512 + 512);
    }

    #[test]
    fn qlora_adapters_stay_float32_and_cast_around_the_4bit_layer() {
        let g = load_in_4bit(&tiny(), &cfg(true)).expect("4-bit");
        let lora = LoraConfig {
            rank: 4,
            alpha: 8.0,
            dropout: 0.0,
            targets: Some(vec!["q_proj".into()]),
            autocast: false,
            param_dtype: DType::BF16,
            upcast_adapters: true,
        };
        let g = apply_lora(&g, &lora).expect("lora");
        let a = param(&g, "block.q_proj.lora_A.default.weight");
        assert_eq!(a.stored_dtype, Some(DType::F32));
        assert!(a.trainable);
        let m = g.find_module("block.q_proj").expect("lora layer");
        let kinds = op_kinds(&g, m);
        // result.clone(), x.to(float32), lora_B(...) * scaling, .to(result.dtype), +
        assert_eq!(kinds, ["clone", "_to_copy", "mul", "_to_copy", "add"]);
        let step = StepConfig {
            precision: Precision::Bf16,
            ..StepConfig::default()
        };
        let s = simulate(&g, &step).expect("simulate");
        // float32 adapter gradients: (64 * 4 + 4 * 64) * 4 bytes
        assert_eq!(s.gradient_bytes, 512 * 4);
    }

    #[test]
    fn gpt2_conv1d_layers_are_quantized_after_a_transpose() {
        let mut b = GraphBuilder::new("gpt2", "GPT2LMHeadModel");
        let x = b.input(vec![2, 8, 64], DType::F32);
        let y = b.module("c_attn", "Conv1D", &[x], |b| {
            let w = b.parameter("weight", vec![64, 192]);
            let bias = b.parameter("bias", vec![192]);
            let op = crate::ops::Aten::new("addmm", vec![2, 8, 192])
                .autocast(crate::ops::Autocast::LowerPrecision);
            b.op(op, &[bias, x, w])
        });
        let y = b.layer("lm_head", Linear::new(192, 10), &[y]);
        let g = b
            .finish(&[y], Task::Classification { num_classes: 10 })
            .expect("graph");
        let g = load_in_4bit(&g, &cfg(false)).expect("4-bit");
        assert_eq!(
            param(&g, "c_attn.weight").shape.to_vec(),
            vec![64 * 192 / 2, 1]
        );
        let m = g.find_module("c_attn").expect("c_attn");
        assert_eq!(&*g.modules[m.0 as usize].type_name, FOUR_BIT_LINEAR);
        // the loaded [64, 192] weight and its transposed contiguous copy
        let shapes: Vec<Vec<u64>> = g.init_temporaries.iter().map(|t| t.shape.clone()).collect();
        assert!(shapes.contains(&vec![64, 192]) && shapes.contains(&vec![192, 64]));
    }

    #[test]
    fn a_model_whose_only_linear_is_the_head_is_an_error() {
        let mut b = GraphBuilder::new("head", "Head");
        let x = b.input(vec![2, 64], DType::F32);
        let y = b.layer("fc", Linear::new(64, 10), &[x]);
        let g = b
            .finish(&[y], Task::Classification { num_classes: 10 })
            .expect("graph");
        let e = load_in_4bit(&g, &cfg(false)).unwrap_err();
        assert!(
            e.to_string().contains("no nn.Linear layer to quantize"),
            "{e}"
        );
    }
}
