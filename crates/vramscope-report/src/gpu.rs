//! The GPUs `--gpu` knows: memory as the driver reports it, compute capability, and the CUDA
//! context and library workspace that `nvidia-smi` shows on top of PyTorch's reserved memory.
//! The table is data (`data/gpus.json`, each entry with its source), embedded at build time.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

/// A GPU model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Gpu {
    /// Display name.
    pub name: String,
    /// Lower-case names accepted by `--gpu` (the first is the short name).
    pub aliases: Vec<String>,
    /// `nvidia` or `amd`.
    pub vendor: String,
    /// CUDA compute capability (`8.0`); none for AMD GPUs.
    pub compute_capability: Option<String>,
    /// Total memory as `nvidia-smi` / NVML (`memory.total`) report it.
    pub memory_bytes: u64,
    /// CUDA context with lazy module loading (CUDA 12+), typical for torch on that architecture.
    pub cuda_context_bytes: u64,
    /// torch's default cuBLAS workspace for the architecture, not in the simulated trace.
    pub library_workspace_bytes: u64,
    /// Where the numbers come from.
    pub source: String,
}

impl Gpu {
    /// Memory that `nvidia-smi` shows for a process besides PyTorch's reserved memory.
    pub fn overhead_bytes(&self) -> u64 {
        self.cuda_context_bytes + self.library_workspace_bytes
    }

    /// The short name (first alias).
    pub fn short_name(&self) -> &str {
        self.aliases
            .first()
            .map(String::as_str)
            .unwrap_or(&self.name)
    }
}

#[derive(Deserialize)]
struct Table {
    gpus: Vec<Gpu>,
}

/// The known GPUs, in the order of `data/gpus.json` (roughly by generation).
pub static GPUS: LazyLock<Vec<Gpu>> = LazyLock::new(|| {
    // the table is compiled in and checked by the tests below; it cannot fail at run time
    serde_json::from_str::<Table>(include_str!("../data/gpus.json"))
        .map(|t| t.gpus)
        .unwrap_or_default()
});

/// Finds a GPU by name or alias, case-insensitively (spaces, `-` and `_` are interchangeable).
pub fn find_gpu(name: &str) -> Option<&'static Gpu> {
    let norm = |s: &str| -> String {
        s.trim()
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c == ' ' || c == '_' { '-' } else { c })
            .collect()
    };
    let key = norm(name);
    GPUS.iter()
        .find(|g| norm(&g.name) == key || g.aliases.iter().any(|a| norm(a) == key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_covers_the_issue_list() {
        assert!(GPUS.len() >= 24, "{} GPUs", GPUS.len());
        for n in [
            "gtx1080ti",
            "rtx2080ti",
            "rtx3060",
            "rtx3080",
            "rtx3090",
            "rtx4060ti",
            "rtx4080",
            "rtx4090",
            "rtx5090",
            "t4",
            "p100",
            "v100",
            "v100-32gb",
            "a10",
            "a100",
            "a100-80gb",
            "l4",
            "l40s",
            "h100-pcie",
            "h100",
            "h200",
            "b200",
            "mi250",
            "mi300x",
        ] {
            assert!(find_gpu(n).is_some(), "{n}");
        }
    }

    #[test]
    fn names_and_aliases_are_unique_and_case_insensitive() {
        let mut seen = std::collections::HashMap::new();
        for g in GPUS.iter() {
            for a in std::iter::once(&g.name).chain(&g.aliases) {
                let owner = seen.entry(a.to_ascii_lowercase()).or_insert(&g.name);
                assert_eq!(*owner, &g.name, "{a} names two GPUs");
            }
            assert!(!g.source.is_empty());
            assert!(g.memory_bytes > 8 << 30, "{}", g.name);
            assert_eq!(g.vendor == "nvidia", g.compute_capability.is_some());
        }
        assert_eq!(
            find_gpu("A100 80GB").map(|g| g.name.as_str()),
            Some("A100 80GB")
        );
        assert_eq!(
            find_gpu("RTX_4090").map(|g| g.name.as_str()),
            Some("RTX 4090")
        );
        assert_eq!(
            find_gpu(" H100 ").map(|g| g.name.as_str()),
            Some("H100 80GB")
        );
        assert!(find_gpu("h1000").is_none());
    }

    #[test]
    fn nvidia_smi_totals() {
        let mib = |n: &str| find_gpu(n).map(|g| g.memory_bytes / (1 << 20));
        assert_eq!(mib("h100"), Some(81_559));
        assert_eq!(mib("a100-80gb"), Some(81_920));
        assert_eq!(mib("rtx4090"), Some(24_564));
        assert_eq!(mib("t4"), Some(15_360));
    }
}
