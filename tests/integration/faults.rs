//! Injected device errors (`[[device.emulated.faults]]`): each fails only its own request
//! with IOERR; the volume's other requests, its data and the other volumes are untouched.

use crate::client::{pattern, Client, Op};
use crate::daemon::{config, control_get, stats_of, volume, DaemonProcess};
use crate::devices::{stalled_read, FAST_DEVICE};
use std::time::{Duration, Instant};

const BLOCK: usize = 64 << 10;

fn faulty_config(rules: &str) -> String {
    let volumes = volume("a", 0, 16, "") + &volume("b", 16, 16, "");
    config(
        &format!("{FAST_DEVICE}{rules}\n[device.qos]\nenable = false\n[control]\nsocket = \"control.sock\"\n"),
        &volumes,
    )
}

/// Writes block `i` of `c`'s pattern (seed `seed`) and returns the result.
fn write_block(c: &mut Client, i: usize, seed: u8) -> i32 {
    let off = (i * BLOCK) as u64;
    let data = pattern(off, BLOCK, seed);
    c.buf()[..BLOCK].copy_from_slice(&data);
    c.run(Op::Write {
        off,
        len: BLOCK,
        buf: 0,
    })
}

/// Reads block `i` back; the result, and whether it holds the pattern of `seed`.
fn read_block(c: &mut Client, i: usize, seed: u8) -> (i32, bool) {
    let off = (i * BLOCK) as u64;
    c.buf()[..BLOCK].fill(0);
    let r = c.run(Op::Read {
        off,
        len: BLOCK,
        buf: 0,
    });
    (r, c.buf()[..BLOCK] == pattern(off, BLOCK, seed)[..])
}

#[test]
fn injected_errors_fail_only_their_request() {
    let d = DaemonProcess::start(&faulty_config(
        r#"
[[device.emulated.faults]]
volume = "a"
op = "write"
error = "eio"
after = 2
count = 1
[[device.emulated.faults]]
volume = "a"
op = "read"
error = "short"
after = 1
count = 1
[[device.emulated.faults]]
volume = "a"
op = "flush"
error = "enospc"
count = 1
"#,
    ));
    let mut a = Client::connect(&d.socket("a"), 1, BLOCK);
    let mut b = Client::connect(&d.socket("b"), 1, BLOCK);
    let eio = -libc::EIO;

    // The third write of a fails; b, writing alongside, sees nothing.
    let writes: Vec<i32> = (0..5).map(|i| write_block(&mut a, i, 1)).collect();
    assert_eq!(writes, [0, 0, eio, 0, 0]);
    for i in 0..5 {
        assert_eq!(write_block(&mut b, i, 2), 0, "b write {i}");
    }
    // The second read of a comes back short: IOERR, and only half the buffer was filled.
    let reads: Vec<(i32, bool)> = [0, 1, 3, 4]
        .iter()
        .map(|&i| read_block(&mut a, i, 1))
        .collect();
    assert_eq!(reads, [(0, true), (eio, false), (0, true), (0, true)]);
    // Asked again, the same block reads back whole.
    assert_eq!(read_block(&mut a, 1, 1), (0, true));
    assert_eq!((a.run(Op::Flush), a.run(Op::Flush)), (eio, 0));
    for i in 0..5 {
        assert_eq!(read_block(&mut b, i, 2), (0, true), "b read {i}");
    }
    assert_eq!(b.run(Op::Flush), 0);

    let stats = control_get(&d, "/v1/stats");
    assert_eq!(stats_of(&stats, "a")["errors"], 3);
    assert_eq!(stats_of(&stats, "b")["errors"], 0);
    assert!(
        d.wait_for_log("injected=true"),
        "the failures are logged as injected:\n{}",
        d.log_text()
    );
}

#[test]
fn a_stalled_request_fails_after_its_stall_while_everything_else_keeps_going() {
    let d = DaemonProcess::start(&faulty_config(&stalled_read("a", "1s")));
    let mut a = Client::connect(&d.socket("a"), 1, 2 * BLOCK);
    let mut b = Client::connect(&d.socket("b"), 1, BLOCK);
    assert_eq!(write_block(&mut a, 0, 3), 0);
    assert_eq!(write_block(&mut b, 0, 4), 0);

    let stalled_at = Instant::now();
    a.submit(
        0,
        Op::Read {
            off: 0,
            len: BLOCK,
            buf: BLOCK,
        },
        999,
    );
    // While it hangs, a's next requests and b's complete as usual, in order.
    for i in 0..50 {
        assert_eq!(read_block(&mut b, 0, 4), (0, true), "b read {i}");
        a.submit(
            0,
            Op::Read {
                off: 0,
                len: BLOCK,
                buf: 0,
            },
            i,
        );
        assert_eq!(
            a.wait(0, 1),
            [(i, 0)],
            "a read {i} overtakes the stalled one"
        );
    }
    assert_eq!(a.buf()[..BLOCK], pattern(0, BLOCK, 3)[..]);
    assert!(
        stalled_at.elapsed() < Duration::from_secs(1),
        "the other requests took the whole stall ({:?}): nothing was overtaken",
        stalled_at.elapsed()
    );
    assert_eq!(a.wait(0, 1), [(999, -libc::EIO)]);
    assert!(
        stalled_at.elapsed() >= Duration::from_secs(1),
        "the stalled read ended after {:?}",
        stalled_at.elapsed()
    );
    let stats = control_get(&d, "/v1/stats");
    assert_eq!(stats_of(&stats, "a")["errors"], 1);
    assert_eq!(stats_of(&stats, "b")["errors"], 0);
}

#[test]
fn a_fault_rule_naming_no_volume_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = faulty_config("[[device.emulated.faults]]\nvolume = \"nope\"\nerror = \"eio\"\n");
    std::fs::write(dir.path().join("c.toml"), text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["check", "--config", "c.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("device.emulated.faults[0].volume") && err.contains("nope"),
        "{err}"
    );
}
