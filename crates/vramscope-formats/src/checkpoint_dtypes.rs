//! Parameter dtypes from a checkpoint's headers (`--weights-dtype from-files`): each parameter and
//! buffer of a built graph takes the dtype its safetensors tensor is stored in, as
//! `from_pretrained(dtype="auto")` keeps a uniform checkpoint's dtype, or `load_state_dict(...,
//! assign=True)` keeps each tensor's own. Only headers are read (see [`crate::weights::inspect`]).
//!
//! A tensor is matched by its name in the file, either the graph's name
//! (`model.layers.0.self_attn.q_proj.weight`) or that name without the base model's prefix (GPT-2
//! checkpoints store `h.0.attn.c_attn.weight` for `transformer.h.0.attn.c_attn.weight`). A matched
//! tensor whose shape differs from the graph's is an error naming it; graph parameters the files
//! lack and file tensors the graph has no use for are reported for the caller to warn about.

use std::collections::HashMap;

use vramscope_core::ir::{Graph, ParamKind};
use vramscope_core::DType;

use crate::weights::{WeightInventory, WeightTensor, WeightsError, BNB_QUANT_STATE_MARK};

/// What applying a checkpoint's dtypes did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtypeMatch {
    /// Parameters and buffers given the dtype of their file tensor.
    pub matched: usize,
    /// Graph parameters no file tensor matches (their dtype follows the precision), by name.
    pub missing: Vec<String>,
    /// File tensors matching no graph parameter or buffer, by name (bitsandbytes' packed
    /// `quant_state` metadata, which stays on the CPU, is not listed).
    pub unused: Vec<String>,
}

/// The vramscope dtype of a safetensors dtype name, if it has one.
pub fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "U8" => DType::U8,
        "BOOL" => DType::Bool,
        _ => return None,
    })
}

/// The floating dtype holding most of the checkpoint's bytes (what `dtype="auto"` loads a uniform
/// checkpoint in), if it has floating tensors.
pub fn dominant_float_dtype(inv: &WeightInventory) -> Option<DType> {
    let mut bytes: Vec<(DType, u64)> = Vec::new();
    for t in &inv.tensors {
        let Some(d) = dtype_of(&t.dtype).filter(|d| d.is_float()) else {
            continue;
        };
        match bytes.iter_mut().find(|(x, _)| *x == d) {
            Some((_, b)) => *b += t.bytes,
            None => bytes.push((d, t.bytes)),
        }
    }
    bytes.into_iter().max_by_key(|&(_, b)| b).map(|(d, _)| d)
}

fn without_prefix(name: &str) -> Option<&str> {
    name.split_once('.').map(|(_, rest)| rest)
}

/// The name a vision-language checkpoint saved before transformers 5 gives a parameter
/// (transformers' `conversion_mapping` for `gemma3` and SigLIP run backwards:
/// `model.language_model.X` was `language_model.model.X`, `model.vision_tower.X` was
/// `vision_tower.vision_model.X`, `model.multi_modal_projector.X` was `multi_modal_projector.X`,
/// `lm_head` was `language_model.lm_head`).
fn legacy_vlm_name(name: &str) -> Option<String> {
    const RENAMED: [(&str, &str); 4] = [
        ("model.language_model.", "language_model.model."),
        ("model.vision_tower.", "vision_tower.vision_model."),
        ("model.multi_modal_projector.", "multi_modal_projector."),
        ("lm_head.", "language_model.lm_head."),
    ];
    RENAMED
        .iter()
        .find_map(|(now, then)| name.strip_prefix(now).map(|rest| format!("{then}{rest}")))
}

/// Gives every parameter and buffer of `graph` that the checkpoint `inv` holds the dtype stored in
/// the file. Errors name the tensor and file: a shape that differs from the graph's, or a dtype
/// the simulator has no type for.
pub fn apply_file_dtypes(
    graph: &mut Graph,
    inv: &WeightInventory,
) -> Result<DtypeMatch, WeightsError> {
    let by_name: HashMap<&str, &WeightTensor> =
        inv.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut used = vec![false; inv.tensors.len()];
    let index: HashMap<&str, usize> = inv
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut out = DtypeMatch {
        matched: 0,
        missing: Vec::new(),
        unused: Vec::new(),
    };
    for p in graph.params.iter_mut() {
        let found = by_name
            .get(p.name.as_str())
            .or_else(|| without_prefix(&p.name).and_then(|n| by_name.get(n)))
            .or_else(|| legacy_vlm_name(&p.name).and_then(|n| by_name.get(n.as_str())));
        let Some(t) = found else {
            if p.kind == ParamKind::Parameter {
                out.missing.push(p.name.clone());
            }
            continue;
        };
        if t.shape[..] != p.shape[..] {
            return Err(WeightsError::invalid(
                &t.file,
                format!("tensor `{}`", t.name),
                format!(
                    "shape {:?} in the file, but the model built from the config has {:?} for `{}`; the config and the weights do not belong together",
                    t.shape, p.shape, p.name
                ),
            ));
        }
        let dtype = dtype_of(&t.dtype).ok_or_else(|| {
            WeightsError::invalid(
                &t.file,
                format!("tensor `{}`", t.name),
                format!(
                    "dtype {} has no PyTorch counterpart the simulator models (F32, F16, BF16, F64, I64, I32, U8, BOOL)",
                    t.dtype
                ),
            )
        })?;
        p.stored_dtype = Some(dtype);
        out.matched += 1;
        if let Some(&i) = index.get(t.name.as_str()) {
            used[i] = true;
        }
    }
    out.unused = inv
        .tensors
        .iter()
        .zip(used)
        // a 4-bit checkpoint's `quant_state.bitsandbytes__nf4` is its QuantState's other fields
        // as JSON bytes, which `QuantState.from_dict` reads on the CPU: never a device tensor
        .filter(|(t, u)| !u && !t.name.contains(BNB_QUANT_STATE_MARK))
        .map(|(t, _)| t.name.clone())
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn vision_language_checkpoints_saved_before_transformers_5_match() {
        use super::legacy_vlm_name as legacy;
        assert_eq!(
            legacy("model.language_model.layers.0.self_attn.q_proj.weight").as_deref(),
            Some("language_model.model.layers.0.self_attn.q_proj.weight")
        );
        assert_eq!(
            legacy("model.vision_tower.post_layernorm.bias").as_deref(),
            Some("vision_tower.vision_model.post_layernorm.bias")
        );
        assert_eq!(
            legacy("model.multi_modal_projector.mm_input_projection_weight").as_deref(),
            Some("multi_modal_projector.mm_input_projection_weight")
        );
        assert_eq!(
            legacy("lm_head.weight").as_deref(),
            Some("language_model.lm_head.weight")
        );
        assert_eq!(legacy("model.layers.0.mlp.up_proj.weight"), None);
    }

    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use vramscope_core::ir::Task;
    use vramscope_core::ops::Linear;
    use vramscope_core::GraphBuilder;

    use super::*;
    use crate::weights::WeightFormat;

    fn graph() -> Graph {
        let mut b = GraphBuilder::new("gpt2", "GPT2LMHeadModel");
        let x = b.input(vec![2, 8], DType::F32);
        let y = b.module("transformer", "GPT2Model", &[x], |b| {
            b.layer("c_attn", Linear::new(8, 24), &[x])
        });
        b.finish(&[y], Task::Classification { num_classes: 24 })
            .expect("graph")
    }

    fn tensor(name: &str, dtype: &str, shape: Vec<u64>) -> WeightTensor {
        let elements = shape.iter().product::<u64>();
        WeightTensor {
            name: name.into(),
            dtype: dtype.into(),
            shape,
            elements,
            bytes: elements * crate::safetensors::dtype_bits(dtype).unwrap_or(8) / 8,
            file: PathBuf::from("model.safetensors"),
            offset: 0,
        }
    }

    fn inventory(tensors: Vec<WeightTensor>) -> WeightInventory {
        WeightInventory {
            format: WeightFormat::Safetensors,
            files: vec![PathBuf::from("model.safetensors")],
            tensors,
            metadata: BTreeMap::new(),
        }
    }

    #[test]
    fn names_match_with_or_without_the_base_model_prefix() {
        let mut g = graph();
        let inv = inventory(vec![
            tensor("c_attn.weight", "F16", vec![24, 8]),
            tensor("transformer.c_attn.bias", "F32", vec![24]),
            tensor("h.0.attn.masked_bias", "F32", vec![]),
        ]);
        let m = apply_file_dtypes(&mut g, &inv).expect("apply");
        assert_eq!(m.matched, 2);
        assert_eq!(m.unused, vec!["h.0.attn.masked_bias".to_string()]);
        assert_eq!(g.params[0].stored_dtype, Some(DType::F16));
        assert_eq!(g.params[1].stored_dtype, Some(DType::F32));
        assert_eq!(dominant_float_dtype(&inv), Some(DType::F16));
    }

    #[test]
    fn shapes_and_dtypes_the_simulator_cannot_hold_are_errors() {
        let inv = inventory(vec![tensor("c_attn.weight", "F16", vec![8, 24])]);
        let e = apply_file_dtypes(&mut graph(), &inv)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tensor `c_attn.weight`") && e.contains("[8, 24]"),
            "{e}"
        );
        let inv = inventory(vec![tensor("c_attn.weight", "F8_E4M3", vec![24, 8])]);
        let e = apply_file_dtypes(&mut graph(), &inv)
            .unwrap_err()
            .to_string();
        assert!(e.contains("F8_E4M3"), "{e}");
    }
}
