//! From which chain of a batch completions go back to the guest early (design §8.10).
//!
//! A guest thread on another CPU gains from getting the first completions of a batch as
//! soon as they are done: its wake-up, 20 µs or more on a VM, then overlaps the rest of
//! the batch. A guest thread that shares the worker's CPU cannot use them until the
//! worker yields, and every early notification makes the scheduler switch to it in the
//! middle of the batch. The worker tells the two apart by its involuntary context
//! switches, which it only gets while something else wants its CPU: once per
//! [`CHECK_EVERY_NS`], it returns completions early from a batch's first chain if it was
//! hardly preempted since the last check, and from the eighth if it was.
//! (BENCHMARKS.md, data path: with the guest on another CPU, from the first chain serves
//! 1.08 × the requests of from the eighth; on the worker's own CPU, 0.70 ×.)

use std::thread::ThreadId;

/// How often the worker reads its involuntary context switches.
pub const CHECK_EVERY_NS: u64 = 10_000_000;
/// More preemptions than this in one check period mean the worker shares its CPU with a
/// busy thread. Sharing it with the guest's costs hundreds per period at full load;
/// alone, the worker sees none.
const PREEMPTIONS_WHEN_SHARED: u64 = 10;
/// The first chain of a batch from which completions go back early, alone on the CPU...
const FROM_ALONE: usize = 1;
/// ...and sharing it. Also the start, until the first check says otherwise.
const FROM_SHARED: usize = 8;

#[derive(Debug)]
pub struct EarlyReturn {
    from: usize,
    next_check_ns: u64,
    /// The last reading: which thread took it and its involuntary switches then.
    last: Option<(ThreadId, u64)>,
}

impl Default for EarlyReturn {
    fn default() -> Self {
        EarlyReturn {
            from: FROM_SHARED,
            next_check_ns: 0,
            last: None,
        }
    }
}

impl EarlyReturn {
    /// The chain of a batch (counting from 1) from which completions go back early.
    pub fn from(&self) -> usize {
        self.from
    }

    /// A batch starts at `now_ns` (CLOCK_MONOTONIC): reads the calling thread's
    /// involuntary context switches if a check is due.
    pub fn batch_starts(&mut self, now_ns: u64) {
        if now_ns >= self.next_check_ns {
            self.next_check_ns = now_ns.saturating_add(CHECK_EVERY_NS);
            let reading = involuntary_switches().map(|n| (std::thread::current().id(), n));
            self.checked(reading);
        }
    }

    /// One reading of the switches, or `None` if they cannot be read (then nothing
    /// changes). Only two readings by the same thread compare: the worker's state is
    /// also driven from the vhost-user thread (GET_VRING_BASE's drain).
    fn checked(&mut self, reading: Option<(ThreadId, u64)>) {
        let Some((thread, switches)) = reading else {
            return;
        };
        if let Some((last_thread, last_switches)) = self.last {
            if last_thread == thread {
                let preempted = switches.saturating_sub(last_switches);
                self.from = if preempted > PREEMPTIONS_WHEN_SHARED {
                    FROM_SHARED
                } else {
                    FROM_ALONE
                };
            }
        }
        self.last = Some((thread, switches));
    }
}

/// The calling thread's involuntary context switches so far.
fn involuntary_switches() -> Option<u64> {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD reads the calling thread's counters.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (done == 0).then(|| u64::try_from(usage.ru_nivcsw).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_thread(switches: u64) -> Option<(ThreadId, u64)> {
        Some((std::thread::current().id(), switches))
    }

    #[test]
    fn starts_late_and_goes_early_while_nothing_preempts_the_worker() {
        let mut early = EarlyReturn::default();
        assert_eq!(early.from(), FROM_SHARED);
        early.checked(this_thread(100));
        assert_eq!(
            early.from(),
            FROM_SHARED,
            "one reading compares with nothing"
        );
        early.checked(this_thread(100 + PREEMPTIONS_WHEN_SHARED));
        assert_eq!(early.from(), FROM_ALONE);
    }

    #[test]
    fn preemptions_make_it_late_until_they_stop() {
        let mut early = EarlyReturn::default();
        early.checked(this_thread(0));
        early.checked(this_thread(0));
        assert_eq!(early.from(), FROM_ALONE);
        early.checked(this_thread(PREEMPTIONS_WHEN_SHARED + 1));
        assert_eq!(early.from(), FROM_SHARED);
        early.checked(this_thread(PREEMPTIONS_WHEN_SHARED + 1));
        assert_eq!(early.from(), FROM_ALONE);
    }

    #[test]
    fn readings_of_another_thread_or_none_change_nothing() {
        let mut early = EarlyReturn::default();
        early.checked(this_thread(0));
        early.checked(this_thread(0));
        assert_eq!(early.from(), FROM_ALONE);
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        // Another thread's count is no measure of this one's preemptions, either way.
        early.checked(Some((other, 1_000_000)));
        assert_eq!(early.from(), FROM_ALONE);
        early.checked(this_thread(2_000_000));
        assert_eq!(
            early.from(),
            FROM_ALONE,
            "not compared with the other thread's reading"
        );
        early.checked(None);
        early.checked(this_thread(2_000_000 + 1_000));
        assert_eq!(early.from(), FROM_SHARED);
    }

    #[test]
    fn reads_the_switches_once_per_period() {
        let mut early = EarlyReturn::default();
        early.batch_starts(1_000);
        let first = early.last;
        assert!(first.is_some(), "getrusage works here");
        assert_eq!(early.next_check_ns, 1_000 + CHECK_EVERY_NS);
        early.last = None;
        early.batch_starts(1_000 + CHECK_EVERY_NS - 1);
        assert!(early.last.is_none(), "no reading before the period ends");
        early.batch_starts(1_000 + CHECK_EVERY_NS);
        assert!(early.last.is_some());
    }
}
