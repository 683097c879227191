//! Host scale: an idle volume costs its two listening sockets (its socket and its
//! hand-over socket) and no thread (one acceptor thread waits on every socket); a
//! connection's threads and descriptors exist while it lasts.

use std::time::{Duration, Instant};

use crate::client::{pattern, Client};
use crate::daemon::DaemonProcess;
use crate::devices::DEFAULTS;

/// A daemon with `n` volumes of 1 MiB each.
fn daemon_with(n: u64) -> DaemonProcess {
    let mut cfg = format!(
        "[device]\npath = \"disk.img\"\ncreate_size = \"{}MiB\"\n{DEFAULTS}\n",
        n.max(1)
    );
    for i in 0..n {
        cfg += &format!(
            "[[volume]]\nname = \"v{i}\"\nsocket = \"v{i}.sock\"\noffset = \"{i}MiB\"\nsize = \"1MiB\"\n"
        );
    }
    DaemonProcess::start(&cfg)
}

fn count(d: &DaemonProcess, what: &str) -> usize {
    std::fs::read_dir(format!("/proc/{}/{what}", d.pid()))
        .unwrap()
        .count()
}

/// Waits (up to 10 s) until the daemon's threads number `want`: a connection's threads
/// end after the frontend has gone.
fn threads_settle_at(d: &DaemonProcess, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = count(d, "task");
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// 200 idle volumes hold as many threads as one (the fixed base: acceptor, planner,
/// control) and two descriptors each beyond it. A frontend on one of them gets its data
/// written and read back; while it is connected the daemon has more threads, and once
/// it leaves they are gone and the next frontend, on another volume, is served too.
#[test]
fn an_idle_volume_holds_a_socket_and_no_thread() {
    let one = daemon_with(1);
    let (base_threads, base_fds) = (count(&one, "task"), count(&one, "fd"));
    drop(one);
    let d = daemon_with(200);
    let (threads, fds) = (count(&d, "task"), count(&d, "fd"));
    eprintln!("1 volume: {base_threads} threads, {base_fds} fds; 200 volumes: {threads} threads, {fds} fds");
    assert_eq!(threads, base_threads, "idle volumes hold threads");
    assert!(
        fds <= base_fds + 2 * 199,
        "{fds} fds for 200 volumes, {base_fds} for one"
    );

    for name in ["v150", "v7"] {
        let mut c = Client::connect(&d.socket(name), 1, 8192);
        assert!(
            c.round_trip(4096, &pattern(4096, 4096, 9)),
            "{name}: data read back"
        );
        let connected = count(&d, "task");
        assert!(
            connected > base_threads,
            "{name}: {connected} threads while connected"
        );
        drop(c);
        let after = threads_settle_at(&d, base_threads);
        assert_eq!(after, base_threads, "{name}: the connection's threads stay");
    }
    assert_eq!(count(&d, "fd"), fds, "the connections' descriptors stay");
}
