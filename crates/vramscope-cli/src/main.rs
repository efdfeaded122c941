//! The `vramscope` command: argument parsing and wiring only.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{simulate, Checkpoint, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_report::{find_gpu, render_text, EstimateReport, ReportInput, GPUS};

/// How much GPU memory a model takes, where it goes, and what fits.
#[derive(Parser, Debug)]
#[command(name = "vramscope", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Predict the memory of a training step or inference pass, phase by phase.
    Estimate(Box<EstimateArgs>),
    /// List the built-in models.
    Models,
}

#[derive(clap::Args, Debug)]
struct EstimateArgs {
    /// A built-in model name (`vramscope models` lists them).
    model: String,
    /// Batch size.
    #[arg(long, short = 'b', default_value_t = 32)]
    batch_size: u64,
    /// Input of one sample as CxHxW (or just H for a square 3-channel image).
    #[arg(long, default_value = "3x224x224")]
    input: String,
    /// Classes of the classifier head.
    #[arg(long, default_value_t = 1000)]
    num_classes: u64,
    /// train or infer.
    #[arg(long, default_value = "train")]
    mode: String,
    /// sgd, sgd-momentum, adam, adamw, adagrad, rmsprop.
    #[arg(long, default_value = "sgd-momentum")]
    optimizer: String,
    /// fp32, fp16, bf16, amp-fp16, amp-bf16.
    #[arg(long, default_value = "fp32")]
    precision: String,
    /// Modules to checkpoint, comma-separated (`layer3,layer4`), or `module:N` for
    /// checkpoint_sequential with N segments.
    #[arg(long, value_delimiter = ',')]
    checkpoint: Vec<String>,
    /// GPU to check the fit against (`vramscope estimate --gpu list` shows them).
    #[arg(long, default_value = "h100")]
    gpu: String,
    /// Print the JSON report.
    #[arg(long)]
    json: bool,
    /// Write every simulated allocation and free to FILE as JSON lines (the format of
    /// ../shared/truth's `--trace`, so the two can be diffed).
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Layers to show in the table (a number or `all`).
    #[arg(long, default_value = "40")]
    layers: String,
}

fn parse_input(s: &str) -> Result<(u64, u64, u64)> {
    let parts: Vec<&str> = s.split(['x', 'X']).collect();
    let nums: Result<Vec<u64>, _> = parts.iter().map(|p| p.trim().parse::<u64>()).collect();
    let nums = nums.map_err(|_| {
        anyhow!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size")
    })?;
    match nums.as_slice() {
        [h] => Ok((3, *h, *h)),
        [c, h, w] => Ok((*c, *h, *w)),
        _ => bail!("--input {s:?}: expected CxHxW (e.g. 3x224x224) or a single image size"),
    }
}

fn parse_checkpoint(items: &[String]) -> Result<Vec<Checkpoint>> {
    items
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| match s.split_once(':') {
            Some((m, n)) => {
                let segments = n.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow!(
                        "--checkpoint {s}: the segment count after ':' must be a positive integer"
                    )
                })?;
                Ok(Checkpoint::Sequential {
                    module: m.trim().to_string(),
                    segments,
                })
            }
            None => Ok(Checkpoint::Module(s.trim().to_string())),
        })
        .collect()
}

fn estimate(a: &EstimateArgs) -> Result<()> {
    let mode = match a.mode.as_str() {
        "train" => Mode::Train,
        "infer" | "inference" | "eval" => Mode::Infer,
        m => bail!("--mode {m:?}: expected train or infer"),
    };
    let precision = Precision::parse(&a.precision).ok_or_else(|| {
        anyhow!(
            "--precision {:?}: expected one of fp32, fp16, bf16, amp-fp16, amp-bf16",
            a.precision
        )
    })?;
    let optimizer = Optimizer::parse(&a.optimizer).ok_or_else(|| {
        anyhow!(
            "--optimizer {:?}: expected one of sgd, sgd-momentum, adam, adamw, adagrad, rmsprop",
            a.optimizer
        )
    })?;
    let gpu = find_gpu(&a.gpu).ok_or_else(|| {
        anyhow!(
            "--gpu {:?}: unknown GPU; known: {}",
            a.gpu,
            GPUS.iter()
                .map(|g| g.aliases[0])
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let (c, h, w) = parse_input(&a.input)?;
    let max_layers = if a.layers == "all" {
        usize::MAX
    } else {
        a.layers
            .parse()
            .map_err(|_| anyhow!("--layers {:?}: expected a number or `all`", a.layers))?
    };
    let input = ZooInput {
        batch: a.batch_size,
        channels: c,
        height: h,
        width: w,
        num_classes: a.num_classes,
    };
    let graph = zoo::build(&a.model, &input)?;
    let cfg = StepConfig {
        mode,
        precision,
        optimizer,
        iterations: 2,
        checkpoint: parse_checkpoint(&a.checkpoint)?,
        record_events: a.trace.is_some(),
    };
    let sim = simulate(&graph, &cfg)?;
    if let Some(path) = &a.trace {
        write_trace(path, &graph, &sim)?;
    }
    let report = EstimateReport::new(
        &ReportInput {
            graph: &graph,
            source: "zoo",
            batch_size: a.batch_size,
            mode,
            precision,
            optimizer,
            checkpoint: a.checkpoint.clone(),
            gpu,
        },
        &sim,
    );
    let text = if a.json {
        serde_json::to_string_pretty(&report).context("serialising the report")? + "\n"
    } else {
        render_text(&report, max_layers)
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}

fn write_trace(
    path: &std::path::Path,
    graph: &vramscope_core::Graph,
    sim: &vramscope_core::sim::Simulation,
) -> Result<()> {
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
    // write to a temporary file first so a failure leaves nothing half-written
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, out).with_context(|| format!("writing trace {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing trace {}", path.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Estimate(a) => estimate(a),
        Command::Models => {
            println!("{}", zoo::names().join("\n"));
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
