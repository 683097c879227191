//! The control plane while volumes run: a weight change under load, persistence across a
//! restart, a control path that is no stale socket, `/metrics` against what a blkio
//! client did, the server's header timeout and connection cap, volume selection by query,
//! and a refused group patch. The endpoints one by one: `control.rs`.

use crate::control::*;
use crate::daemon::{config, volume, DaemonProcess, SLOW_MODEL};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use vhost_iocost::control::client;
use vhost_iocost::loadgen::{self, Pattern, TenantSpec};

fn tenant(d: &DaemonProcess, name: &str, runtime: Duration) -> TenantSpec {
    TenantSpec {
        name: name.into(),
        socket: d.socket(name),
        rw: Pattern::RandRead,
        bs: 4096,
        iodepth: 16,
        runtime,
        ..TenantSpec::default()
    }
}

fn volume_stats<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap()
}

#[test]
fn weight_change_under_load_takes_effect_without_reconnecting() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}\n{CONTROL}"),
        &(volume("light", 0, 16, "") + &volume("heavy", 16, 16, "")),
    ));
    let period_us = ok(&d, "GET", "/v1/device", None)["period_us"]
        .as_u64()
        .unwrap();
    let runtime = Duration::from_secs(7);
    let specs = [tenant(&d, "light", runtime), tenant(&d, "heavy", runtime)];
    let load = std::thread::spawn(move || loadgen::run(&specs));

    // Wait until both are active and share 50/50.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = ok(&d, "GET", "/v1/stats", None);
        let (l, h) = (volume_stats(&st, "light"), volume_stats(&st, "heavy"));
        if l["reads"].as_u64().unwrap() > 100
            && h["reads"].as_u64().unwrap() > 100
            && l["hweight_active_pct"] == 50.0
            && h["hweight_active_pct"] == 50.0
        {
            break;
        }
        assert!(Instant::now() < deadline, "load did not start: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(2)); // two seconds at 1:1
    ok(
        &d,
        "PATCH",
        "/v1/volumes/heavy",
        Some(json!({"weight": 300})),
    );
    let changed = Instant::now();
    // The new shares are in effect within two planning periods.
    loop {
        let st = ok(&d, "GET", "/v1/stats", None);
        let h = volume_stats(&st, "heavy")["hweight_active_pct"]
            .as_f64()
            .unwrap();
        let l = volume_stats(&st, "light")["hweight_active_pct"]
            .as_f64()
            .unwrap();
        if h == 75.0 && l == 25.0 {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_micros(2 * period_us),
            "shares still {l}/{h} after two periods"
        );
    }
    let results = load.join().unwrap().unwrap();
    let (light, heavy) = (&results[0], &results[1]);
    assert_eq!(light.errors + heavy.errors, 0, "I/O errors");
    // Per-second completions: seconds 1..2 before the change split 1:1, the last two
    // seconds (well after it) 1:3.
    let ratio = |from: usize, to: usize| {
        let l: u64 = light.per_second[from..to].iter().map(|s| s.iops).sum();
        let h: u64 = heavy.per_second[from..to].iter().map(|s| s.iops).sum();
        h as f64 / l.max(1) as f64
    };
    let n = light.per_second.len().min(heavy.per_second.len());
    assert!(n >= 6, "{n} seconds");
    let before = ratio(1, 2);
    let after = ratio(n - 2, n);
    eprintln!("heavy/light before {before:.2}, after {after:.2}");
    assert!((0.85..=1.15).contains(&before), "before: {before:.2}");
    assert!(
        (3.0 * 0.85..=3.0 * 1.15).contains(&after),
        "after: {after:.2}"
    );
    // No reconnect and no error on the daemon's side either.
    let st = ok(&d, "GET", "/v1/stats", None);
    for name in ["light", "heavy"] {
        let v = volume_stats(&st, name);
        assert_eq!(v["connections"], 1, "{name}: {v}");
        assert_eq!(v["errors"], 0, "{name}: {v}");
    }
}

#[test]
fn restart_keeps_runtime_changes() {
    let cfg = two_volume_config("");
    let d = DaemonProcess::start(&cfg);
    ok(
        &d,
        "PATCH",
        "/v1/volumes/a",
        Some(json!({"weight": 42, "group": "tenant-b", "caps": {"write_bps": "8MiB"}})),
    );
    ok(
        &d,
        "PATCH",
        "/v1/groups/tenant-b",
        Some(json!({"weight": 900, "reserve": {"pct": 10}, "class": "background"})),
    );
    ok(
        &d,
        "PATCH",
        "/v1/volumes/b",
        Some(json!({"class": "background", "reserve": {"iops": 100}})),
    );
    ok(
        &d,
        "PUT",
        "/v1/device/qos",
        Some(json!({"min": 60.0, "max": 120.0})),
    );
    ok(
        &d,
        "PUT",
        "/v1/device/model",
        Some(json!({"preset": "hdd"})),
    );
    let (status, dir) = d.stop();
    assert!(status.success());
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.toml.state.json")).unwrap())
            .unwrap();
    assert_eq!(
        state["volumes"]["a"],
        json!({"weight": 42, "group": "tenant-b", "caps": {"write_bps": "8MiB"}})
    );

    let d = DaemonProcess::start_in(dir, &cfg);
    let a = ok(&d, "GET", "/v1/volumes/a", None);
    assert_eq!(a["weight"], json!({"value": 42, "source": "runtime"}));
    assert_eq!(
        a["group"],
        json!({"value": "tenant-b", "source": "runtime"})
    );
    assert_eq!(
        a["caps"],
        json!({"value": {"write_bps": "8MiB"}, "source": "runtime"})
    );
    let b = ok(&d, "GET", "/v1/volumes/b", None);
    assert_eq!(b["weight"], json!({"value": 300, "source": "config"}));
    assert_eq!(b["caps"], json!({"value": {}, "source": "config"}));
    assert_eq!(
        b["class"],
        json!({"value": "background", "source": "runtime"})
    );
    assert_eq!(
        b["reserve"],
        json!({"value": {"iops": 100}, "source": "runtime"})
    );
    let g = ok(&d, "GET", "/v1/groups/tenant-b", None);
    assert_eq!(g["weight"], json!({"value": 900, "source": "runtime"}));
    assert_eq!(
        g["class"],
        json!({"value": "background", "source": "runtime"})
    );
    assert_eq!(
        g["reserve"],
        json!({"value": {"pct": 10.0}, "source": "runtime"})
    );
    assert_eq!(g["volumes"], json!(["a"]));
    let dev = ok(&d, "GET", "/v1/device", None);
    assert_eq!(dev["qos"]["source"], "runtime");
    assert_eq!(dev["effective"]["min_pct"], 60.0);
    assert_eq!(dev["model"]["value"]["preset"], "hdd");
    // The QoS core runs with them: the group's share of the tree is as configured.
    let st = ok(&d, "GET", "/v1/stats", None);
    assert_eq!(volume_stats(&st, "a")["weight"], 42);
    assert_eq!(volume_stats(&st, "a")["group"], "tenant-b");
}

#[test]
fn start_fails_when_the_control_path_is_not_a_stale_socket() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("control.sock"), "not a socket").unwrap();
    std::fs::write(dir.path().join("config.toml"), two_volume_config("")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["run", "--config", "config.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("control socket control.sock: exists and is not a socket"),
        "{err}"
    );
    // A stale socket (left by a killed daemon) is replaced.
    std::fs::remove_file(dir.path().join("control.sock")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.path().join("control.sock")).unwrap());
    let d = DaemonProcess::start_in(dir, &two_volume_config(""));
    ok(&d, "GET", "/v1/device", None);
}

/// Parses `/metrics` with a Prometheus parser and sums the samples of `metric` for
/// `volume` (over every `op`).
fn metric_sum(
    scrape: &prometheus_parse::Scrape,
    metric: &str,
    volume: &str,
    op: Option<&str>,
) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && s.labels.get("volume") == Some(volume))
        .filter(|s| op.is_none() || s.labels.get("op") == op)
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

#[test]
fn metrics_parse_and_match_what_the_client_did() {
    let d = DaemonProcess::start(&config(
        CONTROL,
        &(volume("r", 0, 16, "") + &volume("w", 16, 16, "")),
    ));
    let runtime = Duration::from_secs(2);
    let reader = TenantSpec {
        iodepth: 4,
        ..tenant(&d, "r", runtime)
    };
    let writer = TenantSpec {
        rw: Pattern::RandWrite,
        bs: 16384,
        iodepth: 4,
        ..tenant(&d, "w", runtime)
    };
    let results = loadgen::run(&[reader, writer]).unwrap();
    let text = call(&d, "GET", "/metrics", None).body;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let within = |got: f64, want: u64, what: &str| {
        let want = want as f64;
        assert!(want > 100.0, "{what}: too little I/O ({want})");
        assert!(
            (got - want).abs() <= want * 0.01,
            "{what}: /metrics says {got}, the client did {want}\n{text}"
        );
    };
    let (r, w) = (&results[0], &results[1]);
    assert_eq!(r.errors + w.errors, 0);
    let req = "vhost_iocost_volume_requests_total";
    let bytes = "vhost_iocost_volume_bytes_total";
    within(
        metric_sum(&scrape, req, "r", Some("read")),
        r.completed,
        "r reads",
    );
    within(
        metric_sum(&scrape, bytes, "r", Some("read")),
        r.completed * 4096,
        "r bytes",
    );
    within(
        metric_sum(&scrape, req, "w", Some("write")),
        w.completed,
        "w writes",
    );
    within(
        metric_sum(&scrape, bytes, "w", Some("write")),
        w.completed * 16384,
        "w bytes",
    );
    assert_eq!(metric_sum(&scrape, req, "r", Some("write")), 0.0);
    // Labelled by group too, and the latency histogram counts every completed read.
    let lat = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "vhost_iocost_volume_latency_seconds" && s.labels.get("volume") == Some("r")
        })
        .expect("latency histogram of r");
    assert_eq!(lat.labels.get("group"), Some("root"));
    let prometheus_parse::Value::Histogram(buckets) = &lat.value else {
        panic!("not a histogram: {lat:?}");
    };
    let inf = buckets
        .iter()
        .find(|b| b.less_than.is_infinite())
        .expect("+Inf bucket");
    within(inf.count, r.completed, "r latency count");
    assert!(
        buckets.windows(2).all(|p| p[0].count <= p[1].count),
        "{buckets:?}"
    );
    let vrate = scrape
        .samples
        .iter()
        .find(|s| s.metric == "vhost_iocost_device_vrate_percent")
        .expect("vrate");
    assert!(matches!(vrate.value, prometheus_parse::Value::Gauge(v) if v > 0.0));
}

/// Reads until the server closes the connection; returns how long that took.
fn closed_within(s: &mut std::os::unix::net::UnixStream, limit: Duration) -> Option<Duration> {
    use std::io::Read;
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(start.elapsed())
            }
            Err(_) => return None,
        }
    }
}

/// A client that sends its request header byte by byte (slowloris) is disconnected once
/// the header timeout passes, and the API keeps answering others meanwhile.
#[test]
fn a_half_sent_request_is_disconnected_after_the_header_timeout() {
    use std::io::Write;
    use vhost_iocost::control::server::HEADER_TIMEOUT;
    let d = DaemonProcess::start(&two_volume_config(""));
    let mut slow = std::os::unix::net::UnixStream::connect(sock(&d)).unwrap();
    slow.write_all(b"GET /v1/stats HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    ok(&d, "GET", "/v1/device", None);
    let took = closed_within(&mut slow, HEADER_TIMEOUT * 3).expect("still open");
    assert!(
        took >= HEADER_TIMEOUT - Duration::from_secs(1),
        "closed after {took:?}"
    );
}

/// Connections beyond the cap are closed at once; the ones already open are served, and
/// once they end new connections are accepted again.
#[test]
fn connections_beyond_the_cap_are_closed_at_once() {
    use std::io::Write;
    use vhost_iocost::control::server::MAX_CONNECTIONS;
    let d = DaemonProcess::start(&two_volume_config(""));
    let mut idle: Vec<_> = (0..MAX_CONNECTIONS)
        .map(|_| std::os::unix::net::UnixStream::connect(sock(&d)).unwrap())
        .collect();
    // The server accepts in order, so this one comes after all the slots are taken.
    let mut over = std::os::unix::net::UnixStream::connect(sock(&d)).unwrap();
    let took = closed_within(&mut over, Duration::from_secs(2)).expect("over the cap: still open");
    assert!(took < Duration::from_secs(1), "closed after {took:?}");
    // An open one is served.
    idle[1]
        .write_all(b"GET /v1/device HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut idle[1], &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    idle.clear();
    // Once they are gone the API answers again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client::request(&sock(&d), "GET", "/v1/device", None).is_err() {
        assert!(Instant::now() < deadline, "the API did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /v1/stats` and `GET /metrics` select volumes by query (what a host with
/// thousands of volumes needs): by group, by name, by activity, and a page of them;
/// `volumes_total` counts the selection before the page, and a bad key is a 400 that
/// names it.
#[test]
fn stats_and_metrics_select_volumes_by_query() {
    let d = DaemonProcess::start(&two_volume_config(""));
    let names = |path: &str| -> (Vec<String>, u64) {
        let st = ok(&d, "GET", path, None);
        let names = st["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect();
        (names, st["volumes_total"].as_u64().unwrap())
    };
    assert_eq!(names("/v1/stats"), (vec!["a".into(), "b".into()], 2));
    assert_eq!(names("/v1/stats?group=tenant-a"), (vec!["a".into()], 1));
    assert_eq!(names("/v1/stats?group=root"), (vec!["b".into()], 1));
    assert_eq!(names("/v1/stats?volume=b"), (vec!["b".into()], 1));
    assert_eq!(
        names("/v1/stats?active=true"),
        (vec![], 0),
        "nothing issued I/O"
    );
    assert_eq!(names("/v1/stats?offset=1&limit=1"), (vec!["b".into()], 2));
    assert_eq!(names("/v1/stats?limit=0"), (vec![], 2));
    for (query, key) in [("limit=x", "limit"), ("name=a", "name")] {
        let r = call(&d, "GET", &format!("/v1/stats?{query}"), None);
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert_eq!(r.json().unwrap()["field"], key, "{query}");
    }
    let m = call(&d, "GET", "/metrics?volume=b", None);
    assert_eq!(m.status, 200);
    assert!(
        m.body.contains("volume=\"b\"") && !m.body.contains("volume=\"a\""),
        "{}",
        m.body
    );
    assert!(m.body.contains("vhost_iocost_device_vrate_percent"));
    assert_eq!(call(&d, "GET", "/metrics?limit=x", None).status, 400);
}

/// A group PATCH that is refused changes nothing: class "latency" without a target is
/// refused before the weight in the same body is applied. Once a group has a target it
/// keeps it across class changes.
#[test]
fn a_refused_group_patch_changes_nothing() {
    let d = DaemonProcess::start(&two_volume_config(""));
    bad(
        &d,
        "PATCH",
        "/v1/groups/tenant-b",
        json!({"weight": 5, "class": "latency"}),
        "latency_target",
    );
    let g = ok(&d, "GET", "/v1/groups/tenant-b", None);
    assert_eq!(g["weight"]["source"], "config", "{g}");
    assert_eq!(g["class"]["value"], "normal");
    let body = json!({"class": "latency", "latency_target": "p99 5ms"});
    let g = ok(&d, "PATCH", "/v1/groups/tenant-b", Some(body));
    assert_eq!(g["class"]["value"], "latency");
    assert_eq!(g["latency_target"]["value"], "p99 5ms");
    assert_eq!(g["boost"], 1.0);
    ok(
        &d,
        "PATCH",
        "/v1/groups/tenant-b",
        Some(json!({"class": "normal"})),
    );
    let g = ok(
        &d,
        "PATCH",
        "/v1/groups/tenant-b",
        Some(json!({"class": "latency"})),
    );
    assert_eq!(g["latency_target"]["value"], "p99 5ms");
}
