//! The migration log as guest memory's dirty bitmap (design §8.8): one per memory region,
//! empty until the frontend sets a log (SET_LOG_BASE), then one bit per 4 KiB guest page
//! in the frontend's shared file. `tests/integration/dirty_log.rs` checks the pages a read
//! marks, through SET_LOG_BASE (the crate maps the log; it cannot be made here).
//!
//! Why not vhost-user-backend's `BitmapMmapRegion`: its slices each clone an `Arc` and
//! every mark takes a read lock, and vm-memory makes a slice for every guest access. On
//! the null path that cost 18 % of the daemon's IOPS at QD32 whether or not a migration
//! was running. Here slices borrow the region's bitmap, and a mark costs one relaxed load
//! while no log is set.

use crate::lock::RwLocked;
use std::io;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use vhost_user_backend::bitmap::{AtomicBitmapMmap, BitmapReplace, MemRegionBitmap, MmapLogReg};
use vm_memory::bitmap::{Bitmap, NewBitmap, RefSlice, WithBitmapSlice};
use vm_memory::{Address, GuestMemoryRegion, GuestRegionMmap};

use crate::backend::guest_memory::sigbus::Registration;

/// The log's page size, fixed by the vhost-user protocol.
const LOG_PAGE: usize = 4096;

/// A region's dirty bitmap. Clones share the log (the crate hands a clone to each view
/// of the region).
#[derive(Clone, Debug, Default)]
pub struct DirtyLog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// A log is set: the only thing read while none is.
    active: AtomicBool,
    log: RwLock<Option<RegionLog>>,
}

/// Where one region's pages are in the frontend's log.
#[derive(Debug)]
pub struct RegionLog {
    /// The log bytes this region marks, guarded against the frontend shrinking the log's
    /// file under the mapping, as guest memory is. Declared first, so it is unregistered
    /// before `log` unmaps.
    guard: Registration,
    log: Arc<MmapLogReg>,
    /// The region's guest-physical start and length, bytes.
    start: usize,
    len: usize,
}

impl MemRegionBitmap for RegionLog {
    fn new<R: GuestMemoryRegion>(region: &R, log: Arc<MmapLogReg>) -> io::Result<Self> {
        // The crate's own constructor checks that the log covers the region (which is not
        // empty and does not overflow), so the bytes below are the log's.
        AtomicBitmapMmap::new(region, Arc::clone(&log))?;
        let start = usize::try_from(region.start_addr().raw_value()).map_err(io::Error::other)?;
        let len = usize::try_from(region.len()).map_err(io::Error::other)?;
        let (first, last) = (start / LOG_PAGE / 8, (start + len - 1) / LOG_PAGE / 8);
        let at = |byte: usize| &log[byte] as *const _ as usize;
        let guard = Registration::new([(at(first), last - first + 1)]);
        Ok(RegionLog {
            guard,
            log,
            start,
            len,
        })
    }
}

impl RegionLog {
    /// Marks the guest pages of `len` bytes at `offset` in the region (clamped to it),
    /// counted from guest-physical address 0, as the log is.
    fn mark(&self, offset: usize, len: usize) {
        if len == 0 || offset >= self.len {
            return;
        }
        // The data (or ring entry) written before must be visible before the bit is: the
        // frontend clears the bit and copies the page in one go.
        fence(Ordering::Release);
        let last = offset.saturating_add(len - 1).min(self.len - 1);
        for page in (self.start + offset) / LOG_PAGE..=(self.start + last) / LOG_PAGE {
            self.log[page / 8].fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }

    fn is_marked(&self, offset: usize) -> bool {
        if offset >= self.len {
            return false;
        }
        let page = (self.start + offset) / LOG_PAGE;
        self.log[page / 8].load(Ordering::Relaxed) & (1 << (page % 8)) != 0
    }
}

impl DirtyLog {
    /// Marks `len` bytes at `offset` of the region in the log, if one is set.
    fn mark_logged(&self, offset: usize, len: usize) {
        let log = self.shared.log.read_locked();
        if let Some(log) = log.as_ref() {
            log.mark(offset, len);
        }
    }

    /// Whether this region's part of the log has faulted (its file shrank under the
    /// mapping) since the last call.
    pub fn faulted(&self) -> bool {
        let log = self.shared.log.read_locked();
        log.as_ref().is_some_and(|l| l.guard.faulted())
    }

    /// The log file this region marks, once one is set.
    fn log_file(&self) -> Option<Arc<MmapLogReg>> {
        let log = self.shared.log.read_locked();
        log.as_ref().map(|l| Arc::clone(&l.log))
    }
}

/// Hands the log `old` regions mark to the regions of `new` that have none: regions
/// mapped after SET_LOG_BASE (a new memory table, a hot-plugged region during a
/// migration) would otherwise log nothing until the next one.
pub fn carry_over(
    old: &[&GuestRegionMmap<DirtyLog>],
    new: &[&GuestRegionMmap<DirtyLog>],
) -> io::Result<()> {
    // The region's own bitmap (`MmapRegion::bitmap`), not a slice of it.
    let own = |r: &GuestRegionMmap<DirtyLog>| -> DirtyLog { (**r).bitmap().clone() };
    let Some(log) = old.iter().find_map(|r| own(r).log_file()) else {
        return Ok(());
    };
    for region in new {
        let bitmap = own(region);
        if bitmap.log_file().is_none() {
            bitmap.replace(RegionLog::new(*region, Arc::clone(&log))?);
        }
    }
    Ok(())
}

impl Bitmap for DirtyLog {
    // Called for every write to guest memory, logging or not: inlined, the test whether
    // the log is on is a load and a branch.
    #[inline]
    fn mark_dirty(&self, offset: usize, len: usize) {
        if self.shared.active.load(Ordering::Relaxed) {
            self.mark_logged(offset, len);
        }
    }

    fn dirty_at(&self, offset: usize) -> bool {
        let log = self.shared.log.read_locked();
        log.as_ref().is_some_and(|log| log.is_marked(offset))
    }

    fn slice_at(&self, offset: usize) -> <Self as WithBitmapSlice<'_>>::S {
        RefSlice::new(self, offset)
    }
}

impl<'a> WithBitmapSlice<'a> for DirtyLog {
    type S = RefSlice<'a, Self>;
}

impl NewBitmap for DirtyLog {
    fn with_len(_len: usize) -> Self {
        Self::default()
    }
}

impl BitmapReplace for DirtyLog {
    type InnerBitmap = RegionLog;

    /// A new log (SET_LOG_BASE): once this returns, no mark reaches the old one.
    fn replace(&self, log: RegionLog) {
        *self.shared.log.write_locked() = Some(log);
        self.shared.active.store(true, Ordering::Release);
    }
}
