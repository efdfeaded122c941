//! The built-in Hugging Face transformer configs: the published `config.json` of common checkpoints,
//! stored as data under `data/hf/<name>.json` (each with a `_source` key naming its repository) and
//! compiled into the binary. Parameter counts transformers gives for them are in
//! `fixtures/hf_reference.json` (made by `validation/hf_reference.py`).

/// Every built-in config: (zoo name, `config.json` text).
const CONFIGS: &[(&str, &str)] = &[
    ("gpt2", include_str!("../data/hf/gpt2.json")),
    ("gpt2-medium", include_str!("../data/hf/gpt2-medium.json")),
    ("gpt2-large", include_str!("../data/hf/gpt2-large.json")),
    ("gpt2-xl", include_str!("../data/hf/gpt2-xl.json")),
    (
        "bert-base-uncased",
        include_str!("../data/hf/bert-base-uncased.json"),
    ),
    (
        "bert-large-uncased",
        include_str!("../data/hf/bert-large-uncased.json"),
    ),
    ("roberta-base", include_str!("../data/hf/roberta-base.json")),
    (
        "xlm-roberta-base",
        include_str!("../data/hf/xlm-roberta-base.json"),
    ),
    (
        "xlm-roberta-large",
        include_str!("../data/hf/xlm-roberta-large.json"),
    ),
    (
        "distilbert-base-uncased",
        include_str!("../data/hf/distilbert-base-uncased.json"),
    ),
    ("opt-125m", include_str!("../data/hf/opt-125m.json")),
    ("opt-350m", include_str!("../data/hf/opt-350m.json")),
    ("opt-1.3b", include_str!("../data/hf/opt-1.3b.json")),
    ("opt-2.7b", include_str!("../data/hf/opt-2.7b.json")),
    ("opt-6.7b", include_str!("../data/hf/opt-6.7b.json")),
    ("llama-2-7b", include_str!("../data/hf/llama-2-7b.json")),
    ("llama-2-13b", include_str!("../data/hf/llama-2-13b.json")),
    ("llama-2-70b", include_str!("../data/hf/llama-2-70b.json")),
    ("llama-3-8b", include_str!("../data/hf/llama-3-8b.json")),
    ("llama-3-70b", include_str!("../data/hf/llama-3-70b.json")),
    ("llama-3.2-1b", include_str!("../data/hf/llama-3.2-1b.json")),
    ("llama-3.2-3b", include_str!("../data/hf/llama-3.2-3b.json")),
    ("mistral-7b", include_str!("../data/hf/mistral-7b.json")),
    ("mixtral-8x7b", include_str!("../data/hf/mixtral-8x7b.json")),
    ("qwen2.5-0.5b", include_str!("../data/hf/qwen2.5-0.5b.json")),
    ("qwen2.5-1.5b", include_str!("../data/hf/qwen2.5-1.5b.json")),
    ("qwen2.5-3b", include_str!("../data/hf/qwen2.5-3b.json")),
    ("qwen2.5-7b", include_str!("../data/hf/qwen2.5-7b.json")),
    ("qwen2.5-14b", include_str!("../data/hf/qwen2.5-14b.json")),
    ("qwen2.5-32b", include_str!("../data/hf/qwen2.5-32b.json")),
    ("qwen2.5-72b", include_str!("../data/hf/qwen2.5-72b.json")),
    ("gemma-2-2b", include_str!("../data/hf/gemma-2-2b.json")),
    ("gemma-2-9b", include_str!("../data/hf/gemma-2-9b.json")),
    ("phi-3-mini", include_str!("../data/hf/phi-3-mini.json")),
    ("t5-small", include_str!("../data/hf/t5-small.json")),
    ("t5-base", include_str!("../data/hf/t5-base.json")),
    ("flan-t5-base", include_str!("../data/hf/flan-t5-base.json")),
    ("mt5-small", include_str!("../data/hf/mt5-small.json")),
    ("umt5-small", include_str!("../data/hf/umt5-small.json")),
    ("qwen3-0.6b", include_str!("../data/hf/qwen3-0.6b.json")),
    ("qwen3-8b", include_str!("../data/hf/qwen3-8b.json")),
    ("gemma-3-1b", include_str!("../data/hf/gemma-3-1b.json")),
    (
        "gemma-3-4b-it",
        include_str!("../data/hf/gemma-3-4b-it.json"),
    ),
    (
        "embeddinggemma-300m",
        include_str!("../data/hf/embeddinggemma-300m.json"),
    ),
];

/// The zoo names of the built-in transformer configs, in zoo order.
pub fn names() -> Vec<&'static str> {
    CONFIGS.iter().map(|(name, _)| *name).collect()
}

/// The `config.json` text of the built-in config `name`, if there is one.
pub fn config(name: &str) -> Option<&'static str> {
    CONFIGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_is_json_with_source_and_architecture() {
        for name in names() {
            let text = config(name).expect("listed");
            let v: serde_json::Value = serde_json::from_str(text).expect(name);
            assert!(
                v["_source"]
                    .as_str()
                    .is_some_and(|s| s.contains("huggingface.co/")),
                "{name}"
            );
            assert!(v["architectures"][0].is_string(), "{name}");
            assert!(v["model_type"].is_string(), "{name}");
        }
        assert_eq!(names().len(), 44);
        assert!(config("gpt3").is_none());
    }

    #[test]
    fn every_config_has_a_reference_parameter_count() {
        let text = include_str!("../../../fixtures/hf_reference.json");
        let reference: serde_json::Value = serde_json::from_str(text).expect("reference json");
        for name in names() {
            let entry = &reference["models"][name];
            assert!(
                entry["parameters"].as_u64().is_some_and(|n| n > 0),
                "{name}"
            );
            let v: serde_json::Value =
                serde_json::from_str(config(name).expect("listed")).expect(name);
            assert_eq!(entry["architecture"], v["architectures"][0], "{name}");
        }
    }
}
