//! Caps: hard upper limits on a volume's IOPS and bandwidth, with QEMU's throttling
//! semantics (`util/throttle.c`), so that an operator moving a disk from a QEMU throttle
//! group gets the same limits (design §12).
//!
//! Six leaky buckets: bytes and operations, each for all requests, reads and writes. A
//! bucket's level grows by what is admitted and leaks at `avg` per second. A request may
//! go while the level is at most the bucket's size, checked *before* the request is
//! added, so a level overshoots by at most one request, which later requests repay by
//! waiting. The size is a tenth of a second at `avg` when no burst is set, else
//! `max · max_length`; a burst longer than a second is itself paced at `max` by a second
//! level. Nothing is split and nothing gets stuck: a request larger than the whole bucket
//! goes when the bucket is empty and the next one waits for it to drain.
//!
//! Reads and writes count; WRITE_ZEROES counts as a write of its length; FLUSH and
//! DISCARD are not capped (QEMU does not throttle them either). With `iops_size`, a
//! request larger than it counts as `len / iops_size` operations.

use serde::{Deserialize, Serialize};

use crate::cost_model::IoKind;
use crate::size::ByteSize;

/// The largest value QEMU accepts for any limit.
const MAX_LIMIT: u64 = 1_000_000_000_000_000;

/// `caps = { ... }` of a volume: 0 or absent = no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsConfig {
    /// Operations per second, reads and writes together.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iops: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub read_iops: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub write_iops: u64,
    /// Bytes per second, reads and writes together.
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub bps: ByteSize,
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub read_bps: ByteSize,
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub write_bps: ByteSize,
    /// Burst rates: while the burst lasts, up to this many operations (bytes) per second
    /// go, for `burst_seconds`; then the plain rate. Each applies to every IOPS (byte)
    /// limit that is set.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub burst_iops: u64,
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub burst_bps: ByteSize,
    /// How long a full burst lasts, seconds (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_seconds: Option<u64>,
    /// Requests larger than this count as several operations (QEMU's `iops-size`).
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub iops_size: ByteSize,
}

/// `op_caps = { ... }` of a volume: caps on the operations its `caps` leave alone, so a
/// guest's flush or discard storm is bounded without capping its reads and writes. Each
/// takes the keys of `caps` without a direction (`iops`, `bps`, bursts, `iops_size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpCapsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<CapsConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard: Option<CapsConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_zeroes: Option<CapsConfig>,
}

impl OpCapsConfig {
    /// The operations with caps set.
    pub fn each(&self) -> impl Iterator<Item = (IoKind, &'static str, &CapsConfig)> {
        [
            (IoKind::Flush, "flush", self.flush.as_ref()),
            (IoKind::Discard, "discard", self.discard.as_ref()),
            (
                IoKind::WriteZeroes,
                "write_zeroes",
                self.write_zeroes.as_ref(),
            ),
        ]
        .into_iter()
        .filter_map(|(k, n, c)| c.filter(|c| c.is_set()).map(|c| (k, n, c)))
    }

    /// The error names the key, `op_caps.flush.iops: ...`.
    pub fn validate(&self) -> Result<(), String> {
        for (_, name, caps) in self.each() {
            let directed = caps.read_iops | caps.write_iops | caps.read_bps.0 | caps.write_bps.0;
            if directed != 0 {
                return Err(format!(
                    "op_caps.{name}: an operation's caps have no direction (use iops and bps)"
                ));
            }
            caps.validate().map_err(|e| {
                let e = e.strip_prefix("caps.").unwrap_or(&e);
                format!("op_caps.{name}.{e}")
            })?;
        }
        Ok(())
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `iops=2000 bps=200MiB`, the keys that are set, as `ctl set-caps` takes them; `-` when
/// none is.
impl std::fmt::Display for CapsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts = [
            ("iops", self.iops),
            ("read_iops", self.read_iops),
            ("write_iops", self.write_iops),
        ];
        let sizes = [
            ("bps", self.bps),
            ("read_bps", self.read_bps),
            ("write_bps", self.write_bps),
        ];
        let mut pairs: Vec<String> = counts
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .chain(
                sizes
                    .iter()
                    .filter(|(_, v)| !v.is_zero())
                    .map(|(k, v)| format!("{k}={v}")),
            )
            .collect();
        if self.burst_iops != 0 {
            pairs.push(format!("burst_iops={}", self.burst_iops));
        }
        if !self.burst_bps.is_zero() {
            pairs.push(format!("burst_bps={}", self.burst_bps));
        }
        if let Some(s) = self.burst_seconds {
            pairs.push(format!("burst_seconds={s}"));
        }
        if !self.iops_size.is_zero() {
            pairs.push(format!("iops_size={}", self.iops_size));
        }
        if pairs.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&pairs.join(" "))
        }
    }
}

impl CapsConfig {
    pub fn is_set(&self) -> bool {
        self.iops | self.read_iops | self.write_iops != 0
            || self.bps.0 | self.read_bps.0 | self.write_bps.0 != 0
    }

    /// QEMU's rules (`throttle_is_valid`); the error names the key under `caps`.
    pub fn validate(&self) -> Result<(), String> {
        let (iops, bps) = (
            [self.iops, self.read_iops, self.write_iops],
            [self.bps.0, self.read_bps.0, self.write_bps.0],
        );
        for (name, v) in [
            ("iops", self.iops),
            ("read_iops", self.read_iops),
            ("write_iops", self.write_iops),
            ("bps", self.bps.0),
            ("read_bps", self.read_bps.0),
            ("write_bps", self.write_bps.0),
            ("burst_iops", self.burst_iops),
            ("burst_bps", self.burst_bps.0),
            ("iops_size", self.iops_size.0),
        ] {
            if v > MAX_LIMIT {
                return Err(format!("caps.{name}: must be at most 1e15 (got {v})"));
            }
        }
        if iops[0] != 0 && iops[1] | iops[2] != 0 {
            return Err("caps.iops: give either iops or read_iops/write_iops, not both".into());
        }
        if bps[0] != 0 && bps[1] | bps[2] != 0 {
            return Err("caps.bps: give either bps or read_bps/write_bps, not both".into());
        }
        let burst = |name: &str, max: u64, limits: [u64; 3]| -> Result<(), String> {
            let set: Vec<u64> = limits.into_iter().filter(|&l| l != 0).collect();
            if max != 0 && set.is_empty() {
                return Err(format!("caps.{name}: a burst needs a rate to burst above"));
            }
            if let Some(l) = set.iter().find(|&&l| max != 0 && max < l) {
                return Err(format!(
                    "caps.{name}: must be at least the rate it bursts above (got {max} < {l})"
                ));
            }
            Ok(())
        };
        burst("burst_iops", self.burst_iops, iops)?;
        burst("burst_bps", self.burst_bps.0, bps)?;
        match self.burst_seconds {
            Some(0) => return Err("caps.burst_seconds: must be at least 1".into()),
            Some(s) if s > 1 && self.burst_iops == 0 && self.burst_bps.0 == 0 => {
                return Err("caps.burst_seconds: needs burst_iops or burst_bps".into())
            }
            Some(s) if s > 86_400 => {
                return Err(format!(
                    "caps.burst_seconds: must be at most a day (got {s})"
                ))
            }
            _ => {}
        }
        if self.iops_size.0 != 0 && iops.iter().all(|&l| l == 0) {
            return Err("caps.iops_size: needs an IOPS limit".into());
        }
        Ok(())
    }
}
