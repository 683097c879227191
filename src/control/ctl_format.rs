//! What `ctl` prints: the tables of volumes, groups and statistics, and the device's QoS
//! line, from the control API's answers.

use super::api::{GroupList, StatsView, VolumeList};
use serde_json::Value;
use std::fmt::Write as _;

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn mark(runtime: bool) -> &'static str {
    if runtime {
        "*"
    } else {
        ""
    }
}

/// The `volumes` table.
pub fn format_volumes(list: &VolumeList) -> String {
    use super::api::Source::Runtime;
    let mut s = format!(
        "{:<20} {:<16} {:>7} {:>5} {:>9}  {:<16}  {}  {}\n",
        "VOLUME", "GROUP", "WEIGHT", "CONN", "SIZE_MiB", "CLASS", "SOCKET", "CAPS"
    );
    for v in &list.volumes {
        let _ = writeln!(
            s,
            "{:<20} {:<16} {:>7} {:>5} {:>9}  {:<16}  {}  {}{}",
            v.name,
            format!("{}{}", v.group.value, mark(v.group.source == Runtime)),
            format!("{}{}", v.weight.value, mark(v.weight.source == Runtime)),
            v.connections,
            v.size >> 20,
            format_class(&v.class, &v.latency_target),
            v.socket,
            v.caps.value,
            mark(v.caps.source == Runtime),
        );
    }
    s.push_str("(* = changed at runtime)\n");
    s
}

/// `normal`, `background`, or `latency p99 2ms`; `*` when changed at runtime.
fn format_class(
    class: &super::api::Sourced<crate::qos::Class>,
    target: &super::api::Sourced<Option<crate::qos::LatencyTarget>>,
) -> String {
    use super::api::Source::Runtime;
    let runtime = mark(class.source == Runtime || target.source == Runtime);
    match (class.value, target.value) {
        (crate::qos::Class::Latency, Some(t)) => format!("latency {t}{runtime}"),
        (c, _) => format!("{c}{runtime}"),
    }
}

/// The `groups` table.
pub fn format_groups(list: &GroupList) -> String {
    use super::api::Source::Runtime;
    let mut s = format!(
        "{:<20} {:<16} {:>7}  {:<16}  {:<24}  {}\n",
        "GROUP", "PARENT", "WEIGHT", "CLASS", "VOLUMES", "CAPS"
    );
    for g in &list.groups {
        let _ = writeln!(
            s,
            "{:<20} {:<16} {:>7}  {:<16}  {:<24}  {}{}",
            g.name,
            g.parent,
            format!("{}{}", g.weight.value, mark(g.weight.source == Runtime)),
            format_class(&g.class, &g.latency_target),
            g.volumes.join(","),
            g.caps.value,
            mark(g.caps.source == Runtime),
        );
    }
    s
}

/// The device's QoS settings in effect, its model and vrate (`ctl qos`).
pub fn format_qos(device: &Value) -> String {
    let e = &device["effective"];
    format!(
        "qos ({}): enable={} rpct={} rlat={}us wpct={} wlat={}us min={}% max={}% protect={}\n\
         model ({}): {}\nvrate={:.1}% busy_level={} period={}us\n",
        device["qos"]["source"].as_str().unwrap_or("?"),
        e["enable"],
        e["rpct"],
        e["rlat_us"],
        e["wpct"],
        e["wlat_us"],
        e["min_pct"],
        e["max_pct"],
        e["protect"].as_str().unwrap_or("?"),
        device["model"]["source"].as_str().unwrap_or("?"),
        device["model"]["value"],
        device["vrate_pct"].as_f64().unwrap_or(0.0),
        device["busy_level"],
        device["period_us"],
    ) + &format_learned(&device["model"]["learned"])
}

/// The learner's estimate, one line per coefficient (nothing while the model is pinned).
fn format_learned(learned: &Value) -> String {
    let Some(coefs) = learned["coefs_ns"].as_object() else {
        return String::new();
    };
    let mut s = format!(
        "learning: {} saturated windows, {} moves, last {}\n",
        learned["saturated_windows"],
        learned["moves"],
        learned["last_moved_s_ago"]
            .as_f64()
            .map_or("never".to_string(), |t| format!("{t:.1}s ago")),
    );
    for (name, ns) in coefs {
        let se = learned["stderr_pct"][name]
            .as_f64()
            .map_or("not estimated yet".to_string(), |p| format!("±{p:.1}%"));
        s += &format!(
            "  {name:<8} {:>10.1} ns  {se}\n",
            ns.as_f64().unwrap_or(0.0)
        );
    }
    s
}

/// One `stats`/`top` frame.
pub fn format_stats(st: &StatsView) -> String {
    let d = &st.device;
    // Only directions with a target: a miss count against no target means nothing.
    let mut missed = String::new();
    for (dir, target, ppm) in [
        ("reads", &d.read_target, d.missed_ppm[0]),
        ("writes", &d.write_target, d.missed_ppm[1]),
    ] {
        if let Some(t) = target {
            let _ = write!(missed, "  {dir} over {t}: {ppm} ppm");
        }
    }
    let mut s = format!(
        "vrate {:.1}%  busy_level {}  period {} us  qos {}{missed}  uptime {:.0} s\n",
        d.vrate_pct,
        d.busy_level,
        d.period_us,
        if d.enabled { "on" } else { "off" },
        st.uptime_s
    );
    let _ = writeln!(
        s,
        "{:<16} {:<10} {:>6} {:>3} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>5} {:>8} {:>8} {:>4}",
        "VOLUME", "GROUP", "WEIGHT", "ACT", "HWA%", "HWI%", "DON%", "USE%", "PRESS%", "IOPS", "MiB/s",
        "WAIT_ms", "THROTTLED", "CAPPED", "BG_HELD", "RESERVED", "BOOST", "P50_us", "P99_us", "CONN"
    );
    for v in &st.volumes {
        let _ = writeln!(
            s,
            "{:<16} {:<10} {:>6} {:>3} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>8.0} {:>8.1} {:>8} {:>9} {:>8} {:>8} {:>8} {:>5.1} {:>8} {:>8} {:>4}",
            v.name,
            v.group,
            v.weight,
            if v.active { "*" } else { "" },
            v.hweight_active_pct,
            v.hweight_inuse_pct,
            v.donated_pct,
            v.usage_pct,
            v.pressure_pct,
            v.iops,
            (v.read_bytes_per_s + v.write_bytes_per_s) / 1048576.0,
            v.wait_us / 1000,
            v.throttled,
            v.capped,
            v.background_held,
            v.reserved,
            v.boost,
            opt(v.lat_p50_us_period),
            opt(v.lat_p99_us_period),
            v.connections
        );
    }
    s
}
