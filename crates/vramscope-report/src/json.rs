//! The `--json` contract of DESIGN.md. Field names are stable: scripts depend on them.

use serde::Serialize;
use vramscope_core::ir::ParamKind;
use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{Category, Mode, Simulation};
use vramscope_core::{Graph, Precision};

use crate::gpu::Gpu;

/// What the report needs besides the simulation.
#[derive(Debug, Clone)]
pub struct ReportInput<'a> {
    /// The model graph.
    pub graph: &'a Graph,
    /// Where the model came from (`zoo`).
    pub source: &'a str,
    /// Batch size.
    pub batch_size: u64,
    /// Train or infer.
    pub mode: Mode,
    /// Precision.
    pub precision: Precision,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Checkpointed modules: the `--checkpoint` flags as given, then the layers
    /// `--gradient-checkpointing` checkpoints.
    pub checkpoint: Vec<String>,
    /// A Hugging Face model run on a padded batch (`--padded`; `None` for other models).
    pub padded: Option<bool>,
    /// The GPU to check against.
    pub gpu: &'a Gpu,
    /// What a `--mode generate` run covers (`None` otherwise).
    pub generation: Option<GenerationReport>,
}

/// `model`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// Model name.
    pub name: String,
    /// `zoo`, `onnx`, ...
    pub source: String,
    /// Parameter elements.
    pub parameters: u64,
    /// Trainable parameter elements.
    pub trainable_parameters: u64,
    /// Parameter bytes in the run's dtype.
    pub parameter_bytes: u64,
    /// Buffer bytes.
    pub buffer_bytes: u64,
}

/// `config`.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigInfo {
    /// `train` / `infer`.
    pub mode: Mode,
    /// Batch size.
    pub batch_size: u64,
    /// Input shape of one sample.
    pub input_shape: Vec<u64>,
    /// Precision.
    pub precision: Precision,
    /// Optimizer (train only).
    pub optimizer: Option<Optimizer>,
    /// Checkpointed modules.
    pub checkpoint: Vec<String>,
    /// Whether a Hugging Face model's batch carries a padded `attention_mask`; absent for other
    /// models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padded: Option<bool>,
}

/// `peak`.
#[derive(Debug, Clone, Serialize)]
pub struct PeakInfo {
    /// Predicted `max_memory_allocated()`.
    pub allocated_bytes: u64,
    /// Predicted `max_memory_reserved()`.
    pub reserved_bytes: u64,
    /// Predicted process memory in `nvidia-smi` (reserved + context + workspaces).
    pub device_bytes: u64,
    /// Phase of the allocated peak.
    pub phase: String,
}

/// `phases[]`.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseInfo {
    /// Phase name.
    pub name: String,
    /// `memory_allocated()` at its end.
    pub allocated_after_bytes: u64,
    /// Peak allocated within it.
    pub peak_allocated_bytes: u64,
    /// `memory_reserved()` at its end.
    pub reserved_after_bytes: u64,
    /// Peak reserved within it.
    pub peak_reserved_bytes: u64,
}

/// `breakdown_at_peak`.
#[derive(Debug, Clone, Serialize)]
pub struct BreakdownInfo {
    /// Parameters.
    pub parameters: u64,
    /// Buffers.
    pub buffers: u64,
    /// Gradients.
    pub gradients: u64,
    /// Optimizer states.
    pub optimizer_states: u64,
    /// Activations (recomputed ones included).
    pub activations: u64,
    /// Temporaries.
    pub temporaries: u64,
    /// Inputs.
    pub inputs: u64,
    /// The key/value cache: a generation's, or the `past_key_values` an encoder-decoder's
    /// forward returns with `use_cache` (0 otherwise).
    pub kv_cache: u64,
}

/// `generation` (`--mode generate` only): `model.generate(input_ids, do_sample=False,
/// max_new_tokens)` with transformers' default `DynamicCache`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GenerationReport {
    /// Prompt tokens.
    pub prompt_len: u64,
    /// New tokens.
    pub new_tokens: u64,
    /// Decode forwards (`new_tokens - 1`; the prefill makes the first token).
    pub decode_steps: u64,
    /// Decode forwards simulated one by one, op by op.
    pub simulated_decode_steps: u64,
    /// Decode steps of which only the cache growth is simulated; 0 when the steps not
    /// simulated op by op are one jump of the cache to its final length.
    pub skeleton_decode_steps: u64,
    /// Positions per simulated cache growth through those steps (1: position by position, as
    /// the real run; more when the simulation budget is short). Without a cache (`use_cache`
    /// false): one decode step in this many is simulated op by op between the first and the
    /// last ones (0: none, the ids jump).
    pub skeleton_stride: u64,
    /// Bytes of the KV cache when the generation ends: a causal LM's `prompt_len + new_tokens -
    /// 1` positions; an encoder-decoder's `new_tokens` decoder positions plus its
    /// cross-attention keys and values over the prompt.
    pub kv_cache_bytes: u64,
    /// Bytes the KV cache grows by per token (all layers, keys and values, the whole batch).
    pub kv_cache_bytes_per_token: u64,
    /// An encoder-decoder's cross-attention cache (every decoder layer's keys and values over the
    /// prompt, made by the first decoder forward), included in `kv_cache_bytes`; absent for a
    /// causal LM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_attention_kv_cache_bytes: Option<u64>,
    /// Dtype of the cached keys.
    pub kv_key_dtype: &'static str,
    /// Dtype of the cached values.
    pub kv_value_dtype: &'static str,
}

impl GenerationReport {
    /// `use_cache` false: generate() keeps no cache, every step reruns the whole sequence.
    pub fn keeps_no_cache(&self) -> bool {
        self.kv_cache_bytes_per_token == 0 && self.cross_attention_kv_cache_bytes.is_none()
    }
}

/// `layers[]`.
#[derive(Debug, Clone, Serialize)]
pub struct LayerInfo {
    /// Module path.
    pub name: String,
    /// Module class.
    pub op: String,
    /// Output shape.
    pub output_shape: Vec<u64>,
    /// Parameters owned.
    pub parameters: u64,
    /// Bytes saved for backward.
    pub saved_bytes: u64,
}

/// `live_at_peak[]`.
#[derive(Debug, Clone, Serialize)]
pub struct LiveInfo {
    /// Block bytes.
    pub bytes: u64,
    /// Shape.
    pub shape: Vec<u64>,
    /// Dtype.
    pub dtype: &'static str,
    /// Category.
    pub category: Category,
    /// What made it.
    pub made_by: String,
    /// Module path.
    pub module: String,
}

/// `overheads`.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadInfo {
    /// CUDA context.
    pub cuda_context_bytes: u64,
    /// Library workspaces outside the caching allocator.
    pub library_workspace_bytes: u64,
}

/// `gpu`.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    /// GPU name.
    pub name: String,
    /// Its memory.
    pub memory_bytes: u64,
    /// Whether `device_bytes` fits.
    pub fits: bool,
    /// Memory left (negative when it does not fit).
    pub headroom_bytes: i64,
    /// Only when the step does not fit but its allocated peak does: the step simulated again on
    /// an allocator capped at this GPU's memory, which frees its cached segments and retries
    /// when a segment would not fit, as PyTorch does before raising out-of-memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_cache_release: Option<CacheReleaseInfo>,
}

/// `gpu.with_cache_release`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CacheReleaseInfo {
    /// No request went past the cap, the cache released: the step runs.
    pub fits: bool,
    /// `max_memory_reserved()` under the cap.
    pub peak_reserved_bytes: u64,
}

/// The whole `--json` object.
#[derive(Debug, Clone, Serialize)]
pub struct EstimateReport {
    /// Model facts.
    pub model: ModelInfo,
    /// The run's settings.
    pub config: ConfigInfo,
    /// The peak.
    pub peak: PeakInfo,
    /// Phase timeline.
    pub phases: Vec<PhaseInfo>,
    /// Category breakdown at the peak.
    pub breakdown_at_peak: BreakdownInfo,
    /// Largest tensors alive at the peak.
    pub live_at_peak: Vec<LiveInfo>,
    /// Per-layer table.
    pub layers: Vec<LayerInfo>,
    /// Context and workspace lines.
    pub overheads: OverheadInfo,
    /// Fit verdict.
    pub gpu: GpuInfo,
    /// Attention kernels chosen.
    pub sdpa_backends: Vec<String>,
    /// The generation (`--mode generate` only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerationReport>,
}

impl EstimateReport {
    /// Builds the report.
    pub fn new(input: &ReportInput, sim: &Simulation) -> Self {
        let g = input.graph;
        let b = &sim.breakdown_at_peak;
        let device =
            sim.peak_reserved + input.gpu.cuda_context_bytes + input.gpu.library_workspace_bytes;
        let headroom = input.gpu.memory_bytes as i64 - device as i64;
        EstimateReport {
            model: ModelInfo {
                name: g.name.clone(),
                source: input.source.to_string(),
                parameters: g.parameter_count(),
                trainable_parameters: g.trainable_parameter_count(),
                parameter_bytes: sim.parameter_bytes,
                buffer_bytes: sim.buffer_bytes,
            },
            config: ConfigInfo {
                mode: input.mode,
                batch_size: input.batch_size,
                input_shape: g
                    .inputs
                    .first()
                    .map(|t| g.tensor(*t).shape[1..].to_vec())
                    .unwrap_or_default(),
                precision: input.precision,
                optimizer: (input.mode == Mode::Train).then_some(input.optimizer),
                checkpoint: input.checkpoint.clone(),
                padded: input.padded,
            },
            peak: PeakInfo {
                allocated_bytes: sim.peak_allocated,
                reserved_bytes: sim.peak_reserved,
                device_bytes: device,
                phase: sim
                    .phases
                    .get(sim.peak_phase)
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
            },
            phases: sim
                .phases
                .iter()
                .map(|p| PhaseInfo {
                    name: p.name.clone(),
                    allocated_after_bytes: p.allocated_after,
                    peak_allocated_bytes: p.peak_allocated,
                    reserved_after_bytes: p.reserved_after,
                    peak_reserved_bytes: p.peak_reserved,
                })
                .collect(),
            breakdown_at_peak: BreakdownInfo {
                parameters: b.get(Category::Parameters),
                buffers: b.get(Category::Buffers),
                gradients: b.get(Category::Gradients),
                optimizer_states: b.get(Category::OptimizerStates),
                activations: b.get(Category::Activations) + b.get(Category::Recomputed),
                temporaries: b.get(Category::Temporaries),
                inputs: b.get(Category::Inputs),
                kv_cache: b.get(Category::KvCache),
            },
            live_at_peak: sim
                .live_at_peak
                .iter()
                .map(|l| LiveInfo {
                    bytes: l.bytes,
                    shape: l.shape.clone(),
                    dtype: l.dtype.name(),
                    category: l.category,
                    made_by: l.label.to_string(),
                    module: l.module.clone(),
                })
                .collect(),
            layers: sim
                .layers
                .iter()
                .map(|l| LayerInfo {
                    name: l.name(g).to_string(),
                    op: l.op(g).to_string(),
                    output_shape: l.output_shape(g).to_vec(),
                    parameters: l.parameters,
                    saved_bytes: l.saved_bytes,
                })
                .collect(),
            overheads: OverheadInfo {
                cuda_context_bytes: input.gpu.cuda_context_bytes,
                library_workspace_bytes: input.gpu.library_workspace_bytes,
            },
            gpu: GpuInfo {
                name: input.gpu.name.to_string(),
                memory_bytes: input.gpu.memory_bytes,
                fits: headroom >= 0,
                headroom_bytes: headroom,
                with_cache_release: None,
            },
            sdpa_backends: sim
                .sdpa_backends
                .iter()
                .map(|b| {
                    serde_json::to_value(b)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                })
                .collect(),
            generation: input.generation.clone(),
        }
    }

    /// Whether any parameter is a buffer-only model (for the text report).
    pub fn has_buffers(g: &Graph) -> bool {
        g.params.iter().any(|p| p.kind == ParamKind::Buffer)
    }
}
