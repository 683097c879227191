//! The io_uring engine: one ring per worker thread, the host disk registered as fixed file
//! 0, and an eventfd that the worker's epoll loop watches for completions.
//!
//! The null device completes its operations without entering the kernel, as
//! qemu-storage-daemon's null-co does: they are reaped like the ring's completions, so
//! the worker's whole completion path runs, and the null path measures the daemon's own
//! cost per request (design §8.5).
//!
//! The emulated device ([`crate::emulated`]) holds a completion until a deadline: the
//! operation goes with an absolute-time timeout on the same ring, and the engine reports
//! the completion only once both have completed. The kernel's timer wakes the worker
//! through the same eventfd, so the worker needs no timer of its own.

use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use vmm_sys_util::eventfd::EventFd;

use crate::stage_trace::{self, Stage};

/// One operation on the host disk. Offsets are absolute byte offsets on the host disk.
#[derive(Clone, Copy, Debug)]
pub enum DeviceOp {
    Readv {
        iovecs: *const libc::iovec,
        count: u32,
        offset: u64,
    },
    Writev {
        iovecs: *const libc::iovec,
        count: u32,
        offset: u64,
    },
    /// fdatasync: the data written before it is on stable storage when it completes.
    Flush,
    /// fallocate with `mode` (punch hole or zero range), keeping the file size.
    Fallocate { offset: u64, len: u64, mode: i32 },
    /// Completes at once with result 0 (the null device).
    Nop,
}

pub struct Engine {
    ring: IoUring,
    has_file: bool,
    /// Signalled by the kernel on every completion.
    pub completion_evt: EventFd,
    /// Entries pushed since the last submit: an empty submit is a wasted syscall.
    unsubmitted: usize,
    /// Completions held until a deadline, indexed by user_data.
    held: Vec<Option<Held>>,
    /// The null device's completions (user_data), reaped with the ring's.
    completed_at_once: Vec<u64>,
}

/// Marks the user_data of a deadline's timeout (user_data of operations are slot indexes).
const DEADLINE_BIT: u64 = 1 << 63;

/// An operation whose completion waits for its deadline.
struct Held {
    /// The kernel reads it when the timeout is submitted: it must not move or be freed
    /// until then, so it lives here until the completion is reported.
    _deadline: Box<types::Timespec>,
    result: Option<i32>,
    deadline_passed: bool,
}

/// Limits `ring` to the operations [`Engine::build`] and [`Engine::push_until`] make and
/// to the fixed-file flag, with no further registration, then enables it: io_uring's
/// requests pass no seccomp filter, so without this a thread that can submit to the ring
/// could open files or sockets through it.
fn restrict(ring: &IoUring) -> io::Result<()> {
    use io_uring::register::Restriction;
    let mut allowed = [
        Restriction::sqe_op(opcode::Readv::CODE),
        Restriction::sqe_op(opcode::Writev::CODE),
        Restriction::sqe_op(opcode::Fsync::CODE),
        Restriction::sqe_op(opcode::Fallocate::CODE),
        Restriction::sqe_op(opcode::Timeout::CODE),
        Restriction::sqe_op(opcode::Nop::CODE),
        Restriction::sqe_flags_allowed(squeue::Flags::FIXED_FILE.bits()),
    ];
    ring.submitter().register_restrictions(&mut allowed)?;
    ring.submitter().register_enable_rings()
}

impl Engine {
    /// `entries`: submission queue size (the completion queue is twice that). `file`: the
    /// host disk, or `None` for the null device.
    pub fn new(entries: u32, file: Option<RawFd>) -> io::Result<Self> {
        let entries = entries.clamp(8, 4096).next_power_of_two();
        // Created disabled, so that its restrictions are in place before it takes a
        // request.
        let ring = IoUring::builder()
            .setup_cqsize(entries * 2)
            .setup_r_disabled()
            .build(entries)?;
        if let Some(fd) = file {
            ring.submitter().register_files(&[fd])?;
        }
        let completion_evt = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?;
        // The plain variant (not _async) also signals inline completions.
        ring.submitter()
            .register_eventfd(completion_evt.as_raw_fd())?;
        restrict(&ring)?;
        Ok(Engine {
            ring,
            has_file: file.is_some(),
            completion_evt,
            unsubmitted: 0,
            held: Vec::new(),
            completed_at_once: Vec::new(),
        })
    }

    fn build(&self, op: DeviceOp, user_data: u64) -> squeue::Entry {
        let fd = types::Fixed(0);
        let entry = match op {
            DeviceOp::Nop => opcode::Nop::new().build(),
            DeviceOp::Readv {
                iovecs,
                count,
                offset,
            } => opcode::Readv::new(fd, iovecs, count).offset(offset).build(),
            DeviceOp::Writev {
                iovecs,
                count,
                offset,
            } => opcode::Writev::new(fd, iovecs, count)
                .offset(offset)
                .build(),
            DeviceOp::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            DeviceOp::Fallocate { offset, len, mode } => opcode::Fallocate::new(fd, len)
                .offset(offset)
                .mode(mode)
                .build(),
        };
        entry.user_data(user_data)
    }

    /// Queues `op`. The memory `op` points to must stay valid until its completion is reaped.
    pub fn push(&mut self, op: DeviceOp, user_data: u64) -> io::Result<()> {
        if !self.has_file {
            self.completed_at_once.push(user_data);
            return Ok(());
        }
        let entry = self.build(op, user_data);
        for _ in 0..64 {
            // SAFETY: the caller keeps the iovecs and the buffers they describe alive until
            // the completion for `user_data` is reaped (the in-flight table owns them).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.unsubmitted += 1;
                return Ok(());
            }
            // Submission queue full: hand what we have to the kernel and retry.
            self.submit()?;
        }
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "io_uring submission queue stays full",
        ))
    }

    /// Queues `op` like [`Engine::push`], but reports its completion no earlier than
    /// `deadline_ns` on CLOCK_MONOTONIC. `user_data` must be below 2^63.
    pub fn push_until(&mut self, op: DeviceOp, user_data: u64, deadline_ns: u64) -> io::Result<()> {
        self.push(op, user_data)?;
        let index = user_data as usize;
        if self.held.len() <= index {
            self.held.resize_with(index + 1, || None);
        }
        let deadline = Box::new(
            types::Timespec::new()
                .sec(deadline_ns / 1_000_000_000)
                .nsec((deadline_ns % 1_000_000_000) as u32),
        );
        let timeout = opcode::Timeout::new(&*deadline as *const types::Timespec)
            .flags(types::TimeoutFlags::ABS)
            .build()
            .user_data(user_data | DEADLINE_BIT);
        self.held[index] = Some(Held {
            _deadline: deadline,
            result: None,
            deadline_passed: false,
        });
        // SAFETY: the timespec is boxed in `held` until the timeout's completion is reaped.
        if unsafe { self.ring.submission().push(&timeout) }.is_err() {
            // The operation is queued, so this must not fail: its caller would free what
            // the kernel is about to use. A submit error recurs at the next submit.
            // SAFETY: as above.
            if self.submit().is_err() || unsafe { self.ring.submission().push(&timeout) }.is_err() {
                // No room for the deadline: the operation completes when it completes.
                self.held[index] = None;
                return Ok(());
            }
        }
        self.unsubmitted += 1;
        Ok(())
    }

    pub fn submit(&mut self) -> io::Result<()> {
        // Nothing new to submit is no reason to enter the kernel, unless completions
        // overflowed the completion queue: the kernel only moves those back when entered.
        if self.unsubmitted == 0 && !self.ring.submission().cq_overflow() {
            return Ok(());
        }
        loop {
            stage_trace::mark(Stage::SubmitStart);
            match self.ring.submit() {
                Ok(n) => {
                    stage_trace::mark_n(Stage::SubmitEnd, n as u32);
                    self.unsubmitted = 0;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY: the completion queue is full; the caller reaps and submits again.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    stage_trace::mark_n(Stage::SubmitEnd, 0);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Blocks until at least one completion is available.
    pub fn wait_for_completion(&mut self) -> io::Result<()> {
        if !self.completed_at_once.is_empty() {
            return Ok(());
        }
        match self.ring.submit_and_wait(1) {
            Ok(_) => {
                self.unsubmitted = 0;
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether completions are waiting to be reaped.
    pub fn has_completions(&mut self) -> bool {
        if !self.completed_at_once.is_empty() {
            return true;
        }
        let mut cq = self.ring.completion();
        cq.sync();
        !cq.is_empty()
    }

    /// Moves every completion posted so far, as (user_data, result) pairs, into `out`
    /// (cleared first; reusing it avoids an allocation per batch).
    pub fn reap_into(&mut self, out: &mut Vec<(u64, i32)>) {
        out.clear();
        let at_once = self
            .completed_at_once
            .drain(..)
            .map(|user_data| (user_data, 0));
        let mut cq = self.ring.completion();
        cq.sync();
        let all = at_once.chain(cq.map(|cqe| (cqe.user_data(), cqe.result())));
        if self.held.is_empty() {
            out.extend(all);
            return;
        }
        for (user_data, result) in all {
            let index = (user_data & !DEADLINE_BIT) as usize;
            let Some(held) = self.held.get_mut(index).and_then(Option::as_mut) else {
                out.push((user_data, result));
                continue;
            };
            if user_data & DEADLINE_BIT != 0 {
                held.deadline_passed = true;
            } else {
                held.result = Some(result);
            }
            if let (true, Some(result)) = (held.deadline_passed, held.result) {
                self.held[index] = None;
                out.push((index as u64, result));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_ring_runs_the_engines_operations_and_refuses_any_other() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 4096]).unwrap();
        let mut engine = Engine::new(8, Some(file.as_raw_fd())).unwrap();
        let mut buf = [0u8; 512];
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let read = DeviceOp::Readv {
            iovecs: &iov,
            count: 1,
            offset: 512,
        };
        engine.push(read, 1).unwrap();
        // Opening a file through the ring: not an operation the engine makes.
        let path = c"/etc/hostname";
        let open = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
            .build()
            .user_data(2);
        // SAFETY: the path is a static C string.
        unsafe { engine.ring.submission().push(&open) }.unwrap();
        engine.unsubmitted += 1;
        let mut done = Vec::new();
        while done.len() < 2 {
            engine.wait_for_completion().unwrap();
            let mut batch = Vec::new();
            engine.reap_into(&mut batch);
            done.extend(batch);
        }
        done.sort_unstable();
        assert_eq!(done, [(1, 512), (2, -libc::EACCES)]);
        assert_eq!(buf, [7u8; 512]);
    }
}
