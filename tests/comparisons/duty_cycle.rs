//! Readers that come and go beside a writer, on the emulated slow device with the
//! defaults: the protection holds when they come back, and the writer gets the device
//! back when they leave.

use crate::daemon::{config, volume, DaemonProcess};
use crate::devices::{reader, run_one, DEFAULTS, SLOW_DEVICE};
use crate::emulated::measure_tails;
use std::time::Duration;
use vhost_iocost::loadgen::{self, Duty, Pattern, TenantResult, TenantSpec};

/// The readers' SLO: p99 within 1 ms in every second they read. Reported, not asserted
/// (see the test).
const SLO_US: f64 = 1000.0;

/// The worst p99 a reader-second may have beside the writer: a fifth of what the
/// writer's queue costs the readers without QoS (46–49 ms, in every second).
const WORST_P99_US: f64 = 10_000.0;

const READERS: usize = 4;

/// Four QD1 readers at 500 IOPS each, on for 2 s and off for 6 s (from 0 s, 8 s), beside
/// an unpaced 1 MiB QD8 writer, controller free, on a fresh daemon:
///
/// * the writer's queue never reaches the readers: no reader-second (after each one's
///   first: clients connecting) has its p99 over [`WORST_P99_US`];
/// * from a second after they leave (3–8 s) the writer gets at least 90 % of what it
///   gets alone.
///
/// Whether they keep a 1 ms p99 in every second is a benchmark, not this test
/// (`ON=2s OFF=6s scripts/bench-stacking.sh`, medians of alternating rounds in
/// BENCHMARKS.md, "Readers that come and go"), for two reasons measured here. The host
/// stops this VM for 2–24 ms every few seconds without showing it as steal, and four
/// such readers with nothing beside them missed 1 ms in 4 of 6 runs of this cycle. And
/// each reader's first read back waits 25–30 ms behind what the writer queued while it
/// had the device alone (docs/qos.md), which leaves a reader-second one or two slow
/// reads from missing. `measure_tails` prints each attempt's steal and longest stall.
#[test]
fn readers_on_a_duty_cycle_are_kept_from_the_writers_queue_and_it_gets_the_device_back() {
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
    let cycle = |d: &DaemonProcess| {
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
        tenants.push(writer(d));
        let r = loadgen::run(&tenants).unwrap();
        assert!(r.iter().all(|t| t.errors == 0), "{r:?}");
        r
    };
    measure_tails("readers on a duty cycle", || {
        let d = start();
        let solo = run_one(TenantSpec {
            runtime: Duration::from_secs(3),
            ..writer(&d)
        })
        .mib_per_s;
        let beside = cycle(&d);
        let seconds = judged_seconds(&beside);
        let worst = seconds.iter().map(|s| s.2).fold(0.0, f64::max);
        let missed: Vec<_> = seconds.iter().filter(|s| s.2 > SLO_US).collect();
        let away: Vec<f64> = beside[READERS].per_second[3..8]
            .iter()
            .map(|s| s.mib_per_s)
            .collect();
        let summary = format!(
            "worst reader-second p99 beside the writer {worst:.0} µs; reader-seconds over \
             {SLO_US} µs: {missed:?}; writer while the readers are away {away:?} MiB/s, \
             alone {solo:.1}"
        );
        eprintln!("{summary}");
        (worst <= WORST_P99_US && away.iter().all(|&x| x >= 0.9 * solo))
            .then_some(())
            .ok_or(summary)
    });
}

/// The readers' seconds after each one's first in which they read: reader, end of the
/// second, p99 µs.
fn judged_seconds(results: &[TenantResult]) -> Vec<(String, f64, f64)> {
    results[..READERS]
        .iter()
        .flat_map(|t| {
            t.per_second
                .iter()
                .skip(1)
                .filter(|s| s.iops > 0)
                .map(|s| (t.name.clone(), s.t_s, s.p99_us))
        })
        .collect()
}
