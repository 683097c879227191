//! Human-friendly byte sizes in the config: `"4GiB"`, `"512"`, `"1M"`, or a plain integer.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A byte count parsed from `"4GiB"`, `"64MiB"`, `"1G"` (binary units), `"512"` or `512`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        if digits.is_empty() {
            return Err(format!(
                "`{text}` is not a size (expected e.g. \"4GiB\" or \"512\")"
            ));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{text}`: number too large"))?;
        // Binary units, case-insensitive, with an optional "iB"/"B": 4k, 4K, 4KiB, 1m, 1GiB.
        let unit = unit.trim().to_ascii_lowercase();
        let unit = unit
            .strip_suffix("ib")
            .or_else(|| unit.strip_suffix('b'))
            .unwrap_or(&unit);
        let shift = match unit {
            "" => 0,
            "k" => 10,
            "m" => 20,
            "g" => 30,
            "t" => 40,
            _ => {
                return Err(format!(
                    "`{text}`: unknown unit (use B, KiB, MiB, GiB or TiB; k, m, g, t also work)"
                ))
            }
        };
        n.checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}`: size overflows 64 bits"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            let unit = 1u64 << shift;
            if self.0 >= unit && self.0 % unit == 0 {
                return write!(f, "{}{name}", self.0 / unit);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_plain_numbers() {
        assert_eq!(ByteSize::parse("512").unwrap().0, 512);
        assert_eq!(ByteSize::parse("4GiB").unwrap().0, 4 << 30);
        assert_eq!(ByteSize::parse("1M").unwrap().0, 1 << 20);
        assert_eq!(ByteSize::parse("128k").unwrap().0, 128 << 10);
        assert_eq!(ByteSize::parse("1gib").unwrap().0, 1 << 30);
        assert_eq!(ByteSize::parse("0").unwrap().0, 0);
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert!(ByteSize::parse("GiB").is_err());
        assert!(ByteSize::parse("12 parsecs").is_err());
        assert!(ByteSize::parse("99999999999TiB").is_err());
    }

    #[test]
    fn displays_in_the_largest_exact_unit() {
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(1536).to_string(), "1536");
    }
}
