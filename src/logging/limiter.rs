//! Rate-limited log lines: a misbehaving guest must not be able to flood the host's logs.

use std::time::{Duration, Instant};

/// Lets one message through per `interval` and counts the ones it swallowed.
pub struct LogLimiter {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    pub fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when a message may be logged now, `n` being how many were dropped since the
    /// last one; `None` to stay quiet.
    pub fn check(&mut self) -> Option<u64> {
        let now = Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_per_interval_and_the_rest_are_counted() {
        let mut rl = LogLimiter::new(Duration::from_secs(3600));
        assert_eq!(rl.check(), Some(0));
        assert_eq!(rl.check(), None);
        assert_eq!(rl.check(), None);
        rl.last = Some(Instant::now() - Duration::from_secs(7200));
        assert_eq!(rl.check(), Some(2));
    }
}
