//! `[device.model]`: the cost-model section of the daemon configuration.
//!
//! ```toml
//! [device.model]
//! preset = "ssd"                 # "hdd", "ssd-qd1", "ssd" (default), "fast-ssd"
//! # or all six measured numbers (they replace the preset's; give all or none):
//! # rbps = 488636629
//! # rseqiops = 8932
//! # rrandiops = 8518
//! # wbps = 427891549
//! # wseqiops = 28755
//! # wrandiops = 21940
//! flush_factor = 2.0             # flush = this many 4 KiB random writes
//! discard_page_factor = 0.015625 # discard per-page cost relative to a written page
//! write_zeroes_page_factor = 0.125
//! learn = true                   # refine the six numbers from live traffic
//! ```
//!
//! The preset also supplies the default latency target of `[device.qos]`.
//!
//! `learn` defaults to true for a preset or a calibrated model (both are guesses about
//! this device's writes) and to false when the six numbers are given (the operator's
//! measurement stays pinned unless `learn = true` is set too); see
//! [`super::learn`].

use serde::{Deserialize, Serialize};

use super::linear::{LinearModel, LinearParams, NonDataFactors};
use super::model::CostModel;
use super::presets::Preset;

/// Largest accepted non-data factor; beyond that a typo is more likely than intent.
const MAX_FACTOR: f64 = 1000.0;

/// The cost-model configuration. Every key is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Device class whose measured numbers and latency target are used.
    pub preset: Preset,
    /// Maximum sequential read bandwidth, bytes/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rbps: Option<u64>,
    /// Maximum 4 KiB sequential read IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rseqiops: Option<u64>,
    /// Maximum 4 KiB random read IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rrandiops: Option<u64>,
    /// Maximum sequential write bandwidth, bytes/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wbps: Option<u64>,
    /// Maximum 4 KiB sequential write IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wseqiops: Option<u64>,
    /// Maximum 4 KiB random write IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrandiops: Option<u64>,
    /// Flush cost in 4 KiB random writes (default 2.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush_factor: Option<f64>,
    /// Discard per-page cost relative to a written page (default 1/64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard_page_factor: Option<f64>,
    /// Write-zeroes per-page cost relative to a written page (default 1/8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_zeroes_page_factor: Option<f64>,
    /// Refine the six numbers from live traffic (default: unless the six are given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learn: Option<bool>,
}

impl ModelConfig {
    /// The six measured numbers, everything else at its default.
    pub fn from_params(p: LinearParams) -> Self {
        ModelConfig {
            rbps: Some(p.rbps),
            rseqiops: Some(p.rseqiops),
            rrandiops: Some(p.rrandiops),
            wbps: Some(p.wbps),
            wseqiops: Some(p.wseqiops),
            wrandiops: Some(p.wrandiops),
            ..ModelConfig::default()
        }
    }

    /// Whether the model is learned: as `learn` says, else unless the six are given.
    pub fn learns(&self) -> bool {
        self.learn.unwrap_or(self.rbps.is_none())
    }

    /// This configuration with the non-data prices and preset of `other`.
    pub fn with_non_data_of(self, other: &ModelConfig) -> Self {
        ModelConfig {
            preset: other.preset,
            flush_factor: other.flush_factor,
            discard_page_factor: other.discard_page_factor,
            write_zeroes_page_factor: other.write_zeroes_page_factor,
            ..self
        }
    }

    fn six(&self) -> [(&'static str, Option<u64>); 6] {
        [
            ("rbps", self.rbps),
            ("rseqiops", self.rseqiops),
            ("rrandiops", self.rrandiops),
            ("wbps", self.wbps),
            ("wseqiops", self.wseqiops),
            ("wrandiops", self.wrandiops),
        ]
    }

    /// Check every key; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        let six = self.six();
        let given = six.iter().filter(|(_, v)| v.is_some()).count();
        if given != 0 && given != 6 {
            let (present, _) = six
                .iter()
                .find(|(_, v)| v.is_some())
                .copied()
                .unwrap_or(("", None));
            let (missing, _) = six
                .iter()
                .find(|(_, v)| v.is_none())
                .copied()
                .unwrap_or(("", None));
            return Err(format!(
                "device.model.{missing}: missing; {present} is given, so give all six of \
                 rbps, rseqiops, rrandiops, wbps, wseqiops, wrandiops (or none to use the preset)"
            ));
        }
        for (key, v) in six {
            if v == Some(0) {
                return Err(format!("device.model.{key}: must be > 0 (got 0)"));
            }
        }
        for (key, v) in [
            ("flush_factor", self.flush_factor),
            ("discard_page_factor", self.discard_page_factor),
            ("write_zeroes_page_factor", self.write_zeroes_page_factor),
        ] {
            if let Some(f) = v {
                if !f.is_finite() || !(0.0..=MAX_FACTOR).contains(&f) {
                    return Err(format!(
                        "device.model.{key}: must be a number in 0..={MAX_FACTOR} (got {f})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The six measured numbers in effect (user values, else the preset's).
    pub fn linear_params(&self) -> LinearParams {
        let p = self.preset.params();
        LinearParams {
            rbps: self.rbps.unwrap_or(p.rbps),
            rseqiops: self.rseqiops.unwrap_or(p.rseqiops),
            rrandiops: self.rrandiops.unwrap_or(p.rrandiops),
            wbps: self.wbps.unwrap_or(p.wbps),
            wseqiops: self.wseqiops.unwrap_or(p.wseqiops),
            wrandiops: self.wrandiops.unwrap_or(p.wrandiops),
        }
    }

    /// The non-data prices in effect.
    pub fn non_data_factors(&self) -> NonDataFactors {
        let d = NonDataFactors::default();
        NonDataFactors {
            flush_factor: self.flush_factor.unwrap_or(d.flush_factor),
            discard_page_factor: self.discard_page_factor.unwrap_or(d.discard_page_factor),
            write_zeroes_page_factor: self
                .write_zeroes_page_factor
                .unwrap_or(d.write_zeroes_page_factor),
        }
    }

    /// Validate and build the linear model.
    pub fn build(&self) -> Result<LinearModel, String> {
        self.validate()?;
        Ok(LinearModel::with_factors(
            self.linear_params(),
            self.non_data_factors(),
            self.preset.latency_us(),
        ))
    }

    /// Validate and build the model as the trait object [`crate::qos::QosDevice::new`] takes.
    pub fn build_boxed(&self) -> Result<Box<dyn CostModel>, String> {
        Ok(Box::new(self.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ModelConfig, String> {
        toml::from_str::<ModelConfig>(s).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_to_ssd_preset() {
        let c = parse("").unwrap();
        assert_eq!(c.preset, Preset::Ssd);
        c.validate().unwrap();
        assert_eq!(c.linear_params(), Preset::Ssd.params());
        assert_eq!(c.build().unwrap().default_latency_us(), 25_000);
    }

    #[test]
    fn parses_presets_and_six_numbers() {
        let c = parse("preset = \"fast-ssd\"").unwrap();
        assert_eq!(c.build().unwrap().default_latency_us(), 5_000);
        assert_eq!(parse("preset = \"hdd\"").unwrap().preset, Preset::Hdd);
        let c = parse(
            "rbps = 1000000\nrseqiops = 100\nrrandiops = 50\nwbps = 1000000\nwseqiops = 100\nwrandiops = 50",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.linear_params().rrandiops, 50);
    }

    #[test]
    fn rejects_unknown_keys_and_partial_models() {
        assert!(parse("presett = \"ssd\"").is_err());
        assert!(parse("preset = \"nvme\"").is_err());
        let e = parse("rbps = 100").unwrap().validate().unwrap_err();
        assert!(e.starts_with("device.model.rseqiops"), "{e}");
        let e = parse(
            "rbps = 0\nrseqiops = 100\nrrandiops = 50\nwbps = 1000000\nwseqiops = 100\nwrandiops = 50",
        )
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(e.starts_with("device.model.rbps"), "{e}");
        let e = parse("flush_factor = -1.0")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.starts_with("device.model.flush_factor"), "{e}");
    }

    #[test]
    fn learns_unless_the_six_numbers_are_given() {
        assert!(parse("").unwrap().learns());
        assert!(parse("preset = \"hdd\"").unwrap().learns());
        assert!(!parse("learn = false").unwrap().learns());
        let six = "rbps = 1000000\nrseqiops = 100\nrrandiops = 50\nwbps = 1000000\nwseqiops = 100\nwrandiops = 50\n";
        assert!(!parse(six).unwrap().learns());
        assert!(parse(&format!("{six}learn = true")).unwrap().learns());
    }

    #[test]
    fn round_trips_through_toml() {
        let c = ModelConfig {
            preset: Preset::Hdd,
            flush_factor: Some(3.0),
            ..Default::default()
        };
        let s = toml::to_string(&c).unwrap();
        assert_eq!(parse(&s).unwrap(), c);
    }
}
