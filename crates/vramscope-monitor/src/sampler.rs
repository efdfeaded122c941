//! [`Sampler`]: asks a [`GpuSource`] on its own thread at a fixed interval and sends each
//! [`Sample`] over a channel, so a slow driver call never blocks the caller.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{GpuSource, MonitorError, Sample};

/// What the sampling thread did, returned when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples taken (including failed ones).
    pub samples: u64,
    /// CPU time the sampling thread used (user + system); `None` where the OS cannot say.
    pub cpu_time: Option<Duration>,
    /// Wall time the thread ran.
    pub wall_time: Duration,
}

/// What each sample reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    /// Everything ([`GpuSource::sample`]): for `watch`.
    All,
    /// Memory and processes only ([`GpuSource::sample_memory`]): for memory timelines.
    Memory,
}

/// A running sampling thread.
pub struct Sampler {
    samples: Receiver<Result<Sample, MonitorError>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<SamplerStats>>,
    started: Instant,
}

impl Sampler {
    /// Starts sampling `source` every `interval` (the first sample is taken at once). When a
    /// sample takes longer than the interval, the next one starts right after it: ticks are
    /// skipped, never queued.
    pub fn spawn(mut source: Box<dyn GpuSource>, interval: Duration, fields: Fields) -> Self {
        let (tx, samples) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel::<()>();
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("vramscope-sampler".into())
            .spawn(move || {
                let cpu0 = thread_cpu_time();
                let mut taken = 0;
                let mut next = started;
                loop {
                    let gpus = match fields {
                        Fields::All => source.sample(),
                        Fields::Memory => source.sample_memory(),
                    };
                    let sample = gpus.map(|gpus| Sample {
                        elapsed: started.elapsed(),
                        gpus,
                    });
                    taken += 1;
                    if tx.send(sample).is_err() {
                        break; // nobody listens any more
                    }
                    next += interval;
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    match stop_rx.recv_timeout(next - now) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                SamplerStats {
                    samples: taken,
                    cpu_time: thread_cpu_time()
                        .zip(cpu0)
                        .map(|(end, start)| end.saturating_sub(start)),
                    wall_time: started.elapsed(),
                }
            });
        match thread {
            Ok(handle) => Sampler {
                samples,
                stop: Some(stop),
                thread: Some(handle),
                started,
            },
            // no thread: the channel's sender is gone, so receivers see a stopped sampler
            Err(_) => Sampler {
                samples,
                stop: None,
                thread: None,
                started,
            },
        }
    }

    /// The samples, in order. The channel disconnects when the thread stops.
    pub fn samples(&self) -> &Receiver<Result<Sample, MonitorError>> {
        &self.samples
    }

    /// When sampling started (`Sample::elapsed` counts from here).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Waits for the next sample.
    pub fn next(&self) -> Result<Sample, MonitorError> {
        self.samples
            .recv()
            .map_err(|_| MonitorError::SamplerStopped)?
    }

    /// Stops the thread and says what it did. Samples already sent stay readable until the
    /// sampler is dropped.
    pub fn stop(&mut self) -> Option<SamplerStats> {
        self.stop.take();
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU time of the calling thread.
#[cfg(unix)]
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(not(unix))]
fn thread_cpu_time() -> Option<Duration> {
    None
}
