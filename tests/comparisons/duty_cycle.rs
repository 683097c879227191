//! Readers that come and go beside a writer, on the emulated slow device with the
//! defaults: the protection holds when they come back, and the writer gets the device
//! back when they leave.

use crate::daemon::{config, volume, DaemonProcess};
use crate::devices::{reader, run_one, DEFAULTS, SLOW_DEVICE};
use crate::emulated::measure;
use std::time::Duration;
use vhost_iocost::loadgen::{self, Duty, Pattern, TenantSpec};

/// The readers' SLO: p99 within 1 ms in every second they read.
const SLO_US: f64 = 1000.0;

/// Four QD1 readers at 500 IOPS each, on for 2 s and off for 6 s (from 0 s, 8 s), beside
/// an unpaced 1 MiB QD8 writer, controller free: every second in which a reader completed
/// reads, the first excepted (clients connecting), has its p99 within 1 ms, the second
/// phase included (the readers come back to a vrate that protects them, design §5.9);
/// and from a second after they leave (3–8 s) the writer gets at least 90 % of what it
/// gets alone.
#[test]
fn readers_on_a_duty_cycle_keep_their_slo_and_the_writer_gets_the_device_back() {
    let readers: Vec<String> = (0..4).map(|i| format!("r{i}")).collect();
    let mut volumes: String = readers
        .iter()
        .enumerate()
        .map(|(i, name)| volume(name, 8 * i as u64, 8, ""))
        .collect();
    volumes += &volume("writer", 32, 32, "");
    measure("readers on a duty cycle", || {
        let d = DaemonProcess::start(&config(&format!("{SLOW_DEVICE}{DEFAULTS}"), &volumes));
        let writer = TenantSpec {
            rw: Pattern::Write,
            bs: 1 << 20,
            ramp: Duration::ZERO,
            ..reader(&d, "writer", 8, 12)
        };
        let solo = run_one(TenantSpec {
            runtime: Duration::from_secs(3),
            ..writer.clone()
        })
        .mib_per_s;
        let mut tenants: Vec<TenantSpec> = readers
            .iter()
            .map(|name| TenantSpec {
                rate_iops: Some(500),
                ramp: Duration::ZERO,
                duty: Some(Duty {
                    on: Duration::from_secs(2),
                    off: Duration::from_secs(6),
                }),
                ..reader(&d, name, 1, 12)
            })
            .collect();
        tenants.push(writer);
        let r = loadgen::run(&tenants).unwrap();
        assert!(r.iter().all(|t| t.errors == 0), "{r:?}");
        let missed: Vec<(String, f64, f64)> = r[..readers.len()]
            .iter()
            .flat_map(|t| {
                t.per_second
                    .iter()
                    .skip(1)
                    .filter(|s| s.iops > 0 && s.p99_us > SLO_US)
                    .map(|s| (t.name.clone(), s.t_s, s.p99_us))
            })
            .collect();
        let away: Vec<f64> = r[readers.len()].per_second[3..8]
            .iter()
            .map(|s| s.mib_per_s)
            .collect();
        let summary = format!(
            "reader-seconds over {SLO_US} µs: {missed:?}; writer while the readers are \
             away {away:?} MiB/s, alone {solo:.1}"
        );
        eprintln!("{summary}");
        (missed.is_empty() && away.iter().all(|&x| x >= 0.9 * solo))
            .then_some(())
            .ok_or(summary)
    });
}
