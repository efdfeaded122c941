//! Reading a Hugging Face `config.json`: typed field access with errors that name the file, the
//! field and what was expected. Multimodal configs keep the language model under `text_config`;
//! fields missing at the top level are looked up there, then in the defaults of the config class of
//! the `model_type` (`data/hf_config_defaults.json`), as `AutoConfig` fills them in.

use serde_json::{Map, Value};

use super::HfError;

/// The largest integer a size field may hold: below 2^32, so that the product of two sizes
/// (`num_heads * d_kv`, `hidden_size * vocab_size`) cannot overflow before the builder checks
/// the shapes it makes.
pub const MAX_INT: u64 = u32::MAX as u64;

/// The most layers one stack may have (`num_hidden_layers`, `n_layer`, T5's `num_layers` and
/// `num_decoder_layers`): sixteen times Llama 3.1 405B's 126, while the graph of every layer
/// still builds and simulates in well under a second.
pub const MAX_LAYERS: u64 = 2_048;

/// The most experts an MoE layer may have (`num_local_experts`, `num_experts`).
pub const MAX_EXPERTS: u64 = 4_096;

/// A parsed `config.json`.
#[derive(Debug, Clone)]
pub struct HfConfig {
    /// Where it came from (for error messages).
    pub path: String,
    top: Map<String, Value>,
    text: Option<Map<String, Value>>,
    /// The defaults of the config class of its `model_type`, which `AutoConfig` fills in for
    /// the fields the file leaves out.
    defaults: Option<&'static Map<String, Value>>,
}

/// `data/hf_config_defaults.json` (written by `validation/hf_config_defaults.py` from
/// transformers 5.23): per `model_type`, its config class's own field defaults. Each model type's
/// entry is read from the table when first asked for, the others skipped unparsed (reading the
/// whole table was 1% of a 70B estimate), and kept for the process.
fn class_defaults(model_type: &str) -> Option<&'static Map<String, Value>> {
    type Read = Vec<(String, Option<&'static Map<String, Value>>)>;
    static READ: std::sync::Mutex<Read> = std::sync::Mutex::new(Vec::new());
    let mut read = READ.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = read.iter().find(|(t, _)| t == model_type) {
        return *d;
    }
    // compiled in; `every_supported_model_type_has_class_defaults` checks it parses, so an
    // unreadable table can only mean no defaults (missing fields are then errors)
    let text = include_str!("../../data/hf_config_defaults.json");
    let mut de = serde_json::Deserializer::from_str(text);
    let found = serde::Deserializer::deserialize_map(&mut de, Entry(model_type))
        .ok()
        .flatten()
        .map(|m| &*Box::leak(Box::new(m)));
    read.push((model_type.to_string(), found));
    found
}

/// Reads one entry of a JSON object, skipping the others.
struct Entry<'a>(&'a str);

impl<'de> serde::de::Visitor<'de> for Entry<'_> {
    type Value = Option<Map<String, Value>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "an object of config classes' defaults")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if found.is_none() && key == self.0 {
                found = map.next_value::<Value>()?.as_object().cloned();
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl HfConfig {
    /// Parses the text of a `config.json`.
    pub fn parse(path: &str, text: &str) -> Result<HfConfig, HfError> {
        let v: Value = serde_json::from_str(text).map_err(|e| HfError::Json {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let Value::Object(top) = v else {
            return Err(HfError::Field {
                path: path.to_string(),
                field: "(top level)".into(),
                expected: "a JSON object".into(),
            });
        };
        let text = match top.get("text_config") {
            Some(Value::Object(m)) => Some(m.clone()),
            _ => None,
        };
        // a multimodal config's own model_type (gemma3) has no table; its text_config's does
        let model_type = |m: Option<&Map<String, Value>>| {
            m.and_then(|m| m.get("model_type"))
                .and_then(Value::as_str)
                .and_then(class_defaults)
        };
        let defaults = model_type(Some(&top)).or_else(|| model_type(text.as_ref()));
        Ok(HfConfig {
            path: path.to_string(),
            top,
            text,
            defaults,
        })
    }

    /// The config with the defaults of `model_type`'s config class, if it has none yet (a config
    /// without `model_type`, whose class `build` found from `architectures`); `None` when it
    /// already has them or the class has no table.
    pub fn with_class_defaults(&self, model_type: &str) -> Option<HfConfig> {
        if self.defaults.is_some() {
            return None;
        }
        Some(HfConfig {
            defaults: Some(class_defaults(model_type)?),
            ..self.clone()
        })
    }

    /// The file's top-level object.
    pub(super) fn top(&self) -> &Map<String, Value> {
        &self.top
    }

    /// The config with `key` set to `value` at the top level, as `from_pretrained(path,
    /// key=value)` sets a config attribute before the model is built.
    pub fn with_value(mut self, key: &str, value: Value) -> HfConfig {
        self.top.insert(key.to_string(), value);
        self
    }

    /// `key` as the model is built with it: the file's value, else the config class's default
    /// (see [`get`](Self::get)).
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }

    /// `key` as the file sets it (at the top level, else in `text_config`), or the config
    /// class's default, unless the file sets it to `null`: that is None in transformers, which the
    /// class never replaces by its default (the readers' own fallbacks stand for what its
    /// `__post_init__` derives, `num_attention_heads` for a null `num_key_value_heads`).
    fn get(&self, key: &str) -> Option<&Value> {
        self.own(key)
            .or_else(|| (!self.is_null(key)).then(|| self.default_of(key)).flatten())
    }

    /// `key` as the file sets it, not `null`.
    fn own(&self, key: &str) -> Option<&Value> {
        match self.top.get(key) {
            Some(Value::Null) | None => self
                .text
                .as_ref()
                .and_then(|t| t.get(key))
                .filter(|v| !v.is_null()),
            Some(v) => Some(v),
        }
    }

    fn default_of(&self, key: &str) -> Option<&'static Value> {
        self.defaults.and_then(|d| d.get(key))
    }

    /// The first of `keys` the file sets, else the first the config class has a default for
    /// (so that an alias the file uses, `n_embd` for `hidden_size`, wins over a default); none
    /// when the file sets one of them to `null` (see [`get`](Self::get)).
    fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Value)> {
        let own = keys.iter().find_map(|&k| self.own(k).map(|v| (k, v)));
        own.or_else(|| {
            if keys.iter().any(|k| self.is_null(k)) {
                return None;
            }
            keys.iter()
                .find_map(|&k| self.default_of(k).map(|v| (k, v)))
        })
    }

    fn err(&self, field: &str, expected: &str) -> HfError {
        HfError::Field {
            path: self.path.clone(),
            field: field.to_string(),
            expected: expected.to_string(),
        }
    }

    /// A non-negative integer field (at most `MAX_INT`), under the first of `keys` present.
    pub fn opt_u64(&self, keys: &[&str]) -> Result<Option<u64>, HfError> {
        let Some((k, v)) = self.find(keys) else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(n) if n <= MAX_INT => Ok(Some(n)),
            Some(n) => Err(self.err(k, &format!("an integer below 2^32 (got {n})"))),
            None => Err(self.err(k, "a non-negative integer")),
        }
    }

    /// A required positive integer field (the first of `keys` present).
    pub fn u64(&self, keys: &[&str]) -> Result<u64, HfError> {
        match self.opt_u64(keys)? {
            Some(0) => Err(self.err(keys[0], "a positive integer")),
            Some(n) => Ok(n),
            None => match keys.iter().find(|k| self.is_null(k)) {
                Some(k) => Err(self.err(k, "a positive integer (the field is null)")),
                None => Err(self.err(keys[0], "a positive integer (the field is missing)")),
            },
        }
    }

    /// `n`, read from `key`, if it is at most `max`: the counts that decide how many layers or
    /// experts vramscope builds one by one are bounded so that a typo cannot make it build for
    /// hours (`what` says what is counted, for the message).
    pub fn at_most(&self, key: &str, n: u64, max: u64, what: &str) -> Result<u64, HfError> {
        if n <= max {
            Ok(n)
        } else {
            Err(self.err(key, &format!("at most {max} {what} (got {n})")))
        }
    }

    /// A required layer count (the first of `keys` present), at most `MAX_LAYERS`.
    pub fn layers(&self, keys: &[&str]) -> Result<u64, HfError> {
        let n = self.u64(keys)?;
        self.at_most(self.first_present(keys), n, MAX_LAYERS, "layers")
    }

    /// A required positive integer `field` that the config class's `attribute_map` also sets
    /// under `alias` (`hidden_size` for GPT-2's `n_embd`, `head_dim` for T5's `d_kv`):
    /// transformers sets the alias after the fields, so it wins when the file names both
    /// (`GPT2Config.from_dict({"n_embd": 64, "hidden_size": 128}).n_embd` is 128), and a null
    /// alias leaves the field None, on which the model's constructor fails: an error naming it.
    pub fn aliased_u64(&self, field: &str, alias: &str) -> Result<u64, HfError> {
        self.refuse_null_alias(field, alias)?;
        self.u64(&[alias, field])
    }

    /// [`aliased_u64`](Self::aliased_u64) for a layer count, at most `MAX_LAYERS`.
    pub fn aliased_layers(&self, field: &str, alias: &str) -> Result<u64, HfError> {
        self.refuse_null_alias(field, alias)?;
        self.layers(&[alias, field])
    }

    fn refuse_null_alias(&self, field: &str, alias: &str) -> Result<(), HfError> {
        if !self.is_null(alias) {
            return Ok(());
        }
        Err(self.err(
            alias,
            &format!(
                "a positive integer, not null: the config class sets {field} from it, and a \
                 null {field} fails in transformers; leave {alias} out to use {field}"
            ),
        ))
    }

    /// The first of `keys` the config sets (the one a reader of `keys` took its value from), or
    /// the first key when none is set.
    pub fn first_present<'k>(&self, keys: &[&'k str]) -> &'k str {
        self.find(keys).map_or(keys[0], |(k, _)| k)
    }

    /// Refuses `add_cross_attention: true` for the encoders (BERT, RoBERTa, ...): their
    /// cross-attention layers need `is_decoder` (transformers raises without it), as the decoder
    /// of an `EncoderDecoderModel`, which is not modelled.
    pub fn refuse_cross_attention(&self) -> Result<(), HfError> {
        if self.bool_or("add_cross_attention", false)? {
            return Err(self.err(
                "add_cross_attention",
                "false (cross-attention layers, for the decoder of an encoder-decoder model, are not modelled)",
            ));
        }
        Ok(())
    }

    /// A number field, or `default`.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, HfError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, "a number")),
        }
    }

    /// A dropout probability, or `default`: a number in [0, 1], which `nn.Dropout` and
    /// `F.dropout` require ("dropout probability has to be between 0 and 1").
    pub fn prob_or(&self, key: &str, default: f64) -> Result<f64, HfError> {
        let p = self.f64_or(key, default)?;
        if (0.0..=1.0).contains(&p) {
            Ok(p)
        } else {
            Err(self.err(
                key,
                &format!("a dropout probability between 0 and 1 (got {p})"),
            ))
        }
    }

    /// The value of `key` inside the object field `holder`, read with `read` (`None` when either
    /// is absent or `null`; `expected` names the type in the error).
    fn nested<'a, T>(
        &'a self,
        holder: &str,
        key: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>, HfError> {
        match self.get(holder) {
            Some(Value::Object(m)) => match m.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => read(v)
                    .map(Some)
                    .ok_or_else(|| self.err(&format!("{holder}.{key}"), expected)),
            },
            _ => Ok(None),
        }
    }

    /// A number field `key` inside the object field `holder` (`rope_parameters.partial_rotary_factor`),
    /// if both are present.
    pub fn nested_f64(&self, holder: &str, key: &str) -> Result<Option<f64>, HfError> {
        self.nested(holder, key, Value::as_f64, "a number")
    }

    /// A string inside an object field (`rope_scaling.rope_type`): `None` when either is absent
    /// or `null`.
    pub fn nested_str(&self, holder: &str, key: &str) -> Result<Option<&str>, HfError> {
        self.nested(holder, key, Value::as_str, "a string")
    }

    /// A number field that may be `null` (Gemma's soft-capping): `default` when the key is
    /// absent, `None` when it is `null`.
    pub fn nullable_f64(&self, key: &str, default: Option<f64>) -> Result<Option<f64>, HfError> {
        let v = match self.top.get(key) {
            Some(v) => Some(v),
            None => self.text.as_ref().and_then(|t| t.get(key)),
        };
        match v.or_else(|| self.default_of(key)) {
            None => Ok(default),
            Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(key, "a number or null")),
        }
    }

    /// An object field (`quantization_config`), if present and not `null`.
    pub fn object(&self, key: &str) -> Result<Option<&Map<String, Value>>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.err(key, "an object")),
        }
    }

    /// A list of strings (`layer_types`), if present.
    pub fn str_list(&self, key: &str) -> Result<Option<Vec<String>>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.err(key, "a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.err(key, "a list of strings")),
        }
    }

    /// A boolean field, if present and not `null`.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(key, "true or false")),
        }
    }

    /// A boolean field, or `default`.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, HfError> {
        Ok(self.opt_bool(key)?.unwrap_or(default))
    }

    /// A string field.
    pub fn str(&self, key: &str) -> Result<Option<&str>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(key, "a string")),
        }
    }

    /// How many token ids a special-token field holds: 0 when missing or null, 1 for an
    /// integer, n for a list of n integers (Llama 3's `eos_token_id`).
    pub fn token_ids(&self, key: &str) -> Result<u64, HfError> {
        match self.get(key) {
            None => Ok(0),
            Some(Value::Array(a)) if a.iter().all(|v| v.as_u64().is_some()) => Ok(a.len() as u64),
            Some(v) if v.as_u64().is_some() => Ok(1),
            Some(_) => Err(self.err(key, "a token id or a list of token ids")),
        }
    }

    /// Whether `key` is present with the value `null` (as opposed to missing, where
    /// transformers' config class fills in its default).
    pub fn is_null(&self, key: &str) -> bool {
        matches!(self.top.get(key), Some(Value::Null))
            && self
                .text
                .as_ref()
                .is_none_or(|t| matches!(t.get(key), None | Some(Value::Null)))
    }

    /// A list of non-negative integers (`mlp_only_layers`), if present.
    pub fn opt_u64_list(&self, key: &str) -> Result<Option<Vec<u64>>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| self.err(key, "a list of non-negative integers"))
                })
                .collect::<Result<Vec<u64>, HfError>>()
                .map(Some),
            Some(_) => Err(self.err(key, "a list of non-negative integers")),
        }
    }

    /// The number of entries of an object field (`id2label`), if present.
    pub fn map_len(&self, key: &str) -> Result<Option<u64>, HfError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.len() as u64)),
            Some(_) => Err(self.err(key, "an object")),
        }
    }

    /// `architectures`, as a list of class names.
    pub fn architectures(&self) -> Result<Vec<String>, HfError> {
        match self.top.get("architectures") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.err("architectures", "a list of class names"))
                })
                .collect(),
            Some(_) => Err(self.err("architectures", "a list of class names")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_model_type_has_class_defaults() {
        // `gemma3` (the vision-language config) is read through its text_config's `gemma3_text`
        for &model_type in super::super::SUPPORTED.iter().filter(|&&m| m != "gemma3") {
            let d = class_defaults(model_type).unwrap_or_else(|| panic!("{model_type}"));
            assert!(d.contains_key("vocab_size"), "{model_type}");
        }
    }

    /// A required field set to `null` is said to be null, not missing (the class default does
    /// not stand in for it: transformers refuses it too).
    #[test]
    fn a_null_required_field_is_named_null() {
        let text = r#"{"model_type": "gemma", "num_key_value_heads": null}"#;
        let cfg = HfConfig::parse("config.json", text).expect("parses");
        let message = cfg.u64(&["num_key_value_heads"]).unwrap_err().to_string();
        assert!(message.contains("`num_key_value_heads`"), "{message}");
        assert!(message.contains("(the field is null)"), "{message}");
        let message = cfg.u64(&["no_such_field"]).unwrap_err().to_string();
        assert!(message.contains("(the field is missing)"), "{message}");
    }
}
