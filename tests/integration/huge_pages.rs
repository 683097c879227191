//! Guest RAM in huge pages for the tests that need it: the default-size huge page pool,
//! grown for them (a fresh machine's is empty) and shrunk back after.

/// The pool as [`HugePagePool::reserve`] grew it; shrunk back to its size when dropped.
pub struct HugePagePool {
    /// The pool's size before it grew.
    grown_from: Option<u64>,
}

impl HugePagePool {
    const POOL: &'static str = "/proc/sys/vm/nr_hugepages";

    /// Makes sure the pool has `bytes` free, growing it if not (as root).
    pub fn reserve(bytes: u64) -> HugePagePool {
        let page = meminfo("Hugepagesize:") << 10;
        assert!(page > 0, "this kernel has no huge pages");
        let needed = bytes.div_ceil(page);
        let mut pool = HugePagePool { grown_from: None };
        // Growing the pool turns surplus pages into persistent ones before it allocates
        // new ones, and other users of the pool come and go, so one write can fall
        // short: grow again while the pool grows.
        let mut last_error = None;
        for _ in 0..8 {
            let (free, total) = (free_pages(), Self::pool_size());
            if free >= needed {
                break;
            }
            pool.grown_from.get_or_insert(total);
            let wanted = total + needed - free;
            if let Err(e) = std::fs::write(Self::POOL, wanted.to_string()) {
                last_error = Some(e);
                break;
            }
            if Self::pool_size() <= total {
                break;
            }
        }
        let free = free_pages();
        assert!(
            free >= needed,
            "{needed} free huge pages are needed, {free} are free with {} at {} \
             ({last_error:?}): as root, grow it until {needed} are",
            Self::POOL,
            Self::pool_size()
        );
        pool
    }

    fn pool_size() -> u64 {
        std::fs::read_to_string(Self::POOL)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for HugePagePool {
    fn drop(&mut self) {
        // Pages still mapped (the daemon may not have unmapped its table yet) leave the
        // pool when they are freed.
        if let Some(total) = self.grown_from {
            let _ = std::fs::write(Self::POOL, total.to_string());
        }
    }
}

/// Huge pages free and not promised to a mapping already made.
fn free_pages() -> u64 {
    meminfo("HugePages_Free:").saturating_sub(meminfo("HugePages_Rsvd:"))
}

/// A `/proc/meminfo` value (kB values as given), or 0.
fn meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}
