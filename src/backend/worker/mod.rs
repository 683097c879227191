//! A volume's worker: the event-loop state behind one vhost-user connection.
//!
//! A worker thread serves its share of the volume's queues (all of them unless the
//! volume has several `workers`; design §8.11). On a kick it pops descriptor
//! chains, parses and validates them, and appends them to the worker's FIFO
//! ([`ring`]). `dispatch` then lets the FIFO head go when admission control (QoS) admits
//! it and a device slot is free ([`crate::backend::admission::queue`]), and hands it to io_uring
//! ([`inflight`]). Completions write the status byte, return the chain to the used ring,
//! and let the next parked requests go. Nothing here blocks: a throttled request waits on
//! a timerfd, a request without a device slot on a wake eventfd, both on this worker's
//! epoll.
//!
//! The worker's fields are in [`state`]; its methods by concern: events and admission
//! here, popping and returning chains in [`ring`], requests on the device in [`inflight`]
//! (their reusable [`records`]), polling in [`poll`] (its [`poll_window`]), and each
//! queue's inflight log in [`inflight_log`].

mod early_return;
mod inflight;
mod inflight_log;
mod poll;
mod poll_window;
mod records;
mod ring;
mod state;

use state::Popped;
pub use state::{QueueNumbers, Vring, Worker};

use std::io;
use std::sync::Arc;
use std::time::Duration;

use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

use self::records::Records;
use crate::backend::admission::queue::{AdmitQueue, Next, WaitDeadline};
use crate::backend::admission::{Admission, Timing};
use crate::backend::guest_memory::{CurrentMemory, Mem};
use crate::backend::io::engine::Engine;
use crate::backend::io::medium::Medium;
use crate::backend::virtio::inflight_log::QueueLog;
use crate::backend::virtio::request::ChainLayout;
use crate::backend::volume::lease::ConnectionLease;
use crate::backend::volume::Volume;
use crate::logging::LogLimiter;

impl<A: Admission> Worker<A> {
    /// Queue `local` starts (the frontend's kick fd arrived): with `log` when the
    /// frontend keeps an inflight log, and `resubmit`, the heads a previous run left in
    /// flight, which the next pass parses before popping anything new.
    pub fn start_inflight(&mut self, local: u16, log: Option<QueueLog>, resubmit: Vec<u16>) {
        self.logs.start(local, log, resubmit);
    }

    /// A worker woken through `wake_evt` (another volume freed a device slot, the planner
    /// ran, the lease came free), serving for the connection in `lease`.
    pub fn new(
        volume: Arc<Volume<A>>,
        wake_evt: Arc<EventFd>,
        lease: Arc<ConnectionLease>,
        queues: QueueNumbers,
        memory: CurrentMemory,
    ) -> io::Result<Self> {
        let served = queues.mask(volume.num_queues).count_ones().max(1);
        let depth = u32::from(volume.queue_size) * served;
        let medium = Medium::new(volume.disk.file.is_some(), volume.shared.emulated.as_ref());
        let entries = depth * medium.entries_per_op();
        let file = volume
            .disk
            .file
            .as_ref()
            .map(std::os::unix::io::AsRawFd::as_raw_fd);
        Ok(Worker {
            queues,
            engine: Engine::new(entries, file)?,
            timer: TimerFd::new()?,
            timer_deadline: WaitDeadline::default(),
            wake_evt,
            waiting_for_slot: false,
            dirty_logging: false,
            lease,
            serving: 0,
            deferred: 0,
            waited_for_rings: false,
            fifo: AdmitQueue::default(),
            records: Records::default(),
            vrings: Vec::new(),
            touched: 0,
            stopping: 0,
            shutting_down: false,
            broken: 0,
            outstanding: vec![0; usize::from(volume.num_queues)],
            warn: LogLimiter::new(Duration::from_secs(1)),
            reaped: Vec::with_capacity(depth.min(4096) as usize),
            layout: ChainLayout::default(),
            popped_heads: Vec::new(),
            segment_pool: Vec::new(),
            settled: Vec::with_capacity(depth.min(4096) as usize),
            medium,
            progress: 0,
            poll: poll_window::PollWindow::new(volume.shared.poll_max_ns),
            polled_queues: 0,
            early_return: early_return::EarlyReturn::default(),
            admitted: Vec::new(),
            memory,
            used: Vec::new(),
            logs: inflight_log::QueueLogs::default(),
            batch_heads: Vec::new(),
            volume,
        })
    }

    pub fn completion_fd(&self) -> std::os::unix::io::RawFd {
        std::os::unix::io::AsRawFd::as_raw_fd(&self.engine.completion_evt)
    }

    fn remember_vrings(&mut self, vrings: &[Vring]) {
        if self.vrings.is_empty() {
            self.vrings = vrings.to_vec();
        }
    }

    /// The guest's number for this worker's queue `local`.
    fn guest_queue(&self, local: u16) -> u16 {
        self.queues.first + local * self.queues.stride
    }

    /// Serves what an event's handler left when it failed: completions reaped, the chains
    /// returned so far published. The null device's completions signal no eventfd, and a
    /// guest waiting for an answered chain may never kick again, so nothing else would.
    pub fn reap_leftovers(&mut self) -> io::Result<()> {
        self.publish_used();
        if self.engine.has_completions() {
            self.pump()?;
        }
        Ok(())
    }

    /// Logs (rate-limited) an error met while handling an event.
    /// `event` is a vring of this worker (given by its guest queue number) or a token.
    pub fn report_error(&mut self, event: u16, e: &io::Error) {
        if let Some(suppressed) = self.warn.check() {
            if usize::from(event) < self.vrings.len() {
                let queue = self.guest_queue(event);
                tracing::error!(volume = %self.volume.name, queue, suppressed, "handling the queue's kick failed: {e}");
            } else {
                tracing::error!(volume = %self.volume.name, event, suppressed, "event handling failed: {e}");
            }
        }
    }

    /// The completion eventfd fired.
    pub fn on_completion(&mut self, vrings: &[Vring]) -> io::Result<()> {
        self.remember_vrings(vrings);
        let _ = self.engine.completion_evt.read();
        self.pump()
    }

    /// The QoS wait timer fired.
    pub fn on_timer(&mut self, vrings: &[Vring]) -> io::Result<()> {
        self.remember_vrings(vrings);
        let _ = self.timer.wait();
        self.timer_deadline.fired();
        self.pump()
    }

    /// Another volume freed a device slot, the planner changed budgets, or the volume's
    /// other connection gave up the rings: pop the kicks that waited for them.
    pub fn on_wake(&mut self, vrings: &[Vring]) -> io::Result<()> {
        self.remember_vrings(vrings);
        let _ = self.wake_evt.read();
        self.waiting_for_slot = false;
        let mut deferred = std::mem::take(&mut self.deferred);
        while deferred != 0 {
            let q = deferred.trailing_zeros() as u16;
            deferred &= deferred - 1;
            if usize::from(q) < vrings.len() {
                if let Err(e) = self.on_kick(vrings, q) {
                    // The other queues' kicks are kept for the next wake-up.
                    self.deferred |= deferred;
                    return Err(e);
                }
            }
        }
        self.pump()
    }

    /// Whether this connection may pop from queue `bit` now: it holds the volume's
    /// data-plane lease or takes it. Otherwise the kick is kept for when it comes free.
    #[inline]
    fn may_serve(&mut self, bit: u64) -> bool {
        if self.serving & bit != 0 {
            return true;
        }
        if self.serving == 0 && !self.lease.start_serving() {
            if !std::mem::replace(&mut self.waited_for_rings, true) {
                tracing::info!(volume = %self.volume.name, "the volume's other frontend is using the rings (a migration hand-over): this one waits until they are stopped");
            }
            self.deferred |= bit;
            return false;
        }
        if std::mem::take(&mut self.waited_for_rings) {
            tracing::info!(volume = %self.volume.name, "the other frontend stopped its rings: this one serves the volume now");
        }
        self.serving |= bit;
        true
    }

    /// The frontend stopped the queues in `mask` (GET_VRING_BASE, after `drain`): once
    /// none this connection popped from is running, the volume's other connection may
    /// take the rings.
    pub fn stopped(&mut self, mask: u64) {
        // Everything popped was returned: their inflight logs start afresh.
        let mut queues = mask;
        while queues != 0 {
            self.logs.stopped(queues.trailing_zeros() as u16);
            queues &= queues - 1;
        }
        self.deferred &= !mask;
        self.polled_queues &= !mask;
        self.waited_for_rings &= self.deferred != 0;
        if self.serving != 0 {
            self.serving &= !mask;
            if self.serving == 0 {
                self.lease.stop_serving();
            }
        }
    }

    /// Dispatches what may go, submits, completes what finished, until nothing moves; then
    /// publishes the returned chains, notifying the guest once per touched queue. They are
    /// published even when a step failed: a guest waiting for them may never kick again.
    fn pump(&mut self) -> io::Result<()> {
        let moved = self.pump_until_idle();
        self.settle();
        self.publish_used();
        moved
    }

    fn pump_until_idle(&mut self) -> io::Result<()> {
        loop {
            self.dispatch()?;
            self.engine.submit()?;
            if self.complete_ready()? == 0 {
                return Ok(());
            }
        }
    }

    /// Reports the completions gathered since the last call to admission control.
    fn settle(&mut self) {
        if !self.settled.is_empty() {
            let _turn = self.volume.admission_turn();
            self.volume.admission.complete(&self.settled);
            self.settled.clear();
        }
    }

    /// Lets FIFO requests go in order while QoS admits them and device slots are free.
    fn dispatch(&mut self) -> io::Result<()> {
        if self.stopping != 0 {
            self.dispatch_stopping();
        }
        if self.waiting_for_slot || self.fifo.is_empty() {
            return Ok(());
        }
        let volume = self.volume.clone();
        // Admitted under the volume's admission turn, started after it: another worker
        // of the volume admits while this one builds and submits.
        let mut admitted = std::mem::take(&mut self.admitted);
        let (now, wait_until) = {
            let _turn = volume.admission_turn();
            let now = volume.admission.now_ns();
            let slots = &volume.shared.slots;
            let wake_evt = &self.wake_evt;
            let wait_until = loop {
                let take_slot = || slots.try_acquire() || slots.acquire_or_wait(wake_evt);
                match self.fifo.next(&volume.admission, now, take_slot) {
                    Next::Start(p) => admitted.push(p),
                    Next::WaitUntil(ns) => break Some(ns),
                    Next::NoSlot => {
                        self.waiting_for_slot = true;
                        break None;
                    }
                    Next::Empty => break None,
                }
            };
            (now, wait_until)
        };
        for p in admitted.drain(..) {
            self.start(p, now);
        }
        self.admitted = admitted;
        match wait_until {
            Some(ns) => self.arm_timer(ns, now),
            None => Ok(()),
        }
    }

    /// Requests of stopping queues go to the device now, wherever they are in the FIFO
    /// and without waiting for QoS budget or a device slot: GET_VRING_BASE and shutdown
    /// must not wait behind another queue's throttled requests.
    fn dispatch_stopping(&mut self) {
        if self.fifo.is_empty() {
            return;
        }
        let volume = self.volume.clone();
        let stopping = self.stopping;
        let (now, taken) = {
            let _turn = volume.admission_turn();
            let now = volume.admission.now_ns();
            let taken = self
                .fifo
                .take_where(&volume.admission, now, |r| stopping & (1 << r.queue) != 0);
            (now, taken)
        };
        for p in taken {
            volume.shared.slots.force_acquire();
            self.start(p, now);
        }
    }

    fn arm_timer(&mut self, deadline_ns: u64, now: u64) -> io::Result<()> {
        if self.timer_deadline.arm(deadline_ns) {
            // A zero duration would disarm the timer: wait at least a microsecond.
            let wait = Duration::from_nanos(deadline_ns.saturating_sub(now).max(1_000));
            if let Err(e) = self.timer.reset(wait, None) {
                // Not armed: the next wait must try again.
                self.timer_deadline.fired();
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Stops the queues in `mask`: nothing more is popped from them, their parked requests
    /// go to the device without waiting, and this returns once every request of theirs has
    /// completed and been returned to the guest. Used by GET_VRING_BASE and shutdown.
    pub fn drain(&mut self, mask: u64) -> io::Result<()> {
        self.stopping |= mask;
        loop {
            self.pump()?;
            let busy = self.fifo.iter().any(|p| mask & (1 << p.req.queue) != 0)
                || self.records.iter().any(|r| mask & (1 << r.queue) != 0);
            // pump() started every request of the stopping queues, so something is in flight
            // whenever we are still busy; never block on an idle ring.
            if !busy || self.records.len() == 0 {
                return Ok(());
            }
            self.engine.wait_for_completion()?;
        }
    }

    /// Re-enables queues after a drain (a frontend may restart a stopped ring), and gives
    /// a broken ring a fresh start. Not during shutdown.
    pub fn resume(&mut self, mask: u64) {
        if !self.shutting_down {
            self.stopping &= !mask;
            self.broken &= !mask;
        }
    }

    /// The daemon is stopping: drain every queue for good.
    pub fn drain_for_shutdown(&mut self, mask: u64) -> io::Result<()> {
        self.shutting_down = true;
        self.drain(mask)
    }

    pub fn in_flight(&self) -> usize {
        self.records.len()
    }
}

impl<A: Admission> Drop for Worker<A> {
    /// The connection is gone. The kernel may still write into guest memory or bounce
    /// buffers owned by in-flight records: wait for every completion before freeing them.
    /// QoS hears about every admitted request, so the volume can go idle.
    fn drop(&mut self) {
        self.settle();
        // Only the lease holder pops, so only a worker with parked requests can be the
        // one admission control told to wait.
        let was_waiting = !self.fifo.is_empty();
        let admission = &self.volume.admission;
        while self.records.len() > 0 {
            if let Err(e) = self.engine.wait_for_completion() {
                // We cannot learn when the kernel is done: leak the buffers rather than free
                // memory it may still write to. QoS and the device's slots count the
                // requests as done, or the volume (and a background one's in-flight
                // limit) and the slots would stay taken for good.
                tracing::error!(volume = %self.volume.name, in_flight = self.records.len(), "cannot wait for in-flight I/O ({e}); leaking its buffers");
                for record in self.records.iter_mut() {
                    self.volume.shared.slots.release();
                    if let Some(ticket) = record.ticket.take() {
                        // Not seen to complete: reported as taking no device time.
                        let timing = Timing {
                            completed_ns: record.timing.admitted_ns,
                            ..record.timing
                        };
                        self.settled.push((ticket, timing));
                    }
                }
                self.records.leak();
                break;
            }
            let mut done = Vec::new();
            self.engine.reap_into(&mut done);
            let now = admission.now_ns();
            for (user_data, _) in done {
                let Some(record) = self.records.take(user_data) else {
                    continue;
                };
                self.volume.shared.slots.release();
                if let Some(ticket) = record.ticket {
                    let timing = Timing {
                        completed_ns: now,
                        ..record.timing
                    };
                    self.settled.push((ticket, timing));
                }
            }
        }
        // Parked requests were never issued: settle admitted ones, forget the wait.
        let now = admission.now_ns();
        for p in self.fifo.drain() {
            if let Some(ticket) = p.ticket {
                let timing = Timing {
                    arrived_ns: p.arrived_ns,
                    admitted_ns: p.admitted_ns,
                    submitted_ns: now,
                    completed_ns: now,
                };
                self.settled.push((ticket, timing));
            }
        }
        let _turn = self.volume.admission_turn();
        admission.complete(&self.settled);
        if was_waiting {
            admission.abandon_wait();
        }
        if self.serving != 0 {
            self.lease.stop_serving();
        }
    }
}
