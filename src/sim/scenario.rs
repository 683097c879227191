//! Scenario files: the simulated disk, the QoS configuration, the tree and the load.
//!
//! ```toml
//! name = "two tenants"
//! duration = "2s"          # virtual time
//! warmup = "500ms"         # the report measures from here on
//! seed = 1
//!
//! [device.model]           # what QoS believes (same keys as the daemon)
//! preset = "ssd"
//! [device.qos]             # same keys as the daemon
//! rlat = "5ms"
//!
//! [disk]                   # the simulated hardware
//! channels = 4             # requests served in parallel
//! slots = 64               # device queue depth; beyond it requests wait (rq-wait)
//! speed = 1.0              # true speed relative to the truth model
//! [disk.truth]             # the hardware's real cost model (default: device.model)
//! preset = "ssd"
//!
//! [[group]]
//! name = "tenant-a"
//! weight = 100             # parent = "..." nests groups
//!
//! [[volume]]
//! name = "a0"
//! group = "tenant-a"
//! weight = 100
//!
//! [[workload]]
//! volume = "a0"
//! queues = 1               # independent submitters
//! depth = 32               # outstanding requests per queue
//! bs = "4k"
//! read_pct = 100.0
//! pattern = "random"       # or "sequential"
//! op = "rw"                # or "flush", "discard", "write-zeroes"
//! rate_iops = 1000.0       # optional: open loop at this rate (else closed loop)
//! start = "0s"
//! stop = "2s"              # optional
//! ```

use serde::{Deserialize, Serialize};

use crate::cost_model::ModelConfig;
use crate::qos::QosConfig;

/// A duration field: `"250us"`, `"1.5ms"`, `"2s"` or an integer µs. Stored in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SimDuration(pub u64);

impl<'de> Deserialize<'de> for SimDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::duration::deserialize_ns(d).map(SimDuration)
    }
}

impl Serialize for SimDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}us", self.0 / 1000))
    }
}

/// A size field: `"4k"`, `"128k"`, `"1m"`, `"1GiB"` (binary units) or an integer in bytes.
pub use crate::size::ByteSize as Size;

/// The whole scenario file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Shown in the report.
    #[serde(default)]
    pub name: String,
    /// Virtual run time.
    pub duration: SimDuration,
    /// Start of the measurement window.
    #[serde(default)]
    pub warmup: SimDuration,
    /// PRNG seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The daemon-side configuration.
    #[serde(default)]
    pub device: DeviceSection,
    /// The simulated hardware.
    #[serde(default)]
    pub disk: DiskSection,
    /// Groups, parents before children: `[[group]]` of the daemon's config.
    #[serde(default, rename = "group")]
    pub groups: Vec<crate::config::GroupConfig>,
    /// Volumes.
    #[serde(default, rename = "volume")]
    pub volumes: Vec<VolumeSection>,
    /// Load generators.
    #[serde(default, rename = "workload")]
    pub workloads: Vec<WorkloadSection>,
}

fn default_seed() -> u64 {
    1
}

/// `[device]`: exactly what the daemon would be given.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceSection {
    /// `[device.model]`.
    pub model: ModelConfig,
    /// `[device.qos]`.
    pub qos: QosConfig,
}

/// `[disk]`: the simulated hardware.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskSection {
    /// Requests in service at once (internal parallelism).
    pub channels: u32,
    /// Device queue depth: requests beyond it wait for a slot (the rq-wait signal).
    pub slots: u32,
    /// True speed relative to the truth model (2.0 = twice as fast).
    pub speed: f64,
    /// Fixed latency added to every request (the emulated device's `base_latency`).
    pub base_latency: SimDuration,
    /// The hardware's real costs; default: `device.model` (a perfect model).
    pub truth: Option<ModelConfig>,
}

impl Default for DiskSection {
    fn default() -> Self {
        DiskSection {
            channels: 4,
            slots: 64,
            speed: 1.0,
            base_latency: SimDuration(0),
            truth: None,
        }
    }
}

fn default_weight() -> u32 {
    100
}

/// `[[volume]]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSection {
    /// Unique name.
    pub name: String,
    /// Group (default: root).
    #[serde(default)]
    pub group: Option<String>,
    /// 1..=10000.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Volume size, for random offsets.
    #[serde(default = "default_volume_size")]
    pub size: Size,
    /// Hard limits, as `[[volume]] caps` of the daemon's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<crate::qos::CapsConfig>,
    /// As `[[volume]] class` and `latency_target` of the daemon's config.
    #[serde(default)]
    pub class: crate::qos::Class,
    #[serde(default)]
    pub latency_target: Option<crate::qos::LatencyTarget>,
    /// A guaranteed minimum, as `[[volume]] reserve` of the daemon's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<crate::qos::ReserveConfig>,
}

fn default_volume_size() -> Size {
    Size(16 << 30)
}

/// Access pattern.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Uniformly random, block-aligned.
    #[default]
    Random,
    /// Each queue streams through the volume.
    Sequential,
}

/// Operation mix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpMix {
    /// Reads and writes per `read_pct`.
    #[default]
    Rw,
    /// Flushes only.
    Flush,
    /// Discards of `bs` bytes.
    Discard,
    /// Write-zeroes of `bs` bytes.
    WriteZeroes,
}

/// `[[workload]]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    /// Target volume.
    pub volume: String,
    /// Independent submitters.
    #[serde(default = "one")]
    pub queues: u32,
    /// Outstanding requests per queue.
    #[serde(default = "one")]
    pub depth: u32,
    /// Request size.
    #[serde(default = "default_bs")]
    pub bs: Size,
    /// Percentage of reads for `op = "rw"`.
    #[serde(default = "hundred")]
    pub read_pct: f64,
    /// Access pattern.
    #[serde(default)]
    pub pattern: Pattern,
    /// Operation mix.
    #[serde(default)]
    pub op: OpMix,
    /// Open-loop arrival rate; absent = closed loop (always `queues × depth` outstanding).
    #[serde(default)]
    pub rate_iops: Option<f64>,
    /// When the workload starts.
    #[serde(default)]
    pub start: SimDuration,
    /// When it stops generating (in-flight and parked requests still finish).
    #[serde(default)]
    pub stop: Option<SimDuration>,
}

fn one() -> u32 {
    1
}
fn hundred() -> f64 {
    100.0
}
fn default_bs() -> Size {
    Size(4096)
}

/// Upper limits that keep a scenario's run time and memory sane.
const MAX_OUTSTANDING: u64 = 1 << 16;
const MAX_DURATION_NS: u64 = 3_600 * 1_000_000_000;

impl Scenario {
    /// Parse a scenario from TOML text.
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        let s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    /// Check everything the daemon would check, plus the simulator's own limits.
    pub fn validate(&self) -> Result<(), String> {
        self.device.model.validate()?;
        self.device.qos.validate()?;
        if let Some(t) = &self.disk.truth {
            t.validate()
                .map_err(|e| e.replace("device.model", "disk.truth"))?;
        }
        if self.duration.0 == 0 || self.duration.0 > MAX_DURATION_NS {
            return Err("duration: must be within 1ns..=1h".into());
        }
        if self.warmup >= self.duration {
            return Err("warmup: must be shorter than duration".into());
        }
        if self.disk.channels == 0 || self.disk.channels > 4096 {
            return Err(format!(
                "disk.channels: must be within 1..=4096 (got {})",
                self.disk.channels
            ));
        }
        if self.disk.slots == 0 {
            return Err("disk.slots: must be > 0".into());
        }
        if !(self.disk.speed.is_finite() && self.disk.speed > 0.0 && self.disk.speed <= 1e6) {
            return Err(format!(
                "disk.speed: must be a positive number (got {})",
                self.disk.speed
            ));
        }
        for (i, v) in self.volumes.iter().enumerate() {
            if let Some(caps) = &v.caps {
                caps.validate().map_err(|e| format!("volume[{i}].{e}"))?;
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            if let Some(caps) = &g.caps {
                caps.validate().map_err(|e| format!("group[{i}].{e}"))?;
            }
        }
        let mut total = 0u64;
        for (i, w) in self.workloads.iter().enumerate() {
            if !self.volumes.iter().any(|v| v.name == w.volume) {
                return Err(format!(
                    "workload[{i}].volume: no volume named {:?}",
                    w.volume
                ));
            }
            if w.queues == 0 || w.depth == 0 {
                return Err(format!("workload[{i}]: queues and depth must be > 0"));
            }
            total += u64::from(w.queues) * u64::from(w.depth);
            if !(0.0..=100.0).contains(&w.read_pct) {
                return Err(format!("workload[{i}].read_pct: must be within 0..=100"));
            }
            if let Some(r) = w.rate_iops {
                if !(r.is_finite() && r > 0.0 && r <= 1e9) {
                    return Err(format!("workload[{i}].rate_iops: must be within (0, 1e9]"));
                }
            }
            if w.op != OpMix::Flush && (w.bs.0 == 0 || w.bs.0 > 1 << 30) {
                return Err(format!("workload[{i}].bs: must be within 1..=1g"));
            }
        }
        if total > MAX_OUTSTANDING {
            return Err(format!(
                "workload: at most {MAX_OUTSTANDING} outstanding requests in total"
            ));
        }
        for v in &self.volumes {
            if v.size.0 < 4096 {
                return Err(format!("volume {:?}.size: must be at least 4k", v.name));
            }
        }
        Ok(())
    }
}

impl VolumeSection {
    /// The settings the QoS core applies beyond the weight.
    pub fn policy(&self) -> crate::qos::VolumePolicy {
        crate::qos::VolumePolicy {
            caps: self.caps,
            op_caps: None,
            class: self.class,
            latency_target: self.latency_target,
            reserve: self.reserve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        let size = |s: &str| Size::parse(s).map(|b| b.0);
        assert_eq!(size("4k").unwrap(), 4096);
        assert_eq!(size("128KiB").unwrap(), 128 << 10);
        assert_eq!(size("1m").unwrap(), 1 << 20);
        assert_eq!(size("512").unwrap(), 512);
        assert!(size("lots").is_err());
        assert!(size("99999999999t").is_err());
        let s = Scenario::from_toml("duration = \"1.5s\"\nwarmup = 1000").unwrap();
        assert_eq!(s.duration.0, 1_500_000_000);
        assert_eq!(s.warmup.0, 1_000_000);
    }

    #[test]
    fn rejects_bad_scenarios() {
        assert!(Scenario::from_toml("duration = \"1s\"\nbogus = 1").is_err());
        let e = Scenario::from_toml("duration = \"1s\"\n[[workload]]\nvolume = \"x\"").unwrap_err();
        assert!(e.contains("workload[0].volume"), "{e}");
        let e = Scenario::from_toml("duration = \"1s\"\n[device.qos]\nmin = 500.0\nmax = 400.0")
            .unwrap_err();
        assert!(e.starts_with("device.qos.min"), "{e}");
    }
}
