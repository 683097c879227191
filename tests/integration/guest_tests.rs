//! The real-guest tests (the harness is `guest.rs`): data verified through the guest's
//! own driver, device errors, multi-queue, flushes, a weighted split between two guests,
//! and a guest that outlives its daemon's restarts and kills.

use crate::daemon::{tempdir_owned_by, DaemonProcess};
use crate::guest::*;
use crate::privileges::{assert_runs_as_nobody, NOBODY};
use std::time::{Duration, Instant};

/// (a) Random reads and writes of mixed sizes, every written block read back and checked
/// (crc32c), plus what the guest sees of the device: capacity, block size, write cache,
/// discard, serial. The daemon is started as root and runs as `nobody` with no
/// capability (`[security] user`), as a confined host runs it.
#[test]
fn guest_random_read_write_verify() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("randrw-verify");
    let d = DaemonProcess::start_in(
        tempdir_owned_by(NOBODY, NOBODY),
        &guest_config(
            "[security]\nuser = \"nobody\"\n",
            &[("vm", 256, "serial = \"guest-a\"")],
        ),
    );
    ctx.watch(&d);
    let spec = GuestSpec::new(fio(&[
        &[
            "name=randwrite-verify",
            "rw=randwrite",
            "bs=4k",
            "iodepth=16",
            "size=32M",
            "verify=crc32c",
            "do_verify=1",
            "verify_fatal=1",
        ],
        &[
            "name=randrw-verify",
            "rw=randrw",
            "bsrange=4k-128k",
            "iodepth=16",
            "offset=64M",
            "size=64M",
            "verify=crc32c",
            "do_verify=1",
            "verify_backlog=64",
            "verify_fatal=1",
        ],
    ]));
    let (run, json) = run_one(&ctx, image, &d, "vm", &spec);
    let field = |k| run.harness_field("vda", k).unwrap_or_default();
    assert_eq!(
        field("sectors"),
        (256u64 << 20 >> 9).to_string(),
        "capacity"
    );
    assert_eq!(field("logical-block"), "512", "block size");
    assert_eq!(field("write-cache"), "write-back", "VIRTIO_BLK_F_FLUSH");
    assert_ne!(field("discard-max"), "0", "VIRTIO_BLK_F_DISCARD");
    assert_eq!(field("ro"), "0");
    assert_eq!(field("serial"), "guest-a", "GET_ID");
    for name in ["randwrite-verify", "randrw-verify"] {
        let j = job(&json, name);
        let (w, r) = (
            j["write"]["total_ios"].as_f64().unwrap(),
            j["read"]["total_ios"].as_f64().unwrap(),
        );
        eprintln!(
            "{name}: {w} writes ({:.0} IOPS), {r} reads ({:.0} IOPS)",
            j["write"]["iops"].as_f64().unwrap(),
            j["read"]["iops"].as_f64().unwrap()
        );
        // do_verify reads back every written block after the write phase.
        assert!(w > 500.0 && r >= w, "{name}: {w} writes, {r} reads");
    }
    assert_runs_as_nobody(d.pid());
}

/// (a') Device errors under a real guest (`[[device.emulated.faults]]`): failed reads,
/// short reads and a stalled read during fio's verify pass reach fio as I/O errors, one
/// per injected fault, and never as data that verifies wrong.
#[test]
fn guest_sees_injected_device_errors_as_errors_never_as_bad_data() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("faults");
    let device = r#"kind = "emulated"
[device.emulated]
rbps = 2000000000
rseqiops = 200000
rrandiops = 200000
wbps = 1000000000
wseqiops = 100000
wrandiops = 100000
[[device.emulated.faults]]
op = "read"
error = "eio"
every = 500
count = 3
[[device.emulated.faults]]
op = "read"
error = "short"
every = 700
count = 3
[[device.emulated.faults]]
op = "read"
error = "stall"
stall = "500ms"
every = 900
count = 1
[control]
socket = "control.sock"
"#;
    let d = DaemonProcess::start(&guest_config(device, &[("vm", 64, "")]));
    ctx.watch(&d);
    // iodepth 1 keeps the guest from merging requests, so each fault fails one fio IO.
    let spec = GuestSpec::new(fio(&[&[
        "name=verify-with-faults",
        "rw=randwrite",
        "bs=4k",
        "iodepth=1",
        "size=16M",
        "verify=crc32c",
        "do_verify=1",
        "verify_fatal=1",
        "continue_on_error=read",
    ]]));
    let g = Guest::start(image, &d.socket("vm"), ctx.console_path("vm"), &spec);
    let run = g.finish(&d);
    let (json, _rc) = run.fio_json();
    if let Some(l) = run.bad_data() {
        run.fail(&format!("an injected fault became bad data: {l}"));
    }
    let j = job(&json, "verify-with-faults");
    let injected = 7;
    let errors = j["total_err"].as_u64().unwrap_or_default();
    eprintln!(
        "fio: {} writes, {} reads, {errors} errors (first {})",
        j["write"]["total_ios"], j["read"]["total_ios"], j["first_error"]
    );
    assert_eq!(errors, injected, "fio saw each injected fault as one error");
    assert!(
        j["read"]["total_ios"].as_u64().unwrap_or_default() >= 4096 - injected,
        "fio verified the whole file"
    );
    assert!(
        run.console.contains("I/O error"),
        "the guest kernel logged the errors"
    );
    let stats = crate::daemon::control_get(&d, "/v1/stats");
    assert_eq!(crate::daemon::stats_of(&stats, "vm")["errors"], injected);
}

/// (b) Two vCPUs and two fio jobs pinned one per CPU: the guest driver uses both
/// virtqueues (hardware queues), each job writes and verifies its own region.
#[test]
fn guest_multi_queue() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("multi-queue");
    let d = DaemonProcess::start(&guest_config("", &[("vm", 256, "")]));
    ctx.watch(&d);
    let mut spec = GuestSpec::new(fio(&[&[
        "name=mq",
        "rw=randrw",
        "bs=4k",
        "iodepth=16",
        "numjobs=2",
        "cpus_allowed=0-1",
        "cpus_allowed_policy=split",
        "size=32M",
        "offset_increment=64M",
        "verify=crc32c",
        "do_verify=1",
        "verify_fatal=1",
    ]]));
    spec.smp = 2;
    let (run, json) = run_one(&ctx, image, &d, "vm", &spec);
    assert_eq!(
        run.harness_field("vda", "hw-queues").as_deref(),
        Some("2"),
        "guest should see 2 hardware queues"
    );
    let irqs = |q: &str| -> u64 {
        run.harness_field("queue-irqs", q)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (q0, q1) = (irqs("req.0"), irqs("req.1"));
    eprintln!(
        "multi-queue: {} writes, {} reads; completion interrupts req.0={q0} req.1={q1}",
        sum(&json, "write", "total_ios"),
        sum(&json, "read", "total_ios")
    );
    if q0 < 100 || q1 < 100 {
        run.fail(&format!(
            "both virtqueues should carry I/O: interrupts req.0={q0} req.1={q1}"
        ));
    }
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2);
}

/// (c) Flush-heavy: synchronous writes with an fsync after each one (each becomes a
/// VIRTIO_BLK_T_FLUSH, the guest sees a write-back cache), next to async writes with an
/// fsync every 4; everything verified.
#[test]
fn guest_flush_heavy() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("flush");
    let d = DaemonProcess::start(&guest_config("", &[("vm", 256, "")]));
    ctx.watch(&d);
    // Two jobs at once (no stonewall between them): the fio() helper adds stonewall, so
    // list the options by hand.
    let mut opts: Vec<&str> = vec!["name=fsync-each", "filename=/dev/vda", "direct=1"];
    opts.extend([
        "ioengine=psync",
        "rw=randwrite",
        "bs=4k",
        "size=4M",
        "fsync=1",
        "verify=crc32c",
        "do_verify=1",
        "verify_fatal=1",
    ]);
    opts.extend(["name=fsync-every-4", "filename=/dev/vda", "direct=1"]);
    opts.extend([
        "ioengine=libaio",
        "iodepth=8",
        "rw=randwrite",
        "bs=16k",
        "offset=64M",
        "size=16M",
        "fsync=4",
        "verify=crc32c",
        "do_verify=1",
        "verify_fatal=1",
    ]);
    let (run, json) = run_one(
        &ctx,
        image,
        &d,
        "vm",
        &GuestSpec::new(opts.iter().map(|s| s.to_string()).collect()),
    );
    assert_eq!(
        run.harness_field("vda", "write-cache").as_deref(),
        Some("write-back"),
        "without a write-back cache the guest sends no flushes"
    );
    for (name, per) in [("fsync-each", 1.0), ("fsync-every-4", 4.0)] {
        let j = job(&json, name);
        let writes = j["write"]["total_ios"].as_f64().unwrap();
        let syncs = j["sync"]["total_ios"].as_f64().unwrap_or(0.0);
        eprintln!(
            "{name}: {writes} writes, {syncs} syncs, sync p99 {:.0} us",
            j["sync"]["lat_ns"]["percentile"]["99.000000"]
                .as_f64()
                .unwrap_or(0.0)
                / 1000.0
        );
        // fio does not count the sync after the last write of the job.
        if writes < 500.0 || syncs < (writes / per).floor() - 1.0 {
            run.fail(&format!("{name}: {writes} writes but only {syncs} syncs"));
        }
    }
}

/// The QoS model of the two-guest test: 1500 random 4 KiB reads per second, vrate pinned at
/// 100 %. TCG guests reach ~4–5k IOPS each, so the modelled device is the bottleneck.
const SLOW_MODEL: &str = r#"
[device.model]
rbps = 100000000
rseqiops = 1500
rrandiops = 1500
wbps = 100000000
wseqiops = 1500
wrandiops = 1500
[device.qos]
min = 100.0
max = 100.0
"#;

/// (d) Two guests at once on volumes with weights 100 and 300: their IOPS split 1:3.
/// Both boot, then start fio at the same moment (released over the serial console).
#[test]
fn guest_two_guests_weighted_split() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("two-guests");
    let d = DaemonProcess::start(&guest_config(
        SLOW_MODEL,
        &[
            ("light", 128, "weight = 100"),
            ("heavy", 128, "weight = 300"),
        ],
    ));
    ctx.watch(&d);
    let mut spec = GuestSpec::new(fio(&[&[
        "name=randread",
        "rw=randread",
        "bs=4k",
        "iodepth=64",
        "time_based",
        "ramp_time=2",
        "runtime=8",
    ]]));
    spec.wait = true;
    let t = Instant::now();
    let mut light = Guest::start(image, &d.socket("light"), ctx.console_path("light"), &spec);
    let mut heavy = Guest::start(image, &d.socket("heavy"), ctx.console_path("heavy"), &spec);
    for (name, g) in [("light", &mut light), ("heavy", &mut heavy)] {
        if !g.wait_for("HARNESS: ready", Duration::from_secs(60)) {
            panic!(
                "guest {name} did not boot to fio; console {}:\n{}",
                g.log.display(),
                tail(&g.console(), 30)
            );
        }
    }
    light.go();
    heavy.go();
    let (light, heavy) = (light.finish(&d), heavy.finish(&d));
    let (lj, hj) = (light.fio_ok(), heavy.fio_ok());
    let (li, hi) = (sum(&lj, "read", "iops"), sum(&hj, "read", "iops"));
    let ratio = hi / li;
    eprintln!(
        "two guests in {:.1?}: light {li:.0} IOPS, heavy {hi:.0} IOPS, ratio {ratio:.2}, total {:.0}",
        t.elapsed(),
        li + hi
    );
    assert!(
        (3.0 * 0.8..=3.0 * 1.2).contains(&ratio),
        "heavy/light = {ratio:.2} (light {li:.0}, heavy {hi:.0} IOPS); consoles {} {}",
        light.log.display(),
        heavy.log.display()
    );
    // The model's capacity is what they share: not more (QoS throttles), and most of it
    // (otherwise the guests, not the device, were the bottleneck and the split means little).
    let total = li + hi;
    assert!(
        (1500.0 * 0.7..=1500.0 * 1.15).contains(&total),
        "total {total:.0} IOPS, the model allows 1500"
    );
}

/// Boots a guest with `reconnect=1` on volume "vm" of `d` running the fio `job`, and waits
/// until fio has started: a guest for a test that restarts the daemon under it.
pub(crate) fn start_fio_across_restarts(
    image: &Image,
    ctx: &Ctx,
    d: &DaemonProcess,
    job: &[&str],
    qemu: Option<String>,
) -> Guest {
    let mut spec = GuestSpec::new(fio(&[job]));
    spec.reconnect = true;
    spec.qemu = qemu;
    let mut g = Guest::start(image, &d.socket("vm"), ctx.console_path("vm"), &spec);
    assert!(
        g.wait_for("HARNESS: fio start", Duration::from_secs(60)),
        "guest did not start fio; console {}:\n{}",
        g.log.display(),
        tail(&g.console(), 30)
    );
    g
}

/// (f) The daemon is killed (SIGKILL: nothing drained, requests in flight in the device)
/// five times, at random moments, while the guest writes 4 KiB and 256 KiB blocks at QD32 on
/// the emulated device, where the small writes overtake the large ones, and verifies
/// them. A new daemon starts at once on the same sockets and disk; QEMU reconnects
/// (`reconnect=1`) with its inflight region, the requests the dead daemon left in flight
/// are resubmitted, and fio finishes without an error or a mismatch. (Without inflight
/// tracking the guest's I/O hangs: QEMU restarts the ring at the used index.)
#[test]
fn guest_survives_daemon_kill_during_out_of_order_io() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("kill");
    let config = guest_config(crate::devices::SLOW_DEVICE, &[("vm", 512, "")]);
    let mut d = DaemonProcess::start(&config);
    ctx.watch(&d);
    let t = Instant::now();
    let g = start_fio_across_restarts(image, &ctx, &d, OUT_OF_ORDER_VERIFIED_WRITES, None);
    // Five kills at random moments, 0.5-1.5 s after QEMU reconnected, from the clock.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    for i in 0..5u32 {
        let after_ms = 500 + u64::from(seed.rotate_left(i * 7) % 1000);
        std::thread::sleep(Duration::from_millis(after_ms));
        g.assert_fio_running(&format!("kill {}", i + 1));
        let dir = d.kill();
        d = DaemonProcess::start_in(dir, &config);
        ctx.watch(&d);
        // The next kill comes after QEMU has reconnected: killed in the middle of its
        // reconnect handshake, QEMU before 9.1 gives up reconnecting ("vhost_backend_init
        // failed", its "lost reconnect" bug; design §8.14).
        assert!(
            d.wait_for_log("frontend connected"),
            "QEMU did not reconnect after kill {}; console {}",
            i + 1,
            g.log.display()
        );
        eprintln!(
            "kill: daemon killed after {after_ms} ms and restarted at {:.1?}",
            t.elapsed()
        );
    }
    let run = g.finish(&d);
    let json = run.fio_ok();
    let resubmitted = d.log_text().contains("resubmitting");
    eprintln!("kill: the last daemon resubmitted requests left in flight: {resubmitted}");
    let (w, r) = assert_written_and_verified(&json);
    eprintln!("kill: {w} writes, {r} verified reads, {:.1?}", t.elapsed());
}

/// Random writes of 4 KiB and 256 KiB at QD32 with verify: on the emulated device the
/// small ones overtake the large ones, so completions come out of order. Twice over a
/// 512 MiB volume: about 20 s of fio under TCG, twice what the kills of either test take
/// (256 MiB once ended before the fifth kill in 2 of 5 runs).
pub(crate) const OUT_OF_ORDER_VERIFIED_WRITES: &[&str] = &[
    "name=verify-across-kills",
    "rw=randwrite",
    "bssplit=4k/50:256k/50",
    "iodepth=32",
    "size=512M",
    "loops=2",
    "verify=crc32c",
    "do_verify=1",
    "verify_fatal=1",
];

/// fio's first job wrote and read back at least all it wrote; returns (writes, reads).
pub(crate) fn assert_written_and_verified(json: &serde_json::Value) -> (f64, f64) {
    let j = &json["jobs"][0];
    let (w, r) = (
        j["write"]["total_ios"].as_f64().unwrap(),
        j["read"]["total_ios"].as_f64().unwrap(),
    );
    assert!(w > 0.0 && r >= w, "{w} writes, {r} reads");
    (w, r)
}

/// (e) The daemon restarts (SIGTERM, which drains in-flight requests, then a new process on
/// the same sockets and disk) twice while the guest writes and verifies; QEMU reconnects
/// (`reconnect=1`) and fio finishes without an error or a mismatch.
#[test]
fn guest_survives_daemon_restart() {
    let Some(image) = image() else { return };
    let _l = lock();
    let mut ctx = Ctx::new("reconnect");
    let config = guest_config("", &[("vm", 256, "")]);
    let mut d = DaemonProcess::start(&config);
    ctx.watch(&d);
    let t = Instant::now();
    let g = start_fio_across_restarts(
        image,
        &ctx,
        &d,
        &[
            "name=verify-across-restart",
            "rw=randwrite",
            "bs=4k",
            "iodepth=16",
            "size=96M",
            "verify=crc32c",
            "do_verify=1",
            "verify_fatal=1",
        ],
        None,
    );
    for (i, after) in [2u64, 3].into_iter().enumerate() {
        std::thread::sleep(Duration::from_secs(after));
        g.assert_fio_running(&format!("restart {}", i + 1));
        let (status, dir) = d.stop();
        assert!(status.success(), "daemon exit status {status} on SIGTERM");
        d = DaemonProcess::start_in(dir, &config);
        ctx.watch(&d);
        eprintln!("reconnect: daemon restarted at {:.1?}", t.elapsed());
    }
    let run = g.finish(&d);
    let json = run.fio_ok();
    // QEMU really reconnected to the last daemon (it logs each lost connection too).
    let reconnected = d.log_text().contains("frontend connected");
    let lost = run.console.matches("ring restore failed").count();
    eprintln!("reconnect: QEMU lost the backend {lost} times; reconnected: {reconnected}");
    if !reconnected {
        run.fail("QEMU never connected to the restarted daemon");
    }
    let j = &json["jobs"][0];
    let (w, r) = (
        j["write"]["total_ios"].as_f64().unwrap(),
        j["read"]["total_ios"].as_f64().unwrap(),
    );
    eprintln!(
        "reconnect: {w} writes, {r} verified reads, {:.1?}",
        t.elapsed()
    );
    assert!(w >= 24576.0 && r >= w, "{w} writes, {r} reads");
}
