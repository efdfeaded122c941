//! Sampling overhead: CPU time of the sampler thread at a 50 ms interval, with the fake source
//! standing in for NVML (8 GPUs, 10 processes each).
//!
//! `cargo run --release -p vramscope-monitor --example sampler_overhead [SECONDS] [INTERVAL]`

use std::time::Duration;

use vramscope_monitor::{parse_interval, FakeSource, Fields, GpuProcess, GpuSample, Sampler};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let interval = args
        .next()
        .map(|s| parse_interval(&s).expect("an interval such as 50ms"))
        .unwrap_or(Duration::from_millis(50));
    let gpus: Vec<GpuSample> = (0..8)
        .map(|i| GpuSample {
            index: i,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            memory_used_bytes: Some(40 << 30),
            memory_total_bytes: Some(80 << 30),
            utilization_percent: Some(90),
            temperature_c: Some(60),
            power_milliwatts: Some(500_000),
            processes: (0..10)
                .map(|p| GpuProcess {
                    pid: 1000 + p,
                    used_bytes: Some(4 << 30),
                })
                .collect(),
        })
        .collect();
    let mut sampler = Sampler::spawn(
        Box::new(FakeSource::new(vec![gpus])),
        interval,
        Fields::Memory,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(seconds);
    let mut received = 0u64;
    while std::time::Instant::now() < deadline {
        if sampler.next().is_ok() {
            received += 1;
        }
    }
    let stats = sampler.stop().expect("the sampler thread stops");
    let cpu = stats.cpu_time.expect("thread CPU time on this OS");
    println!(
        "interval {interval:?}: {} samples ({received} received) in {:.2} s wall; sampler thread \
         CPU {:.3} ms = {:.4}% of one core ({:.1} µs per sample)",
        stats.samples,
        stats.wall_time.as_secs_f64(),
        cpu.as_secs_f64() * 1e3,
        100.0 * cpu.as_secs_f64() / stats.wall_time.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / stats.samples as f64
    );
}
