//! A SIGBUS in guest memory is that frontend's problem, not the daemon's.
//!
//! Guest memory is the frontend's file (a memfd, a hugetlbfs or /dev/shm file) mapped
//! shared. [`super::guest_memory::check`] refuses a region larger than its file, but a
//! hostile frontend can shrink the file afterwards (`ftruncate`), and the next access to a
//! page past the new end raises SIGBUS, whose default action kills the whole daemon and
//! every volume with it. Only a memfd sealed against shrinking (`F_SEAL_SHRINK`) rules
//! that out, and not every frontend seals.
//!
//! So the daemon handles SIGBUS itself. Every mapped guest region is registered here
//! ([`Registration`]), for as long as a memory table holding it is in use: a request in
//! flight writes its status byte through the table it was popped with, though the
//! frontend may have replaced that table since. A fault inside a registered region is
//! answered by mapping a private zero page over the faulting page, so the access is
//! retried and reads zeroes; the region is marked, and the volume's worker logs it
//! ([`Registration::faulted`]). A fault anywhere else gets the default action: it is a
//! bug, not a guest.
//!
//! The zero page is as large as the region's pages: guest memory on hugetlbfs (QEMU's
//! `memory-backend-file` on /dev/hugepages, a memfd with `hugetlb=on`) is mapped in huge
//! pages, and the kernel refuses to replace part of one ([`page_size_of`]).
//!
//! Only the daemon's own accesses fault this way (ring indices and descriptors, request
//! headers, bounce copies); the kernel's accesses on io_uring's behalf fail that request
//! with EFAULT instead.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Once;

/// Guest regions registered at once, all volumes together.
const SLOTS: usize = 4096;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    /// The mapping's page size: what a zero page replaces.
    page: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    page: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};
static REGIONS: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Faults in registered regions so far: a cheap check for the data path before
/// [`Registration::faulted`].
static FAULTS: AtomicUsize = AtomicUsize::new(0);
static INSTALL: Once = Once::new();

/// The guest regions of one memory table; unregistered when dropped.
#[derive(Debug, Default)]
pub struct Registration {
    slots: Vec<usize>,
}

impl Registration {
    /// Register the mapped ranges `(address, length, page size)` (and install the
    /// handler, once). Ranges beyond the table's capacity are left unprotected, with a
    /// warning.
    pub fn new(ranges: impl IntoIterator<Item = (usize, usize, usize)>) -> Registration {
        install();
        let mut slots = Vec::new();
        for (start, len, page) in ranges {
            let page = if page.is_power_of_two() {
                page
            } else {
                system_page_size()
            };
            let free = REGIONS.iter().position(|s| {
                s.end
                    .compare_exchange(0, usize::MAX, AcqRel, Relaxed)
                    .is_ok()
            });
            let Some(i) = free else {
                tracing::warn!("sigbus: {SLOTS} guest regions registered; one more is unprotected");
                continue;
            };
            let s = &REGIONS[i];
            s.faulted.store(false, Relaxed);
            s.page.store(page, Relaxed);
            s.start.store(start, Release);
            s.end.store(start.saturating_add(len), Release);
            slots.push(i);
        }
        Registration { slots }
    }

    /// Faults in any registered region so far (compare with an earlier value to know
    /// whether [`Registration::faulted`] is worth asking).
    pub fn faults() -> usize {
        FAULTS.load(Acquire)
    }

    /// Whether an access into one of these regions has faulted since the last call.
    pub fn faulted(&self) -> bool {
        self.slots.iter().fold(false, |any, &i| {
            REGIONS[i].faulted.swap(false, AcqRel) | any
        })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        for &i in &self.slots {
            // Reserved (the handler skips it) before `start` changes, so that no moment
            // shows a range the mapping does not cover; free only after.
            REGIONS[i].end.store(usize::MAX, Release);
            REGIONS[i].start.store(0, Release);
            REGIONS[i].end.store(0, Release);
        }
    }
}

/// The page size of `file`'s shared mappings: its filesystem's block size on hugetlbfs
/// (a memfd created with `MFD_HUGETLB` lives there too), the system's page size elsewhere.
pub fn page_size_of(file: &std::fs::File) -> usize {
    use std::os::unix::io::AsRawFd;
    // SAFETY: fstatfs writes into the zeroed struct it is given.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out-pointer.
    let huge = unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } == 0
        && fs.f_type == libc::HUGETLBFS_MAGIC
        && fs.f_bsize > 0;
    if huge {
        fs.f_bsize as usize
    } else {
        system_page_size()
    }
}

/// The system's (smallest) page size.
pub fn system_page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        page if page > 0 => page as usize,
        _ => 4096,
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature
        // and only uses async-signal-safe calls (atomics, mmap, signal).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
                tracing::warn!(
                    "sigbus: cannot install the handler: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    });
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // Only an access past the end of a mapped file (BUS_ADRERR) is a frontend's doing; a
    // memory error (BUS_MCEERR_*) or a misaligned access is not answered with zeroes.
    let regions = if code == libc::BUS_ADRERR {
        &REGIONS[..]
    } else {
        &[]
    };
    for s in regions {
        let (start, end) = (s.start.load(Acquire), s.end.load(Acquire));
        if start <= addr && addr < end && end != usize::MAX {
            let size = s.page.load(Relaxed);
            let page = addr & !(size - 1);
            // SAFETY: replaces one page of a guest mapping this process made (the
            // region's bounds and page size were registered with its mapping) by a
            // private zero page.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                s.faulted.store(true, Release);
                FAULTS.fetch_add(1, Release);
                return;
            }
        }
    }
    // Not guest memory: the default action, when the access is retried.
    // SAFETY: signal(2) is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::{AsRawFd, FromRawFd};

    /// Guest memory on hugetlbfs is tested through the daemon, in the hostile frontend's
    /// tests (`tests/integration/hostile.rs`), which reserve the huge pages.
    #[test]
    fn a_shrunk_file_under_a_registered_mapping_reads_zeroes_and_is_reported() {
        // SAFETY: memfd_create with a NUL-terminated name; the fd is owned by the File.
        let fd = unsafe { libc::memfd_create(c"sigbus-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        let page = page_size_of(&file);
        assert_eq!(page, system_page_size());
        let len = 2 * page;
        file.set_len(len as u64).unwrap();
        // SAFETY: a new shared mapping of the memfd; unmapped at the end of the test.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            map,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let bytes = map as *mut u8;
        // SAFETY: inside the mapping, while the file is two pages long.
        unsafe {
            bytes.add(5).write_volatile(7);
            bytes.add(page + 5).write_volatile(7);
        }
        let reg = Registration::new([(map as usize, len, page)]);
        assert!(!reg.faulted());
        file.set_len(page as u64).unwrap();
        // SAFETY: the second page is past the file's new end: SIGBUS, answered with a
        // zero page.
        let v = unsafe { bytes.add(page + 5).read_volatile() };
        assert_eq!(v, 0);
        assert!(reg.faulted());
        assert!(!reg.faulted(), "reported once");
        // SAFETY: inside the file.
        assert_eq!(
            unsafe { bytes.add(5).read_volatile() },
            7,
            "the file's page is kept"
        );
        drop(reg);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, len) };
    }
}
