//! Requests on the device: building the io_uring operation for an admitted request
//! (iovecs over guest memory, O_DIRECT bounce buffers, the medium's deadline (`io::medium`),
//! injected faults), and finishing it on completion (copy-back, status, used ring,
//! counters, the write-zeroes fallback, the report to admission control).

use std::io;

use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

use super::records::{InFlight, IOV_MAX};
use super::state::{Popped, Worker};
use crate::backend::admission::queue::Parked;
use crate::backend::admission::{Admission, Timing};
use crate::backend::guest_memory::Mem;
use crate::backend::io::bounce::BounceBuffer;
use crate::backend::io::engine::DeviceOp;
use crate::backend::virtio::request::{RequestKind, Segment};
use crate::backend::volume::VolumeCounters;
use crate::emulated::faults::FaultError;
use crate::monotonic::monotonic_now_ns;
use crate::stage_trace::{self, Stage};

/// The largest request copied through a bounce buffer (Linux guests send at most a few
/// MiB per request; larger unaligned requests fail with IOERR).
const MAX_BOUNCE_BYTES: usize = 8 << 20;

impl<A: Admission> Worker<A> {
    /// Builds the device operation for an admitted request and queues it on the ring.
    pub(super) fn start(&mut self, p: Parked<Popped, A::Ticket>, now: u64) {
        let vol = &self.volume;
        let disk = &vol.disk;
        let host_offset = vol.host_offset + p.io.offset;
        let fault = vol.shared.faults.pick(&vol.name, p.io.kind);
        // Filled field by field: the record is reused in place (a cleared one).
        let mut record = self.records.spare();
        record.queue = p.req.queue;
        record.head = p.req.head;
        record.kind = p.req.kind;
        record.io = p.io;
        record.status_addr = p.req.status_addr;
        record.guest_written = 0;
        record.ticket = p.ticket;
        record.timing = Timing {
            arrived_ns: p.arrived_ns,
            admitted_ns: p.admitted_ns,
            submitted_ns: now,
            completed_ns: 0,
        };
        record.fault = fault;
        record.mem = Some(p.req.mem);
        let op = match p.req.kind {
            RequestKind::Read | RequestKind::Write => {
                let is_read = p.req.kind == RequestKind::Read;
                if disk.direct
                    && (host_offset % disk.block_size != 0 || p.io.len % disk.block_size != 0)
                {
                    // O_DIRECT cannot do sub-block I/O; we do not read-modify-write.
                    self.fail_unstarted(
                        record,
                        "offset or length not aligned to the host block size",
                    );
                    return;
                }
                if let Err(why) = self.map_iovecs(&mut record, &p.req.data, is_read) {
                    self.fail_unstarted(record, &why);
                    return;
                }
                let block = if disk.direct { disk.block_size } else { 1 };
                if let Some(keep) = fault.and_then(|f| f.short_len(p.io.len, block)) {
                    truncate_iovecs(&mut record.iovecs, keep as usize);
                }
                if is_read {
                    record.guest_written = p.io.len as u32;
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
                len: p.io.len,
                mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            },
            RequestKind::WriteZeroes { unmap } => DeviceOp::Fallocate {
                offset: host_offset,
                len: p.io.len,
                mode: if unmap {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                },
            },
            RequestKind::GetId => unreachable!("GET_ID is answered when popped"),
        };
        // The iovecs hold what the data segments said; their vector goes to the next parse
        // (which empties it).
        self.segment_pool.push(p.req.data);
        let (op, mut deadline) =
            self.medium
                .prepare(op, record.io.kind, host_offset, record.io.len);
        if let Some(fault) = fault.filter(|f| f.error == FaultError::Stall) {
            let held = monotonic_now_ns().saturating_add(fault.stall_ns);
            deadline = Some(deadline.map_or(held, |d| d.max(held)));
        }
        self.submit_op(record, op, deadline);
    }

    /// Hands `op` to the kernel on behalf of `record` (its completion held until
    /// `deadline_ns` if given); if the ring refuses it, the request fails with IOERR
    /// instead of waiting for a completion that will never come.
    fn submit_op(
        &mut self,
        record: Box<InFlight<A::Ticket>>,
        op: DeviceOp,
        deadline_ns: Option<u64>,
    ) {
        let user_data = self.records.insert(record) as u64;
        let pushed = match deadline_ns {
            Some(deadline) => self.engine.push_until(op, user_data, deadline),
            None => self.engine.push(op, user_data),
        };
        if let Err(e) = pushed {
            if let Some(record) = self.records.take(user_data) {
                self.fail_unstarted(record, &format!("io_uring refused the request: {e}"));
            }
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
        let disk = &self.volume.disk;
        let not_ram = |addr: u64| format!("guest buffer {addr:#x} is not guest RAM");
        let Some(mem) = record.mem.as_deref() else {
            return Err("no guest memory".into());
        };
        let mut aligned = true;
        let mut push = |iovecs: &mut Vec<libc::iovec>, base: *mut u8, len: usize| {
            aligned &= (base as u64) % disk.mem_align == 0 && (len as u64) % disk.mem_align == 0;
            iovecs.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            });
        };
        for seg in data {
            let (addr, len) = (GuestAddress(seg.addr), seg.len as usize);
            // A segment almost always lies in one region: one lookup. The slice iterator
            // for segments across regions is not always inlined, and then cost the null
            // path 8 % at QD32.
            if let Ok(slice) = mem.get_slice(addr, len) {
                push(&mut record.iovecs, slice.ptr_guard_mut().as_ptr(), len);
                continue;
            }
            for slice in mem.get_slices(addr, len) {
                let slice = slice.map_err(|_| not_ram(seg.addr))?;
                push(
                    &mut record.iovecs,
                    slice.ptr_guard_mut().as_ptr(),
                    slice.len(),
                );
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
                record.copy_back.extend_from_slice(data);
            } else {
                let mut at = 0;
                for seg in data {
                    let dst = &mut buffer.as_mut_slice()[at..at + seg.len as usize];
                    mem.read_slice(dst, GuestAddress(seg.addr))
                        .map_err(|_| not_ram(seg.addr))?;
                    at += seg.len as usize;
                }
            }
            record.iovecs.clear();
            record.iovecs.push(libc::iovec {
                iov_base: buffer.as_mut_ptr().cast(),
                iov_len: total,
            });
            record.bounce = Some(buffer);
            VolumeCounters::add(&self.volume.counters.bounced, 1);
        }
        Ok(())
    }

    /// Fails a request that holds a device slot but never reached the device.
    fn fail_unstarted(&mut self, record: Box<InFlight<A::Ticket>>, why: &str) {
        if let Some(suppressed) = self.warn.check() {
            tracing::warn!(volume = %self.volume.name, suppressed, "request failed: {why}");
        }
        let now = self.volume.admission.now_ns();
        self.complete_one(record, -libc::EINVAL, false, now);
    }

    /// Reaps every posted completion. Returns how many there were.
    pub(super) fn complete_ready(&mut self) -> io::Result<usize> {
        let mut done = std::mem::take(&mut self.reaped);
        self.engine.reap_into(&mut done);
        let n = done.len();
        self.progress += n as u64;
        if n > 0 {
            stage_trace::mark_n(Stage::Reaped, n as u32);
        }
        // One clock read for the batch: they were all reaped now.
        let now = if n > 0 {
            self.volume.admission.now_ns()
        } else {
            0
        };
        for &(user_data, result) in &done {
            let Some(record) = self.records.take(user_data) else {
                tracing::error!(volume = %self.volume.name, user_data, "completion for an unknown request");
                continue;
            };
            if zeroes_to_write(&record, result) {
                self.write_zeroes_from_buffer(record);
            } else {
                self.complete_one(record, result, true, now);
            }
        }
        self.reaped = done;
        Ok(n)
    }

    /// Writes the zeroes of a write-zeroes request the filesystem could not zero
    /// ([`zeroes_to_write`]) from a zeroed buffer.
    fn write_zeroes_from_buffer(&mut self, mut record: Box<InFlight<A::Ticket>>) {
        let disk = &self.volume.disk;
        let buffer = BounceBuffer::zeroed(
            record.io.len as usize,
            disk.mem_align.max(disk.block_size) as usize,
        );
        record.iovecs.clear();
        record.iovecs.push(libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: record.io.len as usize,
        });
        record.bounce = Some(buffer);
        let op = DeviceOp::Writev {
            iovecs: record.iovecs.as_ptr(),
            count: 1,
            offset: self.volume.host_offset + record.io.offset,
        };
        self.submit_op(record, op, None);
    }

    /// Finishes one request: copies bounced reads back, writes the status, returns the
    /// chain, releases the device slot, reports the completion to QoS, and keeps the
    /// cleared record for the next request.
    fn complete_one(
        &mut self,
        mut record: Box<InFlight<A::Ticket>>,
        result: i32,
        log_failure: bool,
        now_ns: u64,
    ) {
        let vol = self.volume.clone();
        let c = &vol.counters;
        // Every started record holds the memory it was popped with (`start` sets it first).
        debug_assert!(
            record.mem.is_some(),
            "a started record without guest memory"
        );
        let mem = record.mem.take().unwrap_or_else(|| self.memory.load());
        let expected = match record.kind {
            RequestKind::Read | RequestKind::Write if vol.disk.file.is_some() => {
                record.io.len as i64
            }
            // Zeroes written from a buffer (`write_zeroes_from_buffer`): a write's byte count.
            RequestKind::WriteZeroes { .. } if record.bounce.is_some() => record.io.len as i64,
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
                    ok &= mem.write_slice(src, GuestAddress(seg.addr)).is_ok();
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
        if self.dirty_logging && record.kind == RequestKind::Read && record.bounce.is_none() {
            // io_uring wrote the guest's buffers behind vm-memory's back (a failed or short
            // read may have written some): log their pages before the used ring says so.
            log_written(&mem, &record.iovecs);
        }
        let written = if ok { record.guest_written } else { 0 };
        self.finish(
            record.queue,
            record.head,
            record.status_addr,
            status,
            written,
            &mem,
        );
        vol.shared.slots.release();
        record.timing.completed_ns = now_ns;
        if let Some(ticket) = record.ticket.take() {
            self.settled.push((ticket, record.timing));
        }
        self.records.recycle(record);
    }
}

/// Marks the guest pages under `iovecs` (host pointers into `mem`, each within one
/// region) dirty in the migration log; nothing without a log.
fn log_written(mem: &Mem, iovecs: &[libc::iovec]) {
    use vm_memory::bitmap::Bitmap;
    for v in iovecs {
        let start = v.iov_base as usize;
        let region = mem.iter().find(|r| {
            let base = r.as_ptr() as usize;
            (base..base + r.len() as usize).contains(&start)
        });
        if let Some(region) = region {
            region
                .bitmap()
                .mark_dirty(start - region.as_ptr() as usize, v.iov_len);
        }
    }
}

/// Whether `record` is a write-zeroes request that the filesystem refused to zero
/// (tmpfs, some network file systems have no FALLOC_FL_ZERO_RANGE) and that has not been
/// retried as a write of zeroes yet.
fn zeroes_to_write<T>(record: &InFlight<T>, result: i32) -> bool {
    (result == -libc::EOPNOTSUPP || result == -libc::EINVAL)
        && matches!(record.kind, RequestKind::WriteZeroes { .. })
        && record.bounce.is_none()
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

#[cfg(test)]
mod tests {
    use super::super::records::Records;
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reused_record_carries_nothing_of_the_last_request() {
        let mem = Arc::new(Mem::from_ranges(&[(GuestAddress(0), 1 << 16)]).unwrap());
        let mut records = Records::<u32>::default();
        // A write-zeroes request retried as a write from a zeroed buffer.
        let mut record = records.spare();
        record.kind = RequestKind::WriteZeroes { unmap: false };
        record.mem = Some(Arc::clone(&mem));
        record.bounce = Some(BounceBuffer::zeroed(4096, 4096));
        record.iovecs.push(libc::iovec {
            iov_base: record.bounce.as_mut().unwrap().as_mut_ptr().cast(),
            iov_len: 4096,
        });
        record.copy_back.push(Segment { addr: 0, len: 4096 });
        record.ticket = Some(7);
        assert!(!zeroes_to_write(&record, -libc::EOPNOTSUPP));
        let boxed: *const InFlight<u32> = &*record;

        let user_data = records.insert(record) as u64;
        assert_eq!(records.len(), 1);
        let record = records.take(user_data).expect("on the device");
        assert!(records.take(user_data).is_none(), "taken once");
        assert_eq!(records.len(), 0);
        records.recycle(record);
        assert_eq!(
            Arc::strong_count(&mem),
            1,
            "a spare record keeps no memory mapped"
        );

        let mut record = records.spare();
        assert_eq!(
            &*record as *const InFlight<u32>, boxed,
            "the same record, reused"
        );
        assert!(record.iovecs.is_empty() && record.iovecs.capacity() > 0);
        assert!(record.copy_back.is_empty() && record.bounce.is_none());
        assert!(record.mem.is_none() && record.ticket.is_none() && record.fault.is_none());
        // The next write-zeroes request may fall back to a write again.
        record.kind = RequestKind::WriteZeroes { unmap: false };
        assert!(zeroes_to_write(&record, -libc::EOPNOTSUPP));
    }
}
