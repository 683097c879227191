//! From which chain of a batch completions go back to the guest early (design §8.10).
//!
//! A guest thread on another CPU gains from getting the first completions of a batch as
//! soon as they are done: its wake-up, 20 µs or more on a VM, then overlaps the rest of
//! the batch. A guest thread that shares the worker's CPU cannot use them until the
//! worker yields, and every early notification makes the scheduler switch to it in the
//! middle of the batch. The worker tells the two apart by its involuntary context
//! switches, which it only gets while another thread is runnable on its CPU (a yield
//! in the poll loop then counts too): once per [`CHECK_EVERY_NS`], it returns
//! completions early from a batch's first chain if it was hardly preempted since the
//! last check, and from the eighth if it was. Any other busy thread on its CPU puts it
//! on the eighth as well, the cautious choice. (Measured on the benchmark VM, null
//! path, QD32: from the first chain served 1.08 × the requests of from the eighth with
//! both threads unpinned, and 0.70 × with both on one CPU; BENCHMARKS.md, data path.)

use std::thread::ThreadId;

/// How often the worker reads its involuntary context switches.
pub const CHECK_EVERY_NS: u64 = 10_000_000;
/// More preemptions than this in one check period mean the worker shares its CPU with a
/// busy thread. Measured at full load: sharing it with the guest's, 61–82 per 1,000
/// requests (hundreds per period); alone on its CPU, none.
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
    pub fn first_chain(&self) -> usize {
        self.from
    }

    /// A batch starts at `now_ns` (CLOCK_MONOTONIC): reads the calling thread's
    /// involuntary context switches if a check is due.
    pub fn batch_starts(&mut self, now_ns: u64) {
        self.batch_starts_reading(now_ns, || {
            involuntary_switches().map(|n| (std::thread::current().id(), n))
        });
    }

    /// [`Self::batch_starts`], with the reading taken by `read` if a check is due.
    fn batch_starts_reading(
        &mut self,
        now_ns: u64,
        read: impl FnOnce() -> Option<(ThreadId, u64)>,
    ) {
        if now_ns < self.next_check_ns {
            return;
        }
        // After an idle spell the last reading covers more than one period: a new
        // baseline, no decision.
        if now_ns >= self.next_check_ns.saturating_add(CHECK_EVERY_NS) {
            self.last = None;
        }
        self.next_check_ns = now_ns.saturating_add(CHECK_EVERY_NS);
        self.record_reading(read());
    }

    /// One reading of the switches, or `None` if they cannot be read (then nothing
    /// changes). Only two readings by the same thread compare; batches start on the
    /// worker's thread, so this only guards against a change of driving thread.
    fn record_reading(&mut self, reading: Option<(ThreadId, u64)>) {
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
    // SAFETY: rusage is plain integers (and timevals of integers): all zeroes is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call, which fills it and keeps no
    // pointer to it; RUSAGE_THREAD reads the calling thread's counters.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (done == 0).then(|| u64::try_from(usage.ru_nivcsw).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_thread(switches: u64) -> Option<(ThreadId, u64)> {
        Some((std::thread::current().id(), switches))
    }

    /// One that has gone early: two readings of this thread with no preemption between.
    fn alone() -> EarlyReturn {
        let mut early = EarlyReturn::default();
        early.record_reading(this_thread(0));
        early.record_reading(this_thread(0));
        assert_eq!(early.first_chain(), FROM_ALONE);
        early
    }

    #[test]
    fn starts_late_and_goes_early_while_nothing_preempts_the_worker() {
        let mut early = EarlyReturn::default();
        assert_eq!(early.first_chain(), FROM_SHARED);
        early.record_reading(this_thread(100));
        assert_eq!(
            early.first_chain(),
            FROM_SHARED,
            "one reading compares with nothing"
        );
        early.record_reading(this_thread(100 + PREEMPTIONS_WHEN_SHARED));
        assert_eq!(early.first_chain(), FROM_ALONE);
    }

    #[test]
    fn preemptions_make_it_late_until_they_stop() {
        let mut early = alone();
        early.record_reading(this_thread(PREEMPTIONS_WHEN_SHARED + 1));
        assert_eq!(early.first_chain(), FROM_SHARED);
        early.record_reading(this_thread(PREEMPTIONS_WHEN_SHARED + 1));
        assert_eq!(early.first_chain(), FROM_ALONE);
    }

    #[test]
    fn readings_of_another_thread_or_none_change_nothing() {
        let mut early = alone();
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        // Another thread's count is no measure of this one's preemptions, either way.
        early.record_reading(Some((other, 1_000_000)));
        assert_eq!(early.first_chain(), FROM_ALONE);
        early.record_reading(this_thread(2_000_000));
        assert_eq!(
            early.first_chain(),
            FROM_ALONE,
            "not compared with the other thread's reading"
        );
        early.record_reading(None);
        early.record_reading(this_thread(2_000_000 + 1_000));
        assert_eq!(early.first_chain(), FROM_SHARED);
    }

    #[test]
    fn reads_the_switches_once_per_period() {
        let mut early = EarlyReturn::default();
        let reads = std::cell::Cell::new(0);
        let read = || {
            reads.set(reads.get() + 1);
            this_thread(0)
        };
        early.batch_starts_reading(1_000, read);
        early.batch_starts_reading(1_000 + CHECK_EVERY_NS - 1, read);
        assert_eq!(reads.get(), 1, "no reading before the period ends");
        early.batch_starts(1_000 + CHECK_EVERY_NS);
        assert!(early.last.is_some(), "getrusage works here");
        assert_eq!(early.next_check_ns, 1_000 + 2 * CHECK_EVERY_NS);
    }

    #[test]
    fn a_reading_after_an_idle_spell_only_sets_the_baseline() {
        let mut early = EarlyReturn::default();
        early.batch_starts_reading(0, || this_thread(0));
        early.batch_starts_reading(CHECK_EVERY_NS, || this_thread(0));
        assert_eq!(early.first_chain(), FROM_ALONE);
        // Two periods late: the count covers the idle spell too, so it decides nothing.
        early.batch_starts_reading(4 * CHECK_EVERY_NS, || this_thread(1_000));
        assert_eq!(early.first_chain(), FROM_ALONE);
        // A period later it compares with that baseline.
        early.batch_starts_reading(5 * CHECK_EVERY_NS, || this_thread(2_000));
        assert_eq!(early.first_chain(), FROM_SHARED);
    }
}
