//! The progress line on stderr while a run goes on.
//!
//! `auto` (the default): on a terminal, one line rewritten in place every second and erased
//! at the end; when stderr is not a terminal, nothing (logs and pipes stay clean). `lines`:
//! one line per second, whatever stderr is. `off`: nothing.
//! The line: `[  3s/10s] light 1.0k IOPS | heavy 3.0k IOPS | late waiting`.

use super::spec::TenantSpec;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// In place on a terminal, nothing otherwise.
    #[default]
    Auto,
    /// One line per second.
    Lines,
    /// Nothing.
    Off,
}

pub(crate) const WAITING: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const DONE: u8 = 2;

/// What the tenant threads publish while they run.
pub(crate) struct Live {
    /// Completed requests so far (ramp included).
    pub ios: Vec<AtomicU64>,
    pub state: Vec<AtomicU8>,
}

impl Live {
    pub fn new(n: usize) -> Self {
        Live {
            ios: (0..n).map(|_| AtomicU64::new(0)).collect(),
            state: (0..n).map(|_| AtomicU8::new(WAITING)).collect(),
        }
    }

    pub fn set_state(&self, i: usize, state: u8) {
        self.state[i].store(state, Ordering::Relaxed);
    }
}

/// Reports progress until every tenant thread has ended (each sends one message on
/// `done`, or drops its sender).
pub(crate) fn report(
    mode: ProgressMode,
    tenants: &[TenantSpec],
    live: &Live,
    done: &mpsc::Receiver<()>,
) {
    let in_place = match mode {
        ProgressMode::Off => None,
        ProgressMode::Lines => Some(false),
        ProgressMode::Auto => std::io::stderr().is_terminal().then_some(true),
    };
    let mut remaining = tenants.len();
    let Some(in_place) = in_place else {
        while remaining > 0 && done.recv().is_ok() {
            remaining -= 1;
        }
        return;
    };
    let total = tenants
        .iter()
        .map(|t| t.delay + t.runtime)
        .max()
        .unwrap_or_default();
    let start = Instant::now();
    let mut last: Vec<u64> = vec![0; tenants.len()];
    let mut last_at = start;
    let mut next = start + Duration::from_secs(1);
    let mut printed = false;
    while remaining > 0 {
        match done.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(()) => remaining -= 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                let dt = (now - last_at).as_secs_f64().max(1e-3);
                let status: Vec<(&str, Status)> = tenants
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let ios = live.ios[i].load(Ordering::Relaxed);
                        let rate = (ios - last[i]) as f64 / dt;
                        last[i] = ios;
                        let s = match live.state[i].load(Ordering::Relaxed) {
                            WAITING => Status::Waiting,
                            RUNNING => Status::Iops(rate),
                            _ => Status::Done,
                        };
                        (t.name.as_str(), s)
                    })
                    .collect();
                last_at = now;
                next += Duration::from_secs(1);
                let text = line(now - start, total, &status);
                let mut err = std::io::stderr().lock();
                if in_place {
                    let width = terminal_width().saturating_sub(1);
                    let text: String = text.chars().take(width).collect();
                    let _ = write!(err, "\r\x1b[2K{text}");
                } else {
                    let _ = writeln!(err, "{text}");
                }
                let _ = err.flush();
                printed = true;
            }
        }
    }
    if in_place && printed {
        eprint!("\r\x1b[2K");
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Status {
    Waiting,
    Iops(f64),
    Done,
}

/// One progress line: elapsed/total time and each tenant's current IOPS.
pub(crate) fn line(elapsed: Duration, total: Duration, tenants: &[(&str, Status)]) -> String {
    let parts: Vec<String> = tenants
        .iter()
        .map(|(name, s)| match s {
            Status::Waiting => format!("{name} waiting"),
            Status::Done => format!("{name} done"),
            Status::Iops(r) if *r >= 10_000.0 => format!("{name} {:.0}k IOPS", r / 1000.0),
            Status::Iops(r) if *r >= 1_000.0 => format!("{name} {:.1}k IOPS", r / 1000.0),
            Status::Iops(r) => format!("{name} {r:.0} IOPS"),
        })
        .collect();
    format!(
        "[{:>3}s/{}s] {}",
        elapsed.as_secs_f64().round() as u64,
        total.as_secs_f64().ceil() as u64,
        parts.join(" | ")
    )
}

fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize; a zeroed one is valid.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_shows_time_and_each_tenant() {
        let s = line(
            Duration::from_millis(3010),
            Duration::from_secs(10),
            &[
                ("light", Status::Iops(999.6)),
                ("heavy", Status::Iops(3012.0)),
                ("big", Status::Iops(123_456.0)),
                ("late", Status::Waiting),
                ("early", Status::Done),
            ],
        );
        assert_eq!(
            s,
            "[  3s/10s] light 1000 IOPS | heavy 3.0k IOPS | big 123k IOPS | late waiting | early done"
        );
    }
}
