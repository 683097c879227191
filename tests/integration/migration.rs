//! Live migration of a real guest between two QEMU processes on this host
//! (design §8.8–8.9): the source attaches to the volume's socket, the destination
//! (`-incoming`) to its hand-over socket while the source still runs, and a guest running
//! fio with verify is migrated in the middle of its I/O. Verify passes on the destination,
//! and the destination serves the rest of the job. (The lease's exclusion is tested by
//! `handover.rs`: QEMU never makes the two connections contend.)
//!
//! That every page the daemon writes is logged is checked exactly by `dirty_log.rs`: this
//! test does not catch a missing mark (measured, BENCHMARKS "Live migration").

use crate::daemon::{volume_stats, DaemonProcess};
use crate::guest::{fio, guest_config, image, lock, Ctx, Guest, GuestSpec};
use crate::qmp::Qmp;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Requests served on volume `name` so far.
fn served(d: &DaemonProcess, name: &str) -> u64 {
    let s = volume_stats(d, name);
    s["reads"].as_u64().unwrap() + s["writes"].as_u64().unwrap()
}

/// Polls `what` until it holds, failing with `why` after `secs` seconds.
fn wait_until(secs: u64, why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !what() {
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn guest_live_migrates_to_a_second_qemu_on_this_host_and_verify_passes() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("migration");
    let d = DaemonProcess::start(&guest_config(
        "\n[control]\nsocket = \"control.sock\"\n",
        &[("vm", 256, "")],
    ));
    ctx.watch(&d);
    // Random writes, each block read back and checked (crc32c) a little later: reads
    // land in guest memory all through the migration.
    let spec = GuestSpec {
        wait: true,
        qmp: Some(d.path("source.qmp")),
        ..GuestSpec::new(fio(&[&[
            "name=migrate-verify",
            "rw=randwrite",
            "bs=4k",
            "iodepth=8",
            "size=32M",
            "verify=crc32c",
            "verify_backlog=64",
            "time_based=1",
            "runtime=30",
        ]]))
    };
    let mut source = Guest::start(image, &d.socket("vm"), ctx.console_path("source"), &spec);
    assert!(
        source.wait_for("HARNESS: ready", Duration::from_secs(60)),
        "the source guest did not boot"
    );

    // The destination connects and completes its handshake while the source is
    // connected; QEMU listens for the migration only after that.
    let incoming = d.path("migration.sock");
    let dest_spec = GuestSpec {
        wait: false,
        qmp: Some(d.path("dest.qmp")),
        incoming: Some(format!("unix:{}", incoming.display())),
        ..spec.clone()
    };
    let handover = d.socket("vm") + ".handover";
    let dest = Guest::start(image, &handover, ctx.console_path("dest"), &dest_spec);
    wait_until(
        30,
        "the destination QEMU never listened for the migration",
        || incoming.exists(),
    );

    // Migrate once fio is well under way, slowly enough for several passes.
    source.go();
    wait_until(30, "the source guest's fio did not start", || {
        served(&d, "vm") >= 2000
    });
    let migration = migrate(&d.path("source.qmp"), &incoming);
    let at_switch = served(&d, "vm");
    eprintln!(
        "migration completed in {} ms, {} dirty syncs, {} MiB copied, downtime {} ms; {at_switch} requests served before the switch",
        migration["total-time"],
        migration["ram"]["dirty-sync-count"],
        migration["ram"]["transferred"].as_u64().unwrap_or(0) >> 20,
        migration["downtime"]
    );
    assert!(
        migration["ram"]["dirty-sync-count"].as_u64().unwrap() >= 2,
        "no second pass: the migration did not overlap the guest's I/O: {migration}"
    );

    // The guest finishes on the destination: fio's verify and error checks pass there.
    let run = dest.finish(&d);
    let json = run.fio_ok();
    assert!(
        crate::guest::sum(&json, "read", "total_ios") > 0.0,
        "fio verified nothing"
    );
    assert!(
        served(&d, "vm") > at_switch,
        "the destination served nothing after the switch"
    );
    // QEMU stops the source's rings before the destination starts its own: the lease
    // was never contended.
    assert!(
        !d.log_text()
            .contains("this one waits until they are stopped"),
        "a frontend waited for the other's rings"
    );
    drop(source);
}

/// Migrates the guest behind QMP socket `qmp` to the QEMU listening on `incoming`, at
/// 64 MiB/s so that the guest's I/O spans several passes; returns `query-migrate`'s
/// answer once it completed (failing the test if it failed or was cancelled).
fn migrate(qmp: &std::path::Path, incoming: &std::path::Path) -> Value {
    let mut qmp = Qmp::connect(qmp, Duration::from_secs(5));
    qmp.execute("migrate-set-parameters", json!({"max-bandwidth": 64 << 20}));
    qmp.execute(
        "migrate",
        json!({"uri": format!("unix:{}", incoming.display())}),
    );
    let mut migration = Value::Null;
    wait_until(60, "the migration did not complete", || {
        migration = qmp.execute("query-migrate", json!({}));
        let status = migration["status"].as_str().unwrap_or("");
        assert!(
            !["failed", "cancelled"].contains(&status),
            "migration ended: {migration}"
        );
        status == "completed"
    });
    migration
}
