//! Checkpoints saved already quantized: a `quantization_config` in config.json, which
//! `from_pretrained` follows without being asked (`unsloth/llama-3-8b-bnb-4bit` and the like load
//! as bitsandbytes NF4 weights, not as the bfloat16 model the rest of the config describes).
//!
//! bitsandbytes 4-bit is modelled (the same `Linear4bit` layers as `--load-in-4bit`, loaded from
//! the saved state instead of quantized on the device); every other method (8-bit LLM.int8,
//! GPTQ, AWQ, FP8, compressed-tensors, ...) is refused by name rather than estimated as the
//! unquantized model.

use serde_json::{Map, Value};
use vramscope_core::DType;

use super::{HfConfig, HfError};

/// The bitsandbytes 4-bit settings a pre-quantized checkpoint was saved with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreQuantized4bit {
    /// `bnb_4bit_use_double_quant`: the scales are themselves quantized.
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype` (float32 when absent, `BitsAndBytesConfig`'s default).
    pub compute_dtype: DType,
    /// The dtype the saved quantization state dequantizes to (`quant_state.dtype`, that of the
    /// weights when they were quantized): taken to be the config's `dtype` / `torch_dtype`,
    /// float32 when it has none.
    pub quant_dtype: DType,
}

const FIELD: &str = "quantization_config";

/// The config's `quantization_config`: `None` for a checkpoint saved unquantized, the 4-bit
/// settings for a bitsandbytes 4-bit one, an error naming the field for anything else.
pub fn pre_quantized(cfg: &HfConfig) -> Result<Option<PreQuantized4bit>, HfError> {
    let Some(q) = cfg.object(FIELD)? else {
        return Ok(None);
    };
    let err = |key: &str, expected: String| HfError::Field {
        path: cfg.path.clone(),
        field: format!("{FIELD}.{key}"),
        expected,
    };
    let method = match q.get("quant_method") {
        None | Some(Value::Null) => "bitsandbytes",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => return Err(err("quant_method", "a string".into())),
    };
    if method != "bitsandbytes" {
        return Err(err(
            "quant_method",
            format!(
                "\"bitsandbytes\" with load_in_4bit, the only pre-quantized checkpoints modelled \
                 (got {method:?}); remove `{FIELD}` to estimate the unquantized model"
            ),
        ));
    }
    // a boolean, false when absent; BitsAndBytesConfig.to_dict() writes both `load_in_4bit` and
    // `_load_in_4bit`
    let flag = |key: &str| -> Result<bool, HfError> {
        match q.get(key).or_else(|| q.get(&format!("_{key}"))) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(err(key, "true or false".into())),
        }
    };
    if flag("load_in_8bit")? {
        return Err(err(
            "load_in_8bit",
            format!(
                "false: 8-bit LLM.int8 weights are not modelled, only 4-bit; remove `{FIELD}` \
                 to estimate the unquantized model"
            ),
        ));
    }
    if !flag("load_in_4bit")? {
        return Err(err(
            "load_in_4bit",
            "true (a bitsandbytes config that loads neither 4-bit nor 8-bit)".into(),
        ));
    }
    let text = |key: &str, default: &'static str| -> Result<String, HfError> {
        match q.get(key) {
            None | Some(Value::Null) => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(err(key, "a string".into())),
        }
    };
    let quant_type = text("bnb_4bit_quant_type", "fp4")?;
    if quant_type != "nf4" && quant_type != "fp4" {
        return Err(err(
            "bnb_4bit_quant_type",
            format!("\"nf4\" or \"fp4\" (got {quant_type:?})"),
        ));
    }
    let storage = text("bnb_4bit_quant_storage", "uint8")?;
    if storage != "uint8" {
        return Err(err(
            "bnb_4bit_quant_storage",
            format!("\"uint8\", the only packing modelled (got {storage:?})"),
        ));
    }
    let compute = text("bnb_4bit_compute_dtype", "float32")?;
    let compute_dtype = float_dtype(&compute).ok_or_else(|| {
        err(
            "bnb_4bit_compute_dtype",
            format!("\"float32\", \"bfloat16\" or \"float16\" (got {compute:?})"),
        )
    })?;
    skip_modules(q).map_err(|e| err("llm_int8_skip_modules", e))?;
    let double_quant = flag("bnb_4bit_use_double_quant")?;
    let saved = match cfg.str("dtype")? {
        Some(d) => Some(("dtype", d)),
        None => cfg.str("torch_dtype")?.map(|d| ("torch_dtype", d)),
    };
    let quant_dtype = match saved {
        None => DType::F32,
        Some((key, name)) => float_dtype(name).ok_or_else(|| HfError::Field {
            path: cfg.path.clone(),
            field: key.into(),
            expected: format!(
                "\"float32\", \"bfloat16\" or \"float16\", the dtype of the weights that were quantized (got {name:?})"
            ),
        })?,
    };
    Ok(Some(PreQuantized4bit {
        double_quant,
        compute_dtype,
        quant_dtype,
    }))
}

/// A torch floating-point dtype by the name PyTorch prints (`"bfloat16"`, `"torch.float16"`).
fn float_dtype(name: &str) -> Option<DType> {
    let name = name.trim_start_matches("torch.");
    [DType::F32, DType::BF16, DType::F16]
        .into_iter()
        .find(|d| d.name() == name)
}

/// `llm_int8_skip_modules`: `null` (transformers keeps the output head and tied weights
/// unquantized, as `--load-in-4bit` does) or a list naming only the head; other lists change
/// which layers stay unquantized, which is not modelled.
fn skip_modules(q: &Map<String, Value>) -> Result<(), String> {
    match q.get("llm_int8_skip_modules") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(a)) if a.iter().all(|v| v == "lm_head") => Ok(()),
        Some(Value::Array(_)) => {
            Err("null or [\"lm_head\"] (other modules kept unquantized are not modelled)".into())
        }
        Some(_) => Err("null or a list of module names".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(quantization_config: &str) -> Result<Option<PreQuantized4bit>, HfError> {
        let text =
            format!(r#"{{"model_type": "llama", "quantization_config": {quantization_config}}}"#);
        pre_quantized(&HfConfig::parse("c.json", &text).unwrap())
    }

    #[test]
    fn unsloth_bnb_4bit_is_read() {
        // unsloth/llama-3-8b-bnb-4bit's config.json
        let q = read(
            r#"{"_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "bfloat16",
                "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_use_double_quant": true, "llm_int8_enable_fp32_cpu_offload": false,
                "llm_int8_has_fp16_weight": false, "llm_int8_skip_modules": null,
                "llm_int8_threshold": 6.0, "load_in_4bit": true, "load_in_8bit": false,
                "quant_method": "bitsandbytes"}"#,
        );
        assert_eq!(
            q.unwrap(),
            Some(PreQuantized4bit {
                double_quant: true,
                compute_dtype: DType::BF16,
                quant_dtype: DType::F32,
            })
        );
        let q = read(r#"{"load_in_4bit": true, "quant_method": "bitsandbytes"}"#).unwrap();
        assert_eq!(q.unwrap().compute_dtype, DType::F32);
        let none = HfConfig::parse("c.json", r#"{"model_type": "llama"}"#).unwrap();
        assert_eq!(pre_quantized(&none).unwrap(), None);
    }

    #[test]
    fn other_methods_are_refused_by_name() {
        for (q, needles) in [
            (
                r#"{"bits": 4, "group_size": 128, "quant_method": "gptq"}"#,
                &["quantization_config.quant_method", "\"gptq\"", "remove"][..],
            ),
            (
                r#"{"quant_method": "awq", "bits": 4}"#,
                &["quantization_config.quant_method", "\"awq\""],
            ),
            (
                r#"{"quant_method": "fp8", "weight_block_size": [128, 128]}"#,
                &["\"fp8\""],
            ),
            (
                r#"{"quant_method": "bitsandbytes", "load_in_8bit": true}"#,
                &["quantization_config.load_in_8bit", "8-bit"],
            ),
            (
                r#"{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_storage": "bfloat16"}"#,
                &["quantization_config.bnb_4bit_quant_storage"],
            ),
            (
                r#"{"load_in_4bit": true, "llm_int8_skip_modules": ["vision_tower"]}"#,
                &["quantization_config.llm_int8_skip_modules"],
            ),
            (
                r#"{"load_in_4bit": true, "bnb_4bit_compute_dtype": "float64"}"#,
                &["quantization_config.bnb_4bit_compute_dtype", "float64"],
            ),
            ("7", &["`quantization_config`", "an object"]),
        ] {
            let e = read(q).unwrap_err().to_string();
            assert!(e.starts_with("c.json"), "{e}");
            for n in needles {
                assert!(e.contains(n), "{q}: expected {n:?} in {e}");
            }
        }
    }
}
