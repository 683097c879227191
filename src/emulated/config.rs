//! `[device.emulated]`: the true behaviour of a `kind = "emulated"` device.
//!
//! ```toml
//! [device.emulated]
//! rbps = 2000000000      # the device's true cost model: the six keys of [device.model]
//! rseqiops = 400000
//! rrandiops = 400000
//! wbps = 1000000000
//! wseqiops = 200000
//! wrandiops = 200000
//! base_latency = "50us"  # added to every request
//! channels = 8           # requests served in parallel
//! ```
//!
//! `[[device.emulated.faults]]` adds device errors on demand ([`super::faults`]),
//! `[device.emulated.crash]` a point where the daemon kills itself ([`super::crash`]).

use serde::{Deserialize, Serialize};

use super::disk::EmulatedDisk;
use super::faults::FaultRule;
use crate::cost_model::{LinearModel, LinearParams, ModelConfig};
use crate::duration::DurationUs;

/// Most channels accepted; far beyond any real device's internal parallelism.
const MAX_CHANNELS: u32 = 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatedConfig {
    pub rbps: u64,
    pub rseqiops: u64,
    pub rrandiops: u64,
    pub wbps: u64,
    pub wseqiops: u64,
    pub wrandiops: u64,
    /// Fixed latency of every request, on top of its service time.
    #[serde(default = "default_base_latency")]
    pub base_latency: DurationUs,
    /// Requests served in parallel; together they deliver the six numbers.
    #[serde(default = "default_channels")]
    pub channels: u32,
    /// Device errors on demand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultRule>,
    /// Where the daemon kills itself, for recovery tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<super::crash::CrashConfig>,
    /// A thread class that makes a forbidden system call as soon as it is confined, for
    /// tests of the seccomp filters' SIGSYS report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_trip: Option<crate::seccomp::ThreadClass>,
}

fn default_base_latency() -> DurationUs {
    DurationUs(50)
}

fn default_channels() -> u32 {
    8
}

impl EmulatedConfig {
    pub fn params(&self) -> LinearParams {
        LinearParams {
            rbps: self.rbps,
            rseqiops: self.rseqiops,
            rrandiops: self.rrandiops,
            wbps: self.wbps,
            wseqiops: self.wseqiops,
            wrandiops: self.wrandiops,
        }
    }

    /// Checks every key; the error names it.
    pub fn validate(&self) -> Result<(), String> {
        ModelConfig::from_params(self.params())
            .validate()
            .map_err(|e| e.replace("device.model", "device.emulated"))?;
        if !(1..=MAX_CHANNELS).contains(&self.channels) {
            return Err(format!(
                "device.emulated.channels: must be within 1..={MAX_CHANNELS} (got {})",
                self.channels
            ));
        }
        if self.base_latency.0 > 1_000_000 {
            return Err(format!(
                "device.emulated.base_latency: at most 1s (got {})",
                self.base_latency
            ));
        }
        for (at, rule) in self.faults.iter().enumerate() {
            rule.validate(at)?;
        }
        if let Some(crash) = &self.crash {
            crash.validate()?;
        }
        Ok(())
    }

    /// The disk this describes, idle.
    pub fn disk(&self) -> EmulatedDisk {
        EmulatedDisk::new(
            LinearModel::new(self.params()),
            1.0,
            self.channels as usize,
            self.base_latency.0 * 1000,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIX: &str = "rbps = 2000000000\nrseqiops = 400000\nrrandiops = 400000\n\
                       wbps = 1000000000\nwseqiops = 200000\nwrandiops = 200000\n";

    #[test]
    fn parses_with_defaults_and_names_bad_keys() {
        let c: EmulatedConfig = toml::from_str(SIX).unwrap();
        c.validate().unwrap();
        assert_eq!((c.channels, c.base_latency), (8, DurationUs(50)));
        assert_eq!(c.disk().channels(), 8);
        let missing = toml::from_str::<EmulatedConfig>("rbps = 1").unwrap_err();
        assert!(missing.to_string().contains("rseqiops"), "{missing}");
        let zero: EmulatedConfig = toml::from_str(&format!("{SIX}channels = 0")).unwrap();
        let e = zero.validate().unwrap_err();
        assert!(e.starts_with("device.emulated.channels"), "{e}");
        assert!(toml::from_str::<EmulatedConfig>(&format!("{SIX}chanels = 2")).is_err());
    }
}
