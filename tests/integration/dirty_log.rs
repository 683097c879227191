//! Dirty logging for live migration (design §8.8): with a log set
//! (SET_LOG_BASE) and LOG_ALL acked, a read marks exactly the guest pages the daemon
//! wrote: its data buffer (written by io_uring), its status byte and the used ring, also
//! in memory mapped after the log was set.

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK, T_IN};
use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use vhost::{VhostBackend, VhostUserDirtyLogRegion};

const PAGE: u64 = 4096;
/// One bit per page: 4 KiB of log covers 128 MiB of guest-physical addresses, all of the
/// raw frontend's RAM.
const LOG_BYTES: u64 = 4096;

/// The pages whose bits are set in `log`.
fn dirty_pages(log: &std::fs::File) -> BTreeSet<u64> {
    let mut bytes = vec![0u8; LOG_BYTES as usize];
    log.read_exact_at(&mut bytes, 0).unwrap();
    (0..LOG_BYTES * 8)
        .filter(|&page| bytes[(page / 8) as usize] & (1 << (page % 8)) != 0)
        .collect()
}

fn pages(addr: u64, len: u64) -> impl Iterator<Item = u64> {
    addr / PAGE..(addr + len).div_ceil(PAGE)
}

#[test]
fn a_read_logs_exactly_the_pages_it_wrote() {
    let d = DaemonProcess::start(&config("", &volume("v", 0, 8, "")));
    let opts = Options {
        dirty_log: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    assert_ne!(f.features & (1 << 26), 0, "LOG_ALL is offered and acked");
    let data = pattern(64 * 512, 3 * PAGE as usize, 9);
    assert_eq!(f.write_sectors(0, 64, &data), S_OK as u8);

    let log = crate::virtqueue::memfd_file(LOG_BYTES);
    f.frontend
        .set_log_base(
            0,
            Some(VhostUserDirtyLogRegion {
                mmap_size: LOG_BYTES,
                mmap_offset: 0,
                mmap_handle: log.as_raw_fd(),
            }),
        )
        .unwrap();
    assert!(dirty_pages(&log).is_empty());
    // A new memory table after the log (as a memory hot-plug during a migration sends):
    // its regions log too.
    f.frontend
        .set_mem_table(&crate::virtqueue::region_infos(&f.mem))
        .unwrap();

    let (chain, buf) = f.rw_chain(T_IN, 64, data.len());
    let status = chain[2].addr;
    let done = f.run(0, &chain);
    assert_eq!(done.status, Some(S_OK as u8));
    assert_eq!(f.read(buf, data.len()), data);

    // The data pages (io_uring's write), the status byte's page, and the used ring's
    // index and first element (the driver's pages are not the device's to log).
    let used = f.used_ring(0);
    let expected: BTreeSet<u64> = pages(buf, data.len() as u64)
        .chain(pages(status, 1))
        .chain(pages(used + 2, 2))
        .chain(pages(used + 4, 8))
        .collect();
    assert_eq!(dirty_pages(&log), expected);
}
