//! Run recordings: peak detection, per-process vs device-delta attribution, processes that vanish,
//! values the driver does not give.

mod common;

use common::{gpu, GIB};
use vramscope_monitor::{sparkline, Attribution, Recorder};

const CHILD: u32 = 4242;
const GRANDCHILD: u32 = 4243;
const OTHER: u32 = 999;

fn in_tree(pid: u32) -> bool {
    pid == CHILD || pid == GRANDCHILD
}

#[test]
fn per_process_memory_of_the_whole_tree_and_its_peak() {
    let mut r = Recorder::new(&[gpu(0, 3 * GIB, &[(OTHER, Some(3 * GIB))])]);
    type Procs<'a> = &'a [(u32, Option<u64>)];
    let steps: [(f64, Procs); 6] = [
        (0.05, &[(OTHER, Some(3 * GIB))]),
        (0.10, &[(OTHER, Some(3 * GIB)), (CHILD, Some(GIB))]),
        (
            0.15,
            &[
                (OTHER, Some(3 * GIB)),
                (CHILD, Some(GIB)),
                (GRANDCHILD, Some(2 * GIB)),
            ],
        ),
        // the other program grows: not the command's memory
        (
            0.20,
            &[
                (OTHER, Some(9 * GIB)),
                (CHILD, Some(GIB)),
                (GRANDCHILD, Some(2 * GIB)),
            ],
        ),
        // the grandchild exited between samples
        (0.25, &[(OTHER, Some(9 * GIB)), (CHILD, Some(GIB))]),
        (0.30, &[(OTHER, Some(9 * GIB))]),
    ];
    for (t, procs) in steps {
        let used = procs.iter().map(|p| p.1.unwrap()).sum();
        r.record(t, &[gpu(0, used, procs)], in_tree);
    }
    assert_eq!(r.attribution(), Attribution::PerProcess);
    let s = r.summary();
    assert_eq!(s.peak_bytes, Some(3 * GIB));
    assert_eq!(s.peak_at_s, Some(0.15), "the first sample at the peak");
    assert_eq!(s.baseline_device_bytes, Some(3 * GIB));
    assert_eq!(s.peak_device_used_bytes, Some(6 * GIB));
    assert_eq!(s.max_device_used_bytes, Some(12 * GIB));
    assert_eq!(s.samples, 6);
    let gib: Vec<u64> = r.series().iter().map(|v| v.unwrap() / GIB).collect();
    assert_eq!(gib, [0, 1, 3, 3, 1, 0]);
    assert_eq!(r.current(), Some(0));
    assert_eq!(sparkline(&r.series(), 80), "▁▃██▃▁");
}

#[test]
fn device_delta_when_the_driver_names_none_of_the_commands_processes() {
    // e.g. vramscope in a container: NVML's PIDs are the host's
    let mut r = Recorder::new(&[gpu(0, 2 * GIB, &[]), gpu(1, GIB, &[])]);
    for (t, a, b) in [(0.0, 2, 1), (0.1, 5, 1), (0.2, 5, 4), (0.3, 2, 1)] {
        r.record(
            t,
            &[gpu(0, a * GIB, &[(77, Some(GIB))]), gpu(1, b * GIB, &[])],
            in_tree,
        );
    }
    assert_eq!(r.attribution(), Attribution::DeviceDelta);
    let s = r.summary();
    assert_eq!(s.baseline_device_bytes, Some(3 * GIB));
    assert_eq!(s.peak_bytes, Some(6 * GIB), "both GPUs count");
    assert_eq!(s.peak_at_s, Some(0.2));
    assert!(Attribution::DeviceDelta
        .describe()
        .contains("device memory"));
}

#[test]
fn switches_to_per_process_once_the_driver_names_the_command() {
    let mut r = Recorder::new(&[gpu(0, GIB, &[])]);
    r.record(0.0, &[gpu(0, 2 * GIB, &[])], in_tree);
    assert_eq!(r.attribution(), Attribution::DeviceDelta);
    assert_eq!(r.current(), Some(GIB));
    r.record(0.1, &[gpu(0, 3 * GIB, &[(CHILD, Some(2 * GIB))])], in_tree);
    assert_eq!(r.attribution(), Attribution::PerProcess);
    // earlier samples are re-read per process: the command had nothing on the GPU then
    assert_eq!(r.series(), [Some(0), Some(2 * GIB)]);
}

#[test]
fn unavailable_values_are_not_zero() {
    let mut r = Recorder::new(&[gpu(0, GIB, &[])]);
    let mut blank = gpu(0, 0, &[(CHILD, None)]);
    blank.memory_used_bytes = None;
    r.record(0.0, &[blank.clone()], in_tree);
    assert_eq!(r.current(), None);
    assert_eq!(r.summary().peak_bytes, None);
    // per-process memory unavailable for the command's process: falls back to the device delta
    r.record(0.1, &[gpu(0, 4 * GIB, &[(CHILD, None)])], in_tree);
    assert_eq!(r.attribution(), Attribution::DeviceDelta);
    assert_eq!(r.points()[1].gpu_processes, 1);
    assert_eq!(r.summary().peak_bytes, Some(3 * GIB));
    assert_eq!(sparkline(&r.series(), 10), " █");
}

#[test]
fn an_empty_recording_has_no_peak() {
    let r = Recorder::new(&[]);
    let s = r.summary();
    assert_eq!(
        (s.peak_bytes, s.samples, s.baseline_device_bytes),
        (None, 0, None)
    );
}
