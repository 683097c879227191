//! The virtio side of a worker: popping descriptor chains (and noticing a guest that
//! breaks the ring protocol), answering GET_ID and invalid requests at once, returning
//! chains to the used ring and notifying the guest once per batch. The rings themselves
//! are read and written through [`crate::backend::virtio::split_ring`].

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vhost_user_backend::VringT;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use super::{Mem, Popped, Vring, Worker};
use crate::backend::admission::{Admission, IoKind, IoRequest};
use crate::backend::virtio::chain;
use crate::backend::virtio::request::{self, ChainLayout, Request, RequestError, RequestKind};
use crate::backend::virtio::split_ring::SplitRing;
use crate::backend::volume::VolumeCounters;
use crate::emulated::crash::{self, CrashPoint};
use crate::monotonic::monotonic_now_ns;
use crate::stage_trace::{self, Stage};

/// Consecutive passes that pop nothing while the ring says more is available before the
/// queue is declared broken (a legitimate race resolves in one or two).
const MAX_IDLE_PASSES: u32 = 64;

impl<A: Admission> Worker<A> {
    /// A kick (or a ring becoming ready) on queue `queue`. The guest memory map is read
    /// again on every pass, because requests found after re-enabling notifications may use
    /// regions added (ADD_MEM_REG) since the last pass.
    pub fn on_kick(&mut self, vrings: &[Vring], queue: u16) -> io::Result<()> {
        self.remember_vrings(vrings);
        let bit = 1u64 << queue;
        let vring = &vrings[queue as usize];
        let ready = Self::ring_ready(vring);
        // A stale event for a stopped or disabled ring must not touch it.
        if ready && (self.stopping | self.broken) & bit == 0 && self.may_serve(bit) {
            let mut idle_passes = 0;
            loop {
                vring.disable_notification().map_err(io::Error::other)?;
                let mem = self.memory.load();
                let popped = self.pop_all(vring, queue, &mem)?;
                if self.broken & bit != 0
                    || !vring.enable_notification().map_err(io::Error::other)?
                {
                    break;
                }
                if popped > 0 {
                    idle_passes = 0;
                    continue;
                }
                // Nothing popped, yet "more available". Normally the guest published between
                // the pop and re-enabling notifications, and the next pass finds it. If the
                // avail index is impossible (more pending than the ring holds) the ring
                // refuses to pop and this would spin forever.
                idle_passes += 1;
                if Self::pending(vring, &mem) > u32::from(vring.get_ref().get_queue().size())
                    || idle_passes > MAX_IDLE_PASSES
                {
                    self.mark_broken(queue, "avail index out of range");
                    break;
                }
            }
        }
        self.pump()
    }

    /// Stops serving a queue whose guest broke the ring protocol, like QEMU's
    /// virtio_error(): the queue is served again once the frontend restarts it.
    fn mark_broken(&mut self, queue: u16, why: &str) {
        self.broken |= 1 << queue;
        if let Some(suppressed) = self.warn.check() {
            let queue = self.guest_queue(queue);
            tracing::warn!(volume = %self.volume.name, queue, suppressed, "queue stopped: guest broke the ring protocol: {why}");
        }
    }

    /// Pops and handles every available chain of `queue`; returns how many it popped.
    pub(super) fn pop_all(
        &mut self,
        vring: &Vring,
        queue: u16,
        mem: &Arc<Mem>,
    ) -> io::Result<usize> {
        let mut popped = 0usize;
        // Arrival stamps: one clock reading for the chains popped between two submissions
        // (none for an empty pass).
        let mut now = None;
        // Read once per batch: a resize applies from the next one.
        let mut limits = None;
        // The rings' places are the frontend's to change only while the queue is stopped,
        // which waits for this pass.
        let Some(ring) = SplitRing::map(&**mem, vring.get_ref().get_queue()) else {
            self.mark_broken(queue, "its rings are not in guest memory");
            return Ok(0);
        };
        let mut heads = std::mem::take(&mut self.popped_heads);
        // Requests a previous run left in flight go first, in their order.
        let resubmit = self.logs.take_resubmit(queue);
        if !resubmit.is_empty() {
            self.outstanding[usize::from(queue)] += resubmit.len() as u32;
            heads.extend(resubmit);
        }
        loop {
            // Start the device early: the requests accepted so far go to the kernel after
            // the 1st, 2nd, 4th, 8th... chain of a batch, so the device works on the first
            // ones while the rest are parsed instead of idling until the whole batch has
            // been handled; the extra syscalls grow only with the log of the batch.
            // (QD32 on the benchmark VM: 0.83-0.86 of fio's IOPS without, 0.91-0.93 with.)
            // The chains up to the next of these points are popped together.
            let want = chains_to_next_submit(popped);
            let ring_full = self.pop_chains(vring, queue, &ring, want, &mut heads);
            let got = heads.len();
            if got > 0 {
                crash::reached(CrashPoint::AfterPop);
            }
            if got == 0 {
                self.popped_heads = heads;
                if ring_full && Self::more_published(&ring, vring) {
                    // More chains than the ring holds: descriptors are being reused while
                    // still ours. Stop rather than queue without bound.
                    self.mark_broken(queue, "more chains outstanding than the ring size");
                }
                return Ok(popped);
            }
            if popped == 0 {
                stage_trace::mark(Stage::Popped);
                self.early_return.batch_starts(monotonic_now_ns());
            }
            popped += got;
            self.progress += got as u64;
            let limits = *limits.get_or_insert_with(|| self.volume.current_limits());
            for head in heads.drain(..) {
                let mut layout = std::mem::take(&mut self.layout);
                let data = self.segment_pool.pop().unwrap_or_default();
                match chain::parse_chain(&ring, head, &mut layout, &limits, data) {
                    Ok(req) => {
                        let now = *now.get_or_insert_with(|| self.volume.admission.now_ns());
                        self.accept(queue, head, req, mem, now)
                    }
                    Err(e) => self.refuse(queue, head, &layout, e, mem),
                }
                self.layout = layout;
            }
            if got < want {
                // The ring had no more, or the guest has a ring's worth outstanding: look
                // again (it may have published, or chains may have been returned, since);
                // an empty look ends the pass and leaves the submission to the caller.
                continue;
            }
            // From the batch's first chain on, or its eighth when the guest's thread may
            // share the worker's CPU (`EarlyReturn`), while more of the batch waits to be
            // parsed, what has completed by then goes back to the guest, so that it
            // refills its queue meanwhile (design §8.10).
            self.dispatch()?;
            self.engine.submit()?;
            if popped >= self.early_return.first_chain()
                && Self::more_published(&ring, vring)
                && self.complete_ready()? > 0
            {
                self.publish_used();
            }
            now = None;
        }
    }

    /// Pops the heads of up to `want` chains of `queue` into `heads`, under one lock of the
    /// ring and one reading of its avail index. Returns whether it stopped because the
    /// guest has as many chains outstanding as the ring holds.
    fn pop_chains(
        &mut self,
        vring: &Vring,
        queue: u16,
        ring: &SplitRing<'_, Mem>,
        want: usize,
        heads: &mut Vec<u16>,
    ) -> bool {
        let mut state = vring.get_mut();
        let q = state.get_queue_mut();
        // GET_VRING_BASE marks the ring not ready before it waits for this pass to end.
        if !q.ready() {
            return false;
        }
        let size = u32::from(ring.size());
        let outstanding = &mut self.outstanding[queue as usize];
        let mut next = q.next_avail();
        // An avail index the ring cannot hold pops nothing; on_kick notices it.
        let Some(published) = ring.published(next) else {
            return false;
        };
        let mut full = false;
        for _ in 0..usize::from(published).min(want.saturating_sub(heads.len())) {
            if *outstanding >= size {
                full = true;
                break;
            }
            let Some(head) = ring.avail_head(next) else {
                break;
            };
            next = next.wrapping_add(1);
            *outstanding += 1;
            // Logged before its request can be submitted, in pop order.
            self.logs.popped(queue, head);
            heads.push(head);
        }
        q.set_next_avail(next);
        full
    }

    /// Whether the frontend has the ring enabled and ready (a stale event for a stopped or
    /// disabled ring must not touch it).
    pub(super) fn ring_ready(vring: &Vring) -> bool {
        let state = vring.get_ref();
        state.is_enabled() && state.get_queue().ready()
    }

    /// How many chains the guest published that we have not popped (as its avail index
    /// says; more than the ring size means the index is invalid).
    pub(super) fn pending(vring: &Vring, mem: &Mem) -> u32 {
        let state = vring.get_ref();
        let q = state.get_queue();
        q.avail_idx(mem, Ordering::Acquire)
            .map(|idx| u32::from(idx.0.wrapping_sub(q.next_avail())))
            .unwrap_or(0)
    }

    /// Whether the guest has published chains not popped yet, read through the pass's
    /// mapped avail ring (an index the ring cannot hold counts as more, as in
    /// [`Self::pending`]).
    fn more_published(ring: &SplitRing<'_, Mem>, vring: &Vring) -> bool {
        let next_avail = vring.get_ref().get_queue().next_avail();
        ring.published(next_avail) != Some(0)
    }

    /// Answers GET_ID at once; queues everything else in the worker's FIFO.
    fn accept(&mut self, queue: u16, head: u16, req: Request, mem: &Arc<Mem>, now: u64) {
        let kind = match req.kind {
            RequestKind::GetId => {
                // The ID is NUL-padded to 20 bytes (VIRTIO_BLK_ID_BYTES) and truncated to
                // the guest's buffer, as QEMU does.
                let mut id = [0u8; 20];
                id[..self.volume.serial.len()].copy_from_slice(&self.volume.serial);
                let mut written = 0usize;
                let mut status = VIRTIO_BLK_S_OK;
                for seg in &req.data {
                    let n = (seg.len as usize).min(id.len() - written);
                    if n == 0 {
                        break;
                    }
                    let chunk = &id[written..written + n];
                    if mem.write_slice(chunk, GuestAddress(seg.addr)).is_err() {
                        status = VIRTIO_BLK_S_IOERR;
                        break;
                    }
                    written += n;
                }
                if status != VIRTIO_BLK_S_OK {
                    written = 0;
                }
                self.finish(
                    queue,
                    head,
                    req.status_addr,
                    status as u8,
                    written as u32,
                    mem,
                );
                return;
            }
            RequestKind::Read => IoKind::Read,
            RequestKind::Write => IoKind::Write,
            RequestKind::Flush => IoKind::Flush,
            RequestKind::Discard => IoKind::Discard,
            RequestKind::WriteZeroes { .. } => IoKind::WriteZeroes,
        };
        let io = IoRequest {
            kind,
            offset: req.offset,
            len: req.len,
        };
        self.fifo.push(
            Popped {
                queue,
                head,
                kind: req.kind,
                data: req.data,
                status_addr: req.status_addr,
                mem: mem.clone(),
            },
            io,
            now,
        );
    }

    /// Answers an invalid request with its status (or a zero-length used entry when there
    /// is no status byte to write) and logs it, rate-limited.
    fn refuse(
        &mut self,
        queue: u16,
        head: u16,
        layout: &ChainLayout,
        e: RequestError,
        mem: &Arc<Mem>,
    ) {
        let c = &self.volume.counters;
        match e.status() {
            Some(s) if s == VIRTIO_BLK_S_IOERR as u8 => VolumeCounters::add(&c.errors, 1),
            _ => VolumeCounters::add(&c.unsupported, 1),
        }
        if let Some(suppressed) = self.warn.check() {
            let queue = self.guest_queue(queue);
            tracing::warn!(volume = %self.volume.name, queue, head, suppressed, "refused request: {e}");
        }
        match (e.status(), request::locate_status(layout)) {
            (Some(status), Ok((addr, _))) => self.finish(queue, head, addr, status, 0, mem),
            // Nowhere to put a status: return the chain with nothing written.
            _ => self.return_chain(queue, head, 0),
        }
    }

    /// Returns the chain to the guest: its used entry is written with the others of the
    /// batch by [`Self::publish_used`], and until then it still counts as outstanding.
    fn return_chain(&mut self, queue: u16, head: u16, used_len: u32) {
        self.used.push((queue, head, used_len));
        self.touched |= 1 << queue;
    }

    /// Writes the status byte and puts the chain on the used ring.
    pub(super) fn finish(
        &mut self,
        queue: u16,
        head: u16,
        status_addr: u64,
        status: u8,
        written: u32,
        mem: &Mem,
    ) {
        // One byte lies in one region: stored through its slice (which logs it for a
        // migration), without vm-memory's general copy path.
        let status_ok = mem
            .get_slice(GuestAddress(status_addr), 1)
            .is_ok_and(|slice| slice.store(status, 0, Ordering::Relaxed).is_ok());
        self.return_chain(queue, head, if status_ok { written + 1 } else { 0 });
    }

    /// Writes the chains returned since the last call to the used rings, each ring's under
    /// one lock and one store of its used index, and notifies the guest of each ring that
    /// asked for it. Through the current memory map: the map a chain was popped with may
    /// hold regions the frontend has removed or replaced since, and the used ring is what
    /// the frontend reads now.
    pub(super) fn publish_used(&mut self) {
        let mut touched = std::mem::take(&mut self.touched);
        if touched == 0 {
            return;
        }
        stage_trace::mark(Stage::Published);
        crash::reached(CrashPoint::BeforePublish);
        let mem = self.memory.load();
        let mut used = std::mem::take(&mut self.used);
        while touched != 0 {
            let queue = touched.trailing_zeros() as u16;
            touched &= touched - 1;
            let entries = used.iter().filter(|(q, ..)| *q == queue);
            // Written or not, these chains are no longer the worker's.
            if let Some(n) = self.outstanding.get_mut(usize::from(queue)) {
                *n = n.saturating_sub(entries.clone().count() as u32);
            }
            let Some(vring) = self.vrings.get(usize::from(queue)) else {
                continue;
            };
            let mut state = vring.get_mut();
            let q = state.get_queue_mut();
            let Some(ring) = SplitRing::map(&*mem, q) else {
                if let Some(suppressed) = self.warn.check() {
                    let queue = self.guest_queue(queue);
                    tracing::warn!(volume = %self.volume.name, queue, suppressed, "cannot return requests: the queue's rings are not in guest memory");
                }
                continue;
            };
            let previous = q.next_used();
            let mut next = previous;
            let mut batch = std::mem::take(&mut self.batch_heads);
            batch.clear();
            for &(_, head, len) in entries {
                match ring.put_used(next, head, len) {
                    Ok(()) => {
                        next = next.wrapping_add(1);
                        batch.push(head);
                    }
                    Err(e) => {
                        if let Some(suppressed) = self.warn.check() {
                            let queue = self.guest_queue(queue);
                            tracing::warn!(volume = %self.volume.name, queue, head, suppressed, "cannot return a request: {e}");
                        }
                    }
                }
            }
            if next == previous {
                self.batch_heads = batch;
                continue;
            }
            // The inflight log: linked before the guest can see the batch, cleared after.
            self.logs.publishing(queue, &batch);
            if let Err(e) = ring.publish_used_up_to(next) {
                self.batch_heads = batch;
                if let Some(suppressed) = self.warn.check() {
                    let queue = self.guest_queue(queue);
                    tracing::warn!(volume = %self.volume.name, queue, suppressed, "cannot return requests: {e}");
                }
                continue;
            }
            crash::reached(CrashPoint::AfterPublish);
            self.logs.published(queue, &batch, next);
            self.batch_heads = batch;
            q.set_next_used(next);
            if ring.needs_notification(previous, next) {
                stage_trace::mark(Stage::Notified);
                let _ = state.signal_used_queue();
            }
        }
        used.clear();
        self.used = used;
    }
}

/// How many chains a pass that has popped `popped` pops before its next early submit
/// (the 1st, 2nd, 4th, 8th... chain): one run of [`Worker::pop_chains`].
fn chains_to_next_submit(popped: usize) -> usize {
    (popped + 1).next_power_of_two() - popped
}

#[cfg(test)]
mod tests {
    use super::chains_to_next_submit;

    #[test]
    fn runs_of_chains_end_at_the_early_submits() {
        // A pass that always gets what it asks for submits after 1, 2, 4, 8... chains.
        let mut popped = 0;
        let mut submits = Vec::new();
        while popped < 64 {
            popped += chains_to_next_submit(popped);
            submits.push(popped);
        }
        assert_eq!(submits, [1, 2, 4, 8, 16, 32, 64]);
        // A short run (the ring had 3 of the 4 asked for) resumes towards the same point.
        assert_eq!(chains_to_next_submit(3), 1);
        assert_eq!(chains_to_next_submit(5), 3);
        assert_eq!(chains_to_next_submit(8), 8);
    }
}
