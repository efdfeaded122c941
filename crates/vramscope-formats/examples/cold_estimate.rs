//! One estimate in a fresh process, the way `vramscope estimate` runs it once: the time and the
//! page faults (minor faults from `getrusage`, all threads) of building the graph and of
//! simulating it (docs/performance.md, "fifth session"):
//!
//! ```text
//! cargo build --release -p vramscope-formats --example cold_estimate
//! target/release/examples/cold_estimate llama-3-70b               # as a process starts
//! target/release/examples/cold_estimate llama-3-70b --populate 8  # 8 MiB of heap populated first
//! target/release/examples/cold_estimate llama-3-70b --huge-pages  # the heap's growth THP-backed
//! ```
//!
//! `--huge-pages` puts every thread on the main arena (`M_ARENA_MAX` 1), grows the C heap by a
//! 16 MiB `M_TOP_PAD` and marks the new top `MADV_HUGEPAGE`, so that the estimate's first touches
//! fault in 2 MiB pages where the kernel allows it (docs/performance.md, "eighth session": tried
//! for `vramscope` itself and not adopted).
//!
//! `--populate MB` maps `MB` MiB at the top of the C heap before the estimate
//! (`madvise(MADV_POPULATE_WRITE)` on a freed `malloc` block) and reports what that took, so the
//! estimate after it pays no first-touch faults. The model is a built-in transformer config,
//! simulated as `estimate_once` does (AMP bf16, AdamW, 1 × 4096; gpt2 8 × 1024).

use std::time::Instant;

use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{simulate, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::{hf, hf_zoo};

/// Minor page faults of the process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given and nothing else
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut r);
        r.ru_minflt
    }
}

/// Backs the next 16 MiB of C heap growth with transparent huge pages where the kernel allows.
fn huge_page_heap() {
    const HUGE: usize = 2 << 20;
    // SAFETY: allocator parameters, one block freed at once, and an madvise hint on the heap's
    // own memory
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
        let p = libc::malloc(1 << 20);
        let end = libc::sbrk(0) as usize;
        let start = (p as usize + HUGE - 1) & !(HUGE - 1);
        if end > start {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
        libc::free(p);
    }
}

/// Populates `mib` MiB at the top of the C heap; returns the faults it took.
fn populate(mib: usize) -> Result<i64, String> {
    let before = minor_faults();
    let bytes = mib << 20;
    // SAFETY: the block is freed right away and only its pages are populated (a missing page
    // becomes a zero page; contents are never written)
    unsafe {
        let p = libc::malloc(bytes) as usize;
        if p == 0 {
            return Err(format!("malloc of {mib} MiB failed"));
        }
        let start = (p + 4095) & !4095;
        let len = (bytes - (start - p)) & !4095;
        let r = libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
        libc::free(p as *mut libc::c_void);
        if r != 0 {
            return Err("madvise(MADV_POPULATE_WRITE) failed (Linux 5.14 or later)".into());
        }
    }
    Ok(minor_faults() - before)
}

fn main() -> Result<(), String> {
    vramscope_core::heap::tune_for_estimates();
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .ok_or("usage: cold_estimate MODEL [--populate MB | --huge-pages]")?;
    const USAGE: &str = "usage: cold_estimate MODEL [--populate MB | --huge-pages]";
    let mib: Option<usize> = match (args.next().as_deref(), args.next()) {
        (Some("--populate"), Some(n)) => Some(
            n.parse()
                .map_err(|_| format!("--populate: expected MiB, got `{n}`"))?,
        ),
        (Some("--huge-pages"), None) => {
            huge_page_heap();
            None
        }
        (None, _) => None,
        _ => return Err(USAGE.into()),
    };
    if let Some(mib) = mib {
        let t = Instant::now();
        let faults = populate(mib)?;
        println!(
            "populate {mib} MiB: {:.2} ms, {faults} faults",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let text = hf_zoo::config(&name).ok_or(format!("{name}: not a built-in transformer"))?;
    let cfg = hf::HfConfig::parse(&name, text).map_err(|e| e.to_string())?;
    let (batch, seq) = if name == "gpt2" { (8, 1024) } else { (1, 4096) };
    let f0 = minor_faults();
    let t = Instant::now();
    let graph = hf::build(&cfg, &hf::HfInput::new(batch, seq, Precision::AmpBf16))
        .map_err(|e| e.to_string())?
        .graph;
    let built = t.elapsed().as_secs_f64() * 1e3;
    let f1 = minor_faults();
    let step = StepConfig {
        mode: Mode::Train,
        precision: Precision::AmpBf16,
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    let sim = simulate(&graph, &step).map_err(|e| e.to_string())?;
    let total = t.elapsed().as_secs_f64() * 1e3;
    let f2 = minor_faults();
    println!(
        "{name}: graph {built:.2} ms, {} faults; simulation {:.2} ms, {} faults; total {total:.2} ms; peak {} B",
        f1 - f0,
        total - built,
        f2 - f1,
        sim.peak_allocated
    );
    std::mem::forget((graph, sim));
    Ok(())
}
