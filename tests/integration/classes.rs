//! Service classes on the real data path: reservations (`[[volume]] reserve`), the
//! background and latency classes, and changing them over REST under load.
//!
//! The device is a file with the `SLOW_MODEL` cost model (4000 random reads per second,
//! vrate pinned at 100 %): QoS, not this machine's CPU or disk, is the bottleneck, so the
//! shares are the controller's and not the suite's noise.

use std::time::{Duration, Instant};

use serde_json::json;
use vhost_iocost::control::client;
use vhost_iocost::loadgen;

use crate::daemon::{config, control_get, volume, volume_stats, DaemonProcess, SLOW_MODEL};
use crate::devices::{reader, DEFAULTS, SLOW_DEVICE};

fn patch(d: &DaemonProcess, body: serde_json::Value) -> client::Response {
    client::request(
        &d.path("control.sock"),
        "PATCH",
        "/v1/volumes/x",
        Some(&body.to_string()),
    )
    .unwrap()
}

/// A volume reserving 30 % of the device (1200 of the model's 4000 reads per second)
/// gets ≥ 95 % of it beside three backlogged aggressors of equal weight, which by weight
/// alone would leave it 25 % (1000). Admissions on the reservation are counted.
#[test]
fn a_reservation_of_30_percent_holds_beside_three_aggressors() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}{DEFAULTS}"),
        &(volume("r", 0, 16, "reserve = { pct = 30.0 }")
            + &volume("a1", 16, 16, "")
            + &volume("a2", 32, 16, "")
            + &volume("a3", 48, 16, "")),
    ));
    let names = ["r", "a1", "a2", "a3"];
    let specs: Vec<_> = names.iter().map(|n| reader(&d, n, 8, 3)).collect();
    let results = loadgen::run(&specs).unwrap();
    let iops: Vec<f64> = results.iter().map(|r| r.iops).collect();
    eprintln!("IOPS r, a1, a2, a3: {iops:?}");
    assert!(results.iter().all(|r| r.errors == 0));
    assert!(iops[0] >= 0.95 * 1200.0, "{iops:?}");
    for s in &results[0].per_second {
        assert!(
            s.iops as f64 >= 0.95 * 1200.0,
            "{:?}",
            results[0].per_second
        );
    }
    assert!(volume_stats(&d, "r")["reserved"].as_u64().unwrap() > 0);
    assert_eq!(volume_stats(&d, "a1")["reserved"], 0);
}

/// A background reader beside a backlogged foreground reader gets its floor (1 % of the
/// device, 40 reads per second here) and no more, so the foreground keeps ≥ 90 % of the
/// device; when the foreground stops the background reader takes the device.
#[test]
fn a_background_volume_yields_to_the_foreground_and_fills_idle_time() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}{DEFAULTS}"),
        &(volume("fg", 0, 16, "") + &volume("bg", 16, 16, "class = \"background\"")),
    ));
    let results = loadgen::run(&[reader(&d, "fg", 8, 3), reader(&d, "bg", 8, 6)]).unwrap();
    let (fg, bg) = (&results[0], &results[1]);
    assert_eq!(fg.errors + bg.errors, 0);
    let bg_seconds: Vec<u64> = bg.per_second.iter().map(|s| s.iops).collect();
    eprintln!("fg {:.0} IOPS; bg per second {bg_seconds:?}", fg.iops);
    assert!(fg.iops >= 0.9 * 4000.0, "fg {:.0} IOPS", fg.iops);
    // While the foreground runs (its 3 s after the ramp), the background has its floor.
    for &n in &bg_seconds[..2] {
        assert!((1..=400).contains(&n), "{bg_seconds:?}");
    }
    // A second after the foreground stopped, the background has the device.
    assert!(*bg_seconds.last().unwrap() >= 3600, "{bg_seconds:?}");
    assert!(volume_stats(&d, "bg")["background_held"].as_u64().unwrap() > 0);
    // Its pressure is its class's: held back about the 3 s the foreground ran.
    let held_s = volume_stats(&d, "bg")["class_wait_us"].as_u64().unwrap() as f64 / 1e6;
    assert!((2.0..=5.0).contains(&held_s), "bg held {held_s} s");
    assert_eq!(volume_stats(&d, "fg")["class_wait_us"], 0);
}

/// Class and reservation changed over REST while both volumes are backlogged: a
/// reservation of 70 % shows in admissions on the reservation within two planning
/// periods and holds the volume at ≥ 95 % of it; one that would bring the total over
/// what may be reserved is refused with 409 and the numbers, changing nothing; making
/// the other volume background takes its share away within two periods. Both are shown
/// as runtime settings.
#[test]
fn class_and_reserve_changed_over_rest_apply_under_load() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}{DEFAULTS}"),
        &(volume("x", 0, 16, "") + &volume("y", 16, 16, "")),
    ));
    let period =
        Duration::from_micros(control_get(&d, "/v1/device")["period_us"].as_u64().unwrap());
    let specs = [reader(&d, "x", 8, 5), reader(&d, "y", 8, 5)];
    let load = std::thread::spawn(move || loadgen::run(&specs));
    while ["x", "y"]
        .iter()
        .any(|v| volume_stats(&d, v)["hweight_active_pct"] != 50.0)
    {}
    let start = Instant::now();

    let r = patch(&d, json!({"reserve": {"pct": 70}}));
    assert_eq!(r.status, 200, "{}", r.error_message());
    let changed = Instant::now();
    while volume_stats(&d, "x")["reserved"].as_u64().unwrap() == 0 {
        assert!(
            changed.elapsed() < 2 * period,
            "no reserved admission within two periods"
        );
    }
    let r = client::request(
        &d.path("control.sock"),
        "PATCH",
        "/v1/volumes/y",
        Some(&json!({"reserve": {"pct": 30}, "weight": 500}).to_string()),
    )
    .unwrap();
    assert_eq!(r.status, 409);
    let message = r.error_message();
    assert!(
        message.contains("100.0 %") && message.contains("90.0 %"),
        "{message}"
    );
    let y = control_get(&d, "/v1/volumes/y");
    assert_eq!(y["reserve"], json!({"value": {}, "source": "config"}));
    assert_eq!(
        y["weight"]["value"], 100,
        "a refused request changes nothing"
    );

    std::thread::sleep((start + Duration::from_secs(2)).saturating_duration_since(Instant::now()));
    let r = client::request(
        &d.path("control.sock"),
        "PATCH",
        "/v1/volumes/y",
        Some(&json!({"class": "background"}).to_string()),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.error_message());
    let changed = Instant::now();
    while volume_stats(&d, "y")["hweight_active_pct"]
        .as_f64()
        .unwrap()
        >= 1.0
    {
        assert!(
            changed.elapsed() < 2 * period,
            "y still has its share after two periods"
        );
    }
    let x = control_get(&d, "/v1/volumes/x");
    assert_eq!(
        x["reserve"],
        json!({"value": {"pct": 70.0}, "source": "runtime"})
    );
    let y = control_get(&d, "/v1/volumes/y");
    assert_eq!(
        y["class"],
        json!({"value": "background", "source": "runtime"})
    );

    let results = load.join().unwrap().unwrap();
    let (x, y) = (&results[0], &results[1]);
    assert_eq!(x.errors + y.errors, 0);
    let xs: Vec<u64> = x.per_second.iter().map(|s| s.iops).collect();
    let ys: Vec<u64> = y.per_second.iter().map(|s| s.iops).collect();
    eprintln!("x per second {xs:?}, y per second {ys:?}");
    // The second ending at 2 s (the reservation in force): x ≥ 95 % of 2800.
    assert!(xs[1] as f64 >= 0.95 * 2800.0, "{xs:?}");
    // The last seconds (y background): x has ≥ 90 % of the device.
    assert!(*xs.last().unwrap() as f64 >= 0.9 * 4000.0, "{xs:?} {ys:?}");
}

/// On the defaults (a calibrated read target), a volume declaring a latency target makes
/// that target the device-wide read target while it is declared, and the calibrated one
/// comes back when it is withdrawn; an operator's own `rlat` stays whatever is declared.
#[test]
fn a_declared_latency_target_replaces_the_calibrated_read_target() {
    let lat = "class = \"latency\"\nlatency_target = \"p99 1ms\"";
    let read_target = |d: &DaemonProcess| {
        let e = &control_get(d, "/v1/device")["effective"];
        (e["rpct"].as_f64().unwrap(), e["rlat_us"].as_u64().unwrap())
    };
    let volumes = volume("x", 0, 16, lat) + &volume("y", 16, 16, "");
    let d = DaemonProcess::start(&config(&format!("{SLOW_DEVICE}{DEFAULTS}"), &volumes));
    assert_eq!(read_target(&d), (99.0, 1000), "declared");
    let r = patch(&d, json!({"class": "normal"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let (pct, calibrated_us) = read_target(&d);
    assert_eq!(pct, 90.0, "calibrated");
    assert_ne!(calibrated_us, 1000);
    let r = patch(
        &d,
        json!({"class": "latency", "latency_target": "p99 700us"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        read_target(&d),
        (99.0, 700),
        "declared again, the new target"
    );
    drop(d);

    let own = format!("{SLOW_DEVICE}{DEFAULTS}[device.qos]\nrpct = 95.0\nrlat = \"3ms\"\n");
    let d = DaemonProcess::start(&config(&own, &volumes));
    assert_eq!(read_target(&d), (95.0, 3000), "the operator's own target");
}

/// A latency-class reader (500 reads per second, weight 10, target p99 20 ms) beside a
/// backlogged reader of weight 1000: by weight it would get 1 % of the device (40 reads
/// per second) and its requests would pile up in the daemon; the planner boosts it until
/// its whole load is served within the target (measured by the client once the backlog of
/// the first seconds has drained: a p99 of about a hundred microseconds). Set over REST
/// with `ctl`, and the boost shows in the statistics.
#[test]
fn a_latency_class_volume_is_boosted_until_its_target_holds() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}{DEFAULTS}"),
        &(volume("l", 0, 16, "weight = 10") + &volume("agg", 16, 16, "weight = 1000")),
    ));
    set_latency_class_and_run(&d, "l", "volume");
    let stats = volume_stats(&d, "l");
    let boost = stats["boost"].as_f64().unwrap();
    assert!(boost > 4.0, "boost {boost}");
    // Its windows are counted: the first ones missed (the boost grew), later ones met.
    let judged = stats["latency_target_windows"].as_u64().unwrap();
    let missed = stats["latency_target_windows_missed"].as_u64().unwrap();
    assert!(missed >= 1 && judged > missed, "{stats}");
}

/// The same with the reader in a group of weight 10 that is made latency-class: the
/// group's weight is boosted (its volume's stays 1), and the class and target are kept
/// over a restart.
#[test]
fn a_latency_class_group_is_boosted_until_its_target_holds() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}{DEFAULTS}"),
        &("[[group]]\nname = \"t\"\nweight = 10\n".to_owned()
            + &volume("l", 0, 16, "group = \"t\"")
            + &volume("agg", 16, 16, "weight = 1000")),
    ));
    set_latency_class_and_run(&d, "t", "group");
    let g = control_get(&d, "/v1/groups/t");
    let boost = g["boost"].as_f64().unwrap();
    assert!(boost > 4.0, "boost {boost}");
    assert_eq!(volume_stats(&d, "l")["boost"], 1.0);
    let metrics = client::request(&d.path("control.sock"), "GET", "/metrics", None).unwrap();
    let line = metrics
        .body
        .lines()
        .find(|l| l.starts_with("vhost_iocost_group_latency_boost{group=\"t\"}"))
        .unwrap_or_else(|| panic!("no group boost in /metrics\n{}", metrics.body));
    let in_metrics: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(in_metrics > 4.0, "{line}");
    let (status, dir) = d.stop();
    assert!(status.success());
    let d = DaemonProcess::start_in(
        dir,
        &config(
            &format!("{SLOW_MODEL}{DEFAULTS}"),
            &("[[group]]\nname = \"t\"\nweight = 10\n".to_owned()
                + &volume("l", 0, 16, "group = \"t\"")
                + &volume("agg", 16, 16, "weight = 1000")),
        ),
    );
    let g = control_get(&d, "/v1/groups/t");
    assert_eq!(g["class"], json!({"value": "latency", "source": "runtime"}));
    assert_eq!(
        g["latency_target"],
        json!({"value": "p99 20ms", "source": "runtime"})
    );
}

/// `ctl set-class NAME latency --target "p99 20ms"` on `name` (a `kind`), then a 500
/// reads/s reader on volume `l` beside a backlogged one on `agg`: from the fourth second
/// on (the boost grows once per window, a second here for want of completions, and the
/// backlog then drains) `l` gets its whole load within the target, and the aggressor
/// keeps at least half the device.
fn set_latency_class_and_run(d: &DaemonProcess, name: &str, kind: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["ctl", "--socket"])
        .arg(d.path("control.sock"))
        .args(["set-class", name, "latency", "--target", "p99 20ms"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{kind} {name}: class latency, target p99 20ms\n")
    );
    let paced = vhost_iocost::loadgen::TenantSpec {
        rate_iops: Some(500),
        ..reader(d, "l", 16, 5)
    };
    let results = loadgen::run(&[paced, reader(d, "agg", 16, 5)]).unwrap();
    let (l, agg) = (&results[0], &results[1]);
    assert_eq!(l.errors + agg.errors, 0);
    let seconds: Vec<(u64, f64)> = l.per_second.iter().map(|s| (s.iops, s.p99_us)).collect();
    eprintln!(
        "latency reader per second (IOPS, p99 µs): {seconds:?}; aggressor {:.0} IOPS",
        agg.iops
    );
    for &(iops, p99_us) in &seconds[3..] {
        assert!(iops >= 475 && p99_us <= 20_000.0, "{seconds:?}");
    }
    assert!(agg.iops >= 0.5 * 4000.0, "aggressor {:.0}", agg.iops);
}
