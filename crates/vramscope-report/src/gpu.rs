//! The GPUs `--gpu` knows: memory as the driver reports it, and the CUDA context and library
//! workspace that `nvidia-smi` shows on top of PyTorch's reserved memory.

use serde::Serialize;

/// A GPU model.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Gpu {
    /// Display name.
    pub name: &'static str,
    /// Lower-case names accepted by `--gpu`.
    #[serde(skip)]
    pub aliases: &'static [&'static str],
    /// Total memory as `nvidia-smi` / NVML report it.
    pub memory_bytes: u64,
    /// CUDA context with lazy module loading (CUDA 12+), measured with torch on that architecture.
    pub cuda_context_bytes: u64,
    /// cuBLAS/cuBLASLt workspaces that live outside the caching allocator.
    pub library_workspace_bytes: u64,
}

const MIB: u64 = 1 << 20;

/// The known GPUs. Memory sizes are the driver's totals (NVML `memory.total`); context sizes are
/// typical values for torch 2.x with `CUDA_MODULE_LOADING=LAZY`.
pub static GPUS: &[Gpu] = &[
    Gpu {
        name: "H100 80GB",
        aliases: &["h100", "h100-sxm", "h100-80gb", "h100 80gb"],
        memory_bytes: 81_559 * MIB,
        cuda_context_bytes: 520 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "H100 PCIe",
        aliases: &["h100-pcie"],
        memory_bytes: 81_559 * MIB,
        cuda_context_bytes: 520 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "H200",
        aliases: &["h200", "h200-141gb"],
        memory_bytes: 143_771 * MIB,
        cuda_context_bytes: 520 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "A100 80GB",
        aliases: &["a100-80gb", "a100 80gb", "a100-80g"],
        memory_bytes: 81_920 * MIB,
        cuda_context_bytes: 480 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "A100 40GB",
        aliases: &["a100", "a100-40gb", "a100 40gb"],
        memory_bytes: 40_960 * MIB,
        cuda_context_bytes: 480 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "RTX 4090",
        aliases: &["rtx4090", "4090", "rtx-4090"],
        memory_bytes: 24_564 * MIB,
        cuda_context_bytes: 400 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "RTX 3090",
        aliases: &["rtx3090", "3090", "rtx-3090"],
        memory_bytes: 24_576 * MIB,
        cuda_context_bytes: 380 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "V100 16GB",
        aliases: &["v100", "v100-16gb"],
        memory_bytes: 16_384 * MIB,
        cuda_context_bytes: 350 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "V100 32GB",
        aliases: &["v100-32gb"],
        memory_bytes: 32_768 * MIB,
        cuda_context_bytes: 350 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "T4",
        aliases: &["t4"],
        memory_bytes: 15_360 * MIB,
        cuda_context_bytes: 330 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "L4",
        aliases: &["l4"],
        memory_bytes: 23_034 * MIB,
        cuda_context_bytes: 400 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
    Gpu {
        name: "A10",
        aliases: &["a10"],
        memory_bytes: 23_028 * MIB,
        cuda_context_bytes: 400 * MIB,
        library_workspace_bytes: 32 * MIB,
    },
];

/// Finds a GPU by name or alias, case-insensitively.
pub fn find_gpu(name: &str) -> Option<&'static Gpu> {
    let key = name.trim().to_ascii_lowercase();
    GPUS.iter()
        .find(|g| g.name.to_ascii_lowercase() == key || g.aliases.contains(&key.as_str()))
}
