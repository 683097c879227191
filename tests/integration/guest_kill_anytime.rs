//! A real guest across daemon kills at any moment, its VMM's reconnect handshake
//! included: what needs a QEMU that reconnects after a backend dies inside that
//! handshake (9.1 or later; Debian 12's 7.2 gives up, design §8.14).

use crate::daemon::DaemonProcess;
use crate::guest::*;
use crate::guest_tests::{
    assert_written_and_verified, start_fio_across_restarts, OUT_OF_ORDER_VERIFIED_WRITES,
};
use std::time::{Duration, Instant};

/// Kills during I/O, each followed by a daemon that dies inside QEMU's reconnect
/// handshake.
const KILLS: u32 = 4;

/// The restarted daemon's own crash point: QEMU's reconnect handshake, where QEMU 7.2
/// gives up.
const IN_HANDSHAKE: &str = "\n[device.emulated.crash]\nat = \"mid-handshake\"\n";

/// `config` with the handshake crash point in its `[device.emulated]` table.
fn crashing_config(config: &str) -> String {
    let at = config
        .find("[[volume]]")
        .expect("a volume table follows the device's");
    format!("{}{IN_HANDSHAKE}\n{}", &config[..at], &config[at..])
}

/// (g) Four times while the guest writes 4 KiB and 256 KiB blocks at QD32 on the emulated
/// device and verifies them, the daemon is SIGKILLed at a random moment of the I/O, 0.2–1.5 s
/// after QEMU connected; the daemon started in its place kills itself inside QEMU's
/// reconnect handshake (the `mid-handshake` crash point: at `GET_PROTOCOL_FEATURES`,
/// inside QEMU's `vhost_dev_init`), and a third one is started. QEMU (bookworm-backports' 10.0,
/// `scripts/guest/fetch-qemu.sh`) reconnects every time, and fio finishes without an
/// error or a mismatch.
#[test]
fn guest_survives_daemon_kills_at_any_moment_its_reconnect_handshake_included() {
    let Some(image) = image() else { return };
    let qemu = image.qemu_fixed.clone().unwrap_or_else(|| {
        panic!(
            "this test needs QEMU 9.1 or later: scripts/guest/fetch-qemu.sh (run by \
             prepare.sh) could not unpack bookworm-backports' QEMU"
        )
    });
    let _l = lock();
    let mut ctx = Ctx::new("kill-anytime");
    let config = guest_config(crate::devices::SLOW_DEVICE, &[("vm", 512, "")]);
    let mut d = DaemonProcess::start(&config);
    ctx.watch(&d);
    let t = Instant::now();
    let g = start_fio_across_restarts(image, &ctx, &d, OUT_OF_ORDER_VERIFIED_WRITES, Some(qemu));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let crashing = crashing_config(&config);
    for i in 0..KILLS {
        let after_ms = 200 + u64::from(seed.rotate_left(i * 5)) % 1300;
        std::thread::sleep(Duration::from_millis(after_ms));
        g.assert_fio_running(&format!("kill {}", i + 1));
        let dir = d.kill();
        let dying = DaemonProcess::start_in(dir, &crashing);
        ctx.watch(&dying);
        assert!(
            dying.wait_for_log("crash point reached"),
            "QEMU did not reconnect after kill {}; console {}",
            i + 1,
            g.log.display()
        );
        let dir = dying.wait_killed();
        d = DaemonProcess::start_in(dir, &config);
        ctx.watch(&d);
        assert!(
            d.wait_for_log("frontend connected"),
            "QEMU did not reconnect after a daemon died in its handshake ({}); console {}",
            i + 1,
            g.log.display()
        );
        eprintln!(
            "kill-anytime: killed {after_ms} ms into I/O, then in QEMU's handshake; \
             reconnected at {:.1?}",
            t.elapsed()
        );
    }
    let run = g.finish(&d);
    let json = run.fio_ok();
    // QEMU reports each handshake the crash point cut short.
    let failed_handshakes = run.console.matches("vhost_backend_init failed").count();
    let (w, r) = assert_written_and_verified(&json);
    eprintln!(
        "kill-anytime: {w} writes, {r} verified reads, {failed_handshakes} handshakes cut \
         short, {:.1?}",
        t.elapsed()
    );
    assert_eq!(
        failed_handshakes, KILLS as usize,
        "QEMU's reports of a failed vhost_backend_init"
    );
}
