//! `protect = "underserved"` (design §5.10) in the simulator, on the emulated slow device
//! with the targets calibration derives for it (p90 375 µs reads, no write signal):
//! equal tenants are not throttled for misses of their own queue, weights still hold,
//! and a reservation holds beside writers.

use super::tests::{run_toml, saturating, slow_device, volumes, SEC};

/// The slow device and its derived targets, underserved only; `qos_extra` appended.
fn underserved(duration: &str, qos_extra: &str) -> String {
    slow_device(
        duration,
        "2s",
        &format!("protect = \"underserved\"\n{qos_extra}"),
    )
}

fn equal_readers(tenants: usize, qos_extra: &str) -> String {
    let names: Vec<String> = (0..tenants).map(|i| format!("v{i}")).collect();
    let spec: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), 100)).collect();
    let mut s = underserved("10s", qos_extra) + &volumes(&spec);
    for n in &names {
        s += &saturating(n, 4, "4k", 100.0, "random");
    }
    s
}

/// 8 and 32 equal QD4 random readers: together at least 0.9 × QoS off, each within
/// ±10 % of their mean. With `protect = "all"` the same derived target holds 32 of them
/// at 0.81 × (its latency floor guard stops vrate where the device queue starts to form).
#[test]
fn equal_tenants_get_what_qos_off_gives_them() {
    let (from, to) = (2 * SEC, 10 * SEC);
    for tenants in [8, 32] {
        let on = run_toml(&equal_readers(tenants, ""));
        let off = run_toml(&equal_readers(tenants, "enable = false"));
        let all = run_toml(&equal_readers(tenants, "").replace("\"underserved\"", "\"all\""));
        let total = |r: &super::SimResult| -> Vec<f64> {
            (0..tenants)
                .map(|i| r.iops(&format!("v{i}"), from, to))
                .collect()
        };
        let (each, free) = (total(&on), total(&off).iter().sum::<f64>());
        let sum = each.iter().sum::<f64>();
        let mean = sum / tenants as f64;
        let report = on.report();
        assert!(
            sum >= 0.9 * free,
            "{tenants}: {sum:.0} against {free:.0}\n{report}"
        );
        for x in &each {
            assert!(
                (x / mean - 1.0).abs() <= 0.10,
                "{tenants}: {each:?}\n{report}"
            );
        }
        let old = total(&all).iter().sum::<f64>();
        eprintln!("{tenants} equal: {sum:.0} IOPS, QoS off {free:.0}, protect = all {old:.0}");
    }
}

/// Weights 100:300, both QD16 random readers: the heavy volume is served below its share
/// as soon as the device rather than the budgets splits the service, which makes it
/// underserved, so the split stays 1:3 ± 5 %; and since neither needs protecting from
/// the other, together they get at least 0.9 × what QoS off gives them (their own misses
/// of the derived target do not hold vrate below the model's speed).
#[test]
fn weights_hold_when_only_the_underserved_count() {
    let text = |qos_extra: &str| {
        underserved("30s", qos_extra)
            + &volumes(&[("light", 100), ("heavy", 300)])
            + &saturating("light", 16, "4k", 100.0, "random")
            + &saturating("heavy", 16, "4k", 100.0, "random")
    };
    let (r, off) = (run_toml(&text("")), run_toml(&text("enable = false")));
    let (from, to) = (2 * SEC, 30 * SEC);
    let [heavy, light] = ["heavy", "light"].map(|v| r.iops(v, from, to));
    let ratio = heavy / light;
    assert!(
        (2.85..=3.15).contains(&ratio),
        "heavy/light {ratio:.3}\n{}",
        r.report()
    );
    let free = off.iops("heavy", from, to) + off.iops("light", from, to);
    eprintln!(
        "weights 1:3: {:.0} IOPS together, QoS off {free:.0}",
        heavy + light
    );
    assert!(
        heavy + light >= 0.9 * free,
        "{:.0} against {free:.0}\n{}",
        heavy + light,
        r.report()
    );
}
