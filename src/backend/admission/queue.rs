//! The volume FIFO between parsing and the device (design §3.6). Requests wait in arrival
//! order and only the head is offered to admission control: a head told to wait holds
//! everything behind it, and an admitted head keeps its place while it waits for a device
//! slot. One exception: a request whose operation has caps of its own (`op_caps`, design
//! §12.3) that is told to wait steps aside, so a flush or discard storm held by its caps
//! does not hold the reads and writes behind it; the requests aside are offered first
//! when their time comes. Transport-free: the worker drives it with io_uring and device slots, the
//! simulator (`sim::engine`) with its modelled disk, and its tests with a scripted
//! admission control.

use std::collections::VecDeque;

use crate::backend::admission::{Admission, Decision, IoRequest};

/// A request waiting in the FIFO: `req` is whatever the caller needs to start it.
pub(crate) struct Parked<R, T> {
    pub req: R,
    pub io: IoRequest,
    /// Set once admission control admitted it.
    pub ticket: Option<T>,
    /// When it arrived.
    pub arrived_ns: u64,
    /// When it was admitted (0 until then).
    pub admitted_ns: u64,
}

/// What the FIFO head may do now.
pub(crate) enum Next<R, T> {
    /// Admitted and holding a device slot: start it.
    Start(Parked<R, T>),
    /// Not admitted before this time: arm the timer, offer the head again then (or after a
    /// planner run, which may have made it admissible earlier).
    WaitUntil(u64),
    /// Admitted, but no device slot is free: offer the head again when one is.
    NoSlot,
    /// Nothing is parked.
    Empty,
}

pub(crate) struct AdmitQueue<R, T> {
    fifo: VecDeque<Parked<R, T>>,
    /// Requests that stepped aside, in arrival order, each with the time to offer it again.
    aside: VecDeque<(u64, Parked<R, T>)>,
}

impl<R, T> Default for AdmitQueue<R, T> {
    fn default() -> Self {
        AdmitQueue {
            fifo: VecDeque::new(),
            aside: VecDeque::new(),
        }
    }
}

impl<R, T> AdmitQueue<R, T> {
    /// Queue a request that arrived at `now_ns`.
    pub fn push(&mut self, req: R, io: IoRequest, now_ns: u64) {
        self.fifo.push_back(Parked {
            req,
            io,
            ticket: None,
            arrived_ns: now_ns,
            admitted_ns: 0,
        });
    }

    pub fn len(&self) -> usize {
        self.fifo.len() + self.aside.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty() && self.aside.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Parked<R, T>> {
        self.aside.iter().map(|(_, p)| p).chain(self.fifo.iter())
    }

    /// Offers the head to `admission` (unless it was admitted earlier) and then asks
    /// `take_slot` for a device slot. A request aside whose time has come is offered first.
    pub fn next<A: Admission<Ticket = T>>(
        &mut self,
        admission: &A,
        now_ns: u64,
        take_slot: impl FnOnce() -> bool,
    ) -> Next<R, T> {
        if self.aside.front().is_some_and(|(at, _)| *at <= now_ns) {
            let (_, mut p) = self.aside.pop_front().expect("checked");
            if p.ticket.is_some() {
                return self.start_aside(p, now_ns, take_slot);
            }
            match admission.admit(&p.io, now_ns) {
                Decision::Go(ticket) => {
                    p.ticket = Some(ticket);
                    p.admitted_ns = now_ns;
                    return self.start_aside(p, now_ns, take_slot);
                }
                Decision::Wait { until_ns } => self.put_aside(until_ns, p),
            }
        }
        loop {
            let more = self.fifo.len() > 1;
            let Some(head) = self.fifo.front_mut() else {
                return match self.aside.front() {
                    Some((at, _)) => Next::WaitUntil(*at),
                    None => Next::Empty,
                };
            };
            if head.ticket.is_none() {
                match admission.admit(&head.io, now_ns) {
                    Decision::Go(ticket) => {
                        head.ticket = Some(ticket);
                        head.admitted_ns = now_ns;
                    }
                    Decision::Wait { until_ns } => {
                        if more && admission.may_pass(head.io.kind) {
                            let p = self.fifo.pop_front().expect("the head exists");
                            self.put_aside(until_ns, p);
                            continue;
                        }
                        let aside = self.aside.front().map_or(u64::MAX, |(at, _)| *at);
                        return Next::WaitUntil(until_ns.min(aside));
                    }
                }
            }
            if !take_slot() {
                return Next::NoSlot;
            }
            return Next::Start(self.fifo.pop_front().expect("the head exists"));
        }
    }

    /// Start an admitted request from aside, or keep it first aside until a slot frees.
    fn start_aside(
        &mut self,
        p: Parked<R, T>,
        now_ns: u64,
        take_slot: impl FnOnce() -> bool,
    ) -> Next<R, T> {
        if !take_slot() {
            self.aside.push_front((now_ns, p));
            return Next::NoSlot;
        }
        Next::Start(p)
    }

    /// Keep `p` aside until `at`, ordered by that time.
    fn put_aside(&mut self, at: u64, p: Parked<R, T>) {
        let i = self.aside.partition_point(|(t, _)| *t <= at);
        self.aside.insert(i, (at, p));
    }

    /// Removes every request `pick` selects, wherever it is, in order, for the caller to
    /// start without admission (a queue being stopped must not wait behind another
    /// queue's throttled requests). If the head goes unadmitted, admission control is told
    /// it will not be offered again. Unadmitted requests get `now_ns` as their admission.
    pub fn take_where<A: Admission<Ticket = T>>(
        &mut self,
        admission: &A,
        now_ns: u64,
        pick: impl Fn(&R) -> bool,
    ) -> Vec<Parked<R, T>> {
        let mut taken = Vec::new();
        let mut abandoned = false;
        let mut i = 0;
        while i < self.aside.len() {
            if !pick(&self.aside[i].1.req) {
                i += 1;
                continue;
            }
            let (_, p) = self.aside.remove(i).expect("index in range");
            abandoned |= p.ticket.is_none();
            taken.push(p);
        }
        let mut i = 0;
        while i < self.fifo.len() {
            if !pick(&self.fifo[i].req) {
                i += 1;
                continue;
            }
            let p = self.fifo.remove(i).expect("index in range");
            // It may have been told to wait: QoS must not keep counting it as waiting.
            abandoned |= i == 0 && p.ticket.is_none();
            taken.push(p);
        }
        if abandoned {
            admission.abandon_wait();
        }
        for p in &mut taken {
            if p.admitted_ns == 0 {
                p.admitted_ns = now_ns;
            }
        }
        taken
    }

    /// Empties the FIFO (the connection is gone): the requests were never started.
    pub fn drain(&mut self) -> impl Iterator<Item = Parked<R, T>> + '_ {
        self.aside
            .drain(..)
            .map(|(_, p)| p)
            .chain(self.fifo.drain(..))
    }
}

/// The earliest deadline a wait timer is armed for: a later one need not re-arm it (the
/// earlier expiry offers the head again and learns the new time).
#[derive(Default)]
pub(crate) struct WaitDeadline(Option<u64>);

impl WaitDeadline {
    /// Whether the timer must be (re)armed for `deadline_ns`; records it if so.
    pub fn arm(&mut self, deadline_ns: u64) -> bool {
        if self.0.is_some_and(|d| d <= deadline_ns) {
            return false;
        }
        self.0 = Some(deadline_ns);
        true
    }

    /// The timer fired.
    pub fn fired(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::admission::{IoKind, Timing};
    use std::sync::Mutex;

    /// Admission control that answers from a script and records what it was asked.
    #[derive(Default)]
    struct Scripted {
        answers: Mutex<Vec<Decision<u32>>>,
        offered: Mutex<Vec<u64>>,
        abandoned: Mutex<u32>,
        /// Flushes have caps of their own.
        flush_passes: bool,
    }

    impl Scripted {
        fn answering(answers: &[Decision<u32>]) -> Self {
            let mut a = answers.to_vec();
            a.reverse();
            Scripted {
                answers: Mutex::new(a),
                ..Default::default()
            }
        }
    }

    impl Admission for Scripted {
        type Ticket = u32;
        fn now_ns(&self) -> u64 {
            0
        }
        fn admit(&self, io: &IoRequest, _now_ns: u64) -> Decision<u32> {
            self.offered.lock().unwrap().push(io.offset);
            let next = self.answers.lock().unwrap().pop();
            next.expect("more offers than scripted answers")
        }
        fn complete(&self, _: &[(u32, Timing)]) {}
        fn abandon_wait(&self) {
            *self.abandoned.lock().unwrap() += 1;
        }
        fn may_pass(&self, kind: IoKind) -> bool {
            self.flush_passes && kind == IoKind::Flush
        }
    }

    fn io(offset: u64) -> IoRequest {
        IoRequest {
            kind: IoKind::Read,
            offset,
            len: 4096,
        }
    }

    fn flush(offset: u64) -> IoRequest {
        IoRequest {
            kind: IoKind::Flush,
            offset,
            len: 0,
        }
    }

    fn queue(offsets: &[u64]) -> AdmitQueue<u64, u32> {
        let mut q = AdmitQueue::default();
        for &o in offsets {
            q.push(o, io(o), 0);
        }
        q
    }

    fn started(n: Next<u64, u32>) -> (u64, Option<u32>, u64) {
        match n {
            Next::Start(p) => (p.req, p.ticket, p.admitted_ns),
            _ => panic!("expected a start"),
        }
    }

    #[test]
    fn only_the_head_is_offered_and_a_waiting_head_holds_the_rest() {
        let a = Scripted::answering(&[
            Decision::Go(1),
            Decision::Wait { until_ns: 500 },
            Decision::Go(2),
        ]);
        let mut q = queue(&[10, 20, 30]);
        assert_eq!(started(q.next(&a, 100, || true)), (10, Some(1), 100));
        assert!(matches!(q.next(&a, 100, || true), Next::WaitUntil(500)));
        // The wait is over: the same head is offered again, never the one behind it.
        assert_eq!(started(q.next(&a, 500, || true)), (20, Some(2), 500));
        assert_eq!(*a.offered.lock().unwrap(), [10, 20, 20]);
    }

    #[test]
    fn an_admitted_head_keeps_its_ticket_and_place_while_it_waits_for_a_slot() {
        let a = Scripted::answering(&[Decision::Go(7)]);
        let mut q = queue(&[10, 20]);
        assert!(matches!(q.next(&a, 100, || false), Next::NoSlot));
        // Not offered to admission again: it was charged once.
        assert_eq!(started(q.next(&a, 300, || true)), (10, Some(7), 100));
        assert_eq!(*a.offered.lock().unwrap(), [10]);
    }

    /// A flush whose operation has caps of its own steps aside when told to wait; the
    /// reads behind it go, and it is offered first when its time comes. Alone, or
    /// without caps of its own, a waiting head holds its place.
    #[test]
    fn a_request_with_caps_of_its_own_steps_aside_when_it_must_wait() {
        let mut a = Scripted::answering(&[
            Decision::Wait { until_ns: 500 },
            Decision::Go(1),
            Decision::Go(2),
            Decision::Go(3),
        ]);
        a.flush_passes = true;
        let mut q = AdmitQueue::default();
        q.push(10, flush(10), 0);
        q.push(20, io(20), 0);
        q.push(30, io(30), 0);
        assert_eq!(started(q.next(&a, 100, || true)), (20, Some(1), 100));
        assert_eq!(started(q.next(&a, 100, || true)), (30, Some(2), 100));
        assert!(matches!(q.next(&a, 100, || true), Next::WaitUntil(500)));
        assert_eq!(q.len(), 1);
        assert_eq!(started(q.next(&a, 500, || true)), (10, Some(3), 500));
        assert_eq!(*a.offered.lock().unwrap(), [10, 20, 30, 10]);
        assert!(matches!(q.next(&a, 500, || true), Next::Empty));

        // Alone it waits in place; without caps of its own it holds the rest.
        for passes in [true, false] {
            let mut a = Scripted::answering(&[Decision::Wait { until_ns: 500 }]);
            a.flush_passes = passes;
            let mut q = AdmitQueue::default();
            q.push(10, flush(10), 0);
            if !passes {
                q.push(20, io(20), 0);
            }
            assert!(matches!(q.next(&a, 100, || true), Next::WaitUntil(500)));
            assert_eq!(*a.offered.lock().unwrap(), [10]);
        }
    }

    #[test]
    fn an_empty_queue_asks_nobody() {
        let a = Scripted::answering(&[]);
        let mut q = queue(&[]);
        assert!(matches!(
            q.next(&a, 0, || panic!("no slot needed")),
            Next::Empty
        ));
    }

    #[test]
    fn stopping_takes_the_picked_requests_in_order_and_abandons_the_heads_wait() {
        let a = Scripted::answering(&[Decision::Wait { until_ns: 900 }]);
        let mut q = queue(&[11, 20, 31, 40]);
        assert!(matches!(q.next(&a, 100, || true), Next::WaitUntil(900)));
        let odd = q.take_where(&a, 200, |r| r % 2 == 1);
        let taken: Vec<_> = odd
            .iter()
            .map(|p| (p.req, p.ticket, p.admitted_ns))
            .collect();
        assert_eq!(taken, [(11, None, 200), (31, None, 200)]);
        assert_eq!(*a.abandoned.lock().unwrap(), 1);
        let rest: Vec<u64> = q.iter().map(|p| p.req).collect();
        assert_eq!(rest, [20, 40]);
    }

    #[test]
    fn an_admitted_head_taken_by_stopping_keeps_its_ticket_and_admission_time() {
        let a = Scripted::answering(&[Decision::Go(7)]);
        let mut q = queue(&[11, 20]);
        assert!(matches!(q.next(&a, 100, || false), Next::NoSlot));
        let taken = q.take_where(&a, 300, |r| r % 2 == 1);
        let taken: Vec<_> = taken
            .iter()
            .map(|p| (p.req, p.ticket, p.admitted_ns))
            .collect();
        assert_eq!(taken, [(11, Some(7), 100)]);
        // It was admitted: there is no wait to abandon.
        assert_eq!(*a.abandoned.lock().unwrap(), 0);
    }

    #[test]
    fn taking_from_behind_an_unadmitted_head_keeps_its_wait() {
        let a = Scripted::answering(&[Decision::Wait { until_ns: 900 }]);
        let mut q = queue(&[10, 21]);
        assert!(matches!(q.next(&a, 100, || true), Next::WaitUntil(900)));
        assert_eq!(q.take_where(&a, 200, |r| r % 2 == 1).len(), 1);
        assert_eq!(*a.abandoned.lock().unwrap(), 0);
    }

    #[test]
    fn a_later_deadline_does_not_rearm_the_timer() {
        let mut d = WaitDeadline::default();
        assert!(d.arm(500));
        assert!(!d.arm(700));
        assert!(d.arm(300));
        d.fired();
        assert!(d.arm(700));
    }
}
