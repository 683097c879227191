//! A SIGBUS in guest memory is that frontend's problem, not the daemon's.
//!
//! Guest memory is the frontend's file (a memfd, a hugetlbfs or /dev/shm file) mapped
//! shared. [`crate::backend::guest_memory::check`] refuses a region larger than its file, but a
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
//! The zero page is as large as the mapping's pages: guest memory or a migration log on
//! hugetlbfs (QEMU's `memory-backend-file` on /dev/hugepages, a memfd with `hugetlb=on`)
//! is mapped in huge pages, and the kernel refuses to replace part of one (EINVAL). So the
//! handler tries the system's page first and then each huge page size the kernel offers,
//! smallest first: the first that succeeds is the mapping's own page, which lies inside
//! the mapping (a huge mapping is aligned to its page size).
//!
//! Only the daemon's own accesses fault this way (ring indices and descriptors, request
//! headers, bounce copies); the kernel's accesses on io_uring's behalf fail that request
//! with EFAULT instead.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Once;

/// Ranges registered at once (guest regions and the log bytes they mark), all volumes
/// together.
const SLOTS: usize = 4096;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};
static REGIONS: [Slot; SLOTS] = [EMPTY; SLOTS];
/// The page sizes a zero page may take, smallest first (the system's page, then the huge
/// page sizes); 0 past the last.
static PAGE_SIZES: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];
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
    /// Register the ranges `(address, length)` of shared file mappings (and install the
    /// handler, once). A zero page replaces the whole page of the mapping a fault is in,
    /// which may reach past a range that does not start or end on a page boundary.
    /// Ranges beyond the table's capacity are left unprotected, with a warning.
    pub fn new(ranges: impl IntoIterator<Item = (usize, usize)>) -> Registration {
        install();
        let mut slots = Vec::new();
        for (start, len) in ranges {
            let free = REGIONS.iter().position(|s| {
                s.end
                    .compare_exchange(0, usize::MAX, AcqRel, Relaxed)
                    .is_ok()
            });
            let Some(i) = free else {
                tracing::warn!("sigbus: {SLOTS} ranges registered; one more is unprotected");
                continue;
            };
            let s = &REGIONS[i];
            s.faulted.store(false, Relaxed);
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

/// The system's (smallest) page size.
fn system_page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        page if page > 0 => page as usize,
        _ => 4096,
    }
}

/// The huge page sizes this kernel offers (`/sys/kernel/mm/hugepages/hugepages-<kB>kB`),
/// smallest first.
fn huge_page_sizes() -> Vec<usize> {
    let mut sizes: Vec<usize> = std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let kib = name
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?;
            kib.parse::<usize>().ok()?.checked_mul(1024)
        })
        .filter(|size| size.is_power_of_two())
        .collect();
    sizes.sort_unstable();
    sizes
}

fn install() {
    INSTALL.call_once(|| {
        let sizes = std::iter::once(system_page_size()).chain(huge_page_sizes());
        for (slot, size) in PAGE_SIZES.iter().zip(sizes) {
            slot.store(size, Relaxed);
        }
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
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; errno is this
    // thread's, saved for the code the signal interrupted.
    let (code, addr, errno) = unsafe {
        (
            (*info).si_code,
            (*info).si_addr() as usize,
            *libc::__errno_location(),
        )
    };
    // Only an access past the end of a mapped file (BUS_ADRERR) is a frontend's doing; a
    // memory error (BUS_MCEERR_*) or a misaligned access is not answered with zeroes.
    let registered = |s: &Slot| {
        let (start, end) = (s.start.load(Acquire), s.end.load(Acquire));
        start <= addr && addr < end && end != usize::MAX
    };
    if code == libc::BUS_ADRERR && REGIONS.iter().any(registered) && map_zero_page(addr) {
        // Every range holding the address: the log bytes of two tables' regions overlap.
        for s in REGIONS.iter().filter(|s| registered(s)) {
            s.faulted.store(true, Release);
        }
        FAULTS.fetch_add(1, Release);
        // SAFETY: this thread's errno, as it was.
        unsafe { *libc::__errno_location() = errno };
        return;
    }
    // Not guest memory: the default action, when the access is retried.
    // SAFETY: signal(2) is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}

/// Maps a private zero page over the page of the mapping holding `addr`, trying each page
/// size from the smallest: a huge mapping refuses a smaller page with EINVAL, and the
/// first size it takes is its own. Async-signal-safe.
fn map_zero_page(addr: usize) -> bool {
    for size in PAGE_SIZES.iter().map(|s| s.load(Relaxed)) {
        if size == 0 {
            break;
        }
        let zero_at = addr & !(size - 1);
        // SAFETY: replaces the page holding `addr`, inside a registered shared mapping
        // this process made (a smaller size would have been taken by a mapping of smaller
        // pages), by a private zero page.
        let p = unsafe {
            libc::mmap(
                zero_at as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return true;
        }
        // SAFETY: this thread's errno, just set by mmap.
        if unsafe { *libc::__errno_location() } != libc::EINVAL {
            return false;
        }
    }
    false
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
        let page = system_page_size();
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
        let reg = Registration::new([(map as usize, len)]);
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
