//! The control plane over the real unix socket: every endpoint, its success and each
//! error class, and every route of docs/openapi.json. Changes under load, persistence,
//! `/metrics` against what a client did and the server's limits: `control_runtime.rs`.

use crate::daemon::{config, ctl, volume, DaemonProcess};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use vhost_iocost::control::client::{self, Response};

pub(crate) const CONTROL: &str = "[control]\nsocket = \"control.sock\"\n";

pub(crate) const GROUPS: &str = r#"
[[group]]
name = "tenant-a"
weight = 200

[[group]]
name = "tenant-b"
"#;

pub(crate) fn sock(d: &DaemonProcess) -> PathBuf {
    d.path("control.sock")
}

pub(crate) fn call(d: &DaemonProcess, method: &str, path: &str, body: Option<Value>) -> Response {
    let body = body.map(|b| b.to_string());
    client::request(&sock(d), method, path, body.as_deref())
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// A 2xx call's JSON.
pub(crate) fn ok(d: &DaemonProcess, method: &str, path: &str, body: Option<Value>) -> Value {
    let r = call(d, method, path, body);
    assert!(
        (200..300).contains(&r.status),
        "{method} {path}: {} {}",
        r.status,
        r.body
    );
    r.json().unwrap()
}

/// Asserts a 400 naming `field`.
pub(crate) fn bad(d: &DaemonProcess, method: &str, path: &str, body: Value, field: &str) {
    let r = call(d, method, path, Some(body.clone()));
    assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.body);
    let v = r.json().unwrap();
    assert_eq!(v["field"], field, "{method} {path} {body}: {v}");
    assert!(
        v["error"].as_str().unwrap().starts_with(field),
        "{method} {path} {body}: {v}"
    );
}

pub(crate) fn not_found(d: &DaemonProcess, method: &str, path: &str, body: Option<Value>) {
    let r = call(d, method, path, body);
    assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    assert!(r.json().unwrap()["error"].is_string());
}

pub(crate) fn two_volume_config(device_extra: &str) -> String {
    config(
        &format!("{device_extra}\n{CONTROL}\n{GROUPS}"),
        &(volume("a", 0, 16, "group = \"tenant-a\"") + &volume("b", 16, 16, "weight = 300")),
    )
}

#[test]
fn every_endpoint_answers_and_refuses_bad_input() {
    let d = DaemonProcess::start(&two_volume_config(""));
    let mode = std::fs::metadata(sock(&d)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    device_endpoints(&d);
    group_endpoints(&d);
    volume_endpoints(&d);
    stats_and_metrics_endpoints(&d);
    routes_match_the_openapi_document(d);
}

/// The device part of [`every_endpoint_answers_and_refuses_bad_input`].
fn device_endpoints(d: &DaemonProcess) {
    let dev = ok(d, "GET", "/v1/device", None);
    assert_eq!(dev["qos"]["source"], "config");
    assert_eq!(dev["model"]["source"], "config");
    assert_eq!(dev["model"]["value"]["preset"], "ssd");
    assert_eq!(dev["effective"]["min_pct"], 25.0);
    assert_eq!(dev["effective"]["protect"], "underserved");
    assert!(dev["period_us"].as_u64().unwrap() > 0);
    assert!(dev["vrate_pct"].as_f64().unwrap() > 0.0);
    assert!(dev["busy_level"].is_i64());
    let dev = ok(
        d,
        "PUT",
        "/v1/device/qos",
        Some(json!({"rlat": "5ms", "wlat": 10000, "min": 50.0, "max": 150.0})),
    );
    assert_eq!(dev["qos"]["source"], "runtime");
    assert_eq!(dev["qos"]["value"]["rlat"], "5ms");
    assert_eq!(dev["effective"]["rlat_us"], 5000);
    assert_eq!(dev["effective"]["wlat_us"], 10000);
    assert_eq!(dev["effective"]["max_pct"], 150.0);
    // An operator's own target binds every volume, unless `protect` says otherwise.
    assert_eq!(dev["effective"]["protect"], "all");
    let out = ctl(d, &["qos", "--protect", "underserved"]);
    assert!(out.contains("protect=underserved"), "{out}");
    let dev = ok(d, "GET", "/v1/device", None);
    assert_eq!(dev["qos"]["value"]["protect"], "underserved");
    assert_eq!(dev["effective"]["protect"], "underserved");
    // p95 of a 10 ms target: a 20 ms period, in effect at once.
    assert_eq!(dev["period_us"], 20_000);
    let vrate = dev["vrate_pct"].as_f64().unwrap();
    assert!((50.0..=150.0).contains(&vrate), "vrate {vrate}");
    bad(
        d,
        "PUT",
        "/v1/device/qos",
        json!({"min": 300.0, "max": 200.0}),
        "min",
    );
    bad(d, "PUT", "/v1/device/qos", json!({"rlat": -5}), "rlat");
    bad(d, "PUT", "/v1/device/qos", json!({"rlat": "-5ms"}), "rlat");
    bad(d, "PUT", "/v1/device/qos", json!({"rpct": 101}), "rpct");
    bad(
        d,
        "PUT",
        "/v1/device/qos",
        json!({"protect": "some"}),
        "protect",
    );
    bad(d, "PUT", "/v1/device/qos", json!({"latency": 5}), "latency");
    bad(
        d,
        "PUT",
        "/v1/device/qos",
        json!({"enable": "yes"}),
        "enable",
    );
    let r = call(d, "PUT", "/v1/device/qos", None);
    assert_eq!(r.status, 400, "empty body: {}", r.body);
    // A refused change changed nothing.
    assert_eq!(
        ok(d, "GET", "/v1/device", None)["effective"]["min_pct"],
        50.0
    );

    let dev = ok(
        d,
        "PUT",
        "/v1/device/model",
        Some(json!({"preset": "fast-ssd"})),
    );
    assert_eq!(dev["model"]["source"], "runtime");
    assert_eq!(dev["model"]["value"]["preset"], "fast-ssd");
    bad(
        d,
        "PUT",
        "/v1/device/model",
        json!({"rbps": 1000}),
        "rseqiops",
    );
    bad(
        d,
        "PUT",
        "/v1/device/model",
        json!({"preset": "nvme"}),
        "preset",
    );
    bad(
        d,
        "PUT",
        "/v1/device/model",
        json!({"flush_factor": -1.0}),
        "flush_factor",
    );
}

/// The groups part of [`every_endpoint_answers_and_refuses_bad_input`].
fn group_endpoints(d: &DaemonProcess) {
    let groups = ok(d, "GET", "/v1/groups", None);
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tenant-a", "tenant-b"]);
    let g = ok(d, "GET", "/v1/groups/tenant-a", None);
    assert_eq!(g["weight"], json!({"value": 200, "source": "config"}));
    assert_eq!(g["parent"], "root");
    assert_eq!(g["volumes"], json!(["a"]));
    not_found(d, "GET", "/v1/groups/nope", None);
    let g = ok(
        d,
        "PATCH",
        "/v1/groups/tenant-a",
        Some(json!({"weight": 700})),
    );
    assert_eq!(g["weight"], json!({"value": 700, "source": "runtime"}));
    bad(
        d,
        "PATCH",
        "/v1/groups/tenant-a",
        json!({"weight": 0}),
        "weight",
    );
    bad(
        d,
        "PATCH",
        "/v1/groups/tenant-a",
        json!({"weight": 10001}),
        "weight",
    );
    bad(
        d,
        "PATCH",
        "/v1/groups/tenant-a",
        json!({"weight": -3}),
        "weight",
    );
    bad(
        d,
        "PATCH",
        "/v1/groups/tenant-a",
        json!({"parent": "x"}),
        "parent",
    );
    not_found(d, "PATCH", "/v1/groups/nope", Some(json!({"weight": 5})));
}

/// The volumes part of [`every_endpoint_answers_and_refuses_bad_input`].
fn volume_endpoints(d: &DaemonProcess) {
    let vols = ok(d, "GET", "/v1/volumes", None);
    assert_eq!(vols["volumes"].as_array().unwrap().len(), 2);
    let b = ok(d, "GET", "/v1/volumes/b", None);
    assert_eq!(b["weight"], json!({"value": 300, "source": "config"}));
    assert_eq!(b["caps"], json!({"value": {}, "source": "config"}));
    assert_eq!(b["group"], json!({"value": "root", "source": "config"}));
    assert_eq!(b["size"], 16 << 20);
    assert_eq!(b["connections"], 0);
    not_found(d, "GET", "/v1/volumes/nope", None);
    let b = ok(
        d,
        "PATCH",
        "/v1/volumes/b",
        Some(json!({"weight": 50, "group": "tenant-b"})),
    );
    assert_eq!(b["weight"], json!({"value": 50, "source": "runtime"}));
    assert_eq!(
        b["group"],
        json!({"value": "tenant-b", "source": "runtime"})
    );
    let g = ok(d, "GET", "/v1/groups/tenant-b", None);
    assert_eq!(g["volumes"], json!(["b"]));
    bad(
        d,
        "PATCH",
        "/v1/volumes/b",
        json!({"group": "nope"}),
        "group",
    );
    bad(d, "PATCH", "/v1/volumes/b", json!({"weight": 0}), "weight");
    bad(
        d,
        "PATCH",
        "/v1/volumes/b",
        json!({"weight": 10001, "group": "root"}),
        "weight",
    );
    bad(d, "PATCH", "/v1/volumes/b", json!({"size": 5}), "size");
    not_found(d, "PATCH", "/v1/volumes/nope", Some(json!({"weight": 5})));
    // The refused PATCHes changed nothing.
    let b = ok(d, "GET", "/v1/volumes/b", None);
    assert_eq!(b["weight"]["value"], 50);
    assert_eq!(b["group"]["value"], "tenant-b");
    let b = ok(d, "PATCH", "/v1/volumes/b", Some(json!({"group": "root"})));
    assert_eq!(b["group"], json!({"value": "root", "source": "runtime"}));
}

/// The stats and metrics part of [`every_endpoint_answers_and_refuses_bad_input`].
fn stats_and_metrics_endpoints(d: &DaemonProcess) {
    let st = ok(d, "GET", "/v1/stats", None);
    assert_eq!(st["volumes"].as_array().unwrap().len(), 2);
    assert_eq!(st["volumes"][1]["name"], "b");
    assert_eq!(st["volumes"][1]["weight"], 50);
    for key in ["vrate_pct", "busy_level", "period_us"] {
        assert!(st["device"][key].is_number(), "{key}: {st}");
    }
    for key in [
        "iops",
        "read_bytes",
        "write_bytes",
        "usage_pct",
        "hweight_active_pct",
        "hweight_inuse_pct",
        "wait_us",
        "throttled",
        "donated_pct",
        "connections",
    ] {
        assert!(st["volumes"][0][key].is_number(), "{key}: {st}");
    }
    for key in [
        "lat_p50_us_period",
        "lat_p99_us_period",
        "lat_p50_us",
        "lat_p99_us",
    ] {
        assert!(st["volumes"][0].get(key).is_some(), "{key}: {st}");
    }
    let m = call(d, "GET", "/metrics", None);
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .unwrap()
        .contains("openmetrics-text"));
    assert!(
        m.body
            .contains("vhost_iocost_volume_weight{volume=\"b\",group=\"root\"} 50"),
        "{}",
        m.body
    );
}

/// The routing part of [`every_endpoint_answers_and_refuses_bad_input`].
fn routes_match_the_openapi_document(d: DaemonProcess) {
    not_found(&d, "GET", "/v1/nothing", None);
    let r = call(&d, "PUT", "/v1/volumes/a", None);
    assert_eq!(r.status, 405);
    // Every (method, path) of docs/openapi.json is served (none falls to the fallback
    // or is refused as a wrong method).
    let doc: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if method == "parameters" {
                continue;
            }
            let m = method.to_uppercase();
            let p = path.replace(
                "{name}",
                if path.contains("groups") {
                    "tenant-b"
                } else {
                    "a"
                },
            );
            let body = (m != "GET" && m != "DELETE").then(|| json!({}));
            let r = call(&d, &m, &p, body);
            assert!(
                r.status != 405 && !r.body.contains("no such route"),
                "{m} {p}: {} {}",
                r.status,
                r.body
            );
        }
    }
    let (status, _) = d.stop();
    assert!(status.success());
}
