//! `[metrics] listen`: a read-only listener for Prometheus, over TCP or a unix socket,
//! serving `GET /metrics` and nothing else.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::daemon::{config, control_call, metrics_address, volume, DaemonProcess};

/// One HTTP/1.1 request on `stream`; returns the status and the whole response text.
fn http(mut stream: impl Read + Write, method: &str, path: &str) -> (u16, String) {
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    (status, text)
}

/// The `# TYPE` lines of an exposition: which families it has.
fn families(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("# TYPE ")).collect()
}

fn daemon_with_metrics(listen: &str) -> DaemonProcess {
    DaemonProcess::start(&config(
        "",
        &format!(
            "[control]\nsocket = \"control.sock\"\n[metrics]\nlisten = \"{listen}\"\n{}",
            volume("v1", 0, 16, "")
        ),
    ))
}

#[test]
fn prometheus_scrapes_over_tcp_and_nothing_else_is_served() {
    let d = daemon_with_metrics("127.0.0.1:0");
    let addr = metrics_address(&d);
    let connect = || std::net::TcpStream::connect(&addr).unwrap();

    let (status, text) = http(connect(), "GET", "/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{text}"
    );
    assert!(
        text.contains(
            "vhost_iocost_volume_requests_total{volume=\"v1\",group=\"root\",op=\"read\"}"
        ),
        "{text}"
    );
    assert!(text.contains("vhost_iocost_device_vrate_percent"), "{text}");
    // The same families as the control socket's /metrics.
    let control =
        vhost_iocost::control::client::request(&d.path("control.sock"), "GET", "/metrics", None)
            .unwrap();
    assert_eq!(families(&text), families(&control.body));

    // Nothing but GET /metrics: no mutation, no other view.
    let (status, text) = http(connect(), "PUT", "/v1/device/qos");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("serves GET /metrics only"), "{text}");
    let (status, _) = http(connect(), "GET", "/v1/volumes");
    assert_eq!(status, 404);
    let (status, _) = http(connect(), "POST", "/metrics");
    assert_eq!(status, 405);
    let (_, device) = control_call(&d, "GET", "/v1/device", None);
    assert_ne!(device["qos"]["source"], "runtime", "{device}");
    d.stop();
}

#[test]
fn a_unix_metrics_socket_is_group_readable_and_removed_at_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.sock");
    let d = DaemonProcess::start(&config(
        "",
        &format!(
            "[metrics]\nlisten = \"{}\"\n{}",
            path.display(),
            volume("v1", 0, 16, "")
        ),
    ));
    assert_eq!(metrics_address(&d), path.display().to_string());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let (status, text) = http(
        std::os::unix::net::UnixStream::connect(&path).unwrap(),
        "GET",
        "/metrics",
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("volume=\"v1\""), "{text}");
    let (exit, _dir) = d.stop();
    assert!(exit.success());
    assert!(!path.exists(), "the metrics socket is left behind");
}

#[test]
fn a_bad_or_taken_metrics_address_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = |listen: &str, cmd: &str| {
        let cfg = config(
            "",
            &format!(
                "[metrics]\nlisten = \"{listen}\"\n{}",
                volume("v1", 0, 16, "")
            ),
        );
        std::fs::write(dir.path().join("config.toml"), cfg).unwrap();
        Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
            .args([cmd, "--config", "config.toml"])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let o = run("localhost:9477", "check");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("metrics.listen") && e.contains("HOST:PORT"),
        "{e}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let o = run(&taken.local_addr().unwrap().to_string(), "run");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "started on a taken port");
    assert!(
        e.contains("metrics.listen") && e.contains("cannot listen"),
        "{e}"
    );
}
