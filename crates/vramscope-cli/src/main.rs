//! The `vramscope` command: argument parsing and wiring only. Each command lives in its own
//! module; `model` resolves MODEL for every front-end and `step` turns the step flags into a
//! simulator configuration.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod estimate;
mod finetune;
mod fit;
mod inspect;
mod model;
mod output;
mod run;
mod step;
mod tricks;
mod watch;

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
    Estimate(Box<estimate::EstimateArgs>),
    /// List the tensors of a checkpoint (safetensors, sharded folder, GGUF) from its headers.
    Inspect(inspect::InspectArgs),
    /// The largest batch that fits a GPU, or the smallest GPU that fits a batch.
    Fit(Box<fit::FitArgs>),
    /// List the GPUs `--gpu` knows (memory, compute capability, overheads, sources).
    Gpus {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every memory-saving trick, re-simulated and ranked by memory saved.
    Tricks(Box<tricks::TricksArgs>),
    /// List the built-in models.
    Models,
    /// Show what is on the GPUs (memory, utilisation, temperature, power, processes), refreshed.
    Watch(watch::WatchArgs),
    /// Run a command and measure its GPU memory: peak, when, baseline, timeline.
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    vramscope_core::heap::tune_for_estimates();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Estimate(a) => estimate::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Gpus { json } => gpus(*json),
        Command::Tricks(a) => tricks::run(a),
        Command::Models => models(),
        Command::Watch(a) => watch::run(a),
        Command::Run(a) => return run::main(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // the reader went away (`vramscope estimate ... --json | head`): nothing left to say
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether writing the output failed because its reader closed the pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn models() -> anyhow::Result<()> {
    let names = vramscope_formats::zoo::names()
        .into_iter()
        .chain(vramscope_formats::hf_zoo::names());
    output::text(&names.map(|n| format!("{n}\n")).collect::<String>())
}

fn gpus(json: bool) -> anyhow::Result<()> {
    let gpus: &[vramscope_report::Gpu] = &vramscope_report::GPUS;
    if json {
        output::json(gpus)
    } else {
        output::text(&vramscope_report::render_gpus(gpus))
    }
}
