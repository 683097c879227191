//! Readers that come and go beside a writer, on the emulated slow device with the
//! defaults: the protection holds when they come back, and the writer gets the device
//! back when they leave.

use crate::daemon::{config, volume, DaemonProcess};
use crate::devices::{reader, run_one, DEFAULTS, SLOW_DEVICE};
use crate::emulated::measure_tails;
use std::time::Duration;
use vhost_iocost::loadgen::{self, Duty, Pattern, TenantResult, TenantSpec};

/// The readers' SLO: p99 within 1 ms in every second they read.
const SLO_US: f64 = 1000.0;

const READERS: usize = 4;

/// Four QD1 readers at 500 IOPS each, on for 2 s and off for 6 s (from 0 s, 8 s), beside
/// an unpaced 1 MiB QD8 writer, controller free, each run on a fresh daemon:
///
/// * the writer costs the readers no reader-second within their SLO: with it, no more
///   of their seconds miss it than in the same cycle without it (the first second of
///   each run excepted: clients connecting). The baseline is measured in the same
///   attempt, on a daemon of its own, because this host does not always meet 1 ms
///   for the readers alone: with the hypervisor taking 3–14 % of the CPU, four paced
///   readers with nothing beside them missed it in most of their seconds (p99 2–40
///   ms), QoS on or off. Where the baseline misses none, neither may the readers
///   beside the writer. Where the baseline misses, the writer may not make the worst
///   reader-second more than twice as slow as the baseline's worst (without QoS its
///   queue costs them 46–49 ms, in every second). In an attempt as noisy as the
///   writer's queue, the comparison says little; `measure_tails` prints each attempt's
///   steal and longest host stall, and a miss in an attempt the host stalled earns
///   another;
/// * from a second after they leave (3–8 s) the writer gets at least 90 % of what it
///   gets alone.
#[test]
fn readers_on_a_duty_cycle_keep_their_slo_and_the_writer_gets_the_device_back() {
    let readers: Vec<String> = (0..READERS).map(|i| format!("r{i}")).collect();
    let mut volumes: String = readers
        .iter()
        .enumerate()
        .map(|(i, name)| volume(name, 8 * i as u64, 8, ""))
        .collect();
    volumes += &volume("writer", 32, 32, "");
    let start = || DaemonProcess::start(&config(&format!("{SLOW_DEVICE}{DEFAULTS}"), &volumes));
    let writer = |d: &DaemonProcess| TenantSpec {
        rw: Pattern::Write,
        bs: 1 << 20,
        ramp: Duration::ZERO,
        ..reader(d, "writer", 8, 12)
    };
    let cycle = |d: &DaemonProcess, with_writer: bool| {
        let mut tenants: Vec<TenantSpec> = readers
            .iter()
            .map(|name| TenantSpec {
                rate_iops: Some(500),
                ramp: Duration::ZERO,
                duty: Some(Duty {
                    on: Duration::from_secs(2),
                    off: Duration::from_secs(6),
                }),
                ..reader(d, name, 1, 12)
            })
            .collect();
        if with_writer {
            tenants.push(writer(d));
        }
        let r = loadgen::run(&tenants).unwrap();
        assert!(r.iter().all(|t| t.errors == 0), "{r:?}");
        r
    };
    measure_tails("readers on a duty cycle", || {
        let alone = cycle(&start(), false);
        let d = start();
        let solo = run_one(TenantSpec {
            runtime: Duration::from_secs(3),
            ..writer(&d)
        })
        .mib_per_s;
        let beside = cycle(&d, true);
        let (missed_alone, missed) = (missed_seconds(&alone), missed_seconds(&beside));
        let away: Vec<f64> = beside[READERS].per_second[3..8]
            .iter()
            .map(|s| s.mib_per_s)
            .collect();
        let summary = format!(
            "reader-seconds over {SLO_US} µs beside the writer: {missed:?}; without it: \
             {missed_alone:?}; writer while the readers are away {away:?} MiB/s, alone \
             {solo:.1}"
        );
        eprintln!("{summary}");
        let worst = |m: &[(String, f64, f64)]| m.iter().map(|s| s.2).fold(SLO_US, f64::max);
        (missed.len() <= missed_alone.len()
            && worst(&missed) <= 2.0 * worst(&missed_alone)
            && away.iter().all(|&x| x >= 0.9 * solo))
        .then_some(())
        .ok_or(summary)
    });
}

/// The readers' seconds (after each one's first) whose p99 was over the SLO: reader,
/// end of the second, p99 µs.
fn missed_seconds(results: &[TenantResult]) -> Vec<(String, f64, f64)> {
    results[..READERS]
        .iter()
        .flat_map(|t| {
            t.per_second
                .iter()
                .skip(1)
                .filter(|s| s.iops > 0 && s.p99_us > SLO_US)
                .map(|s| (t.name.clone(), s.t_s, s.p99_us))
        })
        .collect()
}
