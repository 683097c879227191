//! Service classes of a volume (design §13).
//!
//! * `normal`: a share by weight, as IOCost gives it.
//! * `latency` (PINE): a volume with its own latency target (`latency_target = "p99
//!   2ms"`), which the planner meets by raising its weight, or, when the device and not
//!   the volume's share is what is slow, by lowering vrate (`planner::latency_class`).
//! * `background` (DiscNice's aim, IOCost's means): served from what the others leave
//!   idle. Its weight counts a thousandth (`tree::background_weight`), so while a
//!   foreground volume is active it gets almost nothing, and alone or beside idle
//!   neighbours it gets the whole device through donation. While any foreground volume
//!   is active, its device time in flight is held to a tenth of a period, so a deep queue
//!   it built while alone drains before it can delay the foreground's requests much.
//!   It is never starved: unless given a `reserve` of its own, it has a reservation of
//!   1 % of the device. Its completions do not count in the latency signal (its latency
//!   is nobody's target), and it banks no budget while it waits.

use serde::{Deserialize, Serialize};

/// The class of a volume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    #[default]
    Normal,
    Latency,
    Background,
}

impl Class {
    pub fn is_background(self) -> bool {
        self == Class::Background
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Class::Normal => "normal",
            Class::Latency => "latency",
            Class::Background => "background",
        })
    }
}

/// A latency class volume's target: `"p99 2ms"`: the `pct`-th percentile of its requests'
/// latency in the daemon (from arrival to completion) within `us` microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyTarget {
    pub pct: f64,
    pub us: u64,
}

impl LatencyTarget {
    /// `"p99 2ms"`, `"p99.9 500us"`, `"p50 1ms"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("expected a percentile and a time, e.g. \"p99 2ms\" (got {text:?})");
        let (p, t) = text
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(bad)?;
        let pct: f64 = p
            .strip_prefix('p')
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        if !(pct > 0.0 && pct < 100.0) {
            return Err(format!(
                "the percentile must be within (0, 100) (got {pct})"
            ));
        }
        let us = crate::duration::parse_duration_ns(t)? / 1000;
        if us == 0 {
            return Err(format!("the latency must be above 0 (got {text:?})"));
        }
        Ok(LatencyTarget { pct, us })
    }
}

impl std::fmt::Display for LatencyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p{} {}", self.pct, crate::duration::DurationUs(self.us))
    }
}

impl Serialize for LatencyTarget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for LatencyTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        LatencyTarget::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_targets_parse_and_print() {
        let t = LatencyTarget::parse("p99 2ms").unwrap();
        assert_eq!((t.pct, t.us), (99.0, 2000));
        assert_eq!(t.to_string(), "p99 2ms");
        let t = LatencyTarget::parse("p99.9  500us").unwrap();
        assert_eq!((t.pct, t.us), (99.9, 500));
        for bad in ["99 2ms", "p100 2ms", "p99", "p99 0ms", "p99 fast"] {
            assert!(LatencyTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
