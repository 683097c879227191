//! `[device.qos]`: the QoS section of the daemon configuration.
//!
//! ```toml
//! [device.qos]
//! enable = true     # false: admit everything, still count statistics
//! rpct = 95.0       # read latency percentile (0 disables the read latency signal)
//! rlat = "250us"    # read latency target; "250us", "1ms", "2s", or an integer in µs
//! wpct = 95.0
//! wlat = "1ms"
//! min = 25.0        # vrate bounds in percent of the cost model's speed
//! max = 400.0
//! protect = "all"   # whose misses lower vrate: "all" or "underserved" (design §5.10)
//! ```
//!
//! Defaults: enabled, p95 targets for reads and writes, latency targets from the cost
//! model's preset (HDD 250 ms, SSD 25 ms, fast SSD 5 ms), vrate within 25 %..400 %.
//! `protect` is `"underserved"` when neither `rlat` nor `wlat` is given (the targets are
//! derived, nobody asked for them) and `"all"` when one is (the operator's target binds
//! the whole device, as in Linux).
//!
//! Deviation from the kernel defaults (rpct = wpct = 0, min = 1 %, max = 10 000 %): the
//! daemon's device queue is deep (`device.queue_depth`, 256 by default), so requests
//! rarely wait for a slot and the rq-wait signal is mostly zero (design §5.3). Without a
//! latency signal vrate would only ever rise, so latency QoS is on by default, and the
//! bounds are narrower so that a bad model or a misleading signal cannot starve or flood
//! the device.

use serde::{Deserialize, Serialize};

use crate::duration::DurationUs;

/// Largest accepted latency target (the planning period is capped at 1 s anyway).
const MAX_LAT_US: u64 = 10_000_000;

/// The QoS configuration. Every key is optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QosConfig {
    /// Throttle at all. When false every request is admitted and only counted.
    pub enable: bool,
    /// Read latency percentile, 0..=100 (0: reads give no latency signal).
    pub rpct: f64,
    /// Read latency target; default from the cost model's preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlat: Option<DurationUs>,
    /// Write latency percentile, 0..=100.
    pub wpct: f64,
    /// Write latency target; default from the cost model's preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wlat: Option<DurationUs>,
    /// Lower vrate bound, percent (1..=10000).
    pub min: f64,
    /// Upper vrate bound, percent (1..=10000).
    pub max: f64,
    /// Whose latency misses lower vrate; see [`Protect`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protect: Option<Protect>,
    /// `rlat` was filled in by calibration, not given: a latency target declared by a
    /// latency-class volume or group replaces it ([`super::QosParams::derive`]). Never in a
    /// file.
    #[serde(skip)]
    pub rlat_derived: bool,
}

/// Whose latency misses lower vrate (design §5.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protect {
    /// Every volume's: the device's target binds everyone, as in Linux. Equal tenants
    /// are throttled until their own combined queue meets it.
    All,
    /// Only volumes served well below their share (or their reservation): lowering
    /// vrate must give the device to someone who gets less than others. Equal tenants'
    /// misses only keep vrate from rising.
    Underserved,
}

impl QosConfig {
    /// Whether the read target is the operator's own: given, and not filled in by
    /// calibration.
    pub fn rlat_given(&self) -> bool {
        self.rlat.is_some() && !self.rlat_derived
    }

    /// The `protect` in force: as given, else `Underserved` when neither latency target
    /// is given (derived targets), else `All`.
    pub fn protect(&self) -> Protect {
        self.protect
            .unwrap_or(if self.rlat.is_none() && self.wlat.is_none() {
                Protect::Underserved
            } else {
                Protect::All
            })
    }
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            enable: true,
            rpct: 95.0,
            rlat: None,
            wpct: 95.0,
            wlat: None,
            min: 25.0,
            max: 400.0,
            protect: None,
            rlat_derived: false,
        }
    }
}

impl QosConfig {
    /// Check every key; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, v) in [("rpct", self.rpct), ("wpct", self.wpct)] {
            if !v.is_finite() || !(0.0..=100.0).contains(&v) {
                return Err(format!(
                    "device.qos.{key}: must be within 0..=100 (got {v})"
                ));
            }
        }
        for (key, v) in [("rlat", self.rlat), ("wlat", self.wlat)] {
            if let Some(DurationUs(us)) = v {
                if us == 0 || us > MAX_LAT_US {
                    return Err(format!(
                        "device.qos.{key}: must be within 1us..=10s (got {us}us)"
                    ));
                }
            }
        }
        for (key, v) in [("min", self.min), ("max", self.max)] {
            if !v.is_finite() || !(1.0..=10_000.0).contains(&v) {
                return Err(format!(
                    "device.qos.{key}: must be within 1..=10000 percent (got {v})"
                ));
            }
        }
        if self.min > self.max {
            return Err(format!(
                "device.qos.min: must be <= max (got {} > {})",
                self.min, self.max
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<QosConfig, String> {
        toml::from_str::<QosConfig>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn latency_targets_take_durations_and_integer_microseconds() {
        let c = parse("rlat = \"250us\"\nwlat = 1500").unwrap();
        assert_eq!(c.rlat, Some(DurationUs(250)));
        assert_eq!(c.wlat, Some(DurationUs(1500)));
        assert!(parse("rlat = -5").is_err());
    }

    #[test]
    fn defaults_and_example_validate() {
        let c = parse("").unwrap();
        assert_eq!(c, QosConfig::default());
        c.validate().unwrap();
        let c = parse(
            "enable = true\nrpct = 95.0\nrlat = \"250us\"\nwpct = 95.0\nwlat = \"1ms\"\nmin = 25.0\nmax = 400.0",
        )
        .unwrap();
        c.validate().unwrap();
        let back = parse(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn protect_defaults_by_whether_a_target_is_given() {
        assert_eq!(parse("").unwrap().protect(), Protect::Underserved);
        assert_eq!(parse("rlat = \"1ms\"").unwrap().protect(), Protect::All);
        assert_eq!(parse("wlat = 900").unwrap().protect(), Protect::All);
        let own = parse("rlat = \"1ms\"\nprotect = \"underserved\"").unwrap();
        assert_eq!(own.protect(), Protect::Underserved);
        assert_eq!(parse("protect = \"all\"").unwrap().protect(), Protect::All);
        let e = parse("protect = \"some\"").unwrap_err();
        assert!(e.contains("protect") || e.contains("all"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let e = parse("min = 500.0\nmax = 400.0")
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e, "device.qos.min: must be <= max (got 500 > 400)");
        let e = parse("rpct = 101.0").unwrap().validate().unwrap_err();
        assert!(e.starts_with("device.qos.rpct"), "{e}");
        let e = parse("wlat = 0").unwrap().validate().unwrap_err();
        assert!(e.starts_with("device.qos.wlat"), "{e}");
        let e = parse("max = 0.5").unwrap().validate().unwrap_err();
        assert!(e.starts_with("device.qos.max"), "{e}");
        assert!(parse("latency = 5").is_err(), "unknown keys are rejected");
    }
}
