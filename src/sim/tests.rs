//! Acceptance tests of the QoS core, run in the simulator.
//!
//! Every test builds a scenario, runs it in virtual time and asserts measured shares,
//! utilisation, latencies or vrate. All are deterministic. Shares are shares of *device
//! time* (the true service time of the simulated disk), not of IOPS or bytes.
//!
//! The common disk: an ordinary SSD ("ssd" preset: a 4 KiB random read occupies the
//! device for 117 µs, about 8 500 IOPS), 4 channels, 64 queue slots, and a perfect cost
//! model unless a test says otherwise. QoS targets p95 ≤ 2 ms for reads and writes,
//! which makes the planning period 4 ms.

use std::path::Path;

use super::*;

pub(super) const MS: u64 = 1_000_000;
pub(super) const SEC: u64 = 1_000_000_000;

/// The shared device and QoS sections; `qos_extra` is appended to `[device.qos]`.
pub(super) fn base(duration: &str, warmup: &str, qos_extra: &str) -> String {
    format!(
        r#"
duration = "{duration}"
warmup = "{warmup}"
[device.model]
preset = "ssd"
[device.qos]
rpct = 95.0
rlat = "2ms"
wpct = 95.0
wlat = "2ms"
{qos_extra}
[disk]
channels = 4
slots = 64
"#
    )
}

pub(super) fn run_toml(text: &str) -> SimResult {
    match run_str(text) {
        Ok(r) => r,
        Err(e) => panic!("scenario failed: {e}\n{text}"),
    }
}

pub(super) fn assert_share(r: &SimResult, vol: &str, want: f64, tol: f64, from: u64, to: u64) {
    let got = r.share(vol, from, to);
    assert!(
        (got - want).abs() <= tol,
        "{vol}: share {got:.2} %, want {want} ± {tol}\n{}",
        r.report()
    );
}

pub(super) fn volumes(spec: &[(&str, u32)]) -> String {
    spec.iter()
        .map(|(n, w)| format!("[[volume]]\nname = \"{n}\"\nweight = {w}\n"))
        .collect()
}

/// QD32 4 KiB random readers on each of `vols`.
pub(super) fn random_readers(vols: &[&str]) -> String {
    vols.iter()
        .map(|v| saturating(v, 32, "4k", 100.0, "random"))
        .collect()
}

/// The percentage of the device's time `vol` used in a window.
pub(super) fn device_pct(r: &SimResult, vol: &str, from_ns: u64, to_ns: u64) -> f64 {
    r.utilisation(from_ns, to_ns) * r.share(vol, from_ns, to_ns) / 100.0
}

pub(super) fn saturating(vol: &str, depth: u32, bs: &str, read_pct: f64, pattern: &str) -> String {
    format!(
        "[[workload]]\nvolume = \"{vol}\"\ndepth = {depth}\nbs = \"{bs}\"\nread_pct = {read_pct}\npattern = \"{pattern}\"\n"
    )
}

#[test]
fn weights_100_300_give_25_75_of_device_time() {
    let text = base("1500ms", "500ms", "")
        + &volumes(&[("a", 100), ("b", 300)])
        + &saturating("a", 64, "4k", 100.0, "random")
        + &saturating("b", 64, "4k", 100.0, "random");
    let r = run_toml(&text);
    assert_share(&r, "a", 25.0, 3.0, 500 * MS, 1500 * MS);
    assert_share(&r, "b", 75.0, 3.0, 500 * MS, 1500 * MS);
}

#[test]
fn weights_100_300_hold_for_randread_vs_seqwrite() {
    let text = base("1500ms", "500ms", "")
        + &volumes(&[("small-reads", 100), ("big-writes", 300)])
        + &saturating("small-reads", 64, "4k", 100.0, "random")
        + &saturating("big-writes", 64, "128k", 0.0, "sequential");
    let r = run_toml(&text);
    assert_share(&r, "small-reads", 25.0, 3.0, 500 * MS, 1500 * MS);
    assert_share(&r, "big-writes", 75.0, 3.0, 500 * MS, 1500 * MS);
    // Bytes differ by an order of magnitude; device time does not.
    assert!(
        r.mbps("big-writes", 500 * MS, 1500 * MS)
            > 10.0 * r.mbps("small-reads", 500 * MS, 1500 * MS)
    );
}

fn hierarchy(b_start: &str) -> String {
    base("2s", "0s", "")
        + r#"
[[group]]
name = "A"
weight = 100
[[volume]]
name = "A0"
group = "A"
[[volume]]
name = "A1"
group = "A"
[[volume]]
name = "B"
weight = 300
"# + &saturating("A0", 64, "4k", 100.0, "random")
        + &saturating("A1", 64, "4k", 100.0, "random")
        + &saturating("B", 64, "4k", 100.0, "random")
        + &format!("start = \"{b_start}\"\n")
}

#[test]
fn hierarchy_with_b_idle_splits_a_evenly() {
    let r = run_toml(&hierarchy("1s"));
    assert_share(&r, "A0", 50.0, 3.0, 300 * MS, SEC);
    assert_share(&r, "A1", 50.0, 3.0, 300 * MS, SEC);
}

#[test]
fn hierarchy_all_busy_gives_12_5_12_5_75() {
    let r = run_toml(&hierarchy("1s"));
    let (from, to) = (1300 * MS, 2 * SEC);
    assert_share(&r, "A0", 12.5, 3.0, from, to);
    assert_share(&r, "A1", 12.5, 3.0, from, to);
    assert_share(&r, "B", 75.0, 3.0, from, to);
}

/// `light` uses a steady 10 % of the device until `burst_at`, then saturates.
///
/// vrate is pinned to the model (min = max = 100 %, and the model is exact) so that the
/// test measures donation alone: with a moving vrate, utilisation also depends on the
/// vrate loop, which has its own tests below.
fn work_conservation(enable: bool, burst_at: &str) -> String {
    let qos = if enable {
        "min = 100.0\nmax = 100.0"
    } else {
        "enable = false"
    };
    base("2s", "0s", qos)
        + &volumes(&[("light", 100), ("heavy", 100)])
        // 10 % of ≈8 500 IOPS of 4 KiB random reads.
        + &format!(
            "[[workload]]\nvolume = \"light\"\ndepth = 32\nrate_iops = 850.0\nstop = \"{burst_at}\"\n"
        )
        + &saturating("light", 64, "4k", 100.0, "random")
        + &format!("start = \"{burst_at}\"\n")
        + &saturating("heavy", 64, "4k", 100.0, "random")
}

#[test]
fn work_conservation_idle_share_is_used_by_the_busy_volume() {
    let (from, to) = (500 * MS, 2 * SEC);
    let qos = run_toml(&work_conservation(true, "10s"));
    let free = run_toml(&work_conservation(false, "10s"));
    let (u_qos, u_free) = (qos.utilisation(from, to), free.utilisation(from, to));
    assert!(
        u_qos >= 0.95 * u_free,
        "utilisation {u_qos:.1} % vs {u_free:.1} % without QoS\n{}",
        qos.report()
    );
    // A naive 50/50 split would leave the heavy volume at 50 %.
    assert!(qos.share("heavy", from, to) >= 85.0, "{}", qos.report());
    // The light volume still gets what it asks for.
    let light = qos.iops("light", from, to);
    assert!(
        light > 0.97 * 850.0,
        "light volume starved: {light:.0} IOPS\n{}",
        qos.report()
    );
}

#[test]
fn work_conservation_donor_gets_its_share_back_within_one_period() {
    let r = run_toml(&work_conservation(true, "1s"));
    let p = r.period_ns;
    let t = SEC;
    // Admission (the QoS decision) switches within the first period...
    let a = r.admitted_us("light", t, t + p);
    let b = r.admitted_us("heavy", t, t + p);
    assert!(
        a / (a + b) >= 0.45,
        "admitted in the first period: light {a:.0} µs, heavy {b:.0} µs\n{}",
        r.report()
    );
    // ... and device time follows once the disk queue has turned over (≤ 64 requests
    // of the heavy volume were already queued in the disk, about 2 periods' worth).
    assert_share(&r, "light", 50.0, 5.0, t + 2 * p, t + 20 * p);
    assert_share(&r, "light", 50.0, 3.0, t + 20 * p, 2 * SEC);
}

#[test]
fn idle_volume_cannot_bank_more_than_the_budget_cap() {
    // "burst" is idle for 10 s, then arrives with 256 requests (30 ms of device time).
    let text = base("10100ms", "0s", "")
        + &volumes(&[("steady", 100), ("burst", 100)])
        + &saturating("steady", 64, "4k", 100.0, "random")
        + &saturating("burst", 256, "4k", 100.0, "random")
        + "start = \"10s\"\n";
    let r = run_toml(&text);
    let p = r.period_ns;
    let t = 10 * SEC;
    let period_us = p as f64 / 1000.0;
    let vrate = r
        .trace
        .iter()
        .filter(|x| x.at_ns >= t - 2 * p && x.at_ns <= t + 2 * p)
        .map(|x| x.vrate_ppm as f64 / 1e6)
        .fold(0.0, f64::max);
    let admitted = r.admitted_us("burst", t, t + p);
    // Fair share for one period (50 %) plus at most the budget cap (half a period of
    // budget), at the vrate in force, plus one request of rounding.
    let limit = (0.5 * period_us + 0.5 * period_us) * vrate + 120.0;
    assert!(
        admitted <= limit,
        "burst admitted {admitted:.0} µs in its first period, limit {limit:.0}\n{}",
        r.report()
    );
    // Sanity: it did get a real share (the test could fail the other way too).
    assert!(admitted >= 0.5 * period_us * vrate * 0.8, "{admitted:.0}");
}

#[test]
fn example_scenarios_parse_and_run() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/sim");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let report = run_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(report.contains("share%"), "{report}");
            n += 1;
        }
    }
    assert!(
        n >= 3,
        "expected at least 3 example scenarios in {}",
        dir.display()
    );
}

#[test]
fn runs_are_deterministic() {
    let text = base("300ms", "0s", "")
        + &volumes(&[("a", 100)])
        + &saturating("a", 8, "4k", 50.0, "random");
    let (x, y) = (run_toml(&text), run_toml(&text));
    assert_eq!(x.report(), y.report());
    assert_eq!(x.completions.len(), y.completions.len());
}

#[test]
fn bad_scenarios_are_errors_not_panics() {
    assert!(matches!(
        run_str("duration = 5\n[disk]\nchannels = 0"),
        Err(Error::Parse { .. })
    ));
    assert!(matches!(
        run_file(Path::new("/nonexistent.toml")),
        Err(Error::Io { .. })
    ));
    let e = run_str("duration = \"1s\"\n[[volume]]\nname = \"v\"\nweight = 0").unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
}

/// The emulated slow device with the targets calibration derives for it (p90 375 µs
/// reads, no write target); `qos_extra` is appended to `[device.qos]`.
pub(super) fn slow_device(duration: &str, warmup: &str, qos_extra: &str) -> String {
    format!(
        r#"
duration = "{duration}"
warmup = "{warmup}"
[device.model]
{model}
[device.qos]
rpct = 90.0
rlat = "375us"
wpct = 0.0
wlat = "375us"
{qos_extra}
[disk]
channels = 4
slots = 256
base_latency = "50us"
"#,
        model = include_str!("../../configs/emulated/slow-ssd.toml"),
    )
}

/// `profile`'s tables for the emulated slow device: profiled in virtual time, as
/// calibration does, and printed as an operator would paste them.
pub(super) fn profiled_slow_device() -> String {
    use crate::profile::suggest::DEFAULT_PERCENTILE;
    use crate::profile::{profile, simulated::SimTarget, Plan};
    let device: crate::emulated::EmulatedConfig = toml::from_str(concat!(
        include_str!("../../configs/emulated/slow-ssd.toml"),
        "channels = 4\nbase_latency = \"50us\"\n"
    ))
    .unwrap();
    let mut target = SimTarget::from_disk(device.disk(), 1 << 30);
    let p = profile(&mut target, &Plan::quick(true), &mut |_, _| {}).unwrap();
    p.to_toml(DEFAULT_PERCENTILE, "profile of the emulated slow device")
}

pub(super) const SLOW_SSD: &str = include_str!("../../configs/emulated/slow-ssd.toml");
