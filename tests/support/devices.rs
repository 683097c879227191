//! The emulated devices and the tenants the QoS tests measure with, shared by the
//! integration suite and the comparisons that run alone (`tests/comparisons`).

use crate::daemon::{config, volume, wait_for_stats, DaemonProcess};
use std::time::Duration;
use vhost_iocost::loadgen::{self, Pattern, TenantResult, TenantSpec};

/// A slow SSD: 20k random 4 KiB reads (50 µs of device time each), 4 channels, 50 µs
/// base latency. The backing file is in the page cache (`direct = false`), so the host
/// disk's own speed does not show through.
pub const SLOW_DEVICE: &str = concat!(
    "\nkind = \"emulated\"\ndirect = false\n[device.emulated]\n",
    include_str!("../../configs/emulated/slow-ssd.toml"),
    "channels = 4\nbase_latency = \"50us\"\n"
);

/// A 1 M IOPS NVMe: faster than this machine can drive it, so the daemon's CPU is the
/// bottleneck and any throttling by QoS would show.
pub const FAST_DEVICE: &str = r#"
kind = "emulated"
direct = false
[device.emulated]
rbps = 6000000000
rseqiops = 1000000
rrandiops = 1000000
wbps = 4000000000
wseqiops = 800000
wrandiops = 800000
channels = 32
base_latency = "10us"
"#;

/// A `[[device.emulated.faults]]` rule: volume `volume`'s next read stalls for `stall`
/// (a duration such as "1s") and then fails.
pub fn stalled_read(volume: &str, stall: &str) -> String {
    format!(
        "\n[[device.emulated.faults]]\nvolume = \"{volume}\"\nop = \"read\"\n\
         error = \"stall\"\nstall = \"{stall}\"\ncount = 1\n"
    )
}

/// No model and no targets: the daemon calibrates the device at start-up and derives
/// its targets; vrate moves freely within the default bounds.
pub const DEFAULTS: &str = "[control]\nsocket = \"control.sock\"\n";

/// A random 4 KiB reader of volume `name` at `iodepth`, for `secs` after a 1 s ramp.
pub fn reader(d: &DaemonProcess, name: &str, iodepth: usize, secs: u64) -> TenantSpec {
    TenantSpec {
        name: name.into(),
        socket: d.socket(name),
        rw: Pattern::RandRead,
        bs: 4096,
        iodepth,
        runtime: Duration::from_secs(secs),
        ramp: Duration::from_secs(1),
        ..TenantSpec::default()
    }
}

/// Runs one tenant alone and checks that it saw no error.
pub fn run_one(spec: TenantSpec) -> TenantResult {
    let mut r = loadgen::run(&[spec]).unwrap();
    let r = r.remove(0);
    assert_eq!(r.errors, 0, "{r:?}");
    r
}

/// Tenants running on a thread of their own; joining gives their results.
pub type Load = std::thread::JoinHandle<Result<Vec<TenantResult>, String>>;

/// A daemon on the slow device on its defaults and then `device_extra` (TOML after the
/// `[device]` tables), with volumes `light` and `heavy` at equal weights, each read by a
/// QD16 [`reader`] for `secs`; returned once both count as active.
pub fn light_and_heavy_reading(device_extra: &str, secs: u64) -> (DaemonProcess, Load) {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_DEVICE}{device_extra}{DEFAULTS}"),
        &(volume("light", 0, 16, "") + &volume("heavy", 16, 16, "")),
    ));
    let tenants = [reader(&d, "light", 16, secs), reader(&d, "heavy", 16, secs)];
    let load = std::thread::spawn(move || loadgen::run(&tenants));
    wait_for_stats(&d, "both volumes active", |s| {
        s["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["active"] == true)
    });
    (d, load)
}

/// Sets volume `name`'s weight over the control socket.
pub fn patch_weight(d: &DaemonProcess, name: &str, weight: u32) {
    let body = format!("{{\"weight\": {weight}}}");
    let path = format!("/v1/volumes/{name}");
    let r = vhost_iocost::control::client::request(
        &d.path("control.sock"),
        "PATCH",
        &path,
        Some(&body),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}
