//! Assembles the daemon from a validated config: opens the host disk, builds the QoS tree
//! (one `QosDevice` for the disk, a leaf per volume), listens on every volume's socket
//! (one acceptor thread for all), starts the planner thread, and stops gracefully on
//! SIGINT/SIGTERM.

use crate::backend::io::disk::{DiskError, HostDisk};
use crate::backend::io::slots::DeviceSlots;
use crate::backend::vhost_user::acceptor::Acceptor;
use crate::backend::volume::SharedDisk;
use crate::config::{Config, ConfigError, ROOT_GROUP};
use crate::emulated::FaultPlan;
use crate::lock::Locked;
use crate::planner::Planner;
use crate::qos::{LearnedModel, MonotonicClock, PeriodRecord, QosDevice};
use crate::volume_set::VolumeSet;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("qos: {0}")]
    Qos(String),
}

pub struct Daemon {
    pub qos: Arc<QosDevice>,
    /// The volumes served, which the control plane adds to and removes from.
    pub volumes: Arc<VolumeSet>,
    /// The planner thread, which the control API wakes after a change of the period.
    pub planner: std::thread::Thread,
    /// Where the planner thread hands each move of the learned model (the control plane
    /// keeps it in the state file).
    pub learned_sink: LearnedSink,
}

/// A receiver of learned models, installed once the control plane is up.
pub type LearnedSink = Arc<std::sync::Mutex<Option<Box<dyn Fn(&LearnedModel) + Send>>>>;

impl Daemon {
    /// Opens the device and starts serving every volume.
    pub fn start(config: &Config) -> Result<Self, DaemonError> {
        match crate::fd_limit::raise() {
            Ok(limit) => tracing::debug!(limit, "descriptor limit"),
            Err(e) => tracing::warn!("cannot raise the descriptor limit: {e}"),
        }
        let disk = HostDisk::open(&config.device)?;
        config.validate_layout(disk.size, disk.block_size)?;
        tracing::info!(
            path = ?disk.path, size = disk.size, block_size = disk.block_size,
            direct = disk.direct, "host disk ready"
        );
        let qos = Arc::new(build_qos(config)?);
        let shared = Arc::new(SharedDisk {
            disk: Arc::new(disk),
            slots: DeviceSlots::new(config.device.queue_depth),
            emulated: config
                .device
                .emulated
                .as_ref()
                .map(|e| Arc::new(std::sync::Mutex::new(e.disk()))),
            faults: FaultPlan::new(config.device.emulated.as_ref().map_or(&[], |e| &e.faults)),
            poll_max_ns: config.device.poll_max.0 * 1_000,
        });
        if let Some(class) = config.device.emulated.as_ref().and_then(|e| e.seccomp_trip) {
            crate::seccomp::arm_trip(class);
        }
        if let Some(crash) = config.device.emulated.as_ref().and_then(|e| e.crash) {
            crate::emulated::crash::arm(crash);
        }
        if !shared.faults.is_empty() {
            tracing::warn!(
                rules = ?config.device.emulated.as_ref().map(|e| &e.faults),
                "fault injection is on: matching requests will fail on purpose"
            );
        }
        // Volumes with files of their own are checked before any socket listens.
        HostDisk::probe_volume_files(config)?;
        let volumes = Arc::new(VolumeSet::new(
            qos.clone(),
            shared,
            Acceptor::start()?,
            config.device.clone(),
        ));
        for (i, v) in config.volumes.iter().enumerate() {
            // A CPU gone since the volume was configured leaves its workers unpinned; it
            // does not keep the other volumes from starting.
            if let Some(Err(e)) = v
                .cpu_affinity
                .as_deref()
                .map(crate::cpu_affinity::available)
            {
                tracing::warn!(volume = %v.name, "cpu_affinity: {e}: the workers meant for it run where the scheduler puts them");
            }
            if let Err(e) = volumes.add(v, i) {
                volumes.stop();
                return Err(DaemonError::Qos(e.to_string()));
            }
        }
        tracing::info!(
            volumes = volumes.list().len(),
            "listening on every volume's socket"
        );
        let learned_sink = LearnedSink::default();
        let planner = spawn_planner(qos.clone(), volumes.clone(), learned_sink.clone())?;
        Ok(Daemon {
            qos,
            volumes,
            planner,
            learned_sink,
        })
    }

    /// Completes in-flight I/O of every connected frontend, closes the connections and
    /// removes the sockets.
    pub fn stop(&self) {
        self.volumes.stop();
    }
}

/// What `check` can say of the QoS setup without serving: the device's QoS and every
/// group and volume added with its policy, as `run` adds them, so that a reservation
/// `run` would refuse (priced by the model it would use) is refused here too.
pub fn check_qos(config: &Config) -> Result<(), DaemonError> {
    let qos = build_qos(config)?;
    for v in &config.volumes {
        crate::volume_set::add_to_qos(&qos, v)
            .map_err(|e| DaemonError::Qos(format!("volume {}: {e}", v.name)))?;
    }
    Ok(())
}

fn build_qos(config: &Config) -> Result<QosDevice, DaemonError> {
    let d = &config.device;
    let model = d
        .model
        .build_boxed()
        .map_err(|e| DaemonError::Qos(format!("device.model: {e}")))?;
    let qos = QosDevice::new(model, &d.qos, Arc::new(MonotonicClock::new()));
    for g in config.groups_parents_first() {
        let parent = g.parent.as_deref().filter(|p| *p != ROOT_GROUP);
        qos.add_group(&g.name, parent, g.weight)
            .and_then(|()| qos.set_group_policy(&g.name, &g.policy()))
            .map_err(|e| DaemonError::Qos(format!("group {}: {e}", g.name)))?;
    }
    tracing::info!(
        enabled = qos.enabled(),
        period_ms = qos.period_ns() as f64 / 1e6,
        "qos ready"
    );
    Ok(qos)
}

/// Runs one planning period after another, then lets every worker offer its parked
/// requests again (budgets and vrate may have changed; the kernel kicks all wait queues
/// once per period). The planner only takes the QoS device's own locks; the data path
/// never waits for it. Each period is traced at debug level, and a summary is logged at
/// info level when vrate or busy_level moved noticeably. The thread parks between
/// periods, so an unpark (a runtime QoS change) wakes it early.
fn spawn_planner(
    qos: Arc<QosDevice>,
    volumes: Arc<VolumeSet>,
    learned_sink: LearnedSink,
) -> std::io::Result<std::thread::Thread> {
    let handle = std::thread::Builder::new()
        .name("planner".into())
        .spawn(move || {
            crate::seccomp::confine(crate::seccomp::ThreadClass::Planner);
            let planner = Planner::new(&qos);
            let mut logged = (0u64, 0i32);
            let mut unreachable = UnreachableTarget::default();
            let mut refused_logged_ns = None;
            let mut logged_unreached = false;
            loop {
                // plan() returns when the next period is due.
                let next = planner.plan();
                learn_step(&qos, &learned_sink, &mut refused_logged_ns);
                for s in volumes.list() {
                    s.wake();
                }
                let p = qos.last_period();
                tracing::debug!(
                    vrate_pct = p.vrate_after_ppm as f64 / 1e4,
                    busy_level = p.busy_level,
                    missed_read_ppm = p.missed_ppm[0],
                    missed_write_ppm = p.missed_ppm[1],
                    rq_wait_pct = p.rq_wait_pct,
                    mean_read_us = p.mean_lat_us[0],
                    mean_write_us = p.mean_lat_us[1],
                    latency_rising = p.latency_rising,
                    done = p.nr_done,
                    shortages = p.nr_shortages,
                    donors = p.nr_donors,
                    active = p.nr_active,
                    unreached = p.unreached,
                    "planner period"
                );
                let moved = p.vrate_after_ppm.abs_diff(logged.0) * 10 > logged.0.max(1)
                    || (p.busy_level - logged.1).abs() >= 50;
                if moved {
                    logged = (p.vrate_after_ppm, p.busy_level);
                    tracing::info!(
                        vrate_pct = p.vrate_after_ppm as f64 / 1e4,
                        busy_level = p.busy_level,
                        missed_read_ppm = p.missed_ppm[0],
                        missed_write_ppm = p.missed_ppm[1],
                        latency_rising = p.latency_rising,
                        "qos: vrate changed"
                    );
                }
                if p.unreached != logged_unreached {
                    logged_unreached = p.unreached;
                    if p.unreached {
                        tracing::info!(
                            vrate_pct = p.vrate_after_ppm as f64 / 1e4,
                            "qos: the underserved volumes miss their latency target with \
                             vrate low as they did with it higher, so lowering it does not \
                             help them: their misses no longer lower vrate, which rises while \
                             some volume is short of budget"
                        );
                    } else {
                        tracing::info!(
                            "qos: the underserved volumes' latency responds to vrate again: \
                             their misses lower it"
                        );
                    }
                }
                if unreachable.should_warn(&p, qos.period_ns()) {
                    tracing::warn!(
                        seconds = p.missed_at_min as u64 * qos.period_ns() / 1_000_000_000,
                        missed_read_ppm = p.missed_ppm[0],
                        missed_write_ppm = p.missed_ppm[1],
                        mean_read_us = p.mean_lat_us[0],
                        mean_write_us = p.mean_lat_us[1],
                        "qos: latency targets are missed with vrate held at its minimum: \
                         lowering vrate cannot help, and every volume is throttled to its \
                         share of the minimum; loosen rlat/rpct or wlat/wpct (see `vhost-iocost \
                         profile`) or raise min"
                    );
                }
                std::thread::park_timeout(Duration::from_nanos(next.max(1_000_000)));
            }
        })?;
    Ok(handle.thread().clone())
}

/// One step of the cost-model learner: a move is logged and handed to the sink; a move
/// the reservations refuse is logged at most once a minute.
fn learn_step(qos: &QosDevice, sink: &LearnedSink, refused_logged_ns: &mut Option<u64>) {
    match qos.learn_tick() {
        Ok(None) => {}
        Ok(Some(m)) => {
            let p = m.model.linear_params();
            tracing::info!(
                rbps = p.rbps,
                rseqiops = p.rseqiops,
                rrandiops = p.rrandiops,
                wbps = p.wbps,
                wseqiops = p.wseqiops,
                wrandiops = p.wrandiops,
                windows = m.status.windows,
                "device.model: learned from saturated windows"
            );
            if let Some(keep) = sink.locked().as_ref() {
                keep(&m);
            }
        }
        Err(e) => {
            let now = qos.last_period().at_ns;
            if !refused_logged_ns.is_some_and(|t| now.saturating_sub(t) < 60_000_000_000) {
                *refused_logged_ns = Some(now);
                tracing::warn!("device.model: the learned model is not used: {e}");
            }
        }
    }
}

/// When to warn that the latency targets cannot be met: once the planner has seen them
/// missed with vrate at its minimum for a second, then at most every ten seconds while
/// it lasts.
#[derive(Debug, Default)]
struct UnreachableTarget {
    last_warn_ns: Option<u64>,
}

impl UnreachableTarget {
    const AFTER_NS: u64 = 1_000_000_000;
    const EVERY_NS: u64 = 10_000_000_000;

    fn should_warn(&mut self, p: &PeriodRecord, period_ns: u64) -> bool {
        if u64::from(p.missed_at_min).saturating_mul(period_ns) < Self::AFTER_NS {
            return false;
        }
        if self
            .last_warn_ns
            .is_some_and(|t| p.at_ns.saturating_sub(t) < Self::EVERY_NS)
        {
            return false;
        }
        self.last_warn_ns = Some(p.at_ns);
        true
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and every thread it spawns afterwards) so that
/// [`wait_for_signal`] can take them synchronously.
pub fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zero-initialised set; pthread_sigmask on the
    // calling thread with valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for one of the blocked signals; returns its number and the PID that sent it (so
/// the log says who stopped the daemon).
pub fn wait_for_signal(set: &libc::sigset_t) -> (i32, i32) {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid initial value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: set is an initialised sigset and info a valid out-pointer.
        let sig = unsafe { libc::sigwaitinfo(set, &mut info) };
        if sig > 0 {
            // SAFETY: for signals sent by kill(2) the kernel fills si_pid.
            return (sig, unsafe { info.si_pid() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at_s: u64, missed_at_min: u32) -> PeriodRecord {
        PeriodRecord {
            at_ns: at_s * 1_000_000_000,
            missed_at_min,
            ..PeriodRecord::default()
        }
    }

    /// 40 ms periods: silent for the first second of misses at min, then one warning,
    /// then silent until ten seconds later; a new streak after a reset waits again.
    #[test]
    fn unreachable_target_warns_after_a_second_then_every_ten() {
        let period_ns = 40_000_000;
        let mut u = UnreachableTarget::default();
        assert!(!u.should_warn(&record(1, 24), period_ns));
        assert!(u.should_warn(&record(2, 25), period_ns));
        assert!(!u.should_warn(&record(3, 50), period_ns));
        assert!(!u.should_warn(&record(11, 250), period_ns));
        assert!(u.should_warn(&record(12, 275), period_ns));
        assert!(!u.should_warn(&record(13, 0), period_ns));
        assert!(!u.should_warn(&record(30, 10), period_ns));
        assert!(u.should_warn(&record(31, 25), period_ns));
    }
}
