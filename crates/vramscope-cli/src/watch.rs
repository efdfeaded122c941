//! `vramscope watch`: what is on the GPUs now (memory, utilisation, temperature, power, and the
//! processes with their users and commands), refreshed in place like gpustat or nvitop.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use vramscope_monitor::procs::Resolver;
use vramscope_monitor::{bar, human, open_default, parse_interval, Fields, GpuSample, Sampler};

/// `vramscope watch` flags.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// Time between refreshes: 50ms, 0.5s, 2 (seconds).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one sample and exit.
    #[arg(long)]
    pub once: bool,
    /// Print JSON: one object with --once, else one object per line per refresh.
    #[arg(long)]
    pub json: bool,
    /// Stop after N refreshes (default: until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// Runs `vramscope watch`.
pub fn run(a: &WatchArgs) -> Result<()> {
    let mut source = open_default()?;
    let origin = source.describe();
    let resolver = Resolver::new();
    let mut out = std::io::stdout().lock();
    if a.once {
        let gpus = source.sample()?;
        let text = if a.json {
            serde_json::to_string_pretty(&to_json(&origin, &gpus, &resolver))? + "\n"
        } else {
            render(&origin, None, &gpus, &resolver)
        };
        return out.write_all(text.as_bytes()).context("writing to stdout");
    }
    let in_place = !a.json && std::io::stdout().is_terminal();
    let sampler = Sampler::spawn(source, a.interval, Fields::All);
    let mut shown = 0;
    while a.count.is_none_or(|n| shown < n) {
        let frame = match (sampler.next(), a.json) {
            (Ok(s), true) => to_json(&origin, &s.gpus, &resolver).to_string() + "\n",
            (Ok(s), false) => render(&origin, Some(a.interval), &s.gpus, &resolver),
            // a failed sample (a GPU lost, the driver restarting) is shown and watching goes on
            (Err(e), true) => {
                json!({ "source": origin, "error": e.to_string() }).to_string() + "\n"
            }
            (Err(e), false) => format!("{origin}: sample failed: {e}\n"),
        };
        let frame = if in_place {
            // home, each line cleared to its end, then the rest of the screen
            format!("\x1b[H{}\x1b[J", frame.replace('\n', "\x1b[K\n"))
        } else if a.json || shown == 0 {
            frame
        } else {
            format!("\n{frame}")
        };
        out.write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to stdout")?;
        shown += 1;
    }
    Ok(())
}

fn na<T: ToString>(v: Option<T>, unit: &str) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{}{unit}", v.to_string()))
}

/// The text view of one sample.
pub fn render(
    origin: &str,
    interval: Option<Duration>,
    gpus: &[GpuSample],
    resolver: &Resolver,
) -> String {
    let mut s = match interval {
        Some(i) => format!("vramscope watch · {origin} · every {i:?}\n"),
        None => format!("vramscope watch · {origin}\n"),
    };
    if gpus.is_empty() {
        s.push_str("no GPUs found\n");
    }
    for g in gpus {
        let mem = match (g.memory_used_bytes, g.memory_total_bytes) {
            (Some(u), Some(t)) => format!("{} / {}", human(u), human(t)),
            (u, t) => format!("{} / {}", na(u.map(human), ""), na(t.map(human), "")),
        };
        let _ = writeln!(
            s,
            "[{}] {:<24} {:>5} {:>6}  util {:>4}  {} {}",
            g.index,
            g.name.as_deref().unwrap_or("(name n/a)"),
            na(g.temperature_c, "°C"),
            na(g.power_milliwatts.map(|mw| mw / 1000), " W"),
            na(g.utilization_percent, "%"),
            bar(g.memory_used_bytes, g.memory_total_bytes, 20),
            mem,
        );
        if g.processes.is_empty() {
            s.push_str("      (no processes)\n");
            continue;
        }
        let _ = writeln!(
            s,
            "    {:>8}  {:<12} {:>10}  COMMAND",
            "PID", "USER", "GPU MEM"
        );
        for p in &g.processes {
            let info = resolver.info(p.pid);
            let command = match (&info.command, info.unresolved) {
                (Some(c), _) => truncate(c, 80),
                (None, Some(why)) => format!("? ({why})"),
                (None, None) => "?".into(),
            };
            let _ = writeln!(
                s,
                "    {:>8}  {:<12} {:>10}  {}",
                p.pid,
                truncate(info.user.as_deref().unwrap_or("?"), 12),
                na(p.used_bytes.map(human), ""),
                command
            );
        }
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

/// The JSON view of one sample: the sample's fields (null when unavailable) with each process's
/// user and command added.
pub fn to_json(origin: &str, gpus: &[GpuSample], resolver: &Resolver) -> Value {
    let gpus: Vec<Value> = gpus
        .iter()
        .map(|g| {
            let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
            let procs: Vec<Value> = g
                .processes
                .iter()
                .map(|p| {
                    let info = resolver.info(p.pid);
                    json!({
                        "pid": p.pid,
                        "used_bytes": p.used_bytes,
                        "user": info.user,
                        "command": info.command,
                        "unresolved": info.unresolved,
                    })
                })
                .collect();
            v["processes"] = Value::Array(procs);
            v
        })
        .collect();
    json!({ "source": origin, "gpus": gpus })
}
