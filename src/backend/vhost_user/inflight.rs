//! Inflight I/O tracking for one connection (`VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD`, see
//! [`crate::backend::virtio::inflight_log`]): the region a frontend asks for or hands back, and the
//! recovery of each queue from it when the queue starts.
//!
//! A queue starts when its kick fd arrives (after the frontend's SET_INFLIGHT_FD). If the
//! connection has a region, the queue's log says which requests an earlier process
//! popped and did not return: the ring resumes after them (overriding the frontend's
//! SET_VRING_BASE, which after a crash is the used index), and the queue's worker
//! resubmits them, in their order, before it pops anything new. The queue is then
//! kicked and the guest notified once, because a guest waiting on requests in flight
//! may never kick again. A log that does not add up is refused: the queue fails to
//! start and the frontend sees the error, rather than a guess at the guest's data.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vhost::vhost_user::message::VhostUserInflight;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;

use crate::backend::admission::Admission;
use crate::backend::vhost_user::connection::VolumeBackend;
use crate::backend::virtio::inflight_log::Region;
use crate::backend::worker::Vring;

impl<A: Admission> VolumeBackend<A> {
    /// GET_INFLIGHT_FD: a new region for this connection.
    pub(super) fn inflight_get(
        &self,
        req: &VhostUserInflight,
    ) -> io::Result<(VhostUserInflight, File)> {
        let (region, theirs) =
            Region::create(req.num_queues, req.queue_size).map_err(io::Error::other)?;
        let reply = VhostUserInflight {
            mmap_size: Region::size(req.num_queues, req.queue_size) as u64,
            mmap_offset: 0,
            num_queues: req.num_queues,
            queue_size: req.queue_size,
        };
        tracing::info!(volume = %self.volume.name, num_queues = req.num_queues, queue_size = req.queue_size, "inflight tracking: new region");
        *self.inflight_region() = Some(Arc::new(region));
        Ok((reply, theirs))
    }

    /// SET_INFLIGHT_FD: the region this connection's frontend holds.
    pub(super) fn inflight_set(&self, req: &VhostUserInflight, file: File) -> io::Result<()> {
        let region = Region::open(
            file,
            req.mmap_size,
            req.mmap_offset,
            req.num_queues,
            req.queue_size,
        )
        .map_err(|e| {
            tracing::error!(volume = %self.volume.name, "inflight tracking: region refused: {e}");
            io::Error::other(e)
        })?;
        *self.inflight_region() = Some(Arc::new(region));
        Ok(())
    }

    /// A queue starts: recover it from the connection's region, if there is one.
    pub(super) fn inflight_start(&self, queue: u32, vring: &Vring) -> io::Result<()> {
        let Ok(queue) = u16::try_from(queue) else {
            return Ok(());
        };
        let (thread, local) = self.thread_of(queue);
        let region = self.inflight_region().clone();
        let Some(mut log) = region.as_ref().and_then(|r| r.queue_log(queue)) else {
            if region.is_some() {
                tracing::warn!(volume = %self.volume.name, queue, "inflight tracking: the region has no log for this queue; served untracked");
            }
            self.worker(thread).start_inflight(local, None, Vec::new());
            return Ok(());
        };
        let mem = self.current_memory();
        let (used_now, avail_now, size) = {
            let state = vring.get_ref();
            let q = state.get_queue();
            let used = q
                .used_idx(&*mem, Ordering::Acquire)
                .map_err(io::Error::other)?;
            let avail = q
                .avail_idx(&*mem, Ordering::Acquire)
                .map_err(io::Error::other)?;
            (used.0, avail.0, q.size())
        };
        let recovered = log.recover(used_now, size, avail_now).map_err(|e| {
            tracing::error!(volume = %self.volume.name, queue, "inflight tracking: the queue's log is inconsistent, the queue is not started: {e}");
            io::Error::other(e)
        })?;
        vring.set_queue_next_avail(recovered.next_avail);
        vring.set_queue_next_used(used_now);
        let resubmitted = recovered.resubmit.len();
        if resubmitted > 0 {
            tracing::info!(volume = %self.volume.name, queue, resubmitted, "inflight tracking: resubmitting the requests a previous run left in flight");
        }
        self.worker(thread)
            .start_inflight(local, Some(log), recovered.resubmit);
        // Serve the queue without waiting for a kick, and tell the guest once of anything
        // already returned: a guest waiting on its requests in flight may never kick.
        if let Some(kick) = vring.get_ref().get_kick() {
            // The kick eventfd's counter: read by the worker's epoll once the ring is
            // enabled and registered.
            let one = 1u64.to_ne_bytes();
            // SAFETY: an 8-byte write of a counter to an eventfd the vring owns.
            unsafe { libc::write(kick.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
        let _ = vring.signal_used_queue();
        Ok(())
    }
}
