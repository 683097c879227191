//! The learned cost model through the control plane: `GET /v1/device/model`, `ctl qos`,
//! `/metrics`, the state file, and what pins it.

use crate::daemon::{busy_cpus, control_get, ctl, volume, DaemonProcess};
use crate::devices::{reader, DEFAULTS, SLOW_DEVICE};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use vhost_iocost::control::client;
use vhost_iocost::loadgen::{self, Duty, Pattern, TenantSpec};

fn config(model: &str) -> String {
    // Random requests 16 MiB apart need volumes larger than that.
    let volumes: String = ["rr", "rr64", "sw", "sw1m"]
        .iter()
        .enumerate()
        .map(|(i, name)| volume(name, 64 * i as u64, 64, ""))
        .collect();
    format!(
        "[device]\npath = \"disk.img\"\ncreate_size = \"256MiB\"\n{SLOW_DEVICE}{model}{DEFAULTS}\n{volumes}"
    )
}

/// Four backlogged tenants on duty cycles of their own (random 4 and 64 KiB reads,
/// sequential 4 KiB and 1 MiB writes): the slow device saturated by a changing mix.
fn mixed(d: &DaemonProcess, secs: u64) -> Vec<TenantSpec> {
    let kinds = [
        ("rr", Pattern::RandRead, 4096, 16, 2, 1),
        ("rr64", Pattern::RandRead, 64 << 10, 4, 3, 2),
        ("sw", Pattern::Write, 4096, 16, 2, 3),
        ("sw1m", Pattern::Write, 1 << 20, 4, 3, 1),
    ];
    kinds
        .iter()
        .map(|&(name, rw, bs, depth, on, off)| TenantSpec {
            rw,
            bs,
            ramp: Duration::ZERO,
            duty: Some(Duty {
                on: Duration::from_secs(on),
                off: Duration::from_secs(off),
            }),
            ..reader(d, name, depth, secs)
        })
        .collect()
}

fn put_model(d: &DaemonProcess, body: Value) -> Value {
    let r = client::request(
        &d.path("control.sock"),
        "PUT",
        "/v1/device/model",
        Some(&body.to_string()),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.json().unwrap()
}

/// With a preset (learned by default) and mixed traffic on the emulated slow device:
/// `GET /v1/device/model` shows the learner's estimate and, once it moved, `"source":
/// "learned"` with the learned six numbers, which `/metrics` and `ctl qos` show too and
/// the state file keeps; a restart on the same device resumes from them; a model the
/// operator puts pins the numbers and drops the learned ones.
#[test]
fn the_learned_model_is_shown_kept_resumed_and_pinned_by_an_operators_model() {
    let _alone = busy_cpus();
    // A preset that prices reads dearer and writes cheaper than the slow device does;
    // its default targets (25 ms) let the mix saturate the device. (No model at all
    // would be calibrated: exact on the emulated device, and with a derived target so
    // tight that the device rarely saturates, so there is little to learn.)
    let preset = "[device.model]\npreset = \"ssd-qd1\"\n";
    let d = DaemonProcess::start(&config(preset));
    let m = control_get(&d, "/v1/device/model");
    assert_eq!(m["source"], "config");
    assert_eq!(m["learned"]["moves"], 0, "{m}");
    assert!(m["learned"]["stderr_pct"]["wpage"].is_null(), "{m}");
    let specs = mixed(&d, 40);
    let load = std::thread::spawn(move || loadgen::run(&specs));
    // Polled until the first move, at most the whole run.
    let deadline = Instant::now() + Duration::from_secs(40);
    let learned = loop {
        let m = control_get(&d, "/v1/device/model");
        if m["source"] == "learned" || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let r = load.join().unwrap().unwrap();
    assert!(r.iter().all(|t| t.errors == 0), "{r:?}");
    assert_eq!(learned["source"], "learned", "no move in 40 s: {learned}");
    let l = &learned["learned"];
    assert!(l["moves"].as_u64().unwrap() >= 1, "{l}");
    assert!(l["saturated_windows"].as_u64().unwrap() >= 6, "{l}");
    let wpage_se = l["stderr_pct"]["wpage"].as_f64().expect("wpage estimated");
    assert!(wpage_se < 10.0, "{l}");

    // The model as it stands now (it may have moved again since the poll).
    let now = control_get(&d, "/v1/device/model");
    let wpage_ns = now["learned"]["coefs_ns"]["wpage"].as_f64().unwrap();
    let metrics = client::request(&d.path("control.sock"), "GET", "/metrics", None)
        .unwrap()
        .body;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("vhost_iocost_model_coefficient_seconds{coef=\"wpage\"}"))
        .unwrap_or_else(|| panic!("no wpage coefficient in /metrics:\n{metrics}"));
    let seconds: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (seconds * 1e9 / wpage_ns - 1.0).abs() < 1e-3,
        "{line} vs {wpage_ns} ns"
    );
    assert!(
        metrics.contains("vhost_iocost_model_learned_moves_total"),
        "{metrics}"
    );
    let out = ctl(&d, &["qos"]);
    assert!(
        out.contains("model (learned)") && out.contains("wpage"),
        "{out}"
    );

    let kept = now["value"].clone();
    let (status, dir) = d.stop();
    assert!(status.success());
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("config.toml.state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["learned"]["model"]["wbps"], kept["wbps"], "{state}");

    let d = DaemonProcess::start_in(dir, &config(preset));
    let resumed = control_get(&d, "/v1/device/model");
    assert_eq!(resumed["source"], "learned", "{resumed}");
    assert_eq!(resumed["value"]["wbps"], kept["wbps"]);

    let six = json!({"rbps": 400000000, "rseqiops": 20000, "rrandiops": 20000,
                     "wbps": 200000000, "wseqiops": 10000, "wrandiops": 10000});
    put_model(&d, six);
    let pinned = control_get(&d, "/v1/device/model");
    assert_eq!(pinned["source"], "runtime", "{pinned}");
    assert!(pinned["learned"].is_null(), "{pinned}");
    assert_eq!(pinned["value"]["wbps"], 200000000);
    let (_, dir) = d.stop();
    let state = std::fs::read_to_string(dir.path().join("config.toml.state.json")).unwrap();
    assert!(!state.contains("\"learned\""), "{state}");
}

/// Six numbers in the config stay pinned: no learner, nothing learned.
#[test]
fn an_operators_six_numbers_are_not_learned_unless_asked() {
    let six = "[device.model]\nrbps = 400000000\nrseqiops = 20000\nrrandiops = 20000\n\
               wbps = 200000000\nwseqiops = 10000\nwrandiops = 10000\n";
    let d = DaemonProcess::start(&config(six));
    let m = control_get(&d, "/v1/device/model");
    assert_eq!(m["source"], "config");
    assert!(m["learned"].is_null(), "{m}");
    drop(d);
    let d = DaemonProcess::start(&config(&format!("{six}learn = true\n")));
    assert_eq!(control_get(&d, "/v1/device/model")["learned"]["moves"], 0);
}
