//! Built-in model names as users type them: `Llama-3-8B`, `resnet-50`, or a Hub id
//! `meta-llama/Meta-Llama-3-8B`. One lookup over both built-in sets (the torchvision zoo and the
//! transformer configs) that ignores case and `-` / `_`, and the closest name for a "did you
//! mean" hint.

use crate::{hf_zoo, zoo};

/// Every built-in name: the torchvision zoo's, then the transformer configs'.
pub fn all() -> Vec<&'static str> {
    let mut names = zoo::names();
    names.extend(hf_zoo::names());
    names
}

/// `name` as the built-in sets spell it, if it is one of them up to case and `-` / `_`
/// (`Llama-3-8B` → `llama-3-8b`, `wide-resnet50-2` → `wide_resnet50_2`).
pub fn builtin(name: &str) -> Option<&'static str> {
    zoo::names()
        .into_iter()
        .chain(hf_zoo::names())
        .find(|n| same_name(n, name))
}

/// Whether `a` and `b` are the same name up to case and `-` / `_`.
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    // byte by byte, without allocating: it runs on every command line
    let fold = |c: u8| match c.to_ascii_lowercase() {
        b'_' => b'-',
        c => c,
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// The built-in name closest to `name`, for a hint: after the last `/` of a Hub id, the longest
/// built-in name the rest contains (`meta-llama/Meta-Llama-3-8B` → `llama-3-8b`), else the
/// nearest within three edits (`resnet5` → `resnet50`).
pub fn closest(name: &str) -> Option<&'static str> {
    let key = folded(name.rsplit('/').next().unwrap_or(name));
    if key.is_empty() {
        return None;
    }
    let names = all();
    let contained = names
        .iter()
        .filter(|n| {
            let n = folded(n);
            // a short name inside a long one says little (`t5-base` in `flan-t5-base`? yes;
            // `gpt2` in `gpt2-xl-finetuned`? yes; but not 3-letter names)
            n.len() >= 4 && key.contains(&n)
        })
        .max_by_key(|n| n.len());
    contained.copied().or_else(|| {
        names
            .iter()
            .map(|n| (edit_distance(&key, &folded(n)), *n))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, n)| n)
    })
}

/// Lower case, `_` as `-`.
pub(crate) fn folded(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Levenshtein distance, by characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let v = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_ignore_case_and_separators() {
        assert_eq!(builtin("Llama-3-8B"), Some("llama-3-8b"));
        assert_eq!(builtin("LLAMA_3_8B"), Some("llama-3-8b"));
        assert_eq!(builtin("ResNet50"), Some("resnet50"));
        assert_eq!(builtin("wide-resnet50-2"), Some("wide_resnet50_2"));
        assert_eq!(builtin("qwen2.5-0.5B"), Some("qwen2.5-0.5b"));
        assert_eq!(builtin("llama-3-9b"), None);
        // every name is its own
        for n in all() {
            assert_eq!(builtin(n), Some(n));
        }
    }

    #[test]
    fn closest_names_for_hints() {
        assert_eq!(closest("meta-llama/Meta-Llama-3-8B"), Some("llama-3-8b"));
        assert_eq!(closest("meta-llama/Llama-2-7b-hf"), Some("llama-2-7b"));
        assert_eq!(closest("Qwen/Qwen2.5-7B-Instruct"), Some("qwen2.5-7b"));
        assert_eq!(closest("openai-community/gpt2-xl"), Some("gpt2-xl"));
        assert_eq!(closest("resnet5"), Some("resnet50"));
        assert_eq!(closest("Llama-3.1-8B"), Some("llama-3-8b"));
        assert_eq!(closest("deepseek-ai/DeepSeek-V3"), None);
        assert_eq!(closest(""), None);
        assert_eq!(closest("org/"), None);
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("resnet5", "resnet50"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
