//! The `vramscope` command: argument parsing and wiring only. Each command lives in its own
//! module; `model` resolves MODEL for every front-end and `step` turns the step flags into a
//! simulator configuration.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod estimate;
mod finetune;
mod inspect;
mod model;
mod step;

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
    /// List the built-in models.
    Models,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Estimate(a) => estimate::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Models => {
            println!("{}", vramscope_formats::zoo::names().join("\n"));
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
