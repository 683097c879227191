//! How much the host took from this VM while a comparison ran: the hypervisor's steal,
//! and the stalls it leaves out of steal.
//!
//! On this VM the hypervisor stops a vCPU for 2–12 ms every few seconds and `/proc/stat`
//! shows no steal for it: a thread that sleeps 0.5 ms woke 2–12 ms late several times in
//! each 2 s that four paced readers ran, QoS on or off, and about 4 ms late every 4 s on
//! an idle machine. A cluster of such stalls in one second puts that second's p99 over a
//! 1 ms SLO for readers with nothing beside them, so a comparison of such seconds says
//! more about the host than about QoS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the host took during one attempt.
#[derive(Debug)]
pub(crate) struct HostNoise {
    /// Stolen over total CPU time (`/proc/stat`).
    pub(crate) steal: f64,
    /// The longest a [`StallProbe`] thread woke late.
    pub(crate) longest_stall: Duration,
}

impl HostNoise {
    /// Whether the host left the attempt alone: steal under `max_steal` and no stall as
    /// long as `max_stall`.
    pub(crate) fn quiet(&self, max_steal: f64, max_stall: Duration) -> bool {
        self.steal < max_steal && self.longest_stall < max_stall
    }
}

impl std::fmt::Display for HostNoise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host steal {:.1} %, longest stall {:.1} ms",
            self.steal * 100.0,
            self.longest_stall.as_secs_f64() * 1e3
        )
    }
}

/// Watches the host from the start of an attempt until [`Watch::stop`].
pub(crate) struct Watch {
    ticks: (u64, u64),
    probe: StallProbe,
}

impl Watch {
    pub(crate) fn start() -> Self {
        Watch {
            ticks: steal_and_total_ticks(),
            probe: StallProbe::start(),
        }
    }

    pub(crate) fn stop(self) -> HostNoise {
        let after = steal_and_total_ticks();
        let steal = (after.0 - self.ticks.0) as f64 / (after.1 - self.ticks.1).max(1) as f64;
        HostNoise {
            steal,
            longest_stall: self.probe.stop(),
        }
    }
}

/// How often the probe wakes: its lateness is the stall it saw. It costs a few
/// microseconds of CPU per wake-up.
const PROBE_SLEEP: Duration = Duration::from_micros(500);

/// A thread that sleeps [`PROBE_SLEEP`] at a time and keeps the longest it overslept.
struct StallProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Duration>,
}

impl StallProbe {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stopping.load(Ordering::Relaxed) {
                let before = Instant::now();
                std::thread::sleep(PROBE_SLEEP);
                longest = longest.max(before.elapsed().saturating_sub(PROBE_SLEEP));
            }
            longest
        });
        StallProbe { stop, thread }
    }

    fn stop(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(Duration::MAX)
    }
}

/// The machine's stolen and total CPU time so far, in ticks (the first line of
/// `/proc/stat`: user nice system idle iowait irq softirq steal ...).
fn steal_and_total_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    let steal = ticks.get(7).copied().unwrap_or(0);
    (steal, ticks.iter().sum::<u64>().max(steal))
}
