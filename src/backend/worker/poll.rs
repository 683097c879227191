//! Adaptive polling (design §8.10): after handling an event the worker keeps looking at
//! the rings it serves and at its completion queue for a short window before it goes
//! back to epoll. The rings keep their notifications off meanwhile, so requests found in
//! the window cost the guest no kick and the worker no eventfd read and no wake-up.
//!
//! The window adapts the way QEMU's `poll-max-ns` does. The *block time* is how long the
//! worker waited for its next work, whether it found it polling or was woken for it:
//! - within the window: the window is right and stays;
//! - longer than `poll_max`: polling would have burnt that much for nothing, so the
//!   window halves (and falls to zero below [`START_NS`]);
//! - shorter than `poll_max` but past the window: the window doubles (from [`START_NS`]),
//!   up to `poll_max`.
//!
//! There are two windows, by what the worker waits for (QEMU 10.0 likewise keeps one per
//! event handler; the 7.2 this project measures against keeps one): a wait that begins
//! with requests at the device mostly ends with their completion, one that begins with
//! none with the guest's next request (or, with requests parked, their timer). Their
//! lengths differ: at QD1 on a disk slower than `poll_max`, each read's wait would halve
//! one shared window and each wait for the guest's next request double it again, so it
//! would stay too short for either and every kick would wake the worker. Kept apart, the
//! device's window closes and the guest's opens.
//!
//! An idle worker polls at most one shrinking window after its last request. A guest
//! whose next request comes more than `poll_max` after the last completion makes it poll
//! only through the device's answer, and only when the device answers within `poll_max`:
//! polling only runs where it replaces a sleep and a wake-up that would have come sooner
//! than `poll_max`.

use std::io;

use vhost_user_backend::VringT;

use super::{Vring, Worker};
use crate::backend::admission::Admission;
use crate::monotonic::monotonic_now_ns;

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

impl<A: Admission> Worker<A> {
    /// An event is about to be handled: returns a clock reading for
    /// [`Worker::poll_deadline_after_event`] when polling is configured.
    pub fn event_starts(&self) -> Option<u64> {
        (self.poll.max_ns > 0).then(monotonic_now_ns)
    }

    /// The event that started at `started_ns` was handled, and `progress_before` was
    /// [`Worker::progress`] then. If it found work, the window adapts to how long the
    /// worker waited for it, and this returns the deadline to poll until while the window
    /// is open. A stale event (a kick or completion already served by polling) opens no
    /// window, and nothing is polled while requests are parked: their timer and wake
    /// events come through epoll.
    pub fn poll_deadline_after_event(
        &mut self,
        started_ns: u64,
        progress_before: u64,
    ) -> Option<u64> {
        let found_work = self.progress != progress_before;
        let now = self.next_wait(found_work.then_some(started_ns));
        let window = self.poll.window_ns();
        (found_work && window > 0 && self.may_poll()).then_some(now + window)
    }

    /// Work done so far (chains popped plus completions reaped): a handler that moved it
    /// found work.
    pub fn progress(&self) -> u64 {
        self.progress
    }

    /// Work found at `found_ns`, if any, ended the wait (its window adapts; serving it is
    /// not waiting); from now the worker waits for what its requests at the device say.
    /// Returns the clock reading the wait starts at.
    fn next_wait(&mut self, found_ns: Option<u64>) -> u64 {
        if let Some(found_ns) = found_ns {
            self.poll.work_at(found_ns);
        }
        let now = monotonic_now_ns();
        self.poll
            .waiting_from(now, WaitingFor::with_in_flight(self.in_flight()));
        now
    }

    fn may_poll(&self) -> bool {
        self.fifo.is_empty() && !self.waiting_for_slot
    }

    /// One look at the served rings and the completion queue, serving what is there; the
    /// rings it pops from keep their notifications off until [`Worker::end_poll_phase`].
    /// Returns the deadline to keep polling until: a window from now when work was
    /// found, never past `phase_end_ns`; `None` once `deadline_ns` or `phase_end_ns` has
    /// passed or requests are parked. Work found is timed even when serving it fails.
    pub fn poll_once(
        &mut self,
        deadline_ns: u64,
        phase_end_ns: u64,
        vrings: &[Vring],
    ) -> io::Result<Option<u64>> {
        let before = self.progress;
        let looked_at = monotonic_now_ns();
        let served = self.look(vrings);
        // The wait ended when this look began.
        let found = self.progress != before;
        let now = self.next_wait(found.then_some(looked_at));
        let next = if found {
            now + self.poll.window_ns()
        } else {
            deadline_ns
        };
        served?;
        let open = now < next && now < phase_end_ns && self.may_poll();
        Ok(open.then_some(next.min(phase_end_ns)))
    }

    /// Pops what the served rings hold and reaps what has completed.
    fn look(&mut self, vrings: &[Vring]) -> io::Result<()> {
        let before = self.progress;
        let mut ready = self.serving & !(self.stopping | self.broken);
        if ready != 0 {
            let mem = self.memory.load();
            while ready != 0 {
                let q = ready.trailing_zeros() as u16;
                ready &= ready - 1;
                let Some(vring) = vrings.get(usize::from(q)) else {
                    continue;
                };
                if Self::ring_ready(vring) && Self::pending(vring, &mem) > 0 {
                    vring.disable_notification().map_err(io::Error::other)?;
                    self.polled_queues |= 1 << q;
                    self.pop_all(vring, q, &mem)?;
                }
            }
        }
        if self.progress != before || self.engine.has_completions() {
            self.pump()?;
        }
        Ok(())
    }

    /// The poll phase started by `event` is over: the rings it popped from get their
    /// notifications back, what the guest published meanwhile is served as a kick would
    /// be, and nothing completed at once is left behind. Work these steps find ends the
    /// wait as any other would. Errors are logged; the worker keeps serving.
    pub fn end_poll_phase(&mut self, vrings: &[Vring], event: u16) {
        let (before, ended_at) = (self.progress, monotonic_now_ns());
        if let Err(e) = self.end_polling(vrings) {
            self.report_error(event, &e);
        }
        if let Err(e) = self.reap_leftovers() {
            self.report_error(event, &e);
        }
        if self.progress != before {
            self.next_wait(Some(ended_at));
        }
    }

    /// Turns the notifications of the rings the phase popped from back on and serves
    /// what they hold. A ring stopped meanwhile is left alone: its state is the
    /// frontend's (or the volume's other connection's) now. Every ring is handled even
    /// past an error; the first is returned.
    fn end_polling(&mut self, vrings: &[Vring]) -> io::Result<()> {
        let mut polled =
            std::mem::take(&mut self.polled_queues) & self.serving & !(self.stopping | self.broken);
        let mut result = Ok(());
        while polled != 0 {
            let q = polled.trailing_zeros() as u16;
            polled &= polled - 1;
            let Some(vring) = vrings.get(usize::from(q)) else {
                continue;
            };
            let served = match vring.enable_notification() {
                Ok(true) => self.on_kick(vrings, q),
                Ok(false) => Ok(()),
                Err(e) => Err(io::Error::other(e)),
            };
            if let Err(e) = served {
                result = result.and(Err(e));
            }
        }
        result
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
