//! Per-volume pressure against what the workload predicts: a volume held back by QoS for
//! its whole backlogged run stalls for that run's time, within 10 %, under the cause
//! that holds it; a volume that issues nothing stalls for none. The cap's case is in
//! `caps.rs`.

use std::time::Instant;

use vhost_iocost::loadgen;

use crate::daemon::{config, volume, volume_stats, DaemonProcess, SLOW_MODEL};
use crate::devices::reader;

/// Weights 100 and 300 on a model of 4000 reads per second with vrate pinned: both
/// readers, backlogged at QD16, are held by their budgets the whole run (the model, not
/// the device, is the bottleneck), so each one's budget stall (`wait_us`, time with a
/// request waiting for budget) is the run's wall time within 10 %, with no cap or class
/// stall; the idle volume has none.
#[test]
fn a_weight_throttled_volumes_budget_stall_is_its_backlogged_time() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}[control]\nsocket = \"control.sock\"\n"),
        &(volume("light", 0, 16, "weight = 100")
            + &volume("heavy", 16, 16, "weight = 300")
            + &volume("idle", 32, 16, "")),
    ));
    let start = Instant::now();
    let results = loadgen::run(&[reader(&d, "light", 16, 4), reader(&d, "heavy", 16, 4)]).unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    assert!(results.iter().all(|r| r.errors == 0), "{results:?}");
    for name in ["light", "heavy"] {
        let s = volume_stats(&d, name);
        let stalled = s["wait_us"].as_u64().unwrap() as f64 / 1e6;
        eprintln!("{name}: budget stall {stalled:.3} s over a {elapsed:.3} s run; {s}");
        assert!(
            (stalled - elapsed).abs() <= 0.1 * elapsed,
            "{name}: stalled {stalled:.3} s over a {elapsed:.3} s run"
        );
        assert_eq!(
            (s["cap_wait_us"].as_u64(), s["class_wait_us"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let idle = volume_stats(&d, "idle");
    assert_eq!(
        [
            &idle["wait_us"],
            &idle["cap_wait_us"],
            &idle["class_wait_us"]
        ],
        [0, 0, 0],
        "{idle}"
    );
}
