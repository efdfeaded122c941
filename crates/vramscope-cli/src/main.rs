//! The `vramscope` command: argument parsing and wiring only. Each command lives in its own
//! module; `model` resolves MODEL for every front-end and `step` turns the step flags into a
//! simulator configuration.
// On Linux with glibc (`own_entry`, set by build.rs) the C runtime calls `entry::main` directly,
// without Rust's own start-up (see there); the unit tests' harness brings its own `main`.
#![cfg_attr(all(own_entry, not(test)), no_main)]

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

/// Runs the command line's command; returns the process's exit status.
fn command_main() -> u8 {
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
        Ok(()) => 0,
        // the reader went away (`vramscope estimate ... --json | head`): nothing left to say
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

#[cfg(not(all(own_entry, not(test))))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(command_main())
}

/// The process's entry point on Linux with glibc. Rust's start-up before `fn main` reads
/// `/proc/self/maps` to find the main thread's stack guard and sets up a signal stack for
/// its stack-overflow message; a process spends about 0.08 ms on that, every command
/// (docs/performance.md, twenty-eighth session). Here the C runtime calls this function
/// instead, which does what of that start-up the commands rely on. The arguments still
/// reach `std::env::args`: glibc hands them to the standard library's initialiser.
#[cfg(all(own_entry, not(test)))]
mod entry {
    use std::ffi::{c_char, c_int};
    use std::io::Write;

    #[unsafe(no_mangle)]
    extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
        // SAFETY: no other thread runs yet; fcntl, open and signal only act on this
        // process's descriptors and signal dispositions
        unsafe {
            // a closed standard descriptor would be taken by the next file opened, and
            // output would land in it: /dev/null stands in for it, as Rust's start-up does
            for fd in 0..=2 {
                if libc::fcntl(fd, libc::F_GETFD) == -1 {
                    libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                }
            }
            // a write to a closed pipe is an error to report (or to end on quietly), not a
            // signal that kills the process
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        // a panic has printed its message; 101 is the status Rust's start-up gives it
        let status = std::panic::catch_unwind(super::command_main).unwrap_or(101);
        // Rust's start-up flushes stdout at exit; the C runtime's exit does not
        let _ = std::io::stdout().flush();
        c_int::from(status)
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
