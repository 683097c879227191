//! A volume's worker: the event-loop state behind one vhost-user connection.
//!
//! One worker thread serves every queue of its volume. On a kick it pops descriptor
//! chains, parses and validates them, and appends them to the volume's FIFO. `dispatch`
//! then offers the FIFO head to admission control (QoS) and for a device slot, and hands
//! admitted requests to io_uring. Completions write the status byte, return the chain to the
//! used ring, and let the next parked requests go. Nothing here blocks: a throttled request
//! waits on a timerfd, a request without a device slot on a wake eventfd, both on this
//! worker's epoll.

use super::admission::{Admission, Decision, IoKind, IoRequest, Timing};
use super::bounce::BounceBuffer;
use super::chain;
use super::engine::{monotonic_now_ns, DeviceOp, Engine};
use super::request::{self, ChainLayout, Request, RequestError, RequestKind, Segment};
use super::volume::{Volume, VolumeCounters};
use crate::cost_model::CostInput;
use crate::emulated::faults::{Fault, FaultError};
use crate::logging::LogLimiter;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

pub type Mem = GuestMemoryMmap<()>;
pub type Vring = VringRwLock<vm_memory::GuestMemoryAtomic<Mem>>;

/// Linux caps one readv/writev at this many iovecs; larger requests are bounced.
const IOV_MAX: usize = 1024;
/// The largest request copied through a bounce buffer (Linux guests send at most a few
/// MiB per request; larger unaligned requests fail with IOERR).
const MAX_BOUNCE_BYTES: usize = 8 << 20;
/// Consecutive passes that pop nothing while the ring says more is available before the
/// queue is declared broken (a legitimate race resolves in one or two).
const MAX_IDLE_PASSES: u32 = 64;

/// A validated request waiting in the volume FIFO for admission or a device slot.
struct Pending<T> {
    queue: u16,
    head: u16,
    request: Request,
    io: IoRequest,
    mem: Arc<Mem>,
    /// Set once QoS admitted it (it keeps its place if it then waits for a slot).
    ticket: Option<T>,
    admitted_ns: u64,
}

/// A request the device is working on. Owns everything the kernel points into.
struct InFlight<T> {
    queue: u16,
    head: u16,
    kind: RequestKind,
    io: IoRequest,
    status_addr: u64,
    /// Bytes written into guest buffers on success (reads), for the used length.
    guest_written: u32,
    iovecs: Vec<libc::iovec>,
    /// O_DIRECT bounce buffer and, for reads, the guest segments to copy it back into.
    bounce: Option<BounceBuffer>,
    copy_back: Vec<Segment>,
    /// Keeps the guest memory mapped until the kernel is done with it, even if the
    /// frontend replaces the memory table meanwhile.
    mem: Arc<Mem>,
    ticket: Option<T>,
    timing: Timing,
    /// An injected device error (`[[device.emulated.faults]]`) replacing the result.
    fault: Option<Fault>,
}

// SAFETY: the raw iovec pointers point into `mem` (kept alive by the Arc) or into `bounce`,
// both owned by this record; nothing else aliases them.
unsafe impl<T: Send> Send for InFlight<T> {}

pub struct Worker<A: Admission> {
    volume: Arc<Volume<A>>,
    engine: Engine,
    pub timer: TimerFd,
    timer_deadline: Option<u64>,
    pub wake_evt: Arc<EventFd>,
    waiting_for_slot: bool,
    fifo: VecDeque<Pending<A::Ticket>>,
    inflight: Vec<Option<InFlight<A::Ticket>>>,
    free_slots: Vec<usize>,
    in_flight_count: usize,
    /// The vrings of this connection, captured from the first event (for `drain`, which
    /// runs outside the event loop).
    vrings: Vec<Vring>,
    /// Vrings with new used entries since the last notification (bit per queue).
    touched: u64,
    /// Queues being stopped: no more pops, parked requests go without waiting.
    stopping: u64,
    /// Set by a shutdown drain: a later GET_VRING_BASE must not re-enable popping.
    shutting_down: bool,
    /// Queues whose guest broke the ring protocol (an avail index that cannot be right,
    /// or more chains outstanding than the ring holds): not served until restarted.
    broken: u64,
    /// Chains popped from each queue and not yet returned to the used ring. A driver can
    /// never have more than the ring size outstanding; this bounds what a guest can make
    /// the worker hold.
    outstanding: Vec<u32>,
    warn: LogLimiter,
    /// Scratch space reused per request or batch, so the hot path does not allocate:
    /// reaped completions, the descriptor layout of the chain being parsed, and iovec
    /// arrays returned by completed requests.
    reaped: Vec<(u64, i32)>,
    layout: ChainLayout,
    /// Completions to report to admission control, once per pump (see `settle`).
    settled: Vec<(A::Ticket, Timing)>,
    iovec_pool: IovecPool,
    /// End of this volume's previous request on the emulated disk.
    emulated_prev_end: Option<u64>,
}

/// Empty iovec arrays kept for their capacity.
#[derive(Default)]
struct IovecPool(Vec<Vec<libc::iovec>>);

// SAFETY: the pooled vectors are always empty (cleared before they are pooled), so they
// hold no pointers; only their allocations move between threads.
unsafe impl Send for IovecPool {}

impl<A: Admission> Worker<A> {
    pub fn new(volume: Arc<Volume<A>>) -> io::Result<Self> {
        let depth = u32::from(volume.queue_size) * u32::from(volume.num_queues);
        // An emulated request takes two entries: the operation and its deadline.
        let entries = if volume.shared.emulated.is_some() {
            depth * 2
        } else {
            depth
        };
        let file = volume
            .shared
            .disk
            .file
            .as_ref()
            .map(std::os::unix::io::AsRawFd::as_raw_fd);
        Ok(Worker {
            engine: Engine::new(entries, file)?,
            timer: TimerFd::new()?,
            timer_deadline: None,
            wake_evt: Arc::new(EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?),
            waiting_for_slot: false,
            fifo: VecDeque::new(),
            inflight: Vec::new(),
            free_slots: Vec::new(),
            in_flight_count: 0,
            vrings: Vec::new(),
            touched: 0,
            stopping: 0,
            shutting_down: false,
            broken: 0,
            outstanding: vec![0; usize::from(volume.num_queues)],
            warn: LogLimiter::new(Duration::from_secs(1)),
            reaped: Vec::with_capacity(depth.min(4096) as usize),
            layout: ChainLayout::default(),
            settled: Vec::with_capacity(depth.min(4096) as usize),
            iovec_pool: IovecPool::default(),
            emulated_prev_end: None,
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

    /// A kick (or a ring becoming ready) on queue `queue`. `memory` gives the current guest
    /// memory map: it is read again on every pass, because requests found after
    /// re-enabling notifications may use regions added (ADD_MEM_REG) since the last pass.
    pub fn on_kick(
        &mut self,
        vrings: &[Vring],
        queue: u16,
        memory: &dyn Fn() -> Arc<Mem>,
    ) -> io::Result<()> {
        self.remember_vrings(vrings);
        let bit = 1u64 << queue;
        let vring = &vrings[queue as usize];
        let ready = {
            let state = vring.get_ref();
            state.is_enabled() && state.get_queue().ready()
        };
        // A stale event for a stopped or disabled ring must not touch it.
        if ready && (self.stopping | self.broken) & bit == 0 {
            let mut idle_passes = 0;
            loop {
                vring.disable_notification().map_err(io::Error::other)?;
                let mem = memory();
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
                // avail index is impossible (more pending than the ring holds) virtio-queue
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

    /// Logs (rate-limited) an error met while handling an event.
    pub fn report_error(&mut self, event: u16, e: &io::Error) {
        if let Some(suppressed) = self.warn.check() {
            tracing::error!(volume = %self.volume.name, event, suppressed, "event handling failed: {e}");
        }
    }

    /// Stops serving a queue whose guest broke the ring protocol, like QEMU's
    /// virtio_error(): the queue is served again once the frontend restarts it.
    fn mark_broken(&mut self, queue: u16, why: &str) {
        self.broken |= 1 << queue;
        if let Some(suppressed) = self.warn.check() {
            tracing::warn!(volume = %self.volume.name, queue, suppressed, "queue stopped: guest broke the ring protocol: {why}");
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
        self.timer_deadline = None;
        self.pump()
    }

    /// Another volume freed a device slot.
    pub fn on_wake(&mut self, vrings: &[Vring]) -> io::Result<()> {
        self.remember_vrings(vrings);
        let _ = self.wake_evt.read();
        self.waiting_for_slot = false;
        self.pump()
    }

    /// Dispatches what may go, submits, completes what finished, until nothing moves; then
    /// notifies the guest once per touched queue.
    fn pump(&mut self) -> io::Result<()> {
        loop {
            self.dispatch()?;
            self.engine.submit()?;
            if self.complete_ready()? == 0 {
                break;
            }
        }
        self.settle();
        self.notify_guest();
        Ok(())
    }

    /// Reports the completions gathered since the last call to admission control.
    fn settle(&mut self) {
        if !self.settled.is_empty() {
            self.volume.admission.complete(&self.settled);
            self.settled.clear();
        }
    }

    /// Pops and handles every available chain of `queue`; returns how many it popped.
    fn pop_all(&mut self, vring: &Vring, queue: u16, mem: &Arc<Mem>) -> io::Result<usize> {
        let mut popped = 0;
        loop {
            let chain = {
                let mut state = vring.get_mut();
                let q = state.get_queue_mut();
                if self.outstanding[queue as usize] >= u32::from(q.size()) {
                    // More chains than the ring holds: descriptors are being reused while
                    // still ours. Stop rather than queue without bound.
                    drop(state);
                    if Self::pending(vring, mem) > 0 {
                        self.mark_broken(queue, "more chains outstanding than the ring size");
                    }
                    return Ok(popped);
                }
                q.pop_descriptor_chain(mem.clone())
            };
            let Some(chain) = chain else {
                return Ok(popped);
            };
            popped += 1;
            self.outstanding[queue as usize] += 1;
            let head = chain.head_index();
            let mut layout = std::mem::take(&mut self.layout);
            let parsed = chain::parse_chain(chain, &mut layout, &self.volume.limits);
            match parsed {
                Ok(req) => self.accept(queue, head, req, mem),
                Err(e) => self.refuse(queue, head, &layout, e, mem),
            }
            self.layout = layout;
            // Start the device early: the requests accepted so far go to the kernel after
            // the 1st, 2nd, 4th, 8th... chain of a batch, so the device works on the first
            // ones while the rest are parsed instead of idling until the whole batch has
            // been handled; the extra syscalls grow only with the log of the batch.
            // (QD32 on the benchmark VM: 0.83-0.86 of fio's IOPS without, 0.91-0.93 with.)
            if popped.is_power_of_two() {
                self.dispatch()?;
                self.engine.submit()?;
            }
        }
    }

    /// How many chains the guest published that we have not popped (as its avail index
    /// says; more than the ring size means the index is invalid).
    fn pending(vring: &Vring, mem: &Mem) -> u32 {
        let state = vring.get_ref();
        let q = state.get_queue();
        q.avail_idx(mem, std::sync::atomic::Ordering::Acquire)
            .map(|idx| u32::from(idx.0.wrapping_sub(q.next_avail())))
            .unwrap_or(0)
    }

    /// Answers GET_ID at once; queues everything else in the volume FIFO.
    fn accept(&mut self, queue: u16, head: u16, req: Request, mem: &Arc<Mem>) {
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
        self.fifo.push_back(Pending {
            queue,
            head,
            request: req,
            io,
            mem: mem.clone(),
            ticket: None,
            admitted_ns: 0,
        });
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
            tracing::warn!(volume = %self.volume.name, queue, head, suppressed, "refused request: {e}");
        }
        match (e.status(), request::locate_status(layout)) {
            (Some(status), Ok((addr, _))) => self.finish(queue, head, addr, status, 0, mem),
            // Nowhere to put a status: return the chain with nothing written.
            _ => self.return_chain(queue, head, 0),
        }
    }

    fn return_chain(&mut self, queue: u16, head: u16, used_len: u32) {
        if let Some(n) = self.outstanding.get_mut(queue as usize) {
            *n = n.saturating_sub(1);
        }
        if let Some(vring) = self.vrings.get(queue as usize) {
            if let Err(e) = vring.add_used(head, used_len) {
                if let Some(suppressed) = self.warn.check() {
                    tracing::warn!(volume = %self.volume.name, queue, suppressed, "add_used failed: {e}");
                }
            }
            self.touched |= 1 << queue;
        }
    }

    /// Writes the status byte and puts the chain on the used ring.
    fn finish(
        &mut self,
        queue: u16,
        head: u16,
        status_addr: u64,
        status: u8,
        written: u32,
        mem: &Mem,
    ) {
        let status_ok = mem.write_obj(status, GuestAddress(status_addr)).is_ok();
        self.return_chain(queue, head, if status_ok { written + 1 } else { 0 });
    }

    fn notify_guest(&mut self) {
        let mut touched = std::mem::take(&mut self.touched);
        while touched != 0 {
            let q = touched.trailing_zeros() as usize;
            touched &= touched - 1;
            if let Some(vring) = self.vrings.get(q) {
                if vring.needs_notification().unwrap_or(true) {
                    let _ = vring.signal_used_queue();
                }
            }
        }
    }

    /// Lets FIFO requests go in order while QoS admits them and device slots are free.
    fn dispatch(&mut self) -> io::Result<()> {
        if self.stopping != 0 {
            self.dispatch_stopping()?;
        }
        if self.waiting_for_slot {
            return Ok(());
        }
        let volume = self.volume.clone();
        let admission = &volume.admission;
        let now = admission.now_ns();
        while let Some(head) = self.fifo.front_mut() {
            if head.ticket.is_none() {
                match admission.admit(&head.io, now) {
                    Decision::Go(t) => {
                        head.ticket = Some(t);
                        head.admitted_ns = now;
                    }
                    Decision::Wait { until_ns: ns } => {
                        self.arm_timer(ns, now)?;
                        return Ok(());
                    }
                }
            }
            let slots = &volume.shared.slots;
            if !slots.try_acquire() && !slots.acquire_or_wait(&self.wake_evt) {
                self.waiting_for_slot = true;
                return Ok(());
            }
            let pending = self.fifo.pop_front().expect("front exists");
            self.start(pending, now)?;
        }
        Ok(())
    }

    /// Requests of stopping queues go to the device now, wherever they are in the FIFO
    /// and without waiting for QoS budget or a device slot: GET_VRING_BASE and shutdown
    /// must not wait behind another queue's throttled requests.
    fn dispatch_stopping(&mut self) -> io::Result<()> {
        let volume = self.volume.clone();
        let now = volume.admission.now_ns();
        let mut i = 0;
        while i < self.fifo.len() {
            if self.stopping & (1 << self.fifo[i].queue) == 0 {
                i += 1;
                continue;
            }
            let mut p = self.fifo.remove(i).expect("index in range");
            if i == 0 && p.ticket.is_none() {
                // It may have been told to wait: QoS must not keep counting it as waiting.
                volume.admission.abandon_wait();
            }
            if p.admitted_ns == 0 {
                p.admitted_ns = now;
            }
            volume.shared.slots.force_acquire();
            self.start(p, now)?;
        }
        Ok(())
    }

    fn arm_timer(&mut self, deadline_ns: u64, now: u64) -> io::Result<()> {
        if self.timer_deadline.is_some_and(|d| d <= deadline_ns) {
            return Ok(());
        }
        // A zero duration would disarm the timer: wait at least a microsecond.
        let wait = Duration::from_nanos(deadline_ns.saturating_sub(now).max(1_000));
        self.timer.reset(wait, None)?;
        self.timer_deadline = Some(deadline_ns);
        Ok(())
    }

    /// Builds the device operation for an admitted request and queues it on the ring.
    fn start(&mut self, p: Pending<A::Ticket>, now: u64) -> io::Result<()> {
        let vol = &self.volume;
        let disk = &vol.shared.disk;
        let host_offset = vol.host_offset + p.request.offset;
        let fault = vol.shared.faults.pick(&vol.name, p.io.kind);
        let mut record = InFlight {
            queue: p.queue,
            head: p.head,
            kind: p.request.kind,
            io: p.io,
            status_addr: p.request.status_addr,
            guest_written: 0,
            iovecs: self.iovec_pool.0.pop().unwrap_or_default(),
            bounce: None,
            copy_back: Vec::new(),
            mem: p.mem,
            ticket: p.ticket,
            timing: Timing {
                admitted_ns: p.admitted_ns,
                submitted_ns: now,
                completed_ns: 0,
            },
            fault,
        };
        let op = match p.request.kind {
            RequestKind::Read | RequestKind::Write => {
                let is_read = p.request.kind == RequestKind::Read;
                if disk.direct
                    && (host_offset % disk.block_size != 0 || p.request.len % disk.block_size != 0)
                {
                    // O_DIRECT cannot do sub-block I/O; we do not read-modify-write.
                    self.fail_unstarted(
                        record,
                        "offset or length not aligned to the host block size",
                    );
                    return Ok(());
                }
                if let Err(why) = self.map_iovecs(&mut record, &p.request.data, is_read) {
                    self.fail_unstarted(record, &why);
                    return Ok(());
                }
                let block = if disk.direct { disk.block_size } else { 1 };
                if let Some(keep) = fault.and_then(|f| f.short_len(p.request.len, block)) {
                    truncate_iovecs(&mut record.iovecs, keep as usize);
                }
                if is_read {
                    record.guest_written = p.request.len as u32;
                }
                let (iovecs, count) = (record.iovecs.as_ptr(), record.iovecs.len() as u32);
                if is_read {
                    DeviceOp::Readv {
                        iovecs,
                        count,
                        offset: host_offset,
                    }
                } else {
                    DeviceOp::Writev {
                        iovecs,
                        count,
                        offset: host_offset,
                    }
                }
            }
            RequestKind::Flush => DeviceOp::Flush,
            RequestKind::Discard => DeviceOp::Fallocate {
                offset: host_offset,
                len: p.request.len,
                mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            },
            RequestKind::WriteZeroes { unmap } => DeviceOp::Fallocate {
                offset: host_offset,
                len: p.request.len,
                mode: if unmap {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                },
            },
            RequestKind::GetId => unreachable!("GET_ID is answered when popped"),
        };
        let op = if disk.file.is_none() {
            DeviceOp::Nop
        } else {
            op
        };
        let mut deadline = self.emulated_deadline(&record.io, host_offset);
        if let Some(fault) = fault.filter(|f| f.error == FaultError::Stall) {
            let held = monotonic_now_ns().saturating_add(fault.stall_ns);
            deadline = Some(deadline.map_or(held, |d| d.max(held)));
        }
        self.submit_op(record, op, deadline);
        Ok(())
    }

    /// `kind = "emulated"`: when the emulated disk completes this request, on
    /// CLOCK_MONOTONIC. It sees the volume's requests in order, for its seq/rand pricing.
    fn emulated_deadline(&mut self, io: &IoRequest, host_offset: u64) -> Option<u64> {
        let emulated = self.volume.shared.emulated.as_ref()?;
        let input = CostInput {
            kind: io.kind,
            offset: host_offset,
            len: io.len,
            prev_end: self.emulated_prev_end,
        };
        if io.kind != IoKind::Flush {
            self.emulated_prev_end = Some(host_offset.saturating_add(io.len));
        }
        let now = monotonic_now_ns();
        let mut disk = emulated.lock().unwrap_or_else(|e| e.into_inner());
        Some(disk.serve(now, &input).done_ns)
    }

    /// Hands `op` to the kernel on behalf of `record` (its completion held until
    /// `deadline_ns` if given); if the ring refuses it, the request fails with IOERR
    /// instead of waiting for a completion that will never come.
    fn submit_op(&mut self, record: InFlight<A::Ticket>, op: DeviceOp, deadline_ns: Option<u64>) {
        let slot = self.insert(record);
        let pushed = match deadline_ns {
            Some(deadline) => self.engine.push_until(op, slot as u64, deadline),
            None => self.engine.push(op, slot as u64),
        };
        if let Err(e) = pushed {
            let record = self.inflight[slot].take().expect("just inserted");
            self.free_slots.push(slot);
            self.in_flight_count -= 1;
            self.fail_unstarted(record, &format!("io_uring refused the request: {e}"));
        }
    }

    /// Fills `record.iovecs` with host pointers for `data`, through a bounce buffer when the
    /// guest buffers break O_DIRECT alignment, or says why it cannot.
    fn map_iovecs(
        &self,
        record: &mut InFlight<A::Ticket>,
        data: &[Segment],
        is_read: bool,
    ) -> Result<(), String> {
        let disk = &self.volume.shared.disk;
        let not_ram = |addr: u64| format!("guest buffer {addr:#x} is not guest RAM");
        let mut aligned = true;
        for seg in data {
            for slice in record
                .mem
                .get_slices(GuestAddress(seg.addr), seg.len as usize)
            {
                let slice = slice.map_err(|_| not_ram(seg.addr))?;
                let base = slice.ptr_guard_mut().as_ptr();
                aligned &= (base as u64) % disk.mem_align == 0
                    && (slice.len() as u64) % disk.mem_align == 0;
                record.iovecs.push(libc::iovec {
                    iov_base: base.cast(),
                    iov_len: slice.len(),
                });
            }
        }
        if (disk.direct && !aligned) || record.iovecs.len() > IOV_MAX {
            let total: usize = data.iter().map(|s| s.len as usize).sum();
            if total > MAX_BOUNCE_BYTES {
                // The guest chooses the size: never allocate gigabytes on its behalf.
                return Err(format!(
                    "{total} bytes in unaligned guest buffers (at most {MAX_BOUNCE_BYTES} are copied through a bounce buffer)"
                ));
            }
            let mut buffer =
                BounceBuffer::zeroed(total, disk.mem_align.max(disk.block_size) as usize);
            if is_read {
                record.copy_back = data.to_vec();
            } else {
                let mut at = 0;
                for seg in data {
                    let dst = &mut buffer.as_mut_slice()[at..at + seg.len as usize];
                    record
                        .mem
                        .read_slice(dst, GuestAddress(seg.addr))
                        .map_err(|_| not_ram(seg.addr))?;
                    at += seg.len as usize;
                }
            }
            record.iovecs = vec![libc::iovec {
                iov_base: buffer.as_mut_ptr().cast(),
                iov_len: total,
            }];
            record.bounce = Some(buffer);
            VolumeCounters::add(&self.volume.counters.bounced, 1);
        }
        Ok(())
    }

    /// Fails a request that holds a device slot but never reached the device.
    fn fail_unstarted(&mut self, record: InFlight<A::Ticket>, why: &str) {
        if let Some(suppressed) = self.warn.check() {
            tracing::warn!(volume = %self.volume.name, suppressed, "request failed: {why}");
        }
        let now = self.volume.admission.now_ns();
        self.complete_one(record, -libc::EINVAL, false, now);
    }

    fn insert(&mut self, record: InFlight<A::Ticket>) -> usize {
        self.in_flight_count += 1;
        match self.free_slots.pop() {
            Some(i) => {
                self.inflight[i] = Some(record);
                i
            }
            None => {
                self.inflight.push(Some(record));
                self.inflight.len() - 1
            }
        }
    }

    /// Reaps every posted completion. Returns how many there were.
    fn complete_ready(&mut self) -> io::Result<usize> {
        let mut done = std::mem::take(&mut self.reaped);
        self.engine.reap_into(&mut done);
        let n = done.len();
        // One clock read for the batch: they were all reaped now.
        let now = if n > 0 {
            self.volume.admission.now_ns()
        } else {
            0
        };
        for &(user_data, result) in &done {
            let index = user_data as usize;
            let Some(record) = self.inflight.get_mut(index).and_then(Option::take) else {
                tracing::error!(volume = %self.volume.name, user_data, "completion for an unknown request");
                continue;
            };
            self.free_slots.push(index);
            self.in_flight_count -= 1;
            if let Some(record) = self.retry_write_zeroes(record, result) {
                self.complete_one(record, result, true, now);
            }
        }
        self.reaped = done;
        Ok(n)
    }

    /// Filesystems without FALLOC_FL_ZERO_RANGE (tmpfs, some network file systems) get the
    /// zeroes written from a zeroed buffer instead. Returns the record if it is finished.
    fn retry_write_zeroes(
        &mut self,
        mut record: InFlight<A::Ticket>,
        result: i32,
    ) -> Option<InFlight<A::Ticket>> {
        let unsupported = result == -libc::EOPNOTSUPP || result == -libc::EINVAL;
        if !(unsupported
            && matches!(record.kind, RequestKind::WriteZeroes { .. })
            && record.bounce.is_none())
        {
            return Some(record);
        }
        let disk = &self.volume.shared.disk;
        let buffer = BounceBuffer::zeroed(
            record.io.len as usize,
            disk.mem_align.max(disk.block_size) as usize,
        );
        record.iovecs = vec![libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: record.io.len as usize,
        }];
        record.bounce = Some(buffer);
        let op = DeviceOp::Writev {
            iovecs: record.iovecs.as_ptr(),
            count: 1,
            offset: self.volume.host_offset + record.io.offset,
        };
        self.submit_op(record, op, None);
        None
    }

    /// Finishes one request: copies bounced reads back, writes the status, returns the
    /// chain, releases the device slot, and reports the completion to QoS.
    fn complete_one(
        &mut self,
        mut record: InFlight<A::Ticket>,
        result: i32,
        log_failure: bool,
        now_ns: u64,
    ) {
        let vol = self.volume.clone();
        let c = &vol.counters;
        let expected = match record.kind {
            RequestKind::Read | RequestKind::Write if vol.shared.disk.file.is_some() => {
                record.io.len as i64
            }
            _ => 0,
        };
        let result = match record.fault.and_then(|f| f.errno()) {
            // The device's own error wins over an injected one.
            Some(errno) if result >= 0 => -errno,
            _ => result,
        };
        let mut ok = i64::from(result) == expected
            || (result == -libc::EOPNOTSUPP && record.kind == RequestKind::Discard);
        if ok {
            if let Some(buffer) = &record.bounce {
                let mut at = 0;
                for seg in &record.copy_back {
                    let src = &buffer.as_slice()[at..at + seg.len as usize];
                    ok &= record.mem.write_slice(src, GuestAddress(seg.addr)).is_ok();
                    at += seg.len as usize;
                }
            }
        }
        if ok {
            let (count, bytes) = match record.kind {
                RequestKind::Read => (&c.reads, Some(&c.read_bytes)),
                RequestKind::Write => (&c.writes, Some(&c.write_bytes)),
                RequestKind::Flush => (&c.flushes, None),
                RequestKind::Discard => (&c.discards, None),
                _ => (&c.write_zeroes, None),
            };
            VolumeCounters::add(count, 1);
            if let Some(bytes) = bytes {
                VolumeCounters::add(bytes, record.io.len);
            }
        } else {
            VolumeCounters::add(&c.errors, 1);
            if let Some(suppressed) = log_failure.then(|| self.warn.check()).flatten() {
                tracing::warn!(
                    volume = %vol.name, kind = ?record.kind, offset = record.io.offset, len = record.io.len,
                    injected = record.fault.is_some(), suppressed, "device I/O failed: {}", describe_result(result, expected)
                );
            }
        }
        let status = if ok {
            VIRTIO_BLK_S_OK
        } else {
            VIRTIO_BLK_S_IOERR
        } as u8;
        let written = if ok { record.guest_written } else { 0 };
        self.finish(
            record.queue,
            record.head,
            record.status_addr,
            status,
            written,
            &record.mem,
        );
        vol.shared.slots.release();
        record.timing.completed_ns = now_ns;
        if let Some(ticket) = record.ticket.take() {
            self.settled.push((ticket, record.timing));
        }
        if record.bounce.is_none() {
            record.iovecs.clear();
            self.iovec_pool.0.push(record.iovecs);
        }
    }

    /// Stops the queues in `mask`: nothing more is popped from them, their parked requests
    /// go to the device without waiting, and this returns once every request of theirs has
    /// completed and been returned to the guest. Used by GET_VRING_BASE and shutdown.
    pub fn drain(&mut self, mask: u64) -> io::Result<()> {
        self.stopping |= mask;
        loop {
            self.pump()?;
            let busy = self.fifo.iter().any(|p| mask & (1 << p.queue) != 0)
                || self
                    .inflight
                    .iter()
                    .flatten()
                    .any(|r| mask & (1 << r.queue) != 0);
            // pump() started every request of the stopping queues, so something is in flight
            // whenever we are still busy; never block on an idle ring.
            if !busy || self.in_flight_count == 0 {
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
        self.in_flight_count
    }
}

impl<A: Admission> Drop for Worker<A> {
    /// The connection is gone. The kernel may still write into guest memory or bounce
    /// buffers owned by in-flight records: wait for every completion before freeing them.
    /// QoS hears about every admitted request, so the volume can go idle.
    fn drop(&mut self) {
        self.settle();
        let admission = &self.volume.admission;
        while self.in_flight_count > 0 {
            if let Err(e) = self.engine.wait_for_completion() {
                // We cannot learn when the kernel is done: leak the buffers rather than free
                // memory it may still write to.
                tracing::error!(volume = %self.volume.name, in_flight = self.in_flight_count, "cannot wait for in-flight I/O ({e}); leaking its buffers");
                std::mem::forget(std::mem::take(&mut self.inflight));
                return;
            }
            let mut done = Vec::new();
            self.engine.reap_into(&mut done);
            let now = admission.now_ns();
            for (user_data, _) in done {
                let Some(record) = self
                    .inflight
                    .get_mut(user_data as usize)
                    .and_then(Option::take)
                else {
                    continue;
                };
                self.in_flight_count -= 1;
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
        for p in self.fifo.drain(..) {
            if let Some(ticket) = p.ticket {
                let timing = Timing {
                    admitted_ns: p.admitted_ns,
                    submitted_ns: now,
                    completed_ns: now,
                };
                self.settled.push((ticket, timing));
            }
        }
        admission.complete(&self.settled);
        admission.abandon_wait();
    }
}

/// Shortens `iovecs` to describe only their first `keep` bytes.
fn truncate_iovecs(iovecs: &mut Vec<libc::iovec>, keep: usize) {
    let mut left = keep;
    iovecs.retain_mut(|v| {
        v.iov_len = v.iov_len.min(left);
        left -= v.iov_len;
        v.iov_len > 0
    });
}

fn describe_result(result: i32, expected: i64) -> String {
    if result < 0 {
        io::Error::from_raw_os_error(-result).to_string()
    } else {
        format!("short transfer: {result} of {expected} bytes")
    }
}
