//! The files in `deploy/`: the Prometheus alert rules pass their unit tests, and the
//! alert rules and the Grafana dashboard query only metrics the daemon exports, in
//! PromQL that Prometheus parses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::daemon::{config, volume, DaemonProcess};

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
