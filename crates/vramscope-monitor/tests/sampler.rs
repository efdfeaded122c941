//! The sampling thread driven by the fake source: order, timing, errors, stopping.

mod common;

use std::time::{Duration, Instant};

use common::{gpu, GIB};
use vramscope_monitor::{FakeSource, Fields, GpuSource, MonitorError, Sampler};

fn script() -> Vec<Vec<vramscope_monitor::GpuSample>> {
    (0..5).map(|i| vec![gpu(0, i * GIB, &[])]).collect()
}

#[test]
fn fake_source_replays_then_repeats_the_last_sample() {
    let mut src = FakeSource::new(script());
    let used: Vec<u64> = (0..8)
        .map(|_| src.sample().unwrap()[0].memory_used_bytes.unwrap() / GIB)
        .collect();
    assert_eq!(used, [0, 1, 2, 3, 4, 4, 4, 4]);
    assert!(FakeSource::new(vec![]).sample().unwrap().is_empty());
}

#[test]
fn sampler_sends_every_sample_in_order_at_the_interval() {
    let interval = Duration::from_millis(20);
    let mut s = Sampler::spawn(Box::new(FakeSource::new(script())), interval, Fields::All);
    let t0 = Instant::now();
    let got: Vec<_> = (0..6).map(|_| s.next().unwrap()).collect();
    let took = t0.elapsed();
    let used: Vec<u64> = got
        .iter()
        .map(|x| x.device_used_bytes().unwrap() / GIB)
        .collect();
    assert_eq!(used, [0, 1, 2, 3, 4, 4]);
    // the first sample is immediate; five intervals follow
    assert!(took >= interval * 5 - Duration::from_millis(5), "{took:?}");
    assert!(got.windows(2).all(|w| w[0].elapsed < w[1].elapsed));
    let stats = s.stop().expect("the thread stops cleanly");
    assert!(stats.samples >= 6, "{stats:?}");
    assert!(stats.wall_time >= interval * 5 - Duration::from_millis(5));
    assert!(stats.cpu_time.is_some());
}

#[test]
fn stop_is_prompt_even_with_a_long_interval() {
    let mut s = Sampler::spawn(
        Box::new(FakeSource::new(script())),
        Duration::from_secs(3600),
        Fields::Memory,
    );
    s.next().unwrap();
    let t0 = Instant::now();
    let stats = s.stop().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(stats.samples, 1);
}

#[test]
fn a_failed_sample_is_reported_and_sampling_goes_on() {
    let dir = std::env::temp_dir().join(format!("vramscope-fake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("script.json");
    std::fs::write(
        &path,
        r#"[[{"index": 0, "memory_used_bytes": 1024}], {"error": "GPU is lost"}, [{"index": 0}]]"#,
    )
    .unwrap();
    let src = FakeSource::from_file(&path).unwrap();
    assert!(src.describe().contains("script.json"));
    let s = Sampler::spawn(Box::new(src), Duration::from_millis(1), Fields::All);
    assert_eq!(s.next().unwrap().device_used_bytes(), Some(1024));
    let err = s.next().unwrap_err();
    assert!(err.to_string().contains("GPU is lost"), "{err}");
    // the third sample reports nothing but the index: every value unavailable, not zero
    let third = s.next().unwrap();
    assert_eq!(third.gpus[0].memory_used_bytes, None);
    assert_eq!(third.gpus[0].power_milliwatts, None);
    assert_eq!(third.device_used_bytes(), None);

    std::fs::write(&path, r#"{"index": 0}"#).unwrap();
    let err = FakeSource::from_file(&path).unwrap_err();
    assert!(matches!(err, MonitorError::FakeScript { .. }));
    assert!(err.to_string().contains("expected a JSON array"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dropping_the_receiver_side_ends_the_thread() {
    let s = Sampler::spawn(
        Box::new(FakeSource::new(script())),
        Duration::from_millis(1),
        Fields::All,
    );
    drop(s); // joins: would hang if the thread kept running
}

#[cfg(feature = "nvml")]
#[test]
fn no_driver_is_a_clear_error() {
    let err = vramscope_monitor::NvmlSource::open(Some(std::ffi::OsStr::new(
        "/nonexistent/libnvidia-ml.so.1",
    )))
    .err()
    .expect("no NVML library there");
    assert!(matches!(err, MonitorError::NoDriver { .. }));
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "no NVIDIA driver: could not load the NVML library (/nonexistent/libnvidia-ml.so.1"
        ),
        "{msg}"
    );
    assert!(msg.contains("vramscope estimate"), "{msg}");
}
