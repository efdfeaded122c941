//! `vramscope estimate`: one simulation, printed as tables or JSON.

use std::path::Path;

use anyhow::{anyhow, Result};
use vramscope_advice::{with_cache_release, Target};
use vramscope_core::ops::SdpaBackend;
use vramscope_core::sim::{simulate, Simulation};
use vramscope_core::Graph;
use vramscope_formats::hf::GenerationInfo;
use vramscope_report::{
    find_gpu, render_text, EstimateReport, GenerationReport, Gpu, ReportInput, GPUS,
};

use crate::model::{self, ModelArgs};
use crate::output;
use crate::step::StepArgs;

/// `vramscope estimate` flags.
#[derive(clap::Args, Debug)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub step: StepArgs,
    /// GPU to check the fit against.
    #[arg(long, default_value = "h100")]
    pub gpu: String,
    /// Print the JSON report.
    #[arg(long)]
    pub json: bool,
    /// Write every simulated allocation and free to FILE as JSON lines (the format of
    /// ../shared/truth's `--trace`, so the two can be diffed).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// After the report, explain each phase: what was allocated and freed, grouped by what made it.
    #[arg(long)]
    pub explain: bool,
    /// Layers to show in the table (a number or `all`).
    #[arg(long, default_value = "40")]
    pub layers: String,
}

/// Finds `--gpu`.
pub fn gpu(name: &str) -> Result<&'static Gpu> {
    find_gpu(name).ok_or_else(|| {
        anyhow!(
            "--gpu {name:?}: unknown GPU; known: {}",
            GPUS.iter()
                .map(|g| g.short_name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Runs `vramscope estimate`.
pub fn run(a: &EstimateArgs) -> Result<()> {
    let max_layers = if a.layers == "all" {
        usize::MAX
    } else {
        a.layers
            .parse()
            .map_err(|_| anyhow!("--layers {:?}: expected a number or `all`", a.layers))?
    };
    let (loaded, sim, report) = estimate(a, a.trace.is_some() || a.explain)?;
    if let Some(path) = &a.trace {
        write_trace(path, &loaded.graph, &sim)?;
    }
    if a.json {
        output::report_json(&report)?;
    } else {
        let mut t = render_text(&report, max_layers);
        if a.explain {
            t.push('\n');
            t.push_str(&vramscope_report::render_explain(&sim, &report, 8));
        }
        output::text(&t)?;
    }
    // the process ends next: freeing the graph, the simulation and the report one allocation at
    // a time would cost about 3% of a 70B estimate's instructions (docs/performance.md)
    std::mem::forget((loaded, sim, report));
    Ok(())
}

/// Simulates `a` and builds its report (`vramscope run --expect` uses this too).
pub fn estimate(
    a: &EstimateArgs,
    record_events: bool,
) -> Result<(model::LoadedModel, Simulation, EstimateReport)> {
    let mut cfg = model::step_config(&a.model, &a.step)?;
    let gpu = gpu(&a.gpu)?;
    let loaded = model::load(&a.model, a.model.batch_size, &cfg)?;
    loaded.apply_to(&mut cfg);
    cfg.record_events = record_events;
    let sim = simulate(&loaded.graph, &cfg)?;
    if sim.sdpa_backends.contains(&SdpaBackend::Math) {
        // the quadratic cost a user can avoid, said once per estimate
        eprintln!(
            "note: attention runs PyTorch's SDPA math fallback: no fused kernel takes its head \
             dim in this precision (fused kernels want a multiple of 8 in fp16 / bf16 and of 4 \
             in float32, flash attention at most 256), so every layer materializes and keeps \
             its [batch, heads, seq, seq] scores and probabilities, which grow with the square of \
             the sequence length"
        );
    }
    let mut report = EstimateReport::new(
        &ReportInput {
            graph: &loaded.graph,
            source: loaded.source,
            batch_size: a.model.batch_size,
            mode: cfg.mode,
            precision: cfg.precision,
            optimizer: cfg.optimizer,
            checkpoint: a
                .step
                .checkpoint
                .iter()
                .chain(&loaded.checkpoint_layers)
                .cloned()
                .collect(),
            padded: model::padded(&a.model),
            gpu,
            generation: loaded.generation.as_ref().map(generation_report),
        },
        &sim,
    );
    // a step that does not fit only because of the allocator's cache: simulated again on an
    // allocator capped at the GPU's memory (no margin), which frees its cached segments and
    // retries first, as `fit` does at its budget
    if !report.gpu.fits {
        let target = Target { gpu, margin: 0.0 };
        report.gpu.with_cache_release =
            with_cache_release(&loaded.graph, &cfg, &sim, &target, &mut 0)?;
    }
    Ok((loaded, sim, report))
}

/// The report's view of a generation graph.
pub fn generation_report(g: &GenerationInfo) -> GenerationReport {
    GenerationReport {
        prompt_len: g.prompt_len,
        new_tokens: g.new_tokens,
        decode_steps: g.decode_steps,
        simulated_decode_steps: g.simulated_decode_steps,
        skeleton_decode_steps: g.skeleton_decode_steps,
        skeleton_stride: g.skeleton_stride,
        kv_cache_bytes: g.final_kv_bytes(),
        kv_cache_bytes_per_token: g.kv_bytes_per_position(),
        cross_attention_kv_cache_bytes: g.cross_attention.map(|c| c.bytes),
        kv_key_dtype: g.kv_dtypes.0.name(),
        kv_value_dtype: g.kv_dtypes.1.name(),
    }
}

fn write_trace(path: &Path, graph: &Graph, sim: &Simulation) -> Result<()> {
    let mut out = String::new();
    let mut phase = u16::MAX;
    for (seq, e) in sim.events.iter().enumerate() {
        if e.phase != phase {
            phase = e.phase;
            out.push_str(
                &serde_json::json!({"ev": "phase", "phase": sim.phases[phase as usize].name})
                    .to_string(),
            );
            out.push('\n');
        }
        let line = serde_json::json!({
            "seq": seq,
            "ev": if e.alloc { "alloc" } else { "free" },
            "sid": e.storage,
            "phase": sim.phases[e.phase as usize].name,
            "bytes": e.bytes,
            "block": e.block,
            "category": e.category,
            "op": e.label.to_string(),
            "module": e.module.map(|m| graph.module_path(m)),
            "alloc": e.allocated,
            "reserved": e.reserved,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    crate::output::file(path, out.as_bytes(), "trace")
}
