//! Stopping a queue (GET_VRING_BASE) while QoS holds other requests back.

use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::*;
use std::sync::mpsc;
use std::time::Duration;

/// 200 random 4 KiB reads per second at a vrate pinned to 100 %: each read waits ~5 ms for
/// budget, so a queue of them stays throttled for a while (while a neighbour is active:
/// a volume alone on the device is not throttled).
const THROTTLING_MODEL: &str = r#"
[device.model]
rbps = 200000000
rseqiops = 200
rrandiops = 200
wbps = 200000000
wseqiops = 200
wrandiops = 200
[device.qos]
min = 100.0
max = 100.0
[control]
socket = "control.sock"
"#;

#[test]
fn get_vring_base_does_not_wait_behind_another_queues_throttled_requests() {
    let d = DaemonProcess::start(&config(
        THROTTLING_MODEL,
        &(volume("v", 0, 8, "num_queues = 2") + &volume("n", 8, 8, "")),
    ));
    let neighbour = crate::daemon::busy_neighbour(&d, "n", 4);
    let opts = Options {
        num_queues: 2,
        event_idx: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    // 40 reads on queue 0 (about 200 ms of budget), then 4 on queue 1 behind them in the
    // volume's FIFO.
    for q0 in 0..40u64 {
        let (chain, _) = f.rw_chain(T_IN, (q0 * 4096 * 7919 % (8 << 20)) / 512 / 8 * 8, 4096);
        f.submit(0, &chain);
    }
    f.kick(0);
    f.wait_used(0, 1);
    let mut statuses = Vec::new();
    for k in 0..4u64 {
        let (chain, _) = f.rw_chain(T_IN, k * 8, 4096);
        statuses.push(chain[2].addr);
        f.submit(1, &chain);
    }
    f.kick(1);
    assert!(f.wait_consumed(1, 4), "the worker popped queue 1's chains");
    // The reply must come although queue 0's head is still waiting for budget.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let base = f.get_vring_base(1);
        let _ = tx.send((base, f));
    });
    let (base, f) = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("GET_VRING_BASE(1) hung; daemon log:\n{}", d.log_text()));
    assert_eq!(base, 4, "every chain of queue 1 was popped");
    assert_eq!(f.used_idx(1), 4, "and answered before the reply");
    for (k, st) in statuses.iter().enumerate() {
        assert_eq!(f.read(*st, 1), [S_OK as u8], "queue 1 request {k}");
    }
    assert!(
        f.used_idx(0) < 40,
        "queue 0 is still throttled: the test exercised the wait"
    );
    neighbour.join().unwrap().unwrap();
}
