//! The planner's control of vrate in the simulator: it rises and falls with the model's
//! error and stays within its bounds, holds steady under steady load, is not bought by
//! deep queues or storms of cheap requests, and protects paced readers beside a large
//! writer (the stacking scenario). Shared helpers and the common disk: `tests.rs`.

use super::tests::*;

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
/// cannot, and the reader gets nothing; with 25 it keeps over a fifth of its solo IOPS.
/// (Measured: 0.22 and 0.00. The suggestion's `protect = "underserved"` counts the
/// reader's misses only while it is served below its share, and service is priced by the
/// model, which here underprices writes 3×: the reader's deficit is small and, beside the
/// writer's few large completions a period, its share scatters widely, so it is judged a
/// victim in fewer periods. With `protect = "all"` the reader keeps 0.37.)
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
    assert!(r25 >= 0.2, "min = 25: reader {r25:.2} of solo");
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
