//! `vramscope run -- CMD ARGS...`: runs a command, follows its process tree, samples its GPU
//! memory, forwards its exit code, and reports the peak, when it happened, the baseline and a
//! timeline, optionally beside vramscope's prediction (`--expect`).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use serde_json::json;
use vramscope_monitor::procs::ProcessTree;
use vramscope_monitor::{
    human, ignore_interrupts, open_default, parse_interval, sparkline, Fields, Recorder, Sampler,
};

use crate::estimate::{estimate, EstimateArgs};

/// `vramscope run` flags.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Time between samples: 50ms, 0.5s, 2 (seconds).
    #[arg(long, default_value = "50ms", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print the summary and every sample as JSON when the command ends.
    #[arg(long)]
    pub json: bool,
    /// Print the samples as CSV when the command ends.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Write the --json / --csv output to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also print vramscope's prediction for this run: the arguments of `vramscope estimate`,
    /// quoted (`--expect "resnet50 -b 64 --precision amp-bf16"`).
    #[arg(long, value_name = "ESTIMATE ARGS")]
    pub expect: Option<String>,
    /// The command to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

#[derive(Parser, Debug)]
#[command(name = "vramscope estimate", no_binary_name = true)]
struct ExpectArgs {
    #[command(flatten)]
    estimate: EstimateArgs,
}

/// What vramscope predicted for the run.
struct Expected {
    args: String,
    device_bytes: u64,
    allocated_bytes: u64,
    reserved_bytes: u64,
}

fn expected(args: &str) -> Result<Expected> {
    let parsed = ExpectArgs::try_parse_from(args.split_whitespace())
        .map_err(|e| anyhow!("--expect {args:?}: {}", e.render().to_string().trim_end()))?;
    let (_, _, report) = estimate(&parsed.estimate, false).context(format!("--expect {args:?}"))?;
    Ok(Expected {
        args: args.to_string(),
        device_bytes: report.peak.device_bytes,
        allocated_bytes: report.peak.allocated_bytes,
        reserved_bytes: report.peak.reserved_bytes,
    })
}

/// Runs `vramscope run`; the exit status is the command's.
pub fn main(a: &RunArgs) -> u8 {
    match run(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// The exit code a shell would report: the code, or 128 + the signal that killed the command.
fn exit_code(status: ExitStatus) -> u8 {
    if let Some(c) = status.code() {
        return (c & 0xff) as u8;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return (128 + sig).min(255) as u8;
        }
    }
    1
}

fn shown(cmd: &[OsString]) -> String {
    cmd.iter()
        .map(|a| {
            let a = a.to_string_lossy();
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn run(a: &RunArgs) -> Result<u8> {
    let expect = a.expect.as_deref().map(expected).transpose()?;
    let source = open_default()?;
    let origin = source.describe();
    let sampler = Sampler::spawn(source, a.interval, Fields::Memory);
    let baseline = sampler.next().context("reading the GPUs before starting")?;
    let cmd = shown(&a.command);
    let start = Instant::now();
    let mut child = match Command::new(&a.command[0]).args(&a.command[1..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: starting `{cmd}`: {e}");
            // what a shell answers for a missing / non-executable command
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    // Ctrl-C goes to the command; vramscope stays to report what it measured
    ignore_interrupts();
    let mut tree = ProcessTree::new(child.id());
    let mut ever: BTreeSet<u32> = BTreeSet::from([child.id()]);
    let mut recorder = Recorder::new(&baseline.gpus);
    let mut failures = (0usize, None::<String>);
    let progress = std::io::stderr().is_terminal();
    let mut last_progress = start;
    let mut take = |s: Result<vramscope_monitor::Sample, vramscope_monitor::MonitorError>,
                    rec: &mut Recorder,
                    tree: &mut ProcessTree| match s {
        Ok(s) => {
            let at = sampler.started() + s.elapsed;
            // a sample taken while the command was being started counts as taken at its start
            let t = at.saturating_duration_since(start);
            ever.extend(tree.refresh());
            rec.record(t.as_secs_f64(), &s.gpus, |p| ever.contains(&p));
        }
        Err(e) => {
            failures.0 += 1;
            failures.1.get_or_insert(e.to_string());
        }
    };
    let status = loop {
        match sampler.samples().recv_timeout(a.interval) {
            Ok(s) => take(s, &mut recorder, &mut tree),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => bail!("the GPU sampling thread stopped"),
        }
        if let Some(status) = child.try_wait().context("waiting for the command")? {
            break status;
        }
        if progress && last_progress.elapsed() >= Duration::from_millis(200) {
            last_progress = Instant::now();
            eprint!(
                "\r\x1b[Kvramscope: {:.1} s  now {}  peak {}",
                start.elapsed().as_secs_f64(),
                recorder.current().map_or("n/a".into(), human),
                recorder.peak().map_or("n/a".into(), |(b, _)| human(b)),
            );
        }
    };
    // samples already taken up to the exit
    while let Ok(s) = sampler.samples().try_recv() {
        take(s, &mut recorder, &mut tree);
    }
    // a command shorter than the interval still gets one sample after its start
    if recorder.points().is_empty() {
        if let Ok(s) = sampler
            .samples()
            .recv_timeout(a.interval + Duration::from_secs(1))
        {
            take(s, &mut recorder, &mut tree);
        }
    }
    drop(sampler);
    if progress {
        eprint!("\r\x1b[K");
    }
    let code = exit_code(status);
    let summary = recorder.summary();
    let series = recorder.series();
    let mut r = format!(
        "vramscope run: `{cmd}` exited with code {code} after {:.2} s\n",
        start.elapsed().as_secs_f64()
    );
    r += &format!(
        "GPU memory of the command, {}:\n",
        summary.attribution.describe()
    );
    match (summary.peak_bytes, summary.peak_at_s) {
        (Some(b), Some(t)) => r += &format!("  peak       {} at {t:.2} s\n", human(b)),
        _ => r += "  peak       n/a (the driver reported no memory)\n",
    }
    r += &format!(
        "  baseline   {} in use on the device before the start\n",
        summary.baseline_device_bytes.map_or("n/a".into(), human)
    );
    if let Some(d) = summary.peak_device_used_bytes {
        r += &format!("  device     {} in use at the peak\n", human(d));
    }
    r += &format!(
        "  samples    {} every {:?} ({origin})\n",
        summary.samples, a.interval
    );
    if !series.is_empty() {
        r += &format!(
            "  timeline   {}  (0 to {:.2} s)\n",
            sparkline(&series, 60),
            summary.duration_s
        );
    }
    if let (n @ 1.., Some(first)) = &failures {
        r += &format!("  warning    {n} samples failed; the first: {first}\n");
    }
    if let Some(x) = &expect {
        r += &format!(
            "expected   {} on the device for `estimate {}` (allocated {}, reserved {})\n",
            human(x.device_bytes),
            x.args,
            human(x.allocated_bytes),
            human(x.reserved_bytes)
        );
        if let Some(peak) = summary.peak_bytes {
            let diff = peak as f64 - x.device_bytes as f64;
            r += &format!(
                "measured   {}: {}{} ({:+.1}% of the prediction)\n",
                human(peak),
                if diff < 0.0 { "-" } else { "+" },
                human(diff.abs() as u64),
                100.0 * diff / x.device_bytes.max(1) as f64
            );
        }
    }
    eprint!("{r}");
    if a.json || a.csv {
        let text = if a.json {
            let samples: Vec<_> = recorder
                .points()
                .iter()
                .zip(&series)
                .map(|(p, v)| {
                    json!({"t_s": p.t_s, "bytes": v, "process_bytes": p.process_bytes,
                    "device_used_bytes": p.device_used_bytes, "gpu_processes": p.gpu_processes})
                })
                .collect();
            let expected = expect.as_ref().map(|x| {
                json!({"estimate_args": x.args, "device_bytes": x.device_bytes,
                    "allocated_bytes": x.allocated_bytes, "reserved_bytes": x.reserved_bytes})
            });
            let v = json!({
                "command": a.command.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>(),
                "exit_code": code, "source": origin, "interval_s": a.interval.as_secs_f64(),
                "summary": summary, "expected": expected, "failed_samples": failures.0,
                "samples": samples,
            });
            serde_json::to_string_pretty(&v)? + "\n"
        } else {
            let cell = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
            let mut t = String::from("t_s,bytes,process_bytes,device_used_bytes,gpu_processes\n");
            for (p, v) in recorder.points().iter().zip(&series) {
                t += &format!(
                    "{:.3},{},{},{},{}\n",
                    p.t_s,
                    cell(*v),
                    cell(p.process_bytes),
                    cell(p.device_used_bytes),
                    p.gpu_processes
                );
            }
            t
        };
        match &a.output {
            Some(path) => crate::output::file(path, text.as_bytes(), "the timeline")?,
            None => std::io::stdout()
                .write_all(text.as_bytes())
                .context("writing to stdout")?,
        }
    }
    Ok(code)
}
