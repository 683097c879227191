//! Durations as the configuration, the control API and the job files write them:
//! `"250us"`, `"1.5ms"`, `"2s"`, `"10ns"`, `"250µs"`, or a bare number of µs.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration in µs that (de)serialises as `"250us"`, `"1.5ms"`, `"2s"` or an integer µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DurationUs(pub u64);

/// Parse `"250us"`, `"1.5ms"`, `"2s"`, `"10ns"`, `"250µs"` or a bare number (µs) into ns.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "us" | "µs" => 1e3,
        "ns" => 1.0,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?} (use ns, us, ms or s)"
            ))
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (examples: \"250us\", \"1ms\", \"2s\")"))?;
    let ns = value * scale;
    if !ns.is_finite() || ns < 0.0 || ns > u64::MAX as f64 {
        return Err(format!("duration {text:?} out of range"));
    }
    Ok(ns.round() as u64)
}

impl fmt::Display for DurationUs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0;
        if us != 0 && us % 1_000_000 == 0 {
            write!(f, "{}s", us / 1_000_000)
        } else if us != 0 && us % 1_000 == 0 {
            write!(f, "{}ms", us / 1_000)
        } else {
            write!(f, "{us}us")
        }
    }
}

impl Serialize for DurationUs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DurationUs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_ns(d).map(|ns| DurationUs(ns / 1_000))
    }
}

/// A duration written as text (`"250us"`) or as an integer number of µs, in ns.
pub(crate) fn deserialize_ns<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"250us\", \"1ms\", \"2s\" or an integer number of µs")
        }
        fn visit_u64<E: de::Error>(self, us: u64) -> Result<u64, E> {
            Ok(us.saturating_mul(1_000))
        }
        fn visit_i64<E: de::Error>(self, us: i64) -> Result<u64, E> {
            u64::try_from(us)
                .map(|us| us.saturating_mul(1_000))
                .map_err(|_| E::custom("duration must not be negative"))
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
            parse_duration_ns(text).map_err(E::custom)
        }
    }
    d.deserialize_any(V)
}

/// [`parse_duration_ns`] as a [`Duration`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_ns(text).map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_all_forms() {
        assert_eq!(parse_duration_ns("250us").unwrap(), 250_000);
        assert_eq!(parse_duration_ns("250µs").unwrap(), 250_000);
        assert_eq!(parse_duration_ns("1ms").unwrap(), 1_000_000);
        assert_eq!(parse_duration_ns("1.5ms").unwrap(), 1_500_000);
        assert_eq!(parse_duration_ns("2s").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration_ns("7").unwrap(), 7_000);
        assert_eq!(parse_duration("10ns").unwrap(), Duration::from_nanos(10));
        assert!(parse_duration_ns("2 fortnights").is_err());
        assert!(parse_duration_ns("ms").is_err());
        assert_eq!(DurationUs(1_500).to_string(), "1500us");
        assert_eq!(DurationUs(2_000_000).to_string(), "2s");
    }
}
