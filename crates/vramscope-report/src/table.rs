//! Terminal output: layer table, phase timeline with a reason per phase, breakdown at the peak,
//! the largest tensors alive there and the fit verdict.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};

use crate::json::EstimateReport;

/// Formats bytes as MiB/GiB with one decimal.
pub fn human(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib >= 10240.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

fn shape(s: &[u64]) -> String {
    format!(
        "[{}]",
        s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

pub(crate) fn phase_reason(name: &str, delta: i64, r: &EstimateReport) -> String {
    let step = name.rsplit('.').next().unwrap_or(name);
    let second = name.starts_with("it") && !name.starts_with("it1.");
    match step {
        "init" => "nothing allocated yet".into(),
        "model" => "parameters and buffers on the device".into(),
        "optimizer" if delta > 0 => "this optimizer creates its state in the constructor".into(),
        "optimizer" => "nothing yet: optimizer states are created lazily at the first step".into(),
        "data" if second => "new batch; the previous one is freed on reassignment".into(),
        "data" => "the batch (inputs and labels)".into(),
        "forward" if r.config.mode == vramscope_core::sim::Mode::Infer => {
            "no_grad: only live activations; the previous output is still referenced".into()
        }
        "forward" if r.config.mode == vramscope_core::sim::Mode::Generate => {
            match &r.generation {
                // an encoder-decoder: the encoder runs once, the decoder once per token
                Some(g) if g.cross_attention_kv_cache_bytes.is_some() => {
                    "generate(): the encoder once, then one decoder step per token growing the KV cache"
                }
                // `use_cache` false: no cache, every step a forward over the whole sequence
                Some(g) if g.keeps_no_cache() => {
                    "generate() without a KV cache: every step reruns the whole sequence so far"
                }
                _ => "generate(): prefill, then one decode step per token growing the KV cache",
            }
            .into()
        }
        "forward" if second => {
            "saved activations; the previous output and gradients are still alive".into()
        }
        "forward" => "activations saved for backward".into(),
        "loss" => "loss: log-softmax kept for backward".into(),
        "zero_grad" if second => "set_to_none frees the previous gradients".into(),
        "zero_grad" => "no gradients exist yet".into(),
        "backward" => "gradients allocated; saved activations released node by node".into(),
        "step" if !second && delta > 0 => "optimizer states created at the first step".into(),
        "step" => "optimizer update (foreach temporaries are freed again)".into(),
        _ => String::new(),
    }
}

/// Renders the human-readable report.
pub fn render_text(r: &EstimateReport, max_layers: usize) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} ({}): {} parameters ({}), {} {} batch {} input {}",
        r.model.name,
        r.model.source,
        r.model.parameters,
        human(r.model.parameter_bytes),
        match r.config.mode {
            vramscope_core::sim::Mode::Train => "train",
            vramscope_core::sim::Mode::Infer => "infer",
            vramscope_core::sim::Mode::Generate => "generate",
        },
        r.config.precision.name(),
        r.config.batch_size,
        shape(&r.config.input_shape),
    ));
    if r.config.padded == Some(true) {
        out.push_str(", padded");
    }
    if let Some(o) = r.config.optimizer {
        out.push_str(&format!(", optimizer {}", o.name()));
    }
    match r.config.checkpoint.len() {
        0 => {}
        1 => out.push_str(&format!(", checkpointing {}", r.config.checkpoint[0])),
        n => out.push_str(&format!(", checkpointing {n} modules")),
    }
    if let Some(g) = &r.generation {
        out.push_str(&format!(
            ", {} new tokens after a {}-token prompt",
            g.new_tokens, g.prompt_len
        ));
    }
    out.push_str("\n\n");

    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "layer",
        "op",
        "output shape",
        "params",
        "saved for backward",
    ]);
    let n = r.layers.len();
    for l in r.layers.iter().take(max_layers) {
        t.add_row(vec![
            Cell::new(&l.name),
            Cell::new(&l.op),
            Cell::new(shape(&l.output_shape)),
            right(l.parameters.to_string()),
            right(human(l.saved_bytes)),
        ]);
    }
    if n > max_layers {
        t.add_row(vec![
            Cell::new(format!("... {} more (use --layers all)", n - max_layers)),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");

    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "phase",
        "allocated after",
        "peak allocated",
        "peak reserved",
        "why",
    ]);
    let mut prev = 0i64;
    for p in &r.phases {
        let delta = p.allocated_after_bytes as i64 - prev;
        prev = p.allocated_after_bytes as i64;
        let marker = if p.name == r.peak.phase {
            " <- peak"
        } else {
            ""
        };
        t.add_row(vec![
            Cell::new(format!("{}{}", p.name, marker)),
            right(human(p.allocated_after_bytes)),
            right(human(p.peak_allocated_bytes)),
            right(human(p.peak_reserved_bytes)),
            Cell::new(phase_reason(&p.name, delta, r)),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");

    let b = &r.breakdown_at_peak;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec!["at the peak", "bytes"]);
    for (k, v) in [
        ("parameters", b.parameters),
        ("buffers", b.buffers),
        ("gradients", b.gradients),
        ("optimizer states", b.optimizer_states),
        ("activations", b.activations),
        ("temporaries", b.temporaries),
        ("inputs", b.inputs),
        ("KV cache", b.kv_cache),
    ] {
        if k == "KV cache" && r.generation.is_none() {
            continue;
        }
        t.add_row(vec![Cell::new(k), right(human(v))]);
    }
    t.add_row(vec![
        Cell::new("allocated (max_memory_allocated)"),
        right(human(r.peak.allocated_bytes)),
    ]);
    t.add_row(vec![
        Cell::new("reserved (max_memory_reserved)"),
        right(human(r.peak.reserved_bytes)),
    ]);
    t.add_row(vec![
        Cell::new("CUDA context"),
        right(human(r.overheads.cuda_context_bytes)),
    ]);
    t.add_row(vec![
        Cell::new("library workspaces"),
        right(human(r.overheads.library_workspace_bytes)),
    ]);
    t.add_row(vec![
        Cell::new("device total (nvidia-smi)"),
        right(human(r.peak.device_bytes)),
    ]);
    out.push_str(&t.to_string());
    out.push_str("\n\n");

    if !r.live_at_peak.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(vec![
            "largest tensors alive at the peak",
            "shape",
            "dtype",
            "category",
            "bytes",
        ]);
        for l in r.live_at_peak.iter().take(8) {
            let who = if l.module.is_empty() {
                l.made_by.clone()
            } else {
                format!("{} ({})", l.module, l.made_by)
            };
            t.add_row(vec![
                Cell::new(who),
                Cell::new(shape(&l.shape)),
                Cell::new(l.dtype),
                Cell::new(crate::explain::category_name(l.category)),
                right(human(l.bytes)),
            ]);
        }
        out.push_str(&t.to_string());
        out.push_str("\n\n");
    }

    if let Some(g) = &r.generation {
        let dtypes = if g.kv_key_dtype == g.kv_value_dtype {
            g.kv_key_dtype.to_string()
        } else {
            format!("keys {}, values {}", g.kv_key_dtype, g.kv_value_dtype)
        };
        match g.cross_attention_kv_cache_bytes {
            // `use_cache` false: generate() keeps no cache
            None if g.keeps_no_cache() => out.push_str(
                "no KV cache (use_cache false: every step reruns the whole sequence; --use-cache true estimates it with one); ",
            ),
            // an encoder-decoder: the decoder caches its start token and each token fed back
            Some(cross) => out.push_str(&format!(
                "KV cache: {} at the end ({} decoder positions, {} per token, and {} of cross-attention over the {}-token prompt; {dtypes}); ",
                human(g.kv_cache_bytes),
                1 + g.decode_steps,
                human(g.kv_cache_bytes_per_token),
                human(cross),
                g.prompt_len,
            )),
            None => out.push_str(&format!(
                "KV cache: {} at the end ({} positions, {} per token, {dtypes}); ",
                human(g.kv_cache_bytes),
                g.prompt_len + g.decode_steps,
                human(g.kv_cache_bytes_per_token),
            )),
        }
        let no_cache = g.keeps_no_cache();
        if g.simulated_decode_steps == g.decode_steps {
            out.push_str(&format!(
                "prefill and all {} decode steps simulated\n\n",
                g.decode_steps
            ));
        } else if no_cache && g.skeleton_stride > 0 {
            out.push_str(&format!(
                "prefill and {} of {} decode steps simulated op by op (the first, the last, and one in {} in between at its length)\n\n",
                g.simulated_decode_steps, g.decode_steps, g.skeleton_stride
            ));
        } else if no_cache {
            out.push_str(&format!(
                "prefill and {} of {} decode steps simulated op by op (the first and the last), the ids jumping to their final length in between\n\n",
                g.simulated_decode_steps, g.decode_steps
            ));
        } else if g.skeleton_decode_steps > 0 {
            let growth = if g.skeleton_stride > 1 {
                format!("{} positions at a time", g.skeleton_stride)
            } else {
                "position by position".to_string()
            };
            out.push_str(&format!(
                "prefill and {} of {} decode steps simulated op by op (the first and the last), the cache growing {growth} in between\n\n",
                g.simulated_decode_steps, g.decode_steps
            ));
        } else {
            out.push_str(&format!(
                "prefill and {} of {} decode steps simulated op by op (the first and the last), the cache jumping to its final length in between\n\n",
                g.simulated_decode_steps, g.decode_steps
            ));
        }
    }

    let verdict = if r.gpu.fits {
        format!(
            "fits on {} ({}), {} headroom",
            r.gpu.name,
            human(r.gpu.memory_bytes),
            human(r.gpu.headroom_bytes as u64)
        )
    } else {
        format!(
            "does NOT fit on {} ({}): {} short",
            r.gpu.name,
            human(r.gpu.memory_bytes),
            human(r.gpu.headroom_bytes.unsigned_abs())
        )
    };
    out.push_str(&format!(
        "peak {} allocated, {} reserved in {}; {}\n",
        human(r.peak.allocated_bytes),
        human(r.peak.reserved_bytes),
        r.peak.phase,
        verdict
    ));
    // the verdict counts the reserved memory of a GPU with room to spare; where only the
    // allocator's cache is over, the step was simulated again on an allocator capped at this
    // GPU's memory, which frees its cached segments and retries before failing, as PyTorch does
    if let Some(c) = &r.gpu.with_cache_release {
        let ratio = r.peak.reserved_bytes as f64 / r.peak.allocated_bytes.max(1) as f64;
        if c.fits {
            out.push_str(&format!(
                "but it runs: the reserved memory is {ratio:.1} times the allocated peak, and on this GPU the caching allocator frees its cached segments when cudaMalloc fails and retries (simulated: reserved peaks at {}, nothing out of memory)\n",
                human(c.peak_reserved_bytes)
            ));
        } else {
            out.push_str(&format!(
                "and it does not run: even freeing its cached segments when cudaMalloc fails (simulated), the caching allocator finds no room (the reserved memory is {ratio:.1} times the allocated peak: fragmentation)\n"
            ));
        }
    }
    let runs = r.gpu.fits || r.gpu.with_cache_release.as_ref().is_some_and(|c| c.fits);
    if !runs {
        out.push_str(TRICKS_HINT);
        out.push_str("; `vramscope fit` finds the largest batch that does\n");
    }
    out
}

/// Where a step does not fit its GPU (`estimate`, `fit`): the command that ranks the remedies.
pub const TRICKS_HINT: &str = "what to change: `vramscope tricks` with the same model and flags (--gpu included) ranks every remedy, each re-simulated, and says which fit";

/// Renders the GPU table (`vramscope gpus`).
pub fn render_gpus(gpus: &[crate::Gpu]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "GPU",
        "--gpu",
        "memory (NVML total)",
        "compute cap.",
        "CUDA context",
        "cuBLAS workspace",
        "source",
    ]);
    for g in gpus {
        let memory_only = g.compute_capability.is_none();
        let or_dash = |b: u64| {
            if memory_only {
                "-".to_string()
            } else {
                human(b)
            }
        };
        t.add_row(vec![
            Cell::new(&g.name),
            Cell::new(g.aliases.join(", ")),
            right(format!("{} ({} B)", human(g.memory_bytes), g.memory_bytes)),
            Cell::new(
                g.compute_capability
                    .as_deref()
                    .unwrap_or("- (AMD, memory only)"),
            ),
            right(or_dash(g.cuda_context_bytes)),
            right(or_dash(g.library_workspace_bytes)),
            Cell::new(&g.source),
        ]);
    }
    format!(
        "{t}\nCUDA context: typical for torch 2.x with CUDA_MODULE_LOADING=LAZY (approximate); \
         cuBLAS workspace: torch's default for the architecture, added on top of reserved memory.\n"
    )
}
