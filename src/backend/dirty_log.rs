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

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use vhost_user_backend::bitmap::{AtomicBitmapMmap, BitmapReplace, MemRegionBitmap, MmapLogReg};
use vm_memory::bitmap::{Bitmap, NewBitmap, RefSlice, WithBitmapSlice};
use vm_memory::{Address, GuestMemoryRegion};

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
    log: Arc<MmapLogReg>,
    /// The region's first page in the log (its guest-physical page number).
    first_page: usize,
    pages: usize,
}

impl MemRegionBitmap for RegionLog {
    fn new<R: GuestMemoryRegion>(region: &R, log: Arc<MmapLogReg>) -> io::Result<Self> {
        // The crate's own constructor checks that the log covers the region.
        AtomicBitmapMmap::new(region, Arc::clone(&log))?;
        let start = usize::try_from(region.start_addr().raw_value()).map_err(io::Error::other)?;
        let len = usize::try_from(region.len()).map_err(io::Error::other)?;
        Ok(RegionLog {
            log,
            first_page: start / LOG_PAGE,
            pages: len / LOG_PAGE,
        })
    }
}

impl RegionLog {
    fn mark(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let last = offset.saturating_add(len - 1) / LOG_PAGE;
        for page in offset / LOG_PAGE..=last.min(self.pages.saturating_sub(1)) {
            let page = self.first_page + page;
            self.log[page / 8].fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }

    fn is_marked(&self, offset: usize) -> bool {
        let page = offset / LOG_PAGE;
        if page >= self.pages {
            return false;
        }
        let page = self.first_page + page;
        self.log[page / 8].load(Ordering::Relaxed) & (1 << (page % 8)) != 0
    }
}

impl Bitmap for DirtyLog {
    fn mark_dirty(&self, offset: usize, len: usize) {
        if !self.shared.active.load(Ordering::Relaxed) {
            return;
        }
        let log = self.shared.log.read().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = log.as_ref() {
            log.mark(offset, len);
        }
    }

    fn dirty_at(&self, offset: usize) -> bool {
        let log = self.shared.log.read().unwrap_or_else(|e| e.into_inner());
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
        *self.shared.log.write().unwrap_or_else(|e| e.into_inner()) = Some(log);
        self.shared.active.store(true, Ordering::Release);
    }
}
