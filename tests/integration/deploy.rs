//! The files in `deploy/`: the Prometheus alert rules pass their unit tests, and the
//! alert rules and the Grafana dashboard query only metrics the daemon exports, in
//! PromQL that Prometheus parses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::daemon::{config, metrics_address, volume, DaemonProcess};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

/// Runs Debian's `promtool` (package `prometheus`, which `.ci/run` installs).
fn promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (apt-get install prometheus)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// Every `vhost_iocost_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("vhost_iocost_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The PromQL expressions of the dashboard's panels, template variables replaced.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/vhost-iocost.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard parses");
    let queries: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .unwrap()
                .replace("$instance", ".*")
                .replace("$volume", ".*")
        })
        .collect();
    assert!(queries.len() >= 15, "{queries:?}");
    queries
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    let dir = deploy("prometheus");
    let checked = promtool(&["check", "rules", "alerts.yml"], &dir);
    assert!(checked.contains("5 rules found"), "{checked}");
    promtool(&["test", "rules", "alerts_test.yml"], &dir);
}

#[test]
fn the_dashboard_and_alerts_query_only_what_the_daemon_exports() {
    // Prometheus parses every dashboard query (each checked as a recording rule).
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in dashboard_queries().iter().enumerate() {
        let q = serde_json::to_string(q).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {q}\n"
        ));
    }
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    promtool(&["check", "rules", "dashboard.yml"], dir.path());

    // Every metric they name is in a running daemon's exposition.
    let d = DaemonProcess::start(&config(
        "",
        &format!(
            "[control]\nsocket = \"control.sock\"\n{}",
            volume(
                "db",
                0,
                16,
                "class = \"latency\"\nlatency_target = \"p99 2ms\"\n"
            )
        ),
    ));
    let exposition =
        vhost_iocost::control::client::request(&d.path("control.sock"), "GET", "/metrics", None)
            .unwrap()
            .body;
    let exported: BTreeSet<String> = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect();
    let alerts = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    let mut named = metric_names(&alerts);
    named.extend(dashboard_queries().iter().flat_map(|q| metric_names(q)));
    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "named but not exported: {missing:?}\nexported: {exported:?}"
    );
    d.stop();
}

/// A Prometheus server (Debian's `prometheus`) scraping the daemon's metrics listener
/// every 200 ms; stopped when dropped.
struct Prometheus {
    child: std::process::Child,
    api: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn scraping(target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 200ms\n  evaluation_interval: 200ms\n\
                 rule_files: [\"{}\"]\n\
                 scrape_configs:\n  - job_name: vhost-iocost\n    static_configs:\n      - targets: [\"{target}\"]\n",
                deploy("prometheus/alerts.yml").display()
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus (apt-get install prometheus)");
        Prometheus {
            child,
            api: format!("127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// `GET path` on the server's API: its JSON (None while the server is not up yet).
    fn get(&self, path: &str) -> Option<serde_json::Value> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.api).ok()?;
        // HTTP/1.0: the answer comes whole, not chunked.
        write!(s, "GET {path} HTTP/1.0\r\nHost: p\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        // Until its storage is ready the server answers 503: not up yet.
        if !text.starts_with("HTTP/1.0 200") && !text.starts_with("HTTP/1.1 200") {
            return None;
        }
        let body = text.split("\r\n\r\n").nth(1)?;
        let v: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        assert_eq!(v["status"], "success", "{path}: {v}");
        Some(v["data"].clone())
    }

    /// The result vector of an instant query (None while the server is not up yet).
    fn query(&self, expr: &str) -> Option<Vec<serde_json::Value>> {
        let q: String = expr
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let data = self.get(&format!("/api/v1/query?query={q}"))?;
        Some(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Waits (up to 30 s) until `expr` returns series.
    fn wait_for(&self, expr: &str) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match self.query(expr) {
                Some(r) if !r.is_empty() => return r,
                _ if std::time::Instant::now() > deadline => {
                    panic!("no series for {expr} within 30 s")
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes the metrics listener of a daemon under load (a capped
/// volume and a latency-class one): every query of the dashboard returns series, and the
/// rules load and evaluate.
#[test]
fn prometheus_scrapes_the_daemon_and_every_dashboard_query_has_series() {
    let d = DaemonProcess::start(&config(
        &format!(
            "{}{}",
            crate::devices::SLOW_DEVICE,
            crate::devices::DEFAULTS
        ),
        &format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n{}{}",
            volume("capped", 0, 16, "caps = { iops = 500 }"),
            volume(
                "db",
                16,
                16,
                "class = \"latency\"\nlatency_target = \"p99 2ms\"\n"
            )
        ),
    ));
    let target = metrics_address(&d);
    let prom = Prometheus::scraping(&target);
    prom.wait_for("up{job=\"vhost-iocost\"} == 1");
    let load = {
        let tenants = [
            crate::devices::reader(&d, "capped", 8, 4),
            crate::devices::reader(&d, "db", 2, 4),
        ];
        std::thread::spawn(move || vhost_iocost::loadgen::run(&tenants).unwrap())
    };
    // Rates need two scrapes with traffic between them.
    prom.wait_for(
        "rate(vhost_iocost_volume_requests_total{volume=\"capped\",op=\"read\"}[1m]) > 0",
    );
    for q in dashboard_queries() {
        let series = prom.wait_for(&q);
        assert!(!series.is_empty(), "{q}");
    }
    // The alert rules load, and each evaluates without error against live data.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let data = prom.get("/api/v1/rules?type=alert").unwrap();
        let rules: Vec<serde_json::Value> = data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        assert_eq!(rules.len(), 5, "{data}");
        if rules.iter().all(|r| r["health"] == "ok") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rules not healthy: {data}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let results = load.join().unwrap();
    assert_eq!(results.iter().map(|r| r.errors).sum::<u64>(), 0);
    d.stop();
}
