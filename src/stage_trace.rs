//! Stage timestamps for the breakdown of a request's round trip (BENCHMARKS.md, "A round
//! trip, stage by stage"; `scripts/bench-stages.sh`).
//!
//! Off unless `VHOST_IOCOST_STAGE_TRACE` names a file prefix (read at the first mark).
//! Then the daemon's data path and the `bench` client record each stage event with its
//! CLOCK_MONOTONIC time, a clock both processes share, and each writes its events to
//! `PREFIX.daemon` or `PREFIX.client` when it stops: one line per event, `LETTER NS N`.
//! Off, a mark costs one load of an initialised `OnceLock`.

use crate::lock::Locked;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming the prefix of the trace files.
pub const ENV: &str = "VHOST_IOCOST_STAGE_TRACE";
/// Events kept per process; a run that makes more keeps its first ones.
const MAX_EVENTS: usize = 2_000_000;

/// A stage event. Each one is a line's letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The daemon popped the first chain of a pass over a ring.
    Popped,
    /// The daemon enters the kernel to submit operations.
    SubmitStart,
    /// The submission returned; N operations were submitted.
    SubmitEnd,
    /// The daemon reaped N completions.
    Reaped,
    /// The daemon published the completions since its last notification on the used
    /// rings, where a guest that polls sees them.
    Published,
    /// The daemon signalled the guest's used-ring notification (a guest that polls its
    /// queue asks for none).
    Notified,
    /// The client submits what it queued and waits for completions.
    ClientWaits,
    /// The client's wait returned with N completions.
    ClientWoke,
}

impl Stage {
    fn letter(self) -> char {
        match self {
            Stage::Popped => 'P',
            Stage::SubmitStart => 'S',
            Stage::SubmitEnd => 's',
            Stage::Reaped => 'R',
            Stage::Published => 'U',
            Stage::Notified => 'N',
            Stage::ClientWaits => 'K',
            Stage::ClientWoke => 'W',
        }
    }
}

struct Recorder {
    prefix: PathBuf,
    events: Mutex<Vec<(Stage, u64, u32)>>,
}

fn recorder() -> Option<&'static Recorder> {
    static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            std::env::var_os(ENV)
                .filter(|v| !v.is_empty())
                .map(|prefix| Recorder {
                    prefix: PathBuf::from(prefix),
                    // Reserved up front: growing it would stall the traced path. Pages
                    // never written cost no memory.
                    events: Mutex::new(Vec::with_capacity(MAX_EVENTS)),
                })
        })
        .as_ref()
}

/// Records `stage` now.
#[inline]
pub fn mark(stage: Stage) {
    mark_n(stage, 0);
}

/// Records `stage` now, with a count (operations submitted, completions reaped).
#[inline]
pub fn mark_n(stage: Stage, n: u32) {
    if let Some(r) = recorder() {
        record(r, stage, n);
    }
}

#[cold]
#[inline(never)]
fn record(r: &Recorder, stage: Stage, n: u32) {
    let at = crate::monotonic::monotonic_now_ns();
    let mut events = r.events.locked();
    if events.len() < MAX_EVENTS {
        events.push((stage, at, n));
    }
}

/// Writes the events recorded so far to `PREFIX.ROLE` and forgets them; nothing when
/// tracing is off. Returns the file written.
pub fn write(role: &str) -> std::io::Result<Option<PathBuf>> {
    let Some(r) = recorder() else {
        return Ok(None);
    };
    let events = std::mem::take(&mut *r.events.locked());
    let mut path = r.prefix.clone().into_os_string();
    path.push(format!(".{role}"));
    let path = PathBuf::from(path);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    for (stage, at, n) in events {
        writeln!(out, "{} {at} {n}", stage.letter())?;
    }
    out.flush()?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorder is read from the environment once per process, so the test binary
    /// (which does not set it) must record nothing and write nothing.
    #[test]
    fn without_the_variable_nothing_is_recorded_or_written() {
        assert!(
            std::env::var_os(ENV).is_none(),
            "the test run must not set {ENV}"
        );
        mark(Stage::Popped);
        assert!(recorder().is_none());
        assert_eq!(write("daemon").unwrap(), None);
    }

    #[test]
    fn every_stage_has_its_own_letter() {
        let all = [
            Stage::Popped,
            Stage::SubmitStart,
            Stage::SubmitEnd,
            Stage::Reaped,
            Stage::Published,
            Stage::Notified,
            Stage::ClientWaits,
            Stage::ClientWoke,
        ];
        let letters: std::collections::HashSet<char> = all.iter().map(|s| s.letter()).collect();
        assert_eq!(letters.len(), all.len());
    }
}
