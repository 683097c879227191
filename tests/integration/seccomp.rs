//! `[security] seccomp`: every thread of the daemon confines itself to its class's system
//! calls (`enforce` by default), and a call outside them kills the daemon with SIGSYS and a
//! line naming the thread class and the call.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::pattern;
use crate::daemon::{config, control_call, volume, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK};
use serde_json::json;

/// Every thread's `Seccomp:` mode (2 is a filter) and its number of stacked filters (a
/// thread that ends while they are read is left out).
fn thread_seccomp(pid: u32) -> Vec<(String, String, u32)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| {
            let t = t.ok()?.path();
            let status = std::fs::read_to_string(t.join("status")).ok()?;
            let field = |key: &str| {
                let line = status.lines().find(|l| l.starts_with(key)).unwrap();
                line[key.len()..].trim().to_owned()
            };
            let name = std::fs::read_to_string(t.join("comm")).ok()?;
            Some((
                format!("{} ({})", t.display(), name.trim()),
                field("Seccomp:"),
                field("Seccomp_filters:").parse().unwrap(),
            ))
        })
        .collect()
}

/// Every thread's `Seccomp:` field is `mode` (0 none, 2 filtered).
fn assert_every_thread_in_mode(pid: u32, mode: &str) {
    let threads = thread_seccomp(pid);
    assert!(threads.iter().all(|(_, m, _)| m == mode), "{threads:?}");
}

/// A daemon with `extra` configuration and volume `a`, and a frontend connected to it.
fn serving_volume_a(extra: &str) -> (DaemonProcess, RawFrontend) {
    let d = DaemonProcess::start(&config(extra, &volume("a", 0, 8, "")));
    let f = RawFrontend::connect(&d.socket("a"), Options::default());
    (d, f)
}

#[test]
fn every_thread_of_the_daemon_runs_under_a_filter() {
    // A frontend stays connected and has done I/O, so its connection and worker threads
    // are counted; a volume is hot added, so the control API's threads have run too.
    let (d, mut f) = serving_volume_a(
        "[control]\nsocket = \"control.sock\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
    );
    let data = pattern(0, 4096, 7);
    assert_eq!(f.write_sectors(0, 0, &data), S_OK as u8);
    assert_eq!(f.read_sectors(0, 0, 4096), (S_OK as u8, data.clone()));
    let body = json!({ "name": "b", "socket": "b.sock", "size": "4MiB" });
    let (status, added) = control_call(&d, "POST", "/v1/volumes", Some(&body));
    assert_eq!(status, 201, "{added}");
    let mut g = RawFrontend::connect(&d.socket("b"), Options::default());
    assert_eq!(g.write_sectors(0, 8, &data), S_OK as u8);
    let metrics = crate::daemon::metrics_address(&d);
    let scraped = scrape(&metrics);
    assert!(scraped.contains("vhost_iocost"), "{scraped}");

    let threads = thread_seccomp(d.pid());
    assert!(threads.len() >= 6, "{threads:?}");
    for (task, mode, _) in &threads {
        assert_eq!(mode, "2", "{task} runs without a filter: {threads:?}");
    }
    // Still serving after the check, on both volumes.
    assert_eq!(f.read_sectors(0, 0, 4096), (S_OK as u8, data.clone()));
    assert_eq!(g.read_sectors(0, 8, 4096), (S_OK as u8, data));
    assert!(!d.log_text().contains("seccomp"), "{}", d.log_text());
    let (status, _) = d.stop();
    assert!(status.success(), "{status}");
}

/// GET /metrics over plain TCP.
fn scrape(address: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// A daemon whose `class` threads make a forbidden call (`getppid`) once confined.
fn tripped_config(class: &str) -> String {
    config(
        &format!(
            "{}seccomp_trip = \"{class}\"\n[control]\nsocket = \"control.sock\"\n",
            crate::devices::SLOW_DEVICE
        ),
        &volume("a", 0, 8, ""),
    )
}

/// Runs the daemon on `config` until it exits (at most 30 s), connecting a frontend and
/// doing I/O whenever its socket is there; returns its status and what it wrote to stderr.
fn run_until_it_dies(config: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut child = Command::new(support::binary())
        .args(["run", "--config", "config.toml"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let socket = dir.path().join("a.sock").to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the daemon did not die");
        if let Ok(stream) = std::os::unix::net::UnixStream::connect(&socket) {
            drop(stream);
            // A frontend that dies with the daemon: its I/O fails, which is the point.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut f = RawFrontend::connect(&socket, Options::default());
                f.read_sectors(0, 0, 4096)
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    (status, text)
}

#[test]
fn a_forbidden_call_kills_the_daemon_with_sigsys_naming_the_class_and_the_call() {
    for class in [
        "worker",
        "connection",
        "planner",
        "control",
        "acceptor",
        "main",
    ] {
        let (status, stderr) = run_until_it_dies(&tripped_config(class));
        assert_eq!(
            status.signal(),
            Some(libc::SIGSYS),
            "{class}: {status}\n{stderr}"
        );
        let said = format!("({class} class) made system call getppid");
        assert!(stderr.contains(&said), "{class}: {stderr}");
        assert!(stderr.contains("src/seccomp/table.rs"), "{class}: {stderr}");
    }
}

#[test]
fn in_log_mode_a_forbidden_call_runs_and_the_daemon_keeps_serving() {
    let d = DaemonProcess::start(
        &tripped_config("worker").replace("[control]", "[security]\nseccomp = \"log\"\n[control]"),
    );
    assert!(d.wait_for_log("not enforced"), "{}", d.log_text());
    let mut f = RawFrontend::connect(&d.socket("a"), Options::default());
    let data = pattern(0, 4096, 9);
    assert_eq!(f.write_sectors(0, 0, &data), S_OK as u8);
    assert_eq!(f.read_sectors(0, 0, 4096), (S_OK as u8, data));
    assert_every_thread_in_mode(d.pid(), "2");
    let (status, _) = d.stop();
    assert!(status.success(), "{status}");
}

#[test]
fn seccomp_off_installs_no_filter_and_an_unknown_mode_is_refused_naming_the_key() {
    let (d, mut f) = serving_volume_a("[security]\nseccomp = \"off\"\n");
    assert_eq!(f.read_sectors(0, 0, 512).0, S_OK as u8);
    assert_every_thread_in_mode(d.pid(), "0");
    drop(d);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        config("[security]\nseccomp = \"strict\"\n", &volume("a", 0, 8, "")),
    )
    .unwrap();
    let out = Command::new(support::binary())
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("unknown variant `strict`")
            && stderr.contains("`enforce`, `log`, `off`")
            && stderr.contains("seccomp = \"strict\""),
        "{stderr}"
    );
}

/// The control API's less common paths under its filter: a forced removal that drains a
/// request still in the device, and a hot add whose socket path holds a stale socket
/// (probed with `connect`, then replaced).
#[test]
fn a_forced_removal_with_io_in_flight_and_a_hot_add_over_a_stale_socket_keep_serving() {
    let d = DaemonProcess::start(&config(
        &format!(
            "{}{}[control]\nsocket = \"control.sock\"\n",
            crate::devices::SLOW_DEVICE,
            // The first read of any volume (b's, below) stalls.
            "\n[[device.emulated.faults]]\nop = \"read\"\nerror = \"stall\"\nstall = \"1s\"\ncount = 1\n"
        ),
        &(volume("a", 0, 8, "") + &volume("b", 8, 8, "")),
    ));
    let mut b = RawFrontend::connect(&d.socket("b"), Options::default());
    // The read stalls in the device; the write behind it completing shows it was taken.
    let (read, _) = b.rw_chain(crate::raw_frontend::T_IN, 0, 4096);
    let (write, _) = b.rw_chain(crate::raw_frontend::T_OUT, 8, 4096);
    b.submit(0, &read);
    let write_head = b.submit(0, &write);
    b.kick(0);
    let used = b.wait_used(0, 1);
    assert_eq!(used[0].head, write_head, "{used:?}");
    let (status, body) = control_call(&d, "DELETE", "/v1/volumes/b?force=true", None);
    assert_eq!(status, 204, "{body}");
    drop(b);

    let stale = d.path("c.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let body = json!({ "name": "c", "socket": "c.sock", "size": "4MiB" });
    let (status, added) = control_call(&d, "POST", "/v1/volumes", Some(&body));
    assert_eq!(status, 201, "{added}");
    let mut c = RawFrontend::connect(&d.socket("c"), Options::default());
    let data = pattern(0, 4096, 3);
    assert_eq!(c.write_sectors(0, 0, &data), S_OK as u8);
    assert_eq!(c.read_sectors(0, 0, 4096), (S_OK as u8, data.clone()));
    let mut a = RawFrontend::connect(&d.socket("a"), Options::default());
    assert_eq!(a.write_sectors(0, 0, &data), S_OK as u8);
    assert_eq!(a.read_sectors(0, 0, 4096), (S_OK as u8, data));
    let log = d.log_text();
    let (status, _) = d.stop();
    assert!(status.success(), "{status}\n{log}");
}
