//! The polling window: how long a worker polls after its last work, one window per what
//! it waits for (`poll`'s header gives the rule).

/// The first window after none: a wake-up on this machine costs a few microseconds of
/// CPU time, so shorter windows rarely pay.
pub const START_NS: u64 = 2_000;

/// What a waiting worker waits for, which sets its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitingFor {
    /// Requests are at the device: mostly their completions.
    Device = 0,
    /// Nothing is at the device: the guest's next request.
    Guest = 1,
}

impl WaitingFor {
    /// What a worker with `in_flight` requests at the device waits for.
    pub fn with_in_flight(in_flight: usize) -> Self {
        if in_flight > 0 {
            WaitingFor::Device
        } else {
            WaitingFor::Guest
        }
    }
}

/// How long the worker polls after its last work, and when it started waiting.
#[derive(Debug)]
pub struct PollWindow {
    max_ns: u64,
    /// The window of each [`WaitingFor`], indexed by its value.
    windows_ns: [u64; 2],
    /// When the worker last ran out of work and what for, if it has not found more since.
    waiting: Option<(u64, WaitingFor)>,
}

impl PollWindow {
    /// `max_ns`: `device.poll_max`; zero never polls.
    pub fn new(max_ns: u64) -> Self {
        PollWindow {
            max_ns,
            windows_ns: [0; 2],
            waiting: None,
        }
    }

    /// Whether the worker polls at all (`poll_max` is not zero).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.max_ns > 0
    }

    /// The window of the current wait; zero when not waiting.
    pub fn window_ns(&self) -> u64 {
        self.waiting
            .map_or(0, |(_, what)| self.windows_ns[what as usize])
    }

    /// The worker ran out of work at `now_ns`, waiting for `what`. A wait already under
    /// way keeps its start, unless it now waits for something else (parked requests went
    /// to the device): the time before is not one polling could have spared.
    pub fn waiting_from(&mut self, now_ns: u64, what: WaitingFor) {
        if self.max_ns > 0 && !matches!(self.waiting, Some((_, was)) if was == what) {
            self.waiting = Some((now_ns, what));
        }
    }

    /// Work turned up at `now_ns`, found by polling or by an epoll event: the time waited
    /// for it sets the next window for what was waited for.
    pub fn work_at(&mut self, now_ns: u64) {
        let Some((since, what)) = self.waiting.take() else {
            return;
        };
        let block_ns = now_ns.saturating_sub(since);
        let window_ns = &mut self.windows_ns[what as usize];
        if block_ns <= *window_ns {
            return;
        }
        if block_ns > self.max_ns {
            *window_ns /= 2;
            if *window_ns < START_NS {
                *window_ns = 0;
            }
        } else {
            *window_ns = (*window_ns * 2).clamp(START_NS, self.max_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// The window the next wait for the guest would get.
    fn guest_window(w: &PollWindow) -> u64 {
        w.windows_ns[WaitingFor::Guest as usize]
    }

    fn device_window(w: &PollWindow) -> u64 {
        w.windows_ns[WaitingFor::Device as usize]
    }

    /// A window with the given device and guest windows.
    fn with_windows(max_ns: u64, device_ns: u64, guest_ns: u64) -> PollWindow {
        let mut w = PollWindow::new(max_ns);
        w.windows_ns[WaitingFor::Device as usize] = device_ns;
        w.windows_ns[WaitingFor::Guest as usize] = guest_ns;
        w
    }

    #[test]
    fn never_polls_without_a_maximum() {
        let mut w = PollWindow::new(0);
        for t in 0..10 {
            w.waiting_from(t * US, WaitingFor::Guest);
            assert_eq!(w.waiting, None, "no wait is timed");
            assert_eq!(w.window_ns(), 0);
            w.work_at(t * US + 1);
        }
        assert_eq!(guest_window(&w), 0);
    }

    #[test]
    fn short_waits_open_the_window_up_to_the_maximum() {
        let mut w = PollWindow::new(16 * US);
        let mut seen = Vec::new();
        let mut t = 0;
        for _ in 0..6 {
            w.waiting_from(t, WaitingFor::Guest);
            t += 10 * US;
            w.work_at(t);
            seen.push(guest_window(&w) / US);
        }
        // 10 µs waits: from 2 µs doubling until it covers them, capped at 16 µs.
        assert_eq!(seen, [2, 4, 8, 16, 16, 16]);
    }

    #[test]
    fn waits_longer_than_the_maximum_close_the_window() {
        let mut w = PollWindow::new(16 * US);
        let mut t = 0;
        for _ in 0..4 {
            w.waiting_from(t, WaitingFor::Guest);
            t += 12 * US;
            w.work_at(t);
        }
        assert_eq!(guest_window(&w), 16 * US);
        let mut seen = Vec::new();
        for _ in 0..4 {
            w.waiting_from(t, WaitingFor::Guest);
            t += 25 * US; // 40,000 requests a second, one at a time
            w.work_at(t);
            seen.push(guest_window(&w) / US);
        }
        assert_eq!(seen, [8, 4, 2, 0]);
    }

    #[test]
    fn work_within_the_window_keeps_it() {
        let mut w = PollWindow::new(16 * US);
        w.waiting_from(0, WaitingFor::Guest);
        w.work_at(3 * US);
        assert_eq!(guest_window(&w), 2 * US);
        w.waiting_from(10 * US, WaitingFor::Guest);
        w.work_at(11 * US);
        assert_eq!(guest_window(&w), 2 * US);
    }

    #[test]
    fn only_the_first_work_after_waiting_counts() {
        let mut w = with_windows(16 * US, 0, 8 * US);
        w.waiting_from(0, WaitingFor::Guest);
        w.waiting_from(6 * US, WaitingFor::Guest); // still waiting since 0
        w.work_at(12 * US);
        assert_eq!(guest_window(&w), 16 * US, "a 12 µs wait, not a 6 µs one");
        w.work_at(40 * US); // no wait in between: nothing to learn
        assert_eq!(guest_window(&w), 16 * US);
    }

    #[test]
    fn a_wait_for_something_else_starts_again() {
        // A request parked for 40 µs, then sent to the device, which answers 10 µs later:
        // the device's window learns 10 µs; the guest's is left alone.
        let mut w = with_windows(16 * US, 8 * US, 16 * US);
        w.waiting_from(0, WaitingFor::Guest);
        w.waiting_from(40 * US, WaitingFor::Device);
        w.work_at(50 * US);
        assert_eq!(device_window(&w), 16 * US);
        assert_eq!(guest_window(&w), 16 * US);
    }

    #[test]
    fn what_the_worker_waits_for_follows_the_device() {
        assert_eq!(WaitingFor::with_in_flight(0), WaitingFor::Guest);
        assert_eq!(WaitingFor::with_in_flight(1), WaitingFor::Device);
        assert_eq!(WaitingFor::with_in_flight(32), WaitingFor::Device);
    }

    #[test]
    fn the_wait_in_progress_has_its_own_window() {
        let mut w = with_windows(16 * US, 4 * US, 8 * US);
        assert_eq!(w.window_ns(), 0, "not waiting");
        w.waiting_from(0, WaitingFor::Device);
        assert_eq!(w.window_ns(), 4 * US);
        w.work_at(US);
        w.waiting_from(2 * US, WaitingFor::Guest);
        assert_eq!(w.window_ns(), 8 * US);
    }

    #[test]
    fn reads_slower_than_the_maximum_leave_the_wait_for_the_guest_open() {
        // QD1 on a disk whose reads take 45 µs, the guest sending its next read 12 µs
        // after each completion: one window for both would halve on every read and
        // never reach the guest's 12 µs.
        let mut w = with_windows(32 * US, 32 * US, 0);
        let mut t = 0;
        let (mut guest_windows, mut device_windows) = (Vec::new(), Vec::new());
        for _ in 0..6 {
            w.waiting_from(t, WaitingFor::Device);
            t += 45 * US;
            w.work_at(t);
            device_windows.push(device_window(&w) / US);
            w.waiting_from(t, WaitingFor::Guest);
            t += 12 * US;
            w.work_at(t);
            guest_windows.push(guest_window(&w) / US);
        }
        assert_eq!(guest_windows, [2, 4, 8, 16, 16, 16]);
        assert_eq!(device_windows, [16, 8, 4, 2, 0, 0]);
    }

    #[test]
    fn long_waits_for_the_guest_leave_the_device_window_open() {
        // A disk answering in 10 µs, a guest sending a request every 100 µs.
        let mut w = with_windows(32 * US, 16 * US, 32 * US);
        let mut t = 0;
        for _ in 0..6 {
            w.waiting_from(t, WaitingFor::Device);
            t += 10 * US;
            w.work_at(t);
            w.waiting_from(t, WaitingFor::Guest);
            t += 90 * US;
            w.work_at(t);
        }
        assert_eq!(device_window(&w), 16 * US);
        assert_eq!(guest_window(&w), 0);
    }
}
