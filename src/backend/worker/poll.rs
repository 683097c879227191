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

use super::poll_window::WaitingFor;
use super::state::{Vring, Worker};
use crate::backend::admission::Admission;
use crate::monotonic::monotonic_now_ns;

impl<A: Admission> Worker<A> {
    /// An event is about to be handled: returns a clock reading for
    /// [`Worker::poll_deadline_after_event`] when polling is configured.
    pub fn event_starts(&self) -> Option<u64> {
        self.poll.enabled().then(monotonic_now_ns)
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
