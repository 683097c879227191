//! `[[device.emulated.faults]]`: device errors on demand, so that what a guest sees when
//! its disk fails can be tested (EIO, ENOSPC, a short transfer, a request that hangs).
//!
//! ```toml
//! [[device.emulated.faults]]
//! volume = "vm1"     # only this volume's requests (default: every volume)
//! op = "read"        # read | write | flush | discard | write-zeroes (default: any)
//! error = "eio"      # eio | enospc | short | stall
//! every = 100        # fail every 100th matching request (default 1: all of them)
//! after = 1000       # let the first 1000 matching requests through (default 0)
//! count = 5          # stop after this many faults (default: no limit)
//! stall = "2s"       # error = "stall": how long the request hangs before it fails
//! ```
//!
//! The request still goes to the device, as on a real disk where a failed write may have
//! written part of its data. An errno replaces its result; a `short` read or write (only
//! those can be short) really transfers only the first half of its data, so a guest
//! told "done" would find the rest of its buffer stale. The worker turns each of them into
//! VIRTIO_BLK_S_IOERR. Rules are tried in order and the first that fires
//! takes the request; each rule counts only the requests it sees.
//!
//! Faults exist only on the emulated device, so a production disk cannot get them by a
//! stray config line.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cost_model::IoKind;
use crate::duration::DurationUs;

/// The longest stall accepted: beyond it a guest's own I/O timeout is the thing tested.
const MAX_STALL_US: u64 = 600_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultError {
    Eio,
    Enospc,
    /// Transfers only the first half of the bytes asked for.
    Short,
    /// Hangs for `stall`, then fails with EIO, as a device whose command times out.
    Stall,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<IoKind>,
    pub error: FaultError,
    #[serde(default = "one")]
    pub every: u64,
    #[serde(default)]
    pub after: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default = "default_stall")]
    pub stall: DurationUs,
}

fn one() -> u64 {
    1
}

fn default_stall() -> DurationUs {
    DurationUs(2_000_000)
}

impl FaultRule {
    /// Checks every key; `at` is the rule's place in the config (for the error message).
    pub fn validate(&self, at: usize) -> Result<(), String> {
        let field = |key: &str| format!("device.emulated.faults[{at}].{key}");
        if self.every == 0 {
            return Err(format!("{}: must be at least 1", field("every")));
        }
        if self.count == Some(0) {
            return Err(format!(
                "{}: must be at least 1 (leave it out for no limit)",
                field("count")
            ));
        }
        if self.error == FaultError::Short && self.op.is_some_and(|op| !op.is_data()) {
            return Err(format!(
                "{}: a short transfer needs op = \"read\" or \"write\"",
                field("error")
            ));
        }
        if self.stall.0 == 0 || self.stall.0 > MAX_STALL_US {
            return Err(format!(
                "{}: must be within 1us..=10min (got {})",
                field("stall"),
                self.stall
            ));
        }
        Ok(())
    }

    fn matches(&self, volume: &str, kind: IoKind) -> bool {
        self.volume.as_deref().map_or(true, |v| v == volume)
            && self.op.map_or(true, |op| op == kind)
            && (self.error != FaultError::Short || kind.is_data())
    }
}

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub error: FaultError,
    /// For [`FaultError::Stall`]: ns the completion is held.
    pub stall_ns: u64,
}

impl Fault {
    /// The errno the request completes with instead of the device's result; `None` for
    /// a short transfer, whose result is the device's own short count.
    pub fn errno(&self) -> Option<i32> {
        match self.error {
            FaultError::Eio | FaultError::Stall => Some(libc::EIO),
            FaultError::Enospc => Some(libc::ENOSPC),
            FaultError::Short => None,
        }
    }

    /// For a short transfer, how many of `len` bytes to move: half, in whole `block`s.
    pub fn short_len(&self, len: u64, block: u64) -> Option<u64> {
        (self.error == FaultError::Short).then(|| len / 2 / block * block)
    }
}

/// The rules of a running device with their counts, shared by every volume's worker.
#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Vec<(FaultRule, RuleCounts)>,
}

#[derive(Debug, Default)]
struct RuleCounts {
    /// Matching requests seen.
    seen: AtomicU64,
    /// Faults injected.
    fired: AtomicU64,
}

impl FaultPlan {
    pub fn new(rules: &[FaultRule]) -> Self {
        FaultPlan {
            rules: rules
                .iter()
                .map(|r| (r.clone(), RuleCounts::default()))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `volume`'s next request of `kind` fails, and how.
    #[inline]
    pub fn pick(&self, volume: &str, kind: IoKind) -> Option<Fault> {
        // Asked for every request: without rules, a test inlined into the data path.
        if self.is_empty() {
            return None;
        }
        self.pick_by_rules(volume, kind)
    }

    fn pick_by_rules(&self, volume: &str, kind: IoKind) -> Option<Fault> {
        for (rule, counts) in &self.rules {
            if !rule.matches(volume, kind) {
                continue;
            }
            let n = counts.seen.fetch_add(1, Ordering::Relaxed) + 1;
            if n <= rule.after || (n - rule.after) % rule.every != 0 {
                continue;
            }
            // Claim one of the `count` faults; concurrent workers cannot overshoot it.
            let limit = rule.count.unwrap_or(u64::MAX);
            let claimed = counts
                .fired
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                    (f < limit).then_some(f + 1)
                })
                .is_ok();
            if claimed {
                return Some(Fault {
                    error: rule.error,
                    stall_ns: rule.stall.0 * 1000,
                });
            }
        }
        None
    }

    /// Faults injected so far, over every rule.
    pub fn injected(&self) -> u64 {
        self.rules
            .iter()
            .map(|(_, c)| c.fired.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<FaultRule> {
        #[derive(Deserialize)]
        struct Doc {
            faults: Vec<FaultRule>,
        }
        toml::from_str::<Doc>(text).unwrap().faults
    }

    #[test]
    fn every_after_and_count_pick_exactly_the_requests_they_say() {
        let plan = FaultPlan::new(&rules(
            "[[faults]]\nop = \"read\"\nerror = \"eio\"\nevery = 3\nafter = 2\ncount = 2\n",
        ));
        let fired: Vec<usize> = (1..=20)
            .filter(|_| plan.pick("a", IoKind::Write).is_none())
            .filter(|_| plan.pick("a", IoKind::Read).is_some())
            .collect();
        // Reads 1-2 pass, then every third: reads 5 and 8; the count stops the rest.
        assert_eq!(fired, vec![5, 8]);
        assert_eq!(plan.injected(), 2);
    }

    #[test]
    fn rules_are_per_volume_and_the_first_that_fires_takes_the_request() {
        let plan = FaultPlan::new(&rules(
            "[[faults]]\nvolume = \"a\"\nerror = \"short\"\n\
             [[faults]]\nerror = \"stall\"\nstall = \"5ms\"\n",
        ));
        let a = plan.pick("a", IoKind::Read).unwrap();
        assert_eq!(a.error, FaultError::Short);
        assert_eq!(a.errno(), None);
        assert_eq!(a.short_len(8192, 512), Some(4096));
        assert_eq!(a.short_len(4096, 4096), Some(0));
        // A flush cannot be short: the second rule takes it.
        let flush = plan.pick("a", IoKind::Flush).unwrap();
        assert_eq!(
            (flush.error, flush.stall_ns),
            (FaultError::Stall, 5_000_000)
        );
        assert_eq!(flush.errno(), Some(libc::EIO));
        assert_eq!(flush.short_len(4096, 512), None);
        let b = plan.pick("b", IoKind::Write).unwrap();
        assert_eq!(b.error, FaultError::Stall);
        assert!(FaultPlan::default().pick("a", IoKind::Read).is_none());
    }

    #[test]
    fn bad_rules_name_their_key() {
        let check = |text: &str| rules(text)[0].validate(0).unwrap_err();
        let e = check("[[faults]]\nerror = \"eio\"\nevery = 0\n");
        assert!(e.starts_with("device.emulated.faults[0].every"), "{e}");
        let e = check("[[faults]]\nerror = \"short\"\nop = \"flush\"\n");
        assert!(e.starts_with("device.emulated.faults[0].error"), "{e}");
        let e = check("[[faults]]\nerror = \"stall\"\nstall = \"601s\"\n");
        assert!(e.starts_with("device.emulated.faults[0].stall"), "{e}");
        let e = check("[[faults]]\nerror = \"eio\"\ncount = 0\n");
        assert!(e.contains("count"), "{e}");
    }
}
