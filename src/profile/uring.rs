//! Profiling target: a real file or block device, driven with io_uring and O_DIRECT (the
//! same engine the data path uses).

use super::plan::Target;
use super::plan::{Job, JobResult};
use crate::backend::io::bounce::BounceBuffer;
use crate::backend::io::engine::{DeviceOp, Engine};
use crate::rng::Rng;
use hdrhistogram::Histogram;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

pub struct UringTarget {
    file: File,
    size: u64,
    /// Where writes go (offset, length); `None`: anywhere in the first `size` bytes.
    scratch: Option<(u64, u64)>,
    rng: Rng,
}

impl UringTarget {
    /// `file` must be opened with O_DIRECT; I/O stays within the first `size` bytes.
    pub fn new(file: File, size: u64) -> Self {
        UringTarget {
            file,
            size,
            scratch: None,
            rng: Rng::new(1),
        }
    }

    /// Writes stay within `length` bytes from `offset` (the user's scratch range); reads
    /// still cover the first `size` bytes.
    pub fn with_scratch(mut self, offset: u64, length: u64) -> Self {
        self.scratch = Some((offset, length));
        self
    }

    /// The byte range a job's requests fall in.
    fn range(&self, job: &Job) -> (u64, u64) {
        match self.scratch {
            Some(range) if job.pattern.is_write() => range,
            _ => (0, self.size),
        }
    }
}

impl Target for UringTarget {
    fn size(&self) -> u64 {
        self.size
    }

    fn run(&mut self, job: &Job, progress: &mut dyn FnMut(f64)) -> io::Result<JobResult> {
        let depth = job.depth.max(1) as usize;
        let bs = job.block_size as usize;
        let mut engine = Engine::new(job.depth.max(8), Some(self.file.as_raw_fd()))?;
        let (buffer, iovecs) = slot_buffers(depth, bs);
        let (base, span) = self.range(job);
        let blocks = (span / job.block_size).max(1);
        let mut latency_us = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        let interval = job
            .rate_iops
            .map(|r| Duration::from_secs_f64(1.0 / r.max(1e-3)));
        let start = Instant::now();
        let end = start + job.duration;
        let mut issued_at = vec![start; depth];
        let mut free: Vec<usize> = (0..depth).collect();
        let (mut ios, mut next_block, mut next_submit) = (0u64, 0u64, start);
        let mut done = Vec::new();
        let mut last_report = start;
        while Instant::now() < end || free.len() < depth {
            let now = Instant::now();
            while now < end && now >= next_submit {
                let Some(slot) = free.pop() else { break };
                let block = if job.pattern.is_random() {
                    self.rng.below(blocks)
                } else {
                    next_block = (next_block + 1) % blocks;
                    next_block
                };
                let offset = base + block * job.block_size;
                let op = slot_op(job.pattern.is_write(), &iovecs[slot], offset);
                issued_at[slot] = now;
                engine.push(op, slot as u64)?;
                if let Some(i) = interval {
                    next_submit = next_submit.max(now - i) + i;
                }
            }
            engine.submit()?;
            if free.len() == depth {
                // Paced and idle: wait for the next submission time, but never past the
                // job's end (a rate measured as nearly 0 on a stalled host paces requests
                // up to 1000 s apart).
                std::thread::sleep(
                    next_submit
                        .min(end)
                        .saturating_duration_since(Instant::now()),
                );
                continue;
            }
            engine.wait_for_completion()?;
            engine.reap_into(&mut done);
            let at = Instant::now();
            for &(slot, result) in &done {
                if result < 0 {
                    return Err(io::Error::from_raw_os_error(-result));
                }
                if result as usize != bs {
                    return Err(io::Error::other(format!(
                        "short transfer: {result} of {bs} bytes"
                    )));
                }
                let slot = slot as usize;
                free.push(slot);
                if at <= end {
                    ios += 1;
                    let _ = latency_us.record((at - issued_at[slot]).as_micros().max(1) as u64);
                }
            }
            if at - last_report > Duration::from_millis(500) {
                last_report = at;
                progress(((at - start).as_secs_f64() / job.duration.as_secs_f64()).min(1.0));
            }
        }
        drop(buffer); // only after every request completed
        Ok(JobResult {
            ios,
            seconds: job.duration.as_secs_f64(),
            latency_us,
        })
    }
}

/// `depth` slots of `bs` bytes and one iovec per slot, never moved while requests are in
/// flight. Writes carry non-zero data, so devices that detect zeroes are not flattered.
fn slot_buffers(depth: usize, bs: usize) -> (BounceBuffer, Vec<libc::iovec>) {
    let mut buffer = BounceBuffer::zeroed(depth * bs, 4096);
    buffer
        .as_mut_slice()
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i * 31 + 7) as u8);
    let iovecs = (0..depth)
        .map(|i| libc::iovec {
            // SAFETY: slot i lies inside the buffer (depth * bs bytes).
            iov_base: unsafe { buffer.as_mut_ptr().add(i * bs) }.cast(),
            iov_len: bs,
        })
        .collect();
    (buffer, iovecs)
}

/// One slot's read or write of its whole buffer at `offset`.
fn slot_op(is_write: bool, iovec: &libc::iovec, offset: u64) -> DeviceOp {
    let iovecs = iovec as *const libc::iovec;
    if is_write {
        DeviceOp::Writev {
            iovecs,
            count: 1,
            offset,
        }
    } else {
        DeviceOp::Readv {
            iovecs,
            count: 1,
            offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn a_paced_job_ends_on_time_even_at_a_rate_of_almost_nothing() {
        // On a disk (O_DIRECT), not in /dev/shm.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("disk.img");
        std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let mut target = UringTarget::new(file, 1 << 20);
        let job = Job {
            name: "paced",
            pattern: super::super::plan::Pattern::RandRead,
            block_size: 4096,
            depth: 1,
            duration: Duration::from_millis(50),
            // One request, then the next would be due in 1000 s.
            rate_iops: Some(0.0),
        };
        let started = Instant::now();
        let result = target.run(&job, &mut |_| {}).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(result.ios, 1);
    }
}
