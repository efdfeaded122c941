//! 4-bit loading as a graph pass: what `from_pretrained(..., quantization_config=
//! BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant,
//! bnb_4bit_compute_dtype))` does with transformers 5.23 and bitsandbytes.
//!
//! Every `nn.Linear` but the output head (transformers' `get_keys_to_not_convert`: the output
//! embeddings, tied weights and the module of the last parameter) becomes a `Linear4bit`:
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
        }
    }
}

/// A linear layer to quantize: its node, weight and bias.
struct Convert {
    weight: ParamId,
    bias: Option<ParamId>,
    in_features: u64,
    out_features: u64,
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
    let last_param = g
        .params
        .iter()
        .rev()
        .find(|p| p.kind == ParamKind::Parameter)
        .map(|p| p.module);
    let mut convert: Vec<Option<Convert>> = (0..g.nodes.len()).map(|_| None).collect();
    for s in &g.scopes {
        let (first, end) = (s.first as usize, s.end as usize);
        if end != first + 1 {
            continue;
        }
        let node = &g.nodes[first];
        let md = &g.modules[node.module.0 as usize];
        let head =
            Some(node.module) == last_param || node.outputs.iter().any(|t| g.outputs.contains(t));
        if node.op.kind() != "Linear" || md.type_name != "Linear" || node.params.is_empty() || head
        {
            continue;
        }
        let w = g.param(node.params[0]);
        let [out_features, in_features] = w.shape[..] else {
            continue;
        };
        convert[first] = Some(Convert {
            weight: node.params[0],
            bias: node.params.get(1).copied(),
            in_features,
            out_features,
        });
    }
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
    let mut quantized: Vec<Option<ModuleId>> = vec![None; g.params.len()];
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
        let x = n.inputs[0];
        quantized[c.weight.0 as usize] = Some(m);
        out.modules[m.0 as usize].type_name = FOUR_BIT_LINEAR.to_string();
        let to_compute = || Arc::new(ToDtype::fixed(cfg.compute_dtype));
        let xc = push_node(&mut out, m, to_compute(), vec![x], Vec::new());
        let mut inputs = vec![xc];
        if let Some(b) = c.bias {
            out.tensors.push(TensorDef {
                shape: vec![c.out_features],
                dtype: DType::F32,
                producer: None,
                param: Some(b),
            });
            let bt = TensorId(out.tensors.len() as u32 - 1);
            inputs.push(push_node(&mut out, m, to_compute(), vec![bt], Vec::new()));
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
    for t in out.outputs.iter_mut() {
        *t = subst[t.0 as usize];
    }
    reorder_loading(&mut out, &quantized, cfg);
    Ok(out)
}

/// Turns the quantized weights into packed uint8 parameters, adds their quantization state and
/// writes the loading order: `init_rank`s and the loaded weights and quantization temporaries as
/// construction temporaries.
fn reorder_loading(g: &mut Graph, quantized: &[Option<ModuleId>], cfg: &FourBitConfig) {
    let mut order: Vec<ParamId> = (0..g.params.len() as u32).map(ParamId).collect();
    order.sort_by_key(|p| g.params[p.0 as usize].init_rank);
    let mut loaded: Vec<ParamId> = Vec::new();
    let mut temps: Vec<InitTemporary> = Vec::new();
    let mut first_nested = true;
    for pid in order {
        let Some(m) = quantized[pid.0 as usize] else {
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
            shape: shape.clone(),
            dtype: Some(cfg.load_dtype),
            alloc_at: start,
            free_at: 0,
            module: m,
        }];
        if cfg.double_quant {
            // quantize_4bit's float32 scales, dropped once quantize_blockwise has compressed them
            group_temps.push(InitTemporary {
                shape: vec![blocks],
                dtype: Some(DType::F32),
                alloc_at: start,
                free_at: 0,
                module: m,
            });
        }
        let state = state_tensors(n, cfg.double_quant, first_nested);
        if cfg.double_quant {
            first_nested = false;
        }
        for t in state {
            let at = loaded.len() as u32;
            match t {
                None => {
                    let p = &mut g.params[pid.0 as usize];
                    p.shape = FourBitQuant::packed_shape(n);
                    p.dtype = DType::U8;
                    p.stored_dtype = Some(DType::U8);
                    p.trainable = false;
                    loaded.push(pid);
                }
                Some((attr, shape, dtype)) => {
                    if attr == "quant_map" {
                        // get_4bit_type: data.div_(data.abs().max())
                        for s in [vec![16], vec![]] {
                            group_temps.push(InitTemporary {
                                shape: s,
                                dtype: Some(DType::F32),
                                alloc_at: at,
                                free_at: at,
                                module: m,
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
                        shape,
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
                            module: m,
                        });
                    }
                }
            }
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
