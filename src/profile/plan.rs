//! The profiling jobs, and how their results become model coefficients and QoS targets.

use crate::cost_model::LinearParams;
use hdrhistogram::Histogram;
use std::time::Duration;

const KIB4: u64 = 4096;

/// A device `profile` can run jobs on (io_uring on a file, or the simulated disk).
pub trait Target {
    /// Bytes available for I/O (offsets stay below this).
    fn size(&self) -> u64;
    /// Runs one job to completion. `progress` is called with the fraction done (0..=1).
    fn run(&mut self, job: &Job, progress: &mut dyn FnMut(f64)) -> std::io::Result<JobResult>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    SeqRead,
    SeqWrite,
    RandRead,
    RandWrite,
}

impl Pattern {
    pub fn is_write(self) -> bool {
        matches!(self, Pattern::SeqWrite | Pattern::RandWrite)
    }
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
}

/// One workload.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: &'static str,
    pub pattern: Pattern,
    pub block_size: u64,
    pub depth: u32,
    pub duration: Duration,
    /// Pace submissions at this many requests per second (None: as fast as possible).
    pub rate_iops: Option<f64>,
}

/// What a job achieved.
#[derive(Debug)]
pub struct JobResult {
    pub ios: u64,
    pub seconds: f64,
    /// Completion latencies in µs.
    pub latency_us: Histogram<u64>,
}

impl JobResult {
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.seconds.max(1e-9)
    }
}

/// How long and how hard to profile.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Run time of each saturating job.
    pub duration: Duration,
    /// Queue depth of the 4 KiB jobs (the kernel tool uses 64).
    pub depth: u32,
    /// Block size and depth of the bandwidth jobs.
    pub seq_block: u64,
    pub seq_depth: u32,
    /// Measure writes too (destructive on the target's data).
    pub writes: bool,
}

impl Plan {
    /// The default: 20 s per job, like a short iocost_coef_gen run.
    pub fn standard(writes: bool) -> Self {
        Plan {
            duration: Duration::from_secs(20),
            depth: 64,
            seq_block: 4 << 20,
            seq_depth: 4,
            writes,
        }
    }

    /// Under a minute in total, with wider error bars.
    pub fn quick(writes: bool) -> Self {
        Plan {
            duration: Duration::from_secs(3),
            ..Self::standard(writes)
        }
    }

    fn saturating_jobs(&self) -> Vec<Job> {
        let job = |name, pattern, block_size, depth| Job {
            name,
            pattern,
            block_size,
            depth,
            duration: self.duration,
            rate_iops: None,
        };
        let mut jobs = vec![
            job("rbps", Pattern::SeqRead, self.seq_block, self.seq_depth),
            job("rseqiops", Pattern::SeqRead, KIB4, self.depth),
            job("rrandiops", Pattern::RandRead, KIB4, self.depth),
        ];
        if self.writes {
            jobs.extend([
                job("wbps", Pattern::SeqWrite, self.seq_block, self.seq_depth),
                job("wseqiops", Pattern::SeqWrite, KIB4, self.depth),
                job("wrandiops", Pattern::RandWrite, KIB4, self.depth),
            ]);
        }
        jobs
    }
}

/// A measured device.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// The six coefficients of the linear model; the write ones are zero when writes were
    /// not measured.
    pub model: LinearParams,
    /// Latency (µs) of paced random 4 KiB reads / writes at p50, p90, p95, p99.
    pub read_latency_us: [u64; 4],
    pub write_latency_us: [u64; 4],
}

/// Runs the plan on `target`. `report` receives progress lines (job name, fraction done).
pub fn profile(
    target: &mut dyn Target,
    plan: &Plan,
    report: &mut dyn FnMut(&str, f64),
) -> std::io::Result<Profile> {
    let mut p = Profile::default();
    for job in plan.saturating_jobs() {
        let r = target.run(&job, &mut |f| report(job.name, f.min(0.99)))?;
        report(job.name, 1.0);
        // The bandwidth jobs give bytes per second, the 4 KiB jobs IOPS.
        let bandwidth = job.name.ends_with("bps");
        let per_second = if bandwidth {
            job.block_size as f64
        } else {
            1.0
        };
        let value = (r.iops() * per_second).round() as u64;
        match job.name {
            "rbps" => p.model.rbps = value,
            "rseqiops" => p.model.rseqiops = value,
            "rrandiops" => p.model.rrandiops = value,
            "wbps" => p.model.wbps = value,
            "wseqiops" => p.model.wseqiops = value,
            _ => p.model.wrandiops = value,
        }
    }
    // Latency at a high but sustainable load: 90 % of the random IOPS just measured.
    let paced = |name, pattern, iops: u64| Job {
        name,
        pattern,
        block_size: KIB4,
        depth: plan.depth,
        duration: plan.duration,
        rate_iops: Some(iops as f64 * 0.9),
    };
    let mut jobs = vec![paced("read latency", Pattern::RandRead, p.model.rrandiops)];
    if plan.writes {
        jobs.push(paced(
            "write latency",
            Pattern::RandWrite,
            p.model.wrandiops,
        ));
    }
    for job in jobs {
        let r = target.run(&job, &mut |f| report(job.name, f.min(0.99)))?;
        report(job.name, 1.0);
        let h = &r.latency_us;
        let pcts = [50.0, 90.0, 95.0, 99.0].map(|q| h.value_at_percentile(q));
        if job.pattern.is_write() {
            p.write_latency_us = pcts;
        } else {
            p.read_latency_us = pcts;
        }
    }
    Ok(p)
}

/// Write coefficients estimated from the reads, as a fraction of them, where writes were
/// not measured: the ratio of the kernel's ordinary-SSD and fast-SSD presets (0.88 and
/// 0.56), rounded down so that unmeasured writes are priced high rather than low.
pub const WRITE_ESTIMATE: f64 = 0.5;

/// The percentiles a profile measures latency at; a suggestion uses one of them.
pub const PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

impl Profile {
    pub fn writes_measured(&self) -> bool {
        self.model.wbps > 0
    }

    /// The six coefficients, with the write ones estimated ([`WRITE_ESTIMATE`] × the
    /// reads) where they were not measured.
    pub fn model_with_writes(&self) -> LinearParams {
        if self.writes_measured() {
            return self.model;
        }
        let r = self.model;
        let estimate = |v: u64| ((v as f64 * WRITE_ESTIMATE).round() as u64).max(1);
        LinearParams {
            wbps: estimate(r.rbps),
            wseqiops: estimate(r.rseqiops),
            wrandiops: estimate(r.rrandiops),
            ..r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost_model::{ModelConfig, Preset};
    use crate::profile::simulated::SimTarget;

    /// Profiling a simulated disk whose service times follow a known model recovers that
    /// model's six coefficients within ±5 %.
    #[test]
    fn profiling_a_simulated_disk_recovers_its_coefficients() {
        let custom = ModelConfig {
            rbps: Some(900_000_000),
            rseqiops: Some(150_000),
            rrandiops: Some(60_000),
            wbps: Some(700_000_000),
            wseqiops: Some(90_000),
            wrandiops: Some(30_000),
            ..ModelConfig::default()
        };
        let configs = [
            ModelConfig {
                preset: Preset::Ssd,
                ..ModelConfig::default()
            },
            ModelConfig {
                preset: Preset::Hdd,
                ..ModelConfig::default()
            },
            ModelConfig {
                preset: Preset::FastSsd,
                ..ModelConfig::default()
            },
            custom,
        ];
        for cfg in configs {
            let truth = cfg.linear_params();
            let mut target = SimTarget::new(cfg.build().unwrap(), 4, 16 << 30);
            let plan = Plan {
                duration: Duration::from_secs(1),
                ..Plan::quick(true)
            };
            let p = profile(&mut target, &plan, &mut |_, _| {}).unwrap();
            let pairs = [
                ("rbps", p.model.rbps, truth.rbps),
                ("rseqiops", p.model.rseqiops, truth.rseqiops),
                ("rrandiops", p.model.rrandiops, truth.rrandiops),
                ("wbps", p.model.wbps, truth.wbps),
                ("wseqiops", p.model.wseqiops, truth.wseqiops),
                ("wrandiops", p.model.wrandiops, truth.wrandiops),
            ];
            for (name, got, want) in pairs {
                let err = (got as f64 - want as f64).abs() / want as f64;
                assert!(
                    err <= 0.05,
                    "{:?} {name}: measured {got}, truth {want} ({:.1} %)",
                    cfg.preset,
                    err * 100.0
                );
            }
            // Paced at 90 % of capacity, latency stays finite and ordered.
            assert!(p.read_latency_us[0] >= 1 && p.read_latency_us[0] <= p.read_latency_us[3]);
        }
    }
}
