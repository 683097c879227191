//! The emulated device (`kind = "emulated"`): a disk whose behaviour is known, served
//! through the real data path. These tests check the device itself, then QoS on it with
//! vrate free to move.

use crate::client::{pattern, Client, Op};
use crate::daemon::{
    config, control_get, reads_over, stats_of, volume, volume_stats, wait_for_stats, DaemonProcess,
};
use crate::devices::{
    light_and_heavy_reading, patch_weight, reader, run_one, DEFAULTS, FAST_DEVICE, SLOW_DEVICE,
};
use std::time::Duration;
use vhost_iocost::loadgen::{self, TenantSpec};
use vhost_iocost::lock::Locked;

/// The tests that measure a split run one at a time: each keeps both cores busy.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.locked()
}

#[test]
fn emulated_device_serves_at_its_model_rate_and_keeps_the_data() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_DEVICE}[device.qos]\nenable = false\n"),
        &volume("v", 0, 16, ""),
    ));
    // Data goes to the file as usual.
    let mut c = Client::connect(&d.socket("v"), 1, 1 << 20);
    let data = pattern(4096, 256 << 10, 7);
    c.buf()[..data.len()].copy_from_slice(&data);
    let len = data.len();
    assert_eq!(
        c.run(Op::Write {
            off: 4096,
            len,
            buf: 0
        }),
        0
    );
    c.buf()[..len].fill(0);
    assert_eq!(
        c.run(Op::Read {
            off: 4096,
            len,
            buf: 0
        }),
        0
    );
    assert!(c.buf()[..len] == data[..], "read back what was written");
    drop(c);

    // 16 requests in flight keep all 4 channels busy: exactly the model's 20k IOPS.
    let deep = run_one(reader(&d, "v", 16, 3));
    assert!(
        (18_000.0..=20_600.0).contains(&deep.iops),
        "QD16: {:.0} IOPS, the model says 20000",
        deep.iops
    );
    // One at a time: 4 channels × 50 µs of service plus the 50 µs base latency.
    let qd1 = run_one(reader(&d, "v", 1, 2));
    assert!(
        (250.0..=450.0).contains(&qd1.lat_p50_us),
        "QD1 p50 {:.0} µs, the model says 250 µs plus the daemon's round trip",
        qd1.lat_p50_us
    );
}

/// With the default QoS settings a lone tenant is never held back by QoS, on a slow
/// device and on one faster than the machine can drive (its throughput against QoS off
/// is compared in `tests/comparisons`, which has the machine to itself).
#[test]
fn a_lone_tenant_never_waits_for_qos_with_the_defaults() {
    for (device, what) in [(SLOW_DEVICE, "slow"), (FAST_DEVICE, "1M IOPS")] {
        let d = DaemonProcess::start(&config(
            &format!("{device}[control]\nsocket = \"control.sock\"\n"),
            &volume("v", 0, 16, ""),
        ));
        let r = run_one(reader(&d, "v", 32, 2));
        let stats = volume_stats(&d, "v");
        assert!(
            stats["reads"].as_u64().unwrap() >= r.completed,
            "{what}: {stats}"
        );
        assert_eq!(stats["throttled"], 0, "{what}: {stats}");
        assert_eq!(stats["wait_us"], 0, "{what}: {stats}");
    }
}

/// Without `[device.model]` the daemon measures the device at start-up, shows the result
/// as `calibrated` with what was estimated, keeps it in the state file, and reuses it at
/// the next start instead of measuring again.
#[test]
fn a_missing_model_is_calibrated_once_and_kept_in_the_state_file() {
    let text = config(&format!("{SLOW_DEVICE}{DEFAULTS}"), &volume("v", 0, 16, ""));
    let d = DaemonProcess::start(&text);
    let get = |d: &DaemonProcess| control_get(d, "/v1/device/model");
    let m = get(&d);
    assert_eq!(m["source"], "calibrated", "{m}");
    let rrandiops = m["value"]["rrandiops"].as_f64().unwrap();
    assert!((19_000.0..=21_000.0).contains(&rrandiops), "{m}");
    assert_eq!(
        m["value"]["wrandiops"].as_f64().unwrap(),
        (rrandiops / 2.0).round()
    );
    assert!(m["calibration"]["writes"]
        .as_str()
        .unwrap()
        .starts_with("estimated"));
    // The derived read target is in effect, writes give no latency signal.
    let dev = control_get(&d, "/v1/device");
    assert_eq!(dev["model"]["source"], "calibrated");
    assert_eq!(dev["effective"]["rpct"], 90.0);
    assert_eq!(dev["effective"]["wpct"], 0.0);
    let rlat = dev["effective"]["rlat_us"].as_u64().unwrap();
    assert!((250..5_000).contains(&rlat), "{dev}");
    assert!(d.wait_for_log("device.model: calibrated"));
    let state: serde_json::Value =
        serde_json::from_slice(&d.file("config.toml.state.json")).unwrap();
    assert_eq!(state["calibrated"]["model"], m["value"]);

    let (status, dir) = d.stop();
    assert!(status.success());
    let d = DaemonProcess::start_in(dir, &text);
    assert!(d.wait_for_log("using the calibration in the state file"));
    assert!(!d.log_text().contains("calibrating"), "{}", d.log_text());
    assert_eq!(get(&d)["value"], m["value"]);
}

/// A sparse backing file is not measured (its holes would be): the daemon says so and
/// keeps the preset.
#[test]
fn a_sparse_file_is_not_calibrated() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("disk.img")).unwrap();
    file.set_len(64 << 20).unwrap();
    let d = DaemonProcess::start_in(dir, &config(DEFAULTS, &volume("v", 0, 16, "")));
    assert!(d.wait_for_log("not calibrated"), "{}", d.log_text());
    assert!(d.log_text().contains("allocated"), "{}", d.log_text());
    let m = control_get(&d, "/v1/device/model");
    assert_eq!(m["source"], "config", "{m}");
}

/// The reads `heavy` completed per read of `light` over their next `total` reads.
fn split_over(d: &DaemonProcess, total: u64) -> f64 {
    let ([light, heavy], _) = reads_over(d, ["light", "heavy"], total);
    heavy as f64 / light.max(1) as f64
}

/// Two backlogged readers at equal weights split 1:1; a PATCH to 300 gives the heavy one
/// 75 % at once (the first statistics read after the reply shows it) and the split
/// becomes 1:3 from then on, without reconnecting. vrate is held at half the device's
/// speed, so that the budgets decide the split whatever the rest of the suite leaves
/// the emulated device of the two CPUs; with vrate free the split follows once vrate is
/// below the device's speed, and the device stays busy: `comparisons::weights`.
#[test]
fn a_weight_change_takes_effect_at_once() {
    let _one_at_a_time = measuring();
    // The load outlasts the 30,000 reads measured even on a machine busy with the rest
    // of the suite (alone they take 3 s at 10,000 a second).
    let (d, load) = light_and_heavy_reading("[device.qos]\nmin = 50.0\nmax = 50.0\n", 10);
    let before = split_over(&d, 10_000);
    patch_weight(&d, "heavy", 300);
    let hw = volume_stats(&d, "heavy")["hweight_active_pct"]
        .as_f64()
        .unwrap();
    let after = split_over(&d, 20_000);
    eprintln!(
        "split before {before:.2}, heavy's share right after the PATCH {hw:.1} %, \
         split after {after:.2}"
    );
    assert!((0.9..=1.1).contains(&before), "before: {before:.2}");
    assert!(
        (hw - 75.0).abs() < 0.5,
        "hweight right after the PATCH: {hw}"
    );
    assert!((2.7..=3.3).contains(&after), "after: {after:.2}");
    for r in load.join().unwrap().unwrap() {
        assert_eq!(r.errors, 0);
    }
}

/// An idle volume lends its whole share; when it resumes it takes its share back at once:
/// in the first 2,000 reads after it counts as active again the split with a backlogged
/// neighbour of equal weight is already 1:1. (The simulator checks the same at period
/// granularity: `work_conservation_donor_gets_its_share_back_within_one_period`.)
#[test]
fn an_idle_volumes_share_comes_back_when_it_resumes() {
    let _one_at_a_time = measuring();
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_DEVICE}{DEFAULTS}"),
        &(volume("light", 0, 16, "") + &volume("heavy", 16, 16, "")),
    ));
    let tenants = [
        TenantSpec {
            delay: Duration::from_secs(2),
            ..reader(&d, "light", 16, 4)
        },
        reader(&d, "heavy", 16, 6),
    ];
    let load = std::thread::spawn(move || loadgen::run(&tenants));
    wait_for_stats(&d, "heavy reading alone", |s| {
        stats_of(s, "heavy")["reads"].as_u64().unwrap() > 10_000
    });
    assert_eq!(volume_stats(&d, "light")["active"], false);
    wait_for_stats(&d, "light active again", |s| {
        s["volumes"][0]["active"] == true
    });
    let first = split_over(&d, 2_000);
    eprintln!("heavy/light in the first 2,000 reads after light resumed: {first:.2}");
    assert!((0.85..=1.15).contains(&first), "{first:.2}");
    for r in load.join().unwrap().unwrap() {
        assert_eq!(r.errors, 0);
    }
}
