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

const MS: u64 = 1_000_000;
pub(super) const SEC: u64 = 1_000_000_000;

/// The shared device and QoS sections; `qos_extra` is appended to `[device.qos]`.
fn base(duration: &str, warmup: &str, qos_extra: &str) -> String {
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

fn assert_share(r: &SimResult, vol: &str, want: f64, tol: f64, from: u64, to: u64) {
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
fn random_readers(vols: &[&str]) -> String {
    vols.iter()
        .map(|v| saturating(v, 32, "4k", 100.0, "random"))
        .collect()
}

/// The percentage of the device's time `vol` used in a window.
fn device_pct(r: &SimResult, vol: &str, from_ns: u64, to_ns: u64) -> f64 {
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

fn vrate_scenario(speed: f64, qos_extra: &str, enable: bool) -> String {
    let qos = if enable {
        qos_extra.to_string()
    } else {
        format!("{qos_extra}\nenable = false")
    };
    base("3s", "0s", &qos)
        + &format!("speed = {speed}\n")
        + &volumes(&[("a", 100), ("b", 100)])
        + &saturating("a", 32, "4k", 100.0, "random")
        + &saturating("b", 32, "4k", 70.0, "random")
}

#[test]
fn vrate_rises_when_the_model_is_too_pessimistic() {
    // The disk is twice as fast as the model says.
    let (from, to) = (2 * SEC, 3 * SEC);
    let r = run_toml(&vrate_scenario(2.0, "", true));
    let free = run_toml(&vrate_scenario(2.0, "", false));
    let max = r.vrates(0, to).into_iter().max().unwrap_or(0);
    assert!(
        max >= 1_500_000,
        "vrate only reached {max} ppm\n{}",
        r.report()
    );
    let (u, u_free) = (r.utilisation(from, to), free.utilisation(from, to));
    assert!(
        u >= 0.9 * u_free,
        "utilisation {u:.1} % vs {u_free:.1} % without QoS\n{}",
        r.report()
    );
}

#[test]
fn vrate_falls_when_the_model_is_too_optimistic_until_latency_holds() {
    // The disk is half as fast as the model says.
    let (from, to) = (2 * SEC, 3 * SEC);
    let r = run_toml(&vrate_scenario(0.5, "", true));
    let free = run_toml(&vrate_scenario(0.5, "", false));
    let v = r.vrates(from, to);
    let mean = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    // vrate converges around the disk's true speed (50 %).
    assert!(
        (350_000.0..=650_000.0).contains(&mean),
        "mean vrate {mean:.0} ppm\n{}",
        r.report()
    );
    // The latency target holds at its percentile over the whole second. (The kernel's
    // controller alone limit-cycles around saturation here, p95 4.9 ms; the queue guard
    // of `planner::latency_floor` holds it.)
    let p95 = r.qos_latency_ns(95.0, from, to).unwrap_or(u64::MAX);
    assert!(p95 <= 2 * MS, "p95 {p95} ns\n{}", r.report());
    // Without QoS the disk queue fills up and the target is missed by far.
    let p95_free = free.qos_latency_ns(95.0, from, to).unwrap_or(0);
    assert!(
        p95_free > 6 * MS && p95 * 2 < p95_free,
        "p95 {p95} ns with QoS, {p95_free} ns without\n{}",
        r.report()
    );
}

#[test]
fn vrate_never_leaves_its_bounds() {
    for (speed, bounds) in [
        (2.0, (50.0, 150.0)),
        (0.5, (75.0, 400.0)),
        (1.0, (100.0, 100.0)),
    ] {
        let extra = format!("min = {}\nmax = {}", bounds.0, bounds.1);
        let r = run_toml(&vrate_scenario(speed, &extra, true));
        let lo = (bounds.0 * 10_000.0) as u64;
        let hi = (bounds.1 * 10_000.0) as u64 + 1; // integer rate rounds up by < 1 ppm
        for t in &r.trace {
            assert!(
                (lo..=hi).contains(&t.vrate_ppm),
                "speed {speed}: vrate {} outside [{lo}, {hi}] at {} ns",
                t.vrate_ppm,
                t.at_ns
            );
        }
        assert!(!r.trace.is_empty());
    }
}

#[test]
fn steady_load_does_not_make_vrate_oscillate() {
    let r = run_toml(&vrate_scenario(1.0, "", true));
    let (from, to) = (SEC, 3 * SEC);
    let v = r.vrates(from, to);
    let periods = v.len();
    let reversals = r.vrate_reversals(from, to);
    // At most a few direction changes per 100 periods.
    assert!(
        reversals * 100 <= 5 * periods,
        "{reversals} reversals in {periods} periods\n{}",
        r.report()
    );
    // Bounded swing around the mean (the kernel's controller hunts ±20 % around the
    // saturation point on this disk; it must not drift or grow).
    let mean = v.iter().sum::<u64>() as f64 / periods.max(1) as f64;
    let min = *v.iter().min().unwrap_or(&0) as f64;
    let max = *v.iter().max().unwrap_or(&0) as f64;
    assert!(
        min >= 0.7 * mean && max <= 1.3 * mean,
        "vrate swings {min}..{max} ppm around {mean:.0}\n{}",
        r.report()
    );
    let (first, second) = (r.vrates(SEC, 2 * SEC), r.vrates(2 * SEC, 3 * SEC));
    let spread =
        |x: &[u64]| *x.iter().max().unwrap_or(&0) as f64 - *x.iter().min().unwrap_or(&0) as f64;
    // A swing within 10 % of the mean is not growing oscillation (the queue guard of
    // `planner::latency_floor` can hold vrate flat for a second and then correct it by 2 %).
    assert!(
        spread(&second) <= (1.2 * spread(&first)).max(0.1 * mean),
        "the swing grows\n{}",
        r.report()
    );
}

/// 8 queues × depth 32 against 1 queue × depth 1 at equal weights.
///
/// A depth-1 volume's throughput is bounded by its own latency, so it can only
/// "saturate" a disk that serves one request at a time: the disk here has one channel
/// (no internal parallelism), so the depth-1 volume alone keeps it 100 % busy. Like in
/// the kernel, the shallow volume then keeps its half only if the disk queue stays
/// short, which is the vrate loop's job: the latency target is tight (p95 ≤ 200 µs,
/// 1.7× the 117 µs service time). With a loose target (400 µs) the loop hunts, the deep
/// volume's requests pile up in front of the shallow one's and the split becomes about
/// 73/27.
#[test]
fn many_deep_queues_cannot_buy_more_share_than_one_shallow_queue() {
    let text = base("1500ms", "500ms", "")
        .replace("channels = 4", "channels = 1")
        .replace("\"2ms\"", "\"200us\"")
        + &volumes(&[("deep", 100), ("shallow", 100)])
        + "[[workload]]\nvolume = \"deep\"\nqueues = 8\ndepth = 32\n"
        + &saturating("shallow", 1, "4k", 100.0, "random");
    let r = run_toml(&text);
    assert_share(&r, "deep", 50.0, 3.0, 500 * MS, 1500 * MS);
    assert_share(&r, "shallow", 50.0, 3.0, 500 * MS, 1500 * MS);
}

fn storm(op: &str) -> String {
    base("1500ms", "500ms", "")
        + &volumes(&[("storm", 100), ("reader", 100)])
        + &format!("[[workload]]\nvolume = \"storm\"\nqueues = 4\ndepth = 32\nop = \"{op}\"\nbs = \"1m\"\n")
        + &saturating("reader", 64, "4k", 100.0, "random")
}

#[test]
fn flush_storm_leaves_the_other_volume_its_half() {
    let r = run_toml(&storm("flush"));
    let s = r.share("reader", 500 * MS, 1500 * MS);
    assert!(s >= 45.0, "reader {s:.2} %\n{}", r.report());
}

#[test]
fn discard_storm_leaves_the_other_volume_its_half() {
    let r = run_toml(&storm("discard"));
    let s = r.share("reader", 500 * MS, 1500 * MS);
    assert!(s >= 45.0, "reader {s:.2} %\n{}", r.report());
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

/// The stacking scenario of the emulated-device acceptance test
/// (`tests/integration/emulated.rs`): four QD1 4 KiB readers at 500 IOPS each beside a
/// 1 MiB QD8 sequential writer, on the emulated slow device with the targets calibration
/// gives it (p90 375 µs reads, no write target).
fn stacking_scenario(extra_qos: &str) -> String {
    let mut s = slow_device("8s", "2s", extra_qos);
    s += &volumes(&[
        ("r0", 100),
        ("r1", 100),
        ("r2", 100),
        ("r3", 100),
        ("w", 100),
    ]);
    // Out of phase, as independent readers are: 0.5 ms apart.
    for (i, r) in ["r0", "r1", "r2", "r3"].iter().enumerate() {
        s += &format!(
            "[[workload]]\nvolume = \"{r}\"\ndepth = 1\nbs = \"4k\"\nrate_iops = 500.0\nstart = {}\n",
            500 * i
        );
    }
    s += "[[workload]]\nvolume = \"w\"\ndepth = 8\nbs = \"1m\"\nread_pct = 0.0\npattern = \"sequential\"\n";
    s
}

/// Under steady contention the controller settles. The readers' p90
/// target is met in at least 95 % of the contended periods, their p99 stays within it,
/// and the writer's per-second throughput is steady (coefficient of variation ≤ 0.25)
/// at no less than 60 % of what it gets with QoS off. Judged period by period, with one
/// or two reads per 1 ms period, the same controller met the target in 91 % of them
/// and let the readers' p99 reach 1.2 ms (`planner::lat_stat::LatWindow`).
#[test]
fn stacking_settles_with_the_read_target_met() {
    let r = run_toml(&stacking_scenario(""));
    let off = run_toml(&stacking_scenario("enable = false"));
    let (from, to) = (2 * SEC, 8 * SEC);
    let (n, missed) = r.contended_periods(from, to, 100_000);
    let per_sec: Vec<f64> = (2..8)
        .map(|s| r.mbps("w", s * SEC, (s + 1) * SEC))
        .collect();
    let mean = per_sec.iter().sum::<f64>() / per_sec.len() as f64;
    let sd =
        (per_sec.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / per_sec.len() as f64).sqrt();
    let report = r.report();
    assert!(n > 500, "{n} contended periods\n{report}");
    assert!(
        missed * 20 <= n,
        "{missed} of {n} contended periods missed\n{report}"
    );
    eprintln!("{missed} of {n} contended periods missed\n{report}");
    for reader in ["r0", "r1", "r2", "r3"] {
        let p90 = r.latency_ns(Some(reader), 90.0, from, to).unwrap();
        assert!(p90 <= 375_000, "{reader}: p90 {p90} ns\n{report}");
    }
    assert!(
        sd / mean <= 0.25,
        "writer MB/s per second {per_sec:?}\n{report}"
    );
    let free = off.mbps("w", from, to);
    assert!(
        mean >= 0.6 * free,
        "writer {mean:.1} MB/s, {free:.1} with QoS off\n{report}"
    );
}

/// `profile`'s tables for the emulated slow device: profiled in virtual time, as
/// calibration does, and printed as an operator would paste them.
pub(crate) fn profiled_slow_device() -> String {
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

/// A QD1 reader beside a 1 MiB QD8 writer at equal weights on the emulated slow device
/// (`truth`: its real costs) run with `tables` (`[device.model]` and `[device.qos]`):
/// the reader's IOPS and the writer's bandwidth, each as a share of its solo run.
fn reader_beside_writer(tables: &str, truth: &str) -> (f64, f64) {
    let run = |reader: bool, writer: bool| {
        let mut s = format!(
            "duration = \"8s\"\nwarmup = \"2s\"\n{tables}\n[disk]\nchannels = 4\nslots = 256\n\
             base_latency = \"50us\"\n[disk.truth]\n{truth}"
        );
        s += &volumes(&[("r0", 100), ("w", 100)]);
        if reader {
            s += "[[workload]]\nvolume = \"r0\"\ndepth = 1\nbs = \"4k\"\n";
        }
        if writer {
            s += "[[workload]]\nvolume = \"w\"\ndepth = 8\nbs = \"1m\"\nread_pct = 0.0\npattern = \"sequential\"\n";
        }
        run_toml(&s)
    };
    let (both, reader, writer) = (run(true, true), run(true, false), run(false, true));
    let (from, to) = (2 * SEC, 8 * SEC);
    let r = both.iops("r0", from, to) / reader.iops("r0", from, to);
    let w = both.mbps("w", from, to) / writer.mbps("w", from, to);
    eprintln!("reader {r:.2} of solo, writer {w:.2} of solo");
    (r, w)
}

const SLOW_SSD: &str = include_str!("../../configs/emulated/slow-ssd.toml");

/// On the emulated slow device with the tables `profile`
/// prints for it (the calibrated defaults: p90 read target, no write signal, vrate
/// 25–400 %): an unpaced QD1 reader beside a 1 MiB QD8 writer at equal weights keeps at
/// least 60 % of its solo IOPS and the writer at least 50 % of its solo bandwidth (both
/// 0.54 / 0.82 with the kernel's threshold instead of the controller's aim at 40 % of
/// it). Measured: 0.98 / 0.73.
#[test]
fn a_qd1_reader_beside_a_large_writer_keeps_most_of_its_solo_iops() {
    use crate::profile::suggest::{READER_KEEPS, WRITER_KEEPS};
    let (r, w) = reader_beside_writer(&profiled_slow_device(), SLOW_SSD);
    assert!(
        r >= READER_KEEPS && w >= WRITER_KEEPS,
        "reader {r:.2} of solo, writer {w:.2}"
    );
}

/// Why the suggested floor is 25 % and not 60 %: where writes cost the device 3× what the
/// model says (as on a disk whose writes hurt reads more than their own cost shows), the
/// controller must throttle the writer far below the model's speed. With `min = 60` it
/// cannot, and the reader gets nothing; with 25 it keeps over a quarter of its solo IOPS.
/// (Measured: 0.27 and 0.00. The suggestion's `protect = "underserved"` counts the
/// reader's misses only while it is served below its share, and service is priced by the
/// model, which here underprices writes 3×: with `protect = "all"` the reader keeps 0.37.)
#[test]
fn a_vrate_floor_of_60_starves_a_reader_where_writes_cost_more_than_modelled() {
    let costly_writes = SLOW_SSD
        .replace("wbps = 200000000", "wbps = 66666666")
        .replace("wseqiops = 10000", "wseqiops = 3333")
        .replace("wrandiops = 10000", "wrandiops = 3333");
    assert_ne!(costly_writes, SLOW_SSD);
    let suggested = profiled_slow_device();
    let floor_60 = suggested
        .replace("min = 25.0", "min = 60.0")
        .replace("max = 400.0", "max = 100.0");
    assert_ne!(floor_60, suggested);
    let (r25, _) = reader_beside_writer(&suggested, &costly_writes);
    let (r60, w60) = reader_beside_writer(&floor_60, &costly_writes);
    assert!(r25 >= 0.25, "min = 25: reader {r25:.2} of solo");
    assert!(
        r60 < 0.10 && w60 > 0.9,
        "min = 60: reader {r60:.2}, writer {w60:.2}"
    );
}

/// The stacking scenario with readers that come and go: each reader is on for 2 s and off
/// for 2 s, all four together, beside the unpaced 1 MiB writer. The readers' p99 stays
/// under 1 ms in every second they are on, the first second back included; the writer
/// keeps at least 60 % of the solo device while they are on (as under steady contention,
/// `stacking_settles_with_the_read_target_met`) and all of it from a second after they
/// stop (a volume counts as alone a second after the last contention, design §5.9).
/// The readers' worst p99 in a first second back was 27 ms with neither deviation of design §5.8 and §5.9, 14 ms without
/// the lone volume's charge, 3 ms with the kernel's lost-budget compensation, and 5 ms
/// with that compensation allowed only while the targets held.
#[test]
fn readers_returning_from_idle_are_not_queued_behind_the_writer() {
    let steady = stacking_scenario("");
    let mut s = String::new();
    for (i, block) in steady.split("[[workload]]").enumerate() {
        if i == 0 {
            s += &block.replace("duration = \"8s\"", "duration = \"18s\"");
        } else if !block.contains("rate_iops") {
            s += "[[workload]]";
            s += block;
        }
    }
    let readers = ["r0", "r1", "r2", "r3"];
    for (i, r) in readers.iter().enumerate() {
        for phase in 0..4u64 {
            let start = phase * 4 * SEC / 1000 + 500 * i as u64;
            s += &format!(
                "[[workload]]\nvolume = \"{r}\"\ndepth = 1\nbs = \"4k\"\nrate_iops = 500.0\n\
                 start = {start}\nstop = {}\n",
                start + 2 * SEC / 1000
            );
        }
    }
    let r = run_toml(&s);
    let report = r.report();
    let solo = r.mbps("w", 16 * SEC, 18 * SEC);
    // The first phase starts the device cold; the next three return from idle.
    for phase in 0..4u64 {
        let off = r.mbps("w", (4 * phase + 3) * SEC, (4 * phase + 4) * SEC);
        assert!(
            off >= 0.95 * solo,
            "writer {off:.0} MB/s with the readers off, {solo:.0} alone\n{report}"
        );
        if phase == 0 {
            continue;
        }
        for sec in [4 * phase, 4 * phase + 1] {
            for reader in readers {
                let (from, to) = (sec * SEC, (sec + 1) * SEC);
                let iops = r.iops(reader, from, to);
                let p99 = r.latency_ns(Some(reader), 99.0, from, to).unwrap();
                assert!(
                    iops >= 475.0,
                    "{reader} second {sec}: {iops} IOPS\n{report}"
                );
                assert!(
                    p99 <= 1_000_000,
                    "{reader} second {sec}: p99 {p99} ns\n{report}"
                );
            }
            let on = r.mbps("w", sec * SEC, (sec + 1) * SEC);
            assert!(
                on >= 0.6 * solo,
                "writer {on:.0} MB/s in second {sec} with the readers on, {solo:.0} alone\n{report}"
            );
        }
    }
}

/// In the simulator, a volume capped at 1000 IOPS with a 2 s burst to
/// 3000 (QEMU's semantics: a 6000-operation bucket, which fills at 3000 − 1000 per
/// second, so the burst lasts about 3 s, paced at 3000 after a first tenth of a second)
/// and then holds 1000 in every second, within half a percent (seconds count completions,
/// which lag admissions by a queue's latency); its equal-weight neighbour
/// takes the rest of the device (the capped volume's unused share is donated, not
/// lost), so the device stays busy.
#[test]
fn a_capped_volume_bursts_then_holds_its_cap_and_its_neighbour_takes_the_rest() {
    let text = base("8s", "0s", "")
        + "[[volume]]\nname = \"capped\"\nweight = 100\n\
           caps = { iops = 1000, burst_iops = 3000, burst_seconds = 2 }\n"
        + &volumes(&[("free", 100)])
        + &saturating("capped", 32, "4k", 100.0, "random")
        + &saturating("free", 32, "4k", 100.0, "random");
    let r = run_toml(&text);
    let report = r.report();
    let per_second: Vec<f64> = (0..8)
        .map(|s| r.iops("capped", s * SEC, (s + 1) * SEC))
        .collect();
    assert!(
        (3000.0..=3301.0).contains(&per_second[0]),
        "{per_second:?}\n{report}"
    );
    assert!(
        (2985.0..=3015.0).contains(&per_second[1]),
        "{per_second:?}\n{report}"
    );
    for &n in &per_second[3..] {
        assert!((995.0..=1005.0).contains(&n), "{per_second:?}\n{report}");
    }
    let (from, to) = (3 * SEC, 8 * SEC);
    let free = r.iops("free", from, to);
    let utilisation = r.share("capped", from, to) + r.share("free", from, to);
    assert!(free > 5.0 * 1000.0, "free {free:.0} IOPS\n{report}");
    assert!(
        utilisation > 90.0,
        "device {utilisation:.1} % busy\n{report}"
    );
}

/// Group caps: a group capped at 1000 IOPS holds its two backlogged
/// members' sum to 1000 in every second after the first (which also holds the initial
/// tenth-of-a-second burst), the members share it by weight (100:300), and an uncapped
/// volume beside the group takes the rest of the device. Without the turns, the member
/// the simulator offers first took all 1000 and the other none.
#[test]
fn a_group_cap_bounds_the_sum_of_its_members() {
    let text = base("6s", "0s", "")
        + "[[group]]\nname = \"tenant\"\ncaps = { iops = 1000 }\n"
        + "[[volume]]\nname = \"a\"\ngroup = \"tenant\"\nweight = 100\n"
        + "[[volume]]\nname = \"b\"\ngroup = \"tenant\"\nweight = 300\n"
        + &volumes(&[("free", 100)])
        + &saturating("a", 16, "4k", 100.0, "random")
        + &saturating("b", 16, "4k", 100.0, "random")
        + &saturating("free", 16, "4k", 100.0, "random");
    let r = run_toml(&text);
    let report = r.report();
    for s in 1..6 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let (a, b) = (r.iops("a", from, to), r.iops("b", from, to));
        assert!(
            (990.0..=1010.0).contains(&(a + b)),
            "second {s}: a {a:.0} + b {b:.0}\n{report}"
        );
        assert!(
            a >= 100.0 && b >= 100.0,
            "second {s}: a {a:.0}, b {b:.0}\n{report}"
        );
    }
    // They take turns by weight (QEMU's round robin would give 500 each).
    let (a, b) = (r.iops("a", SEC, 6 * SEC), r.iops("b", SEC, 6 * SEC));
    assert!((225.0..=275.0).contains(&a), "a {a:.0}\n{report}");
    assert!((725.0..=775.0).contains(&b), "b {b:.0}\n{report}");
    let free = r.iops("free", SEC, 6 * SEC);
    assert!(free > 5.0 * 1000.0, "free {free:.0} IOPS\n{report}");
}

/// The background class: a background volume writing 128 KiB at QD32
/// beside a foreground reader that comes and goes (QD8 4 KiB random reads, on 2 s, off
/// 2 s). From one planning period after the reader starts, the background volume is
/// admitted at most 10 % of the device's time (6.9 % and 7.1 % in the two phases: its 1 %
/// floor, plus what the reader leaves when vrate rises above what it can use, in the
/// periods its latency is not rising), and the reader keeps ≥ 90 % of its IOPS alone in
/// every second; while the reader is off the background volume has ≥ 90 % of the device
/// and it completes requests in every second. With both in the normal class at equal
/// weight the reader gets under 70 % of its IOPS alone. (Before the planner held
/// background volumes to their floor while the foreground's latency rose, they took up
/// to 40 % of the device in some periods of the reader's phases.)
#[test]
fn a_background_volume_yields_within_a_period_and_fills_idle_time() {
    let reader = |start_s: u64| {
        format!(
            "[[workload]]\nvolume = \"fg\"\ndepth = 8\nbs = \"4k\"\nread_pct = 100.0\n\
             pattern = \"random\"\nstart = \"{start_s}s\"\nstop = \"{}s\"\n",
            start_s + 2
        )
    };
    let scenario = |class: &str| {
        base("10s", "0s", "")
            + &volumes(&[("fg", 100)])
            + &format!("[[volume]]\nname = \"bg\"\nweight = 100\nclass = \"{class}\"\n")
            + &saturating("bg", 32, "128k", 0.0, "sequential")
            + &reader(2)
            + &reader(6)
    };
    let solo = run_toml(&(base("2s", "0s", "") + &volumes(&[("fg", 100)]) + &reader(0)));
    let solo_iops = solo.iops("fg", 0, 2 * SEC);
    let r = run_toml(&scenario("background"));
    let report = r.report();
    let period = r.period_ns;
    for on in [2 * SEC, 6 * SEC] {
        // From one period after the reader starts to its end: the floor (1 %) and what
        // the reader donates (when vrate rises above what it can use).
        let (from, to) = (on + period, on + 2 * SEC);
        let admitted = r.admitted_us("bg", from, to) * 1000.0;
        eprintln!(
            "background admitted {:.1} % of the device's time",
            admitted * 100.0 / (to - from) as f64
        );
        assert!(
            admitted <= 0.10 * (to - from) as f64,
            "background admitted {admitted:.0} ns of device time in [{from}, {to}) ns\n{report}"
        );
        for sec in [on, on + SEC] {
            let iops = r.iops("fg", sec, sec + SEC);
            assert!(
                iops >= 0.9 * solo_iops,
                "reader {iops:.0} IOPS in [{sec}, +1 s), {solo_iops:.0} alone\n{report}"
            );
        }
    }
    for off in [SEC, 5 * SEC, 9 * SEC] {
        let used = device_pct(&r, "bg", off, off + SEC);
        assert!(
            used >= 90.0,
            "background used {used:.1} % of the device in [{off}, +1 s)\n{report}"
        );
    }
    for sec in 0..10 {
        assert!(
            r.iops("bg", sec * SEC, (sec + 1) * SEC) > 0.0,
            "second {sec}\n{report}"
        );
    }
    let normal = run_toml(&scenario("normal"));
    let fg_normal = normal.iops("fg", 3 * SEC, 4 * SEC);
    assert!(
        fg_normal < 0.7 * solo_iops,
        "at equal weight in the normal class the reader had {fg_normal:.0} IOPS, {solo_iops:.0} alone"
    );
}

/// Reservations: a volume reserving 30 % of the device keeps ≥ 95 % of
/// it (28.5 % of the device's time) in every second beside three saturating aggressors
/// of equal weight, which alone by weight would leave it 25 %. The aggressors share the
/// rest equally. A reservation that would bring the total over what may be reserved is
/// refused with the numbers.
#[test]
fn a_reservation_holds_beside_three_aggressors() {
    let text = base("5s", "0s", "")
        + "[[volume]]\nname = \"r\"\nweight = 100\nreserve = { pct = 30.0 }\n"
        + &volumes(&[("a1", 100), ("a2", 100), ("a3", 100)])
        + &random_readers(&["r", "a1", "a2", "a3"]);
    let r = run_toml(&text);
    let report = r.report();
    for s in 1..5 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let used = device_pct(&r, "r", from, to);
        assert!(
            used >= 28.5,
            "second {s}: {used:.1} % of the device\n{report}"
        );
        let a: Vec<f64> = ["a1", "a2", "a3"]
            .iter()
            .map(|v| r.share(v, from, to))
            .collect();
        let (lo, hi) = (
            a.iter().cloned().fold(f64::MAX, f64::min),
            a.iter().cloned().fold(0.0, f64::max),
        );
        assert!(hi - lo < 3.0, "second {s}: aggressors {a:?}\n{report}");
    }
    assert!(
        r.stats
            .volumes
            .iter()
            .find(|v| v.name == "r")
            .unwrap()
            .reserved
            > 0
    );

    let over = text.replace(
        "name = \"a1\"\nweight = 100\n",
        "name = \"a1\"\nweight = 100\nreserve = { pct = 50.0 }\n",
    );
    let err = run_str(&over).unwrap_err().to_string();
    assert!(
        err.contains("\"a1\" (50.0 % of the device)")
            && err.contains("80.0 %,")
            && err.contains("72.0 %"),
        "{err}"
    );
}

/// The latency class: a reader at 1000 IOPS (open loop, up to 16 in
/// flight) with weight 10 beside a saturating aggressor of weight 1000. By weight alone it
/// gets 1 % of the device, an eighth of its load, and its requests queue in the daemon.
/// As a latency-class volume with a target of p99 2 ms (latency in the daemon), its boost
/// grows until its whole load is served from the third second on; then its latency is
/// the device's, which the planner brings under the target by lowering vrate (from the
/// sixth second on in every second), while the aggressor keeps ≥ 50 % of its IOPS alone.
/// Once the aggressor stops, the met target gives at least 40 % of the boost back within
/// 4 s. In the normal class the reader gets 82 IOPS and a p99 of 200 ms.
#[test]
fn a_latency_class_volume_meets_its_target_beside_a_heavier_aggressor() {
    let scenario = |class: &str, aggressor_stop: &str, duration: &str| {
        base(duration, "0s", "")
            + &format!(
                "[[volume]]\nname = \"l\"\nweight = 10\nclass = \"{class}\"\n\
                 latency_target = \"p99 2ms\"\n"
            )
            + &volumes(&[("agg", 1000)])
            + "[[workload]]\nvolume = \"l\"\ndepth = 16\nbs = \"4k\"\nrate_iops = 1000.0\n"
            + &saturating("agg", 32, "4k", 100.0, "random")
            + &format!("stop = \"{aggressor_stop}\"\n")
    };
    let r = run_toml(&scenario("latency", "8s", "12s"));
    let report = r.report();
    let mut seconds = Vec::new();
    for s in 0..12 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let p99 = r.total_latency_ns("l", 99.0, from, to).unwrap();
        seconds.push((p99 / 1000, r.iops("l", from, to) as u64));
    }
    eprintln!("reader per second (p99 µs, IOPS): {seconds:?}");
    for s in 3..8 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let (p99_us, iops) = seconds[s as usize];
        assert!(iops >= 950, "second {s}: {seconds:?}\n{report}");
        if s >= 5 {
            assert!(p99_us <= 2000, "second {s}: {seconds:?}\n{report}");
        }
        let agg = r.iops("agg", from, to);
        assert!(
            agg >= 0.5 * 8518.0,
            "second {s}: aggressor {agg:.0} IOPS\n{report}"
        );
    }
    let boost = |r: &SimResult| {
        r.stats
            .volumes
            .iter()
            .find(|v| v.name == "l")
            .unwrap()
            .boost
    };
    let with_aggressor = boost(&run_toml(&scenario("latency", "10s", "8s")));
    let later = boost(&r);
    eprintln!("boost {with_aggressor} with the aggressor, {later} 4 s after it stopped");
    assert!(with_aggressor >= 10.0 && later <= 0.6 * with_aggressor);
    let normal = run_toml(&scenario("normal", "8s", "12s"));
    let p99 = normal
        .total_latency_ns("l", 99.0, 3 * SEC, 8 * SEC)
        .unwrap();
    let iops = normal.iops("l", 3 * SEC, 8 * SEC);
    eprintln!("normal class: p99 {} µs, {iops:.0} IOPS", p99 / 1000);
    assert!(
        p99 > 10_000_000 && iops < 200.0,
        "normal class: p99 {p99} ns, {iops:.0} IOPS"
    );
}

/// Per group: a group reserving 40 % of the device gives its two
/// volumes together ≥ 38 % beside three saturating aggressors of equal weight at the top
/// level, where by weight the group would have 25 %; its members split it by weight
/// (100:300). A group's reservation covers its members' own: a member reserving less adds
/// nothing to the device's total.
#[test]
fn a_group_reservation_holds_for_its_members_together() {
    let text = base("5s", "0s", "")
        + "[[group]]\nname = \"tenant\"\nreserve = { pct = 40.0 }\n"
        + "[[volume]]\nname = \"m1\"\ngroup = \"tenant\"\nweight = 100\nreserve = { pct = 5.0 }\n"
        + "[[volume]]\nname = \"m2\"\ngroup = \"tenant\"\nweight = 300\n"
        + &volumes(&[("a1", 100), ("a2", 100), ("a3", 100)])
        + &random_readers(&["m1", "m2", "a1", "a2", "a3"]);
    let r = run_toml(&text);
    let report = r.report();
    for s in 1..5 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let used = |v: &str| device_pct(&r, v, from, to);
        let (m1, m2) = (used("m1"), used("m2"));
        assert!(m1 + m2 >= 38.0, "second {s}: {m1:.1} + {m2:.1} %\n{report}");
        assert!(
            (m2 / m1 - 3.0).abs() < 0.5,
            "second {s}: {m1:.1}, {m2:.1} %\n{report}"
        );
    }
    // 40 % for the group (not 45): with 33 % more elsewhere, 73 % > 72 % is refused.
    let over = text.replace(
        "name = \"a1\"\nweight = 100\n",
        "name = \"a1\"\nweight = 100\nreserve = { pct = 33.0 }\n",
    );
    let err = run_str(&over).unwrap_err().to_string();
    assert!(err.contains("73.0 %"), "{err}");
    let fits = text.replace(
        "name = \"a1\"\nweight = 100\n",
        "name = \"a1\"\nweight = 100\nreserve = { pct = 32.0 }\n",
    );
    assert!(run_str(&fits).is_ok());
}

/// Every class at once on one device: a volume under a group capped at 2000
/// IOPS, a volume reserving 20 %, a latency-class reader (500 IOPS, weight 10, p99 5 ms),
/// a background writer and a normal aggressor, all backlogged. From the third second on:
/// the capped volume holds its cap, the reserved one ≥ 19 % of the device, the latency
/// reader its whole load within its target, the background writer only its floor-ish
/// share (≤ 5 % of the device but never nothing), and the aggressor the rest.
#[test]
fn every_class_at_once_holds_its_promise() {
    let text = base("8s", "0s", "")
        + "[[group]]\nname = \"capped-tenant\"\ncaps = { iops = 2000 }\n"
        + "[[volume]]\nname = \"capped\"\ngroup = \"capped-tenant\"\n"
        + "[[volume]]\nname = \"resv\"\nreserve = { pct = 20.0 }\n"
        + "[[volume]]\nname = \"lat\"\nweight = 10\nclass = \"latency\"\nlatency_target = \"p99 5ms\"\n"
        + "[[volume]]\nname = \"bg\"\nclass = \"background\"\n"
        + &volumes(&[("agg", 100)])
        + &random_readers(&["capped", "resv", "agg"])
        + "[[workload]]\nvolume = \"lat\"\ndepth = 16\nbs = \"4k\"\nrate_iops = 500.0\n"
        + &saturating("bg", 32, "128k", 0.0, "sequential");
    let r = run_toml(&text);
    let report = r.report();
    for s in 3..8 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let capped = r.iops("capped", from, to);
        assert!(
            (1980.0..=2020.0).contains(&capped),
            "second {s}: capped {capped:.0}\n{report}"
        );
        let resv = device_pct(&r, "resv", from, to);
        assert!(resv >= 19.0, "second {s}: reserved {resv:.1} %\n{report}");
        let lat_p99 = r.total_latency_ns("lat", 99.0, from, to).unwrap();
        let lat_iops = r.iops("lat", from, to);
        assert!(
            lat_p99 <= 5_000_000 && lat_iops >= 475.0,
            "second {s}: latency reader p99 {lat_p99} ns, {lat_iops:.0} IOPS\n{report}"
        );
        let bg = device_pct(&r, "bg", from, to);
        assert!(
            bg > 0.0 && bg <= 5.0,
            "second {s}: background {bg:.1} %\n{report}"
        );
        let agg = device_pct(&r, "agg", from, to);
        assert!(agg >= 20.0, "second {s}: aggressor {agg:.1} %\n{report}");
    }
}

/// Beside an aggressor of *equal* weight: a 1000-IOPS reader with a p99
/// 1 ms target and a QD32 4 KiB aggressor, both weight 100. The reader has share enough;
/// its latency is the device's, which has a cliff: p99 0.6 ms at vrate 97 %, 2 ms at
/// 100 %, where the device-wide target (p95 2 ms) keeps it in the normal class. The
/// class finds the edge, keeps vrate under it with a ceiling and tries above it ever more
/// rarely, ending a missed window as soon as it is certain (design §15). Over 40 s: the
/// reader's p99 is within its target, at most 4 seconds miss it and none by more than
/// 10 %, and the aggressor keeps ≥ 98 % of the IOPS it gets beside a normal reader. In
/// the normal class every second misses (≈ 2 ms).
#[test]
fn a_latency_class_volume_meets_its_target_beside_an_equal_weight_aggressor() {
    let scenario = |class: &str| {
        base("40s", "0s", "")
            + &format!(
                "[[volume]]\nname = \"l\"\nclass = \"{class}\"\nlatency_target = \"p99 1ms\"\n"
            )
            + &volumes(&[("agg", 100)])
            + "[[workload]]\nvolume = \"l\"\ndepth = 16\nbs = \"4k\"\nrate_iops = 1000.0\n"
            + &saturating("agg", 32, "4k", 100.0, "random")
    };
    let per_second = |r: &SimResult| -> Vec<(u64, u64)> {
        (0..40)
            .map(|s| {
                let (from, to) = (s * SEC, (s + 1) * SEC);
                let p99 = r.total_latency_ns("l", 99.0, from, to).unwrap() / 1000;
                (p99, r.iops("agg", from, to) as u64)
            })
            .collect()
    };
    let latency = run_toml(&scenario("latency"));
    let normal = run_toml(&scenario("normal"));
    let (with_class, without) = (per_second(&latency), per_second(&normal));
    eprintln!("latency class (p99 µs, aggressor IOPS): {with_class:?}");
    eprintln!("normal class: {without:?}");
    let missed: Vec<(u64, u64)> = (0..40)
        .filter(|&s| with_class[s as usize].0 > 1000)
        .map(|s| (s, with_class[s as usize].0))
        .collect();
    let report = latency.report();
    assert!(
        missed.len() <= 4 && missed.iter().all(|&(_, p99)| p99 <= 1100),
        "missed seconds (second, p99 µs) {missed:?}\n{report}"
    );
    let p99 = latency.total_latency_ns("l", 99.0, 0, 40 * SEC).unwrap();
    eprintln!("p99 over 40 s: {} µs", p99 / 1000);
    assert!(p99 <= 1_000_000, "p99 {p99} ns over 40 s\n{report}");
    let agg = |r: &SimResult| r.iops("agg", 0, 40 * SEC);
    eprintln!(
        "aggressor {:.0} IOPS, {:.0} beside a normal reader",
        agg(&latency),
        agg(&normal)
    );
    assert!(
        agg(&latency) >= 0.98 * agg(&normal),
        "aggressor {:.0} IOPS, {:.0} beside a normal reader",
        agg(&latency),
        agg(&normal)
    );
    assert!(without.iter().all(|&(p99, _)| p99 > 1000), "{without:?}");
}

/// Per group: a tenant's two readers (500 IOPS each, open loop) in a
/// latency-class group of weight 10 with a p99 2 ms target, beside a saturating aggressor
/// of weight 1000. The group's volumes are judged together and the group's weight is
/// boosted: from the fourth second both readers get their whole load within 2 ms. As a
/// normal group they get about 1 % of the device, an eighth of their load.
#[test]
fn a_latency_class_group_meets_its_target_for_its_volumes_together() {
    let scenario = |class: &str| {
        base("8s", "0s", "")
            + &format!(
                "[[group]]\nname = \"tenant\"\nweight = 10\nclass = \"{class}\"\n\
                 latency_target = \"p99 2ms\"\n"
            )
            + "[[volume]]\nname = \"r1\"\ngroup = \"tenant\"\n"
            + "[[volume]]\nname = \"r2\"\ngroup = \"tenant\"\n"
            + &volumes(&[("agg", 1000)])
            + "[[workload]]\nvolume = \"r1\"\ndepth = 16\nbs = \"4k\"\nrate_iops = 500.0\n"
            + "[[workload]]\nvolume = \"r2\"\ndepth = 16\nbs = \"4k\"\nrate_iops = 500.0\n"
            + &saturating("agg", 32, "4k", 100.0, "random")
    };
    let r = run_toml(&scenario("latency"));
    let report = r.report();
    let mut seconds = Vec::new();
    for s in 0..8 {
        let (from, to) = (s * SEC, (s + 1) * SEC);
        let p99 = |v: &str| r.total_latency_ns(v, 99.0, from, to).unwrap() / 1000;
        let iops = r.iops("r1", from, to) + r.iops("r2", from, to);
        seconds.push((p99("r1").max(p99("r2")), iops as u64));
    }
    eprintln!("readers per second (worse p99 µs, IOPS together): {seconds:?}");
    for (s, &(p99_us, iops)) in seconds.iter().enumerate().skip(3) {
        assert!(
            iops >= 950 && p99_us <= 2000,
            "second {s}: {seconds:?}\n{report}"
        );
        let agg = r.iops("agg", s as u64 * SEC, (s as u64 + 1) * SEC);
        assert!(
            agg >= 0.5 * 8518.0,
            "second {s}: aggressor {agg:.0} IOPS\n{report}"
        );
    }
    let boost = r.stats.volumes.iter().map(|v| v.boost).fold(0.0, f64::max);
    assert_eq!(boost, 1.0, "the group is boosted, not its volumes");
    let normal = run_toml(&scenario("normal"));
    let iops = normal.iops("r1", 3 * SEC, 8 * SEC) + normal.iops("r2", 3 * SEC, 8 * SEC);
    eprintln!("normal group: {iops:.0} IOPS together");
    assert!(iops < 200.0, "normal group: {iops:.0} IOPS");
}
