//! `VhostUserBackend` for one volume and one vhost-user connection.
//!
//! Implemented directly (not the `Mut` variant behind a backend-wide lock): each worker's
//! state sits in its own mutex, taken by its worker thread for each event and by the
//! frontend-handler thread to drain queues (GET_VRING_BASE, RESET_DEVICE, shutdown) and
//! to switch migration logging. Worker `t` of a
//! volume with `workers = n` serves queues `t`, `t + n`, `t + 2n`...; a volume has one
//! worker unless configured otherwise. The connection's memory tables are handled in
//! [`crate::backend::vhost_user::memory_tables`], its inflight region in [`crate::backend::vhost_user::inflight`].

use crate::backend::admission::Admission;
use crate::backend::guest_memory::CurrentMemory;
use crate::backend::guest_memory::Mem;
use crate::backend::vhost_user::memory_tables::MemoryTables;
use crate::backend::virtio::blk_config::{self, BlkConfig};
use crate::backend::volume::lease::ConnectionLease;
use crate::backend::volume::Volume;
use crate::backend::worker::{QueueNumbers, Vring, Worker};
use crate::lock::Locked;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::VhostUserBackend;
use vm_memory::GuestMemoryAtomic;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

/// The longest a worker polls without going back to epoll, however much work it finds.
const MAX_POLL_PHASE_NS: u64 = 1_000_000;

/// Epoll tokens beyond the queue indices (`num_queues` itself is reserved by the crate).
#[derive(Clone, Copy, Debug)]
pub struct Tokens {
    pub completion: u16,
    pub timer: u16,
    pub wake: u16,
    /// The connection is over: the vring worker threads end.
    pub exit: u16,
}

impl Tokens {
    pub fn for_queues(num_queues: u16) -> Self {
        Tokens {
            completion: num_queues + 1,
            timer: num_queues + 2,
            wake: num_queues + 3,
            exit: num_queues + 4,
        }
    }
}

pub struct VolumeBackend<A: Admission> {
    pub(super) volume: Arc<Volume<A>>,
    /// One per worker thread, indexed like `queues_per_thread`.
    workers: Vec<Mutex<Worker<A>>>,
    /// The guest queues each worker serves, a bit per queue (`queues_per_thread`). The
    /// crate hands worker `t` only its own vrings, numbered from 0: see `local_mask`.
    masks: Vec<u64>,
    /// Stops (GET_VRING_BASE, RESET_DEVICE, shutdown) waiting for a worker's lock: while
    /// any does, poll phases end, so the lock is not kept from them for up to a phase.
    stops_waiting: std::sync::atomic::AtomicU32,
    /// The workers' wake eventfds, reachable without taking their locks.
    wakes: Vec<Arc<vmm_sys_util::eventfd::EventFd>>,
    /// Pins each worker thread to its CPU (`cpu_affinity`) at its first event:
    /// vhost-user-backend starts the threads, so they place themselves.
    placed: Vec<std::sync::Once>,
    mem: CurrentMemory,
    tokens: Tokens,
    /// This connection's first message ([`crate::backend::vhost_user::handshake`]).
    pub handshake: Arc<crate::backend::vhost_user::handshake::Handshake>,
    /// The memory tables the frontend gave, guarded against SIGBUS
    /// ([`crate::backend::vhost_user::memory_tables`]).
    tables: MemoryTables,
    /// [`crate::backend::guest_memory::sigbus::Registration::faults`] when this volume last looked.
    seen_faults: std::sync::atomic::AtomicUsize,
    /// Written once the connection is over: the vring worker threads end (see
    /// `exit_event`). Nothing else reads it, and it closes with the backend.
    pub exit_evt: vmm_sys_util::eventfd::EventFd,
    /// The channel to the frontend (SET_BACKEND_REQ_FD), if it set one up.
    backend_req: Mutex<Option<vhost::vhost_user::Backend>>,
    /// The inflight-tracking region of this connection, if its frontend set one up
    /// ([`crate::backend::vhost_user::inflight`]).
    inflight: Mutex<Option<Arc<crate::backend::virtio::inflight_log::Region>>>,
}

impl<A: Admission> VolumeBackend<A> {
    pub fn new(volume: Arc<Volume<A>>) -> io::Result<Self> {
        let wakes = (0..volume.workers.max(1))
            .map(|_| {
                vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
                    .map(Arc::new)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let lease = Arc::new(ConnectionLease::join(volume.lease.clone(), &wakes));
        let mem = CurrentMemory::default();
        let n = wakes.len() as u16;
        let workers = round_robin(n)
            .zip(&wakes)
            .map(|(queues, wake)| {
                Worker::new(
                    volume.clone(),
                    wake.clone(),
                    lease.clone(),
                    queues,
                    mem.clone(),
                )
                .map(Mutex::new)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let masks = round_robin_masks(volume.num_queues, n);
        Ok(VolumeBackend {
            placed: wakes.iter().map(|_| std::sync::Once::new()).collect(),
            wakes,
            workers,
            masks,
            stops_waiting: Default::default(),
            tokens: Tokens::for_queues(volume.num_queues),
            handshake: Arc::default(),
            mem,
            tables: MemoryTables::default(),
            seen_faults: std::sync::atomic::AtomicUsize::new(0),
            exit_evt: vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?,
            backend_req: Mutex::new(None),
            inflight: Mutex::new(None),
            volume,
        })
    }

    /// Tells the frontend that the config space changed (the capacity), on a thread of
    /// its own: with REPLY_ACK the frontend answers only after reading the config again,
    /// and a frontend that never answers must not hold the caller. False when the
    /// frontend set up no channel for it.
    pub fn notify_config_change(&self) -> bool {
        let Some(channel) = self.backend_req.locked().clone() else {
            return false;
        };
        let name = self.volume.name.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("vol-{name}-cfg"))
            .spawn(move || {
                crate::seccomp::confine(crate::seccomp::ThreadClass::Helper);
                if let Err(e) = channel.config_change() {
                    tracing::warn!(volume = %name, "frontend not told of the new capacity: {e}");
                }
            });
        spawned.is_ok()
    }

    /// Ends the connection's vring worker threads (through `exit_evt`, registered as
    /// `tokens.exit`): call before the daemon is dropped, which joins the threads.
    pub fn end_worker_thread(&self) {
        let _ = self.exit_evt.write(1);
    }

    pub fn tokens(&self) -> Tokens {
        self.tokens
    }

    /// Pins the calling thread, worker `thread`, to its CPU. A CPU the daemon cannot use
    /// (offline, outside its cgroup; start-up only warns of one) leaves it where it is.
    fn pin_worker_thread(&self, thread: usize) {
        let cpus = &self.volume.cpu_affinity;
        let cpu = cpus[thread % cpus.len()];
        match crate::cpu_affinity::pin_current_thread(cpu) {
            Ok(()) => {
                tracing::info!(volume = %self.volume.name, worker = thread, cpu, "worker pinned")
            }
            Err(e) => tracing::warn!(
                volume = %self.volume.name,
                worker = thread,
                cpu,
                "cpu_affinity: cannot pin the worker, the scheduler places it: {e}"
            ),
        }
    }

    /// Worker `thread`'s state.
    /// The inflight-tracking region of this connection.
    pub(super) fn inflight_region(
        &self,
    ) -> MutexGuard<'_, Option<Arc<crate::backend::virtio::inflight_log::Region>>> {
        self.inflight.locked()
    }

    /// The worker thread serving guest queue `queue`, and its own number for it.
    pub(super) fn thread_of(&self, queue: u16) -> (usize, u16) {
        let n = self.workers.len().max(1) as u16;
        (usize::from(queue % n), queue / n)
    }

    /// The memory table in use.
    pub(super) fn current_memory(&self) -> Arc<Mem> {
        self.mem.load()
    }

    pub fn worker(&self, thread: usize) -> MutexGuard<'_, Worker<A>> {
        self.workers[thread].locked()
    }

    /// Requests of this connection in the kernel now.
    pub fn in_flight(&self) -> usize {
        (0..self.workers.len())
            .map(|t| self.worker(t).in_flight())
            .sum()
    }

    /// Makes the workers offer their parked requests again (after a planning period,
    /// when budgets may have changed).
    pub fn wake(&self) {
        for wake in &self.wakes {
            let _ = wake.write(1);
        }
    }

    /// Completes every request of this connection and stops taking new ones.
    pub fn drain_all(&self) -> io::Result<()> {
        let _stop = self.request_stop();
        let mut result = Ok(());
        for thread in 0..self.workers.len() {
            let local = self.local_mask(thread, self.all_queues_mask());
            if let Err(e) = self.worker(thread).drain_for_shutdown(local) {
                result = Err(e);
            }
        }
        result
    }

    fn local_mask(&self, thread: usize, mask: u64) -> u64 {
        local_mask(self.masks[thread], mask)
    }

    /// Ends the workers' poll phases until the returned guard is dropped.
    fn request_stop(&self) -> impl Drop + '_ {
        use std::sync::atomic::{AtomicU32, Ordering};
        struct Stop<'a>(&'a AtomicU32);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.stops_waiting.fetch_add(1, Ordering::AcqRel);
        Stop(&self.stops_waiting)
    }

    /// Completes every request popped from the queues in `mask` and stops taking new
    /// ones until they restart; the rings they leave are free for the volume's other
    /// connection (design §8.9).
    fn stop_queues(&self, mask: u64) -> io::Result<()> {
        let _stop = self.request_stop();
        let mut result = Ok(());
        for thread in 0..self.workers.len() {
            let mask = self.local_mask(thread, mask);
            if mask == 0 {
                continue;
            }
            let mut worker = self.worker(thread);
            if let Err(e) = worker.drain(mask) {
                // Requests may still be in flight: the rings stay with this connection,
                // and go to the other one only when this one ends.
                tracing::error!(volume = %self.volume.name, "cannot complete the stopped queues' requests ({e}): the volume's other frontend gets the rings only once this one disconnects");
                result = Err(e);
                continue;
            }
            worker.resume(mask);
            worker.stopped(mask);
        }
        result
    }

    fn all_queues_mask(&self) -> u64 {
        if self.volume.num_queues >= 64 {
            u64::MAX
        } else {
            (1u64 << self.volume.num_queues) - 1
        }
    }
}

/// A worker's own numbers (bit `i`: its `i`-th vring) for the guest queues in `mask`,
/// given the guest queues it serves (`served`).
fn local_mask(served: u64, mask: u64) -> u64 {
    (0..64)
        .filter(|q| served >> q & 1 == 1)
        .enumerate()
        .filter(|&(_, q)| mask >> q & 1 == 1)
        .fold(0, |local, (i, _)| local | 1 << i)
}

/// Worker `t` of `workers` serves guest queues `t`, `t + workers`, `t + 2 workers`...
fn round_robin(workers: u16) -> impl Iterator<Item = QueueNumbers> {
    let stride = workers.max(1);
    (0..stride).map(move |first| QueueNumbers { first, stride })
}

/// The guest queues of each worker, a bit per queue.
fn round_robin_masks(num_queues: u16, workers: u16) -> Vec<u64> {
    round_robin(workers).map(|q| q.mask(num_queues)).collect()
}

impl<A: Admission> VhostUserBackend for VolumeBackend<A> {
    /// Guest writes through vm-memory (used ring, status bytes, bounced copies) mark the
    /// migration log when one is set; io_uring's reads are marked by the worker.
    type Bitmap = crate::backend::guest_memory::dirty_log::DirtyLog;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        self.volume.num_queues as usize
    }

    fn max_queue_size(&self) -> usize {
        self.volume.queue_size as usize
    }

    fn features(&self) -> u64 {
        // The first message a frontend sends: the crate's message thread runs under the
        // connection thread's filter.
        crate::seccomp::inherited(crate::seccomp::ThreadClass::Connection);
        self.handshake.greeted();
        blk_config::features(self.volume.limits.read_only)
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // Asked for by GET_PROTOCOL_FEATURES only, early in a frontend's handshake.
        crate::emulated::crash::reached(crate::emulated::crash::CrashPoint::MidHandshake);
        blk_config::protocol_features()
    }

    fn get_inflight_fd(
        &self,
        inflight: &vhost::vhost_user::message::VhostUserInflight,
    ) -> io::Result<(vhost::vhost_user::message::VhostUserInflight, std::fs::File)> {
        self.inflight_get(inflight)
    }

    fn set_inflight_fd(
        &self,
        inflight: &vhost::vhost_user::message::VhostUserInflight,
        file: std::fs::File,
    ) -> io::Result<()> {
        self.inflight_set(inflight, file)
    }

    /// A queue starts: recovered from the inflight log when the frontend keeps one.
    fn start_vring(&self, queue_index: u32, vring: &Vring) -> io::Result<()> {
        self.inflight_start(queue_index, vring)
    }

    /// The vhost-user-backend crate applies EVENT_IDX to the vrings itself.
    fn set_event_idx(&self, _enabled: bool) {}

    /// LOG_ALL acked: a migration is under way, and what io_uring writes into guest
    /// memory must be logged too.
    fn acked_features(&self, features: u64) {
        let logging = features & VhostUserVirtioFeatures::LOG_ALL.bits() != 0;
        for thread in 0..self.workers.len() {
            self.worker(thread).dirty_logging = logging;
        }
    }

    fn set_backend_req_fd(&self, backend: vhost::vhost_user::Backend) {
        *self.backend_req.locked() = Some(backend);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        BlkConfig {
            capacity_bytes: self.volume.capacity(),
            seg_max: self.volume.limits.seg_max,
            blk_size: self.volume.block_size as u32,
            num_queues: self.volume.num_queues,
        }
        .read(offset, size)
    }

    /// A new memory table (SET_MEM_TABLE, ADD_MEM_REG, REM_MEM_REG), already mapped by
    /// the vhost-user-backend crate ([`crate::backend::vhost_user::memory_tables`]).
    fn update_memory(&self, mem: GuestMemoryAtomic<Mem>) -> io::Result<()> {
        self.tables.accept(mem, &self.mem, &self.volume.name)
    }

    /// Worker `t` of `n` serves queues `t`, `t + n`, `t + 2n`... (one worker: all).
    fn queues_per_thread(&self) -> Vec<u64> {
        self.masks.clone()
    }

    /// None: vhost-user-backend 0.24 registers an exit event's consumer as a raw fd and
    /// never closes it, one descriptor lost per connection. The vring worker threads end
    /// through the backend's own `exit_evt` instead ([`VolumeBackend::end_worker_thread`]).
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        None
    }

    /// GET_VRING_BASE: every request popped from this queue must be answered before the
    /// frontend reads the ring position.
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        if queue_index >= 64 {
            return Ok(());
        }
        let mask = 1u64 << queue_index;
        self.stop_queues(mask)
    }

    /// RESET_DEVICE: the crate has disabled every ring; the requests popped from them are
    /// completed, and the volume's other connection may take the rings.
    fn reset_device(&self) {
        if let Err(e) = self.stop_queues(self.all_queues_mask()) {
            tracing::error!(volume = %self.volume.name, "device reset: {e}");
        }
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            tracing::warn!(volume = %self.volume.name, device_event, ?evset, "unexpected epoll event");
        }
        // Once per thread: the worker threads are the vhost-user crate's.
        crate::seccomp::confine(crate::seccomp::ThreadClass::Worker);
        if device_event == self.tokens.exit {
            // The only error that ends the thread: the connection is over.
            return Err(io::Error::other("connection ended"));
        }
        if !self.volume.cpu_affinity.is_empty() {
            self.placed[thread].call_once(|| self.pin_worker_thread(thread));
        }
        let mut worker = self.worker(thread);
        let t = self.tokens;
        let started = worker.event_starts();
        let progress = worker.progress();
        let result = match device_event {
            q if (q as usize) < vrings.len() => worker.on_kick(vrings, q),
            e if e == t.completion => worker.on_completion(vrings),
            e if e == t.timer => worker.on_timer(vrings),
            e if e == t.wake => worker.on_wake(vrings),
            other => {
                tracing::warn!(volume = %self.volume.name, event = other, "unknown event");
                Ok(())
            }
        };
        let faults = crate::backend::guest_memory::sigbus::Registration::faults();
        if faults
            != self
                .seen_faults
                .swap(faults, std::sync::atomic::Ordering::Relaxed)
        {
            self.tables.report_fault(&self.volume.name);
        }
        // An error returned here would end the worker thread and silently stop the volume;
        // log it and keep serving (the next event retries).
        if let Err(e) = result {
            worker.report_error(device_event, &e);
            // The handler may have stopped before reaping what completed at once (the
            // null device signals no eventfd): nothing must be left for the next event.
            if let Err(e) = worker.reap_leftovers() {
                worker.report_error(device_event, &e);
            }
        }
        let mut polling =
            started.and_then(|started| worker.poll_deadline_after_event(started, progress));
        drop(worker);
        // Look for more work while the poll window is open (design §8.10), the worker's
        // lock taken for each look so that GET_VRING_BASE can drain between them; at most
        // MAX_POLL_PHASE_NS before the timer and wake events get their turn in epoll.
        let phase_end = crate::monotonic::monotonic_now_ns() + MAX_POLL_PHASE_NS;
        let mut found = true;
        while let Some(deadline) = polling {
            if !found {
                // Give the CPU to whatever else may run on it: the guest's vCPU or the
                // frontend thread whose next request this waits for may share it.
                std::thread::yield_now();
            }
            let mut worker = self.worker(thread);
            let stop = self
                .stops_waiting
                .load(std::sync::atomic::Ordering::Acquire)
                != 0;
            let before = worker.progress();
            polling = if stop {
                // A stop waits for this lock: no more looks, so it has less to drain.
                None
            } else {
                match worker.poll_once(deadline, phase_end, vrings) {
                    Ok(next) => next,
                    Err(e) => {
                        worker.report_error(device_event, &e);
                        None
                    }
                }
            };
            found = worker.progress() != before;
            if polling.is_none() {
                worker.end_poll_phase(vrings, device_event);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_go_round_robin_and_each_worker_numbers_its_own_from_zero() {
        assert_eq!(round_robin_masks(1, 1), [0b1]);
        assert_eq!(round_robin_masks(4, 1), [0b1111]);
        assert_eq!(round_robin_masks(4, 2), [0b0101, 0b1010]);
        assert_eq!(round_robin_masks(5, 3), [0b01001, 0b10010, 0b00100]);
        let masks = round_robin_masks(4, 2);
        // Guest queue 1 is worker 1's first vring, guest queue 3 its second.
        assert_eq!(local_mask(masks[1], 1 << 1), 0b01);
        assert_eq!(local_mask(masks[1], 1 << 3), 0b10);
        assert_eq!(local_mask(masks[0], 1 << 1), 0, "not worker 0's");
        assert_eq!(local_mask(masks[0], 0b1111), 0b11);
        assert_eq!(local_mask(u64::MAX, u64::MAX), u64::MAX);
    }
}
