//! Calibration: a cost model measured from the device itself when the config gives none.
//!
//! A guessed preset is wrong by an order of magnitude on most disks (the `ssd` preset
//! says 8.5k random reads per second; an NVMe does a million), and a wrong model makes
//! QoS either throttle for nothing or protect nobody. So when `[device.model]` is absent
//! the daemon measures the device at start-up, before serving, **read-only**:
//!
//! | measured (with `profile`'s jobs, [`CALIBRATION_JOB`] each) | becomes |
//! |---|---|
//! | sequential 4 MiB reads, depth 8 | `rbps` |
//! | sequential / random 4 KiB reads, depth 64 | `rseqiops`, `rrandiops` |
//! | random 4 KiB reads paced at 90 % of `rrandiops` | the read latency target |
//!
//! Writes cannot be measured without writing, so the write coefficients are *estimates*:
//! half the read ones ([`WRITE_ESTIMATE`]), the ratio of the kernel's ordinary-SSD and
//! fast-SSD presets rounded down, and stated as estimates wherever the model is shown.
//! The default targets are the ones `profile` suggests ([`crate::profile::suggest`], where
//! the rule is explained): reads must complete within 1.5 × the p90 latency measured at
//! 90 % load in 90 % of cases, and writes give no latency signal.
//! Give `wpct`/`wlat` to change that.
//!
//! The result is kept in the state file (`"calibrated"`), with the device's path and
//! size, and reused at the next start of the same device, its read target derived again
//! from the latencies kept (so a rule changed by an upgrade applies to it too); delete
//! the entry (or the state file) to measure again. A regular file that is mostly
//! unallocated is not measured: its holes read as zeroes without touching the disk,
//! which would make the model many times too fast. The daemon then keeps the preset and says so.
//!
//! An emulated device (`kind = "emulated"`) is measured the same way, through its model in
//! virtual time: calibration sees exactly what the data path will see.

use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::DeviceConfig;
use crate::cost_model::ModelConfig;
use crate::duration::DurationUs;
use crate::profile::allocation::check_allocated;
use crate::profile::plan::WRITE_ESTIMATE;
use crate::profile::simulated::SimTarget;
use crate::profile::suggest::{target, without_write_signal, DEFAULT_PERCENTILE};
use crate::profile::uring::UringTarget;
use crate::profile::{profile, suggest_qos, Plan, Profile, Target};
use crate::qos::QosConfig;

/// Run time of each calibration job (four jobs: about two seconds in all).
pub const CALIBRATION_JOB: Duration = Duration::from_millis(500);
/// Depth of the 4 MiB bandwidth job: deeper than `profile`'s 4, so that a device that
/// serves each request on one of its channels (the emulated one does) is saturated up to
/// 8 channels within the short run.
pub const CALIBRATION_SEQ_DEPTH: u32 = 8;

/// A measured device, as the state file keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// What was measured: the device path and its size in bytes.
    pub device: String,
    pub size: u64,
    /// The six coefficients; the write ones estimated.
    pub model: ModelConfig,
    /// How the write coefficients were obtained.
    pub writes: String,
    /// The default read target: `rpct` percent of reads within `rlat`.
    pub rpct: f64,
    pub rlat: DurationUs,
    /// Read latency at 90 % load, µs: p50, p90, p95, p99.
    pub read_latency_us: [u64; 4],
}

impl Calibration {
    fn from_profile(device: String, size: u64, p: &Profile) -> Self {
        let q = suggest_qos(p, DEFAULT_PERCENTILE);
        Calibration {
            device,
            size,
            model: ModelConfig::from_params(p.model_with_writes()),
            writes: format!(
                "estimated: {WRITE_ESTIMATE} x the measured reads (calibration never writes)"
            ),
            rpct: q.rpct,
            rlat: q.rlat.unwrap_or(DurationUs(1)),
            read_latency_us: p.read_latency_us,
        }
    }

    /// This calibration with the read target the current rule derives from its measured
    /// latencies: a state file keeps what was measured, and the rule that turns it into a
    /// target applies at every start (a kept target from another rule is replaced, and
    /// logged). One without measured latencies keeps its target.
    pub fn with_current_target(mut self) -> Self {
        if self.read_latency_us.iter().all(|&us| us > 0) {
            let (rpct, rlat) = target(self.read_latency_us, DEFAULT_PERCENTILE);
            if (rpct, rlat) != (self.rpct, self.rlat.0) {
                tracing::info!(
                    kept = %format_args!("p{} {}", self.rpct, self.rlat),
                    now = %format_args!("p{rpct} {}", DurationUs(rlat)),
                    "device.model: the kept calibration's read target follows the current rule"
                );
                (self.rpct, self.rlat) = (rpct, DurationUs(rlat));
            }
        }
        self
    }

    /// Whether this calibration is of the device `cfg` names (same path and size).
    pub fn matches(&self, cfg: &DeviceConfig, size: u64) -> bool {
        Some(self.device.as_str()) == device_name(cfg).as_deref() && self.size == size
    }

    /// The QoS configuration with the calibrated defaults filled in: the read target
    /// unless the config gives `rlat`, no write signal unless it gives `wlat`.
    pub fn qos_defaults(&self, qos: &QosConfig) -> QosConfig {
        let mut q = qos.clone();
        // The targets filled in here are derived: they protect the underserved only.
        q.protect = Some(qos.protect());
        if q.rlat.is_none() {
            q.rpct = self.rpct;
            q.rlat = Some(self.rlat);
            q.rlat_derived = true;
        }
        if q.wlat.is_none() {
            without_write_signal(&mut q);
        }
        q
    }
}

/// Whether the config leaves the model to calibration: no `[device.model]` keys but
/// `learn`.
pub fn wanted(cfg: &DeviceConfig) -> bool {
    let keys = ModelConfig {
        learn: None,
        ..cfg.model.clone()
    };
    cfg.kind.has_file() && keys == ModelConfig::default()
}

pub(crate) fn device_name(cfg: &DeviceConfig) -> Option<String> {
    cfg.path.as_ref().map(|p| p.display().to_string())
}

/// Measures the device `cfg` names (already opened by the daemon, `size` bytes), read
/// only. `Err` says why it cannot be measured.
pub fn measure(cfg: &DeviceConfig, size: u64) -> Result<Calibration, String> {
    let name = device_name(cfg).ok_or("no device path")?;
    let plan = Plan {
        duration: CALIBRATION_JOB,
        seq_depth: CALIBRATION_SEQ_DEPTH,
        ..Plan::quick(false)
    };
    let mut target: Box<dyn Target> = match &cfg.emulated {
        Some(e) => Box::new(SimTarget::from_disk(e.disk(), size)),
        None => Box::new(file_target(cfg, size)?),
    };
    let p = profile(target.as_mut(), &plan, &mut |_, _| {})
        .map_err(|e| format!("measuring {name}: {e}"))?;
    if p.model.rbps == 0 || p.model.rseqiops == 0 || p.model.rrandiops == 0 {
        return Err(format!("measuring {name}: no read completed"));
    }
    Ok(Calibration::from_profile(name, size, &p))
}

/// The device opened read-only with O_DIRECT, after checking that a regular file is
/// allocated (holes would be measured instead of the disk).
fn file_target(cfg: &DeviceConfig, size: u64) -> Result<UringTarget, String> {
    let path = cfg.path.as_ref().ok_or("no device path")?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    if cfg.direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    check_allocated(&file, size, path)?;
    Ok(UringTarget::new(file, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::EmulatedConfig;
    use crate::profile::suggest::LATENCY_MARGIN;

    /// The example device of docs/configuration.md: 400k random reads per second on 8 channels.
    fn emulated_device() -> DeviceConfig {
        let text = r#"
            path = "x.img"
            kind = "emulated"
            [emulated]
            rbps = 2000000000
            rseqiops = 400000
            rrandiops = 400000
            wbps = 1000000000
            wseqiops = 200000
            wrandiops = 200000
            base_latency = "50us"
            channels = 8
        "#;
        toml::from_str(text).unwrap()
    }

    /// Calibrating an emulated device recovers its read coefficients, estimates writes
    /// at half of them, and derives a read target above the light-load latency.
    #[test]
    fn calibrating_an_emulated_device_recovers_its_reads() {
        let cfg = emulated_device();
        let c = measure(&cfg, 64 << 20).unwrap();
        let truth: &EmulatedConfig = cfg.emulated.as_ref().unwrap();
        let m = c.model.linear_params();
        for (name, got, want) in [
            ("rbps", m.rbps, truth.rbps),
            ("rseqiops", m.rseqiops, truth.rseqiops),
            ("rrandiops", m.rrandiops, truth.rrandiops),
        ] {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err <= 0.05, "{name}: measured {got}, truth {want}");
        }
        assert_eq!(m.wrandiops, m.rrandiops / 2);
        assert!(c.writes.starts_with("estimated"), "{}", c.writes);
        c.model.validate().unwrap();
        // A lone 4 KiB read takes 8 channels × 2.5 µs + 50 µs; the target is above it.
        assert_eq!(c.rpct, 90.0);
        assert!(c.rlat.0 > 70, "{:?}", c);
        assert!(c.matches(&cfg, 64 << 20) && !c.matches(&cfg, 32 << 20));
        let q = c.qos_defaults(&QosConfig::default());
        assert_eq!((q.rlat, q.wpct, q.wlat), (Some(c.rlat), 0.0, Some(c.rlat)));
        let own = QosConfig {
            rlat: Some(DurationUs(7)),
            ..QosConfig::default()
        };
        assert_eq!(c.qos_defaults(&own).rlat, Some(DurationUs(7)));
    }

    /// A calibration kept in the state file under another rule keeps its measurements and
    /// gets the target the current rule derives from them; one without measured
    /// latencies keeps the target it has.
    #[test]
    fn a_kept_calibration_gets_the_current_rules_target() {
        let measured = measure(&emulated_device(), 64 << 20).unwrap();
        let p90 = measured.read_latency_us[1];
        // Kept under a rule of 3 × the p95.
        let kept = Calibration {
            rpct: 95.0,
            rlat: DurationUs(measured.read_latency_us[2] * 3),
            ..measured.clone()
        };
        let now = kept.with_current_target();
        assert_eq!((now.rpct, now.rlat), (90.0, measured.rlat));
        assert_eq!(now.rlat.0, (p90 as f64 * LATENCY_MARGIN).ceil() as u64);
        assert_eq!(
            (&now.model, now.read_latency_us),
            (&measured.model, measured.read_latency_us)
        );
        let unmeasured = Calibration {
            rlat: DurationUs(375),
            read_latency_us: [0; 4],
            ..measured
        };
        assert_eq!(unmeasured.with_current_target().rlat, DurationUs(375));
    }

    /// A sparse file is not measured: its holes would be.
    #[test]
    fn a_sparse_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse.img");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(16 << 20).unwrap();
        let cfg: DeviceConfig = toml::from_str(&format!(
            "path = {:?}\ndirect = false",
            path.display().to_string()
        ))
        .unwrap();
        let e = measure(&cfg, 16 << 20).unwrap_err();
        assert!(e.contains("allocated"), "{e}");
    }
}
