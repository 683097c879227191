//! The shared region of inflight logs: created on GET_INFLIGHT_FD (a memfd, sealed
//! against resizing, zeroed), mapped again from the fd a frontend hands back with
//! SET_INFLIGHT_FD (after a restart: the dead process's region, read as it left it).
//! Queue `q`'s log starts at `q · queue_stride(queue_size)`, as in libvhost-user.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;

use super::queue_log::{queue_stride, QueueLog};

/// Most queues a region may describe (a volume has at most this many).
pub const MAX_QUEUES: u16 = 64;
/// Largest queue size a region may describe (virtio's split-ring maximum).
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// A mapped region.
#[derive(Debug)]
pub struct Region {
    map: *mut u8,
    len: usize,
    /// Kept open with the mapping, as the frontend keeps its own.
    _file: File,
    num_queues: u16,
    queue_size: u16,
}

// SAFETY: the mapping is shared memory accessed through atomics (`QueueLog`); the
// pointer stays valid until drop.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Bytes a region of `num_queues` queues of `queue_size` takes.
    pub fn size(num_queues: u16, queue_size: u16) -> usize {
        usize::from(num_queues) * queue_stride(queue_size)
    }

    fn check_shape(num_queues: u16, queue_size: u16) -> Result<(), String> {
        if !(1..=MAX_QUEUES).contains(&num_queues) {
            return Err(format!(
                "num_queues {num_queues}: must be within 1..={MAX_QUEUES}"
            ));
        }
        if !(1..=MAX_QUEUE_SIZE).contains(&queue_size) {
            return Err(format!(
                "queue_size {queue_size}: must be within 1..={MAX_QUEUE_SIZE}"
            ));
        }
        Ok(())
    }

    /// A new, zeroed region (GET_INFLIGHT_FD) and a descriptor of it for the frontend.
    pub fn create(num_queues: u16, queue_size: u16) -> Result<(Region, File), String> {
        Self::check_shape(num_queues, queue_size)?;
        let len = Self::size(num_queues, queue_size);
        let name = c"vhost-iocost-inflight";
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor we just created and own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)
            .map_err(|e| format!("ftruncate: {e}"))?;
        let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our descriptor.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(format!("sealing: {}", std::io::Error::last_os_error()));
        }
        let theirs = file.try_clone().map_err(|e| format!("dup: {e}"))?;
        let region = Self::map(file, len, 0, num_queues, queue_size)?;
        Ok((region, theirs))
    }

    /// The region a frontend hands back (SET_INFLIGHT_FD): `mmap_size` bytes at
    /// `mmap_offset` of `file`, checked against the file's size before it is touched.
    pub fn open(
        file: File,
        mmap_size: u64,
        mmap_offset: u64,
        num_queues: u16,
        queue_size: u16,
    ) -> Result<Region, String> {
        Self::check_shape(num_queues, queue_size)?;
        let len = Self::size(num_queues, queue_size);
        if mmap_size < len as u64 {
            return Err(format!(
                "mmap_size {mmap_size} < {len} for {num_queues} queues of {queue_size}"
            ));
        }
        let file_len = file.metadata().map_err(|e| format!("fstat: {e}"))?.len();
        if !mmap_offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= file_len)
        {
            return Err(format!(
                "the region ({len} bytes at {mmap_offset}) is beyond its file ({file_len} bytes)"
            ));
        }
        if mmap_offset % 4096 != 0 {
            return Err(format!("mmap_offset {mmap_offset}: not page aligned"));
        }
        Self::map(file, len, mmap_offset, num_queues, queue_size)
    }

    fn map(
        file: File,
        len: usize,
        offset: u64,
        num_queues: u16,
        queue_size: u16,
    ) -> Result<Region, String> {
        // SAFETY: a shared mapping of `len` bytes of a file at least that long past
        // `offset`; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Region {
            map: map.cast(),
            len,
            _file: file,
            num_queues,
            queue_size,
        })
    }

    /// Queue `queue`'s log, keeping the region mapped while it lives; None beyond the
    /// region's queues.
    pub fn queue_log(self: &Arc<Self>, queue: u16) -> Option<QueueLog> {
        if queue >= self.num_queues {
            return None;
        }
        let offset = usize::from(queue) * queue_stride(self.queue_size);
        // SAFETY: the stride lies within the mapping (`size`), page aligned plus a
        // multiple of 64; the Arc keeps it mapped.
        let mapping: Arc<dyn std::fmt::Debug + Send + Sync> = Arc::clone(self) as _;
        Some(unsafe { QueueLog::new(self.map.add(offset), self.queue_size, mapping) })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; no log outlives the region (they hold it).
        unsafe { libc::munmap(self.map.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_handed_back_holds_what_the_first_process_logged() {
        let (first, theirs) = Region::create(2, 128).unwrap();
        let first = Arc::new(first);
        let mut log = first.queue_log(1).unwrap();
        log.recover(0, 128, 0).unwrap();
        log.mark_popped(7);
        log.mark_popped(3);
        drop(log);
        drop(first);
        let size = Region::size(2, 128) as u64;
        let again = Arc::new(Region::open(theirs, size, 0, 2, 128).unwrap());
        let r = again.queue_log(1).unwrap().recover(0, 128, 2).unwrap();
        assert_eq!(r.resubmit, vec![7, 3]);
        assert!(again.queue_log(2).is_none());
    }

    #[test]
    fn a_short_or_misplaced_region_is_refused_before_it_is_mapped() {
        let (_, theirs) = Region::create(1, 128).unwrap();
        let size = Region::size(1, 128) as u64;
        let e = Region::open(theirs.try_clone().unwrap(), size, 4096, 1, 128).unwrap_err();
        assert!(e.contains("beyond its file"), "{e}");
        assert!(Region::open(theirs.try_clone().unwrap(), size, 0, 2, 128).is_err());
        assert!(Region::open(theirs, size, 0, 0, 128).is_err());
        assert!(Region::create(1, 0).is_err());
    }
}
