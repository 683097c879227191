//! Shares and speeds on this machine's own disk, through a filled file: what the
//! emulated device proves about the controller, checked where the latency is real.

use crate::emulated::{equal_tenants_against_qos_off, measure};
use std::io::Write;

/// Megabytes each tenant reads from: enough that the host's caches under the disk do
/// not hold all of it.
const VOLUME_MIB: u64 = 16;

/// Many equal tenants are not throttled for nothing, on a real disk: 8 QD4 random readers
/// on the defaults (calibrated model and derived read target) get together at least
/// 0.9 × QoS off, each within ±10 % of their mean. Here the derived target (p90 about
/// 125 µs) is missed by most reads at every vrate, even `min`: lowering vrate does not
/// bring the tenants' latency back, so their misses do not hold it, and nobody served
/// alike is a victim (design §5.10). 32 tenants reach 0.9 × only in runs longer than
/// this test's 5 s (`scripts/bench-equal.sh`, BENCHMARKS.md): their first seconds, while
/// 32 clients connect on two cores, are still throttled.
#[test]
fn many_equal_tenants_on_this_disk_get_what_qos_off_gives_them() {
    let dir = tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or("/var/tmp".into()))
        .expect("tempdir");
    let file = dir.path().join("disk.img");
    fill(&file, 8 * VOLUME_MIB);
    let device = format!("[device]\npath = {:?}\n", file.to_str().unwrap());
    measure("8 equal tenants on this disk", || {
        equal_tenants_against_qos_off(&device, 8, VOLUME_MIB)
    });
}

/// Writes `mib` MiB of non-zero bytes to `path`: reads of a sparse file's holes never
/// reach the disk.
fn fill(path: &std::path::Path, mib: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251 + 1) as u8).collect();
    for _ in 0..mib {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
}
