//! The daemon's log: `tracing` to stderr, filtered by `RUST_LOG` (default `info`).
//!
//! A guest decides how often some messages happen, so none of them may flood the host's
//! journal. The daemon's own guest-triggered warnings go through
//! [`LogLimiter`]. The crates underneath (virtio-queue,
//! vhost, vhost-user-backend) log through the `log` crate, bridged into `tracing`, and
//! know nothing of that: a guest publishing bad ring heads made virtio-queue log
//! thousands of lines per second. So every call site outside this crate gets at most
//! one line per [`FOREIGN_INTERVAL`]; the rest are dropped.

mod limiter;

pub use limiter::LogLimiter;

use crate::lock::Locked;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::Metadata;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter, EnvFilter, Layer};

/// At most one line per call site of another crate in this interval.
pub const FOREIGN_INTERVAL: Duration = Duration::from_secs(1);

/// Install the subscriber (once, at start-up).
pub fn init() {
    let limiter = CallSiteLimiter::new(FOREIGN_INTERVAL);
    // Colours only on a terminal: journald and log files get plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter::filter_fn(move |m| limiter.allow(m, Instant::now())));
    tracing_subscriber::registry()
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with(fmt)
        .init();
}

/// A call site: target, file, line.
type CallSite = (String, Option<String>, Option<u32>);

/// When each foreign call site last got a line through.
struct CallSiteLimiter {
    interval: Duration,
    last: Mutex<HashMap<CallSite, Instant>>,
}

/// Call sites remembered before the table is cleared (a bound on its memory).
const MAX_CALL_SITES: usize = 4096;

impl CallSiteLimiter {
    fn new(interval: Duration) -> Self {
        CallSiteLimiter {
            interval,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// This crate's events and spans always pass; another crate's event passes if its
    /// call site has been quiet for the interval.
    fn allow(&self, m: &Metadata<'_>, now: Instant) -> bool {
        if !m.is_event() || m.target().starts_with(env!("CARGO_CRATE_NAME")) {
            return true;
        }
        let key = (
            m.target().to_string(),
            m.file().map(str::to_string),
            m.line(),
        );
        let mut last = self.last.locked();
        match last.get(&key) {
            Some(&t) if now.duration_since(t) < self.interval => false,
            _ => {
                if last.len() >= MAX_CALL_SITES {
                    last.clear();
                }
                last.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::callsite::Identifier;
    use tracing::field::FieldSet;
    use tracing::metadata::Kind;
    use tracing::Level;

    struct Site;
    impl tracing::Callsite for Site {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!()
        }
    }
    static SITE: Site = Site;

    fn event(target: &'static str, line: u32) -> Metadata<'static> {
        Metadata::new(
            "log record",
            target,
            Level::ERROR,
            Some("src/queue.rs"),
            Some(line),
            None,
            FieldSet::new(&[], Identifier(&SITE)),
            Kind::EVENT,
        )
    }

    #[test]
    fn a_foreign_call_site_gets_one_line_per_interval() {
        let l = CallSiteLimiter::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let flood = event("virtio_queue::queue", 120);
        assert!(l.allow(&flood, t0));
        let through = (1..10_000)
            .filter(|i| l.allow(&flood, t0 + Duration::from_micros(*i)))
            .count();
        assert_eq!(through, 0);
        // Another call site is counted apart; a second later the first speaks again.
        assert!(l.allow(&event("virtio_queue::queue", 300), t0));
        assert!(l.allow(&flood, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn this_crates_events_are_never_dropped_here() {
        let l = CallSiteLimiter::new(Duration::from_secs(1));
        let own = event("vhost_iocost::backend::worker", 7);
        let t0 = Instant::now();
        assert!((0..100).all(|i| l.allow(&own, t0 + Duration::from_nanos(i))));
    }
}
