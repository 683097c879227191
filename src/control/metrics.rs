//! `GET /metrics`: the figures of `GET /v1/stats` in the Prometheus/OpenMetrics text
//! format, encoded with `prometheus-client`.
//!
//! Nothing is registered ahead of time: a [`Collector`] reads the live counters at each
//! scrape (the data path keeps its own atomics; a scrape adds no work to it). The query
//! string selects volumes as for `/v1/stats` ([`super::filter`]). Per-volume series
//! carry the labels `volume` and `group`:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `vhost_iocost_volume_requests_total{op}` | counter | completed requests, `op` = read, write, flush, discard, write_zeroes |
//! | `vhost_iocost_volume_bytes_total{op}` | counter | bytes read / written |
//! | `vhost_iocost_volume_errors_total` | counter | requests answered IOERR |
//! | `vhost_iocost_volume_connections_total` | counter | frontend connections accepted |
//! | `vhost_iocost_volume_throttled_total` | counter | requests that waited for budget |
//! | `vhost_iocost_volume_capped_total` | counter | times a cap held the next request back |
//! | `vhost_iocost_volume_background_held_total` | counter | times a background volume's next request was held back for the foreground |
//! | `vhost_iocost_volume_reserved_total` | counter | requests admitted on the volume's reservation |
//! | `vhost_iocost_volume_latency_boost` | gauge | what the latency class multiplies the volume's weight by |
//! | `vhost_iocost_volume_latency_target_windows_total`, `..._latency_target_missed_windows_total` | counter | latency class: windows of the volume's own target judged, and missed |
//! | `vhost_iocost_group_latency_boost{group}` | gauge | the same for a latency-class group's weight |
//! | `vhost_iocost_volume_wait_seconds_total` | counter | time with a throttled request |
//! | `vhost_iocost_volume_pressure_seconds_total{cause}` | counter | time held back by `budget`, `cap` or `class`; `device_slot`: device-slot waits summed over requests |
//! | `vhost_iocost_volume_cost_seconds_total` | counter | absolute cost admitted (device time at the model's speed) |
//! | `vhost_iocost_volume_budget_seconds` | gauge | budget it may spend now; negative: debt |
//! | `vhost_iocost_volume_weight` | gauge | configured weight |
//! | `vhost_iocost_volume_usage_percent` | gauge | device time used in the last period |
//! | `vhost_iocost_volume_hweight_active_percent`, `..._inuse_percent`, `..._donated_percent` | gauge | shares |
//! | `vhost_iocost_volume_latency_seconds` | histogram | device latency since start (bounds are powers of two µs) |
//! | `vhost_iocost_device_vrate_percent`, `..._busy_level`, `..._period_seconds` | gauge | device |
//! | `vhost_iocost_device_vrate_min_percent`, `..._vrate_max_percent` | gauge | vrate's bounds (`[device.qos] min`, `max`) |
//! | `vhost_iocost_device_contended_periods_total`, `..._contended_periods_missed_total` | counter | periods where QoS arbitrated, and those that missed a latency target |
//! | `vhost_iocost_model_coefficient_seconds{coef}` | gauge | the cost model's six coefficients (`rpage`, `rseqio`, `rrandio`, `wpage`, `wseqio`, `wrandio`), device seconds |
//! | `vhost_iocost_model_learned_stderr_ratio{coef}` | gauge | while learning: each coefficient's standard error over its estimate (absent: not estimated yet) |
//! | `vhost_iocost_model_learned_moves_total` | counter | while learning: times the coefficients moved |

use super::api::{DeviceStatsView, VolumeStatsView};
use super::context::Control;
use super::filter::VolumeFilter;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// The content type of the text encoding.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency histogram bounds, µs: powers of two from 16 µs to ~4 s (exact bucket edges
/// of the core's histogram).
pub const LATENCY_BOUNDS_US: [u64; 19] = {
    let mut b = [0u64; 19];
    let mut i = 0;
    while i < 19 {
        b[i] = 16 << i;
        i += 1;
    }
    b
};

struct ControlCollector(Arc<Control>, VolumeFilter);

impl std::fmt::Debug for ControlCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, M)],
) -> Result<(), std::fmt::Error> {
    let Some(first) = series.first() else {
        return Ok(());
    };
    let mut m = enc.encode_descriptor(name, help, None, first.1.metric_type())?;
    for (labels, metric) in series {
        metric.encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for ControlCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ctl = &self.0;
        let stats = ctl.stats(&self.1);
        encode_volume_series(&stats.volumes, &mut enc)?;
        encode_latency_histograms(ctl, &stats.volumes, &mut enc)?;
        encode_group_boosts(ctl, &mut enc)?;
        encode_device(&stats.device, &mut enc)?;
        encode_vrate_bounds(&ctl.qos.qos_config(), &mut enc)?;
        encode_model(ctl, &mut enc)
    }
}

/// A volume's labels: `volume` and `group`.
fn volume_labels(v: &VolumeStatsView) -> Labels {
    vec![("volume", v.name.clone()), ("group", v.group.clone())]
}

/// Reads one figure from a volume's statistics.
type Getter<T> = fn(&VolumeStatsView) -> T;

/// What one per-volume family reads from a volume's statistics, by its value's type.
enum Read {
    Count(Getter<u64>),
    Seconds(Getter<f64>),
    Level(Getter<i64>),
    Share(Getter<f64>),
}

/// The per-volume families after `requests` and `bytes` (which carry an `op` label):
/// name after `vhost_iocost_volume_`, help, value. Counters get `_total` from the encoder.
const VOLUME_FAMILIES: &[(&str, &str, Read)] = &[
    (
        "errors",
        "Requests answered IOERR.",
        Read::Count(|v| v.errors),
    ),
    (
        "connections",
        "Frontend connections accepted.",
        Read::Count(|v| v.connections),
    ),
    (
        "throttled",
        "Requests that waited for budget.",
        Read::Count(|v| v.throttled),
    ),
    (
        "capped",
        "Times a cap held the next request back.",
        Read::Count(|v| v.capped),
    ),
    (
        "background_held",
        "Times a background volume's next request was held back for the foreground.",
        Read::Count(|v| v.background_held),
    ),
    (
        "reserved",
        "Requests admitted on the volume's reservation.",
        Read::Count(|v| v.reserved),
    ),
    (
        "latency_target_windows",
        "Latency class: windows of the volume's own target judged.",
        Read::Count(|v| v.latency_target_windows),
    ),
    (
        "latency_target_missed_windows",
        "Latency class: windows of the volume's own target missed.",
        Read::Count(|v| v.latency_target_windows_missed),
    ),
    (
        "latency_boost",
        "What the latency class multiplies the volume's weight by (1: none).",
        Read::Share(|v| v.boost),
    ),
    (
        "wait_seconds",
        "Time with a throttled request.",
        Read::Seconds(|v| v.wait_us as f64 / 1e6),
    ),
    (
        "weight",
        "Weight (1..10000).",
        Read::Level(|v| i64::from(v.weight)),
    ),
    (
        "cost_seconds",
        "Absolute cost admitted: device time at the cost model's speed.",
        Read::Seconds(|v| v.cost_us as f64 / 1e6),
    ),
    (
        "budget_seconds",
        "Budget the volume may spend now, virtual seconds; negative: its debt.",
        Read::Share(|v| v.budget_us as f64 / 1e6),
    ),
    (
        "usage_percent",
        "Device time used in the last planning period, percent.",
        Read::Share(|v| v.usage_pct),
    ),
    (
        "hweight_active_percent",
        "Fair share of the device, percent.",
        Read::Share(|v| v.hweight_active_pct),
    ),
    (
        "hweight_inuse_percent",
        "Share charged against, percent.",
        Read::Share(|v| v.hweight_inuse_pct),
    ),
    (
        "donated_percent",
        "Share lent to other volumes, percent.",
        Read::Share(|v| v.donated_pct),
    ),
];

/// One series per volume of what `metric` makes of it.
fn series<M>(
    volumes: &[VolumeStatsView],
    metric: impl Fn(&VolumeStatsView) -> M,
) -> Vec<(Labels, M)> {
    volumes
        .iter()
        .map(|v| (volume_labels(v), metric(v)))
        .collect()
}

/// Every per-volume family but the latency histogram.
fn encode_volume_series(
    volumes: &[VolumeStatsView],
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let by_op = |ops: &[(&'static str, Getter<u64>)]| {
        let mut series = Vec::new();
        for v in volumes {
            for (op, read) in ops {
                let mut l = volume_labels(v);
                l.push(("op", (*op).to_owned()));
                series.push((l, ConstCounter::new(read(v))));
            }
        }
        series
    };
    let requests = by_op(&[
        ("read", |v| v.reads),
        ("write", |v| v.writes),
        ("flush", |v| v.flushes),
        ("discard", |v| v.discards),
        ("write_zeroes", |v| v.write_zeroes),
    ]);
    let p = "vhost_iocost_volume_";
    family(
        enc,
        &format!("{p}requests"),
        "Completed requests.",
        &requests,
    )?;
    let bytes = by_op(&[("read", |v| v.read_bytes), ("write", |v| v.write_bytes)]);
    family(enc, &format!("{p}bytes"), "Bytes read and written.", &bytes)?;
    let mut pressure = Vec::new();
    for v in volumes {
        for (cause, us) in [
            ("budget", v.wait_us),
            ("cap", v.cap_wait_us),
            ("class", v.class_wait_us),
            ("device_slot", v.slot_wait_us),
        ] {
            let mut l = volume_labels(v);
            l.push(("cause", cause.to_owned()));
            pressure.push((l, ConstCounter::new(us as f64 / 1e6)));
        }
    }
    family(
        enc,
        &format!("{p}pressure_seconds"),
        "Time with a request held back, by cause: budget (weight), cap, class; \
         device_slot is summed over the requests that waited for a device slot.",
        &pressure,
    )?;
    for (name, help, read) in VOLUME_FAMILIES {
        let name = format!("{p}{name}");
        match read {
            Read::Count(f) => family(
                enc,
                &name,
                help,
                &series(volumes, |v| ConstCounter::new(f(v))),
            )?,
            Read::Seconds(f) => family(
                enc,
                &name,
                help,
                &series(volumes, |v| ConstCounter::new(f(v))),
            )?,
            Read::Level(f) => family(
                enc,
                &name,
                help,
                &series(volumes, |v| ConstGauge::new(f(v))),
            )?,
            Read::Share(f) => family(
                enc,
                &name,
                help,
                &series(volumes, |v| ConstGauge::new(f(v))),
            )?,
        }
    }
    Ok(())
}

/// Each volume's device latency since start, as a histogram.
fn encode_latency_histograms(
    ctl: &Control,
    volumes: &[VolumeStatsView],
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let stats_volumes = volumes;
    let name = "vhost_iocost_volume_latency_seconds";
    let mut m = enc.encode_descriptor(
        name,
        "Device latency (admitted to completed) since start.",
        None,
        MetricType::Histogram,
    )?;
    let all = ctl.handles();
    let handles: std::collections::HashMap<&str, _> =
        all.iter().map(|v| (v.name.as_str(), v)).collect();
    for s in stats_volumes {
        let Some(v) = handles.get(s.name.as_str()) else {
            continue;
        };
        let h = v.admission.latency_histogram(&LATENCY_BOUNDS_US);
        // The encoder sums per-bucket counts itself: hand it differences.
        let mut below = 0;
        let buckets: Vec<(f64, u64)> = h
            .buckets
            .iter()
            .map(|&(b, n)| (b as f64 / 1e6, n))
            .chain(std::iter::once((f64::INFINITY, h.count)))
            .map(|(b, n)| {
                let d = n.saturating_sub(below);
                below = below.max(n);
                (b, d)
            })
            .collect();
        let l = volume_labels(s);
        m.encode_family(&l)?.encode_histogram::<NoLabelSet>(
            h.sum_us as f64 / 1e6,
            h.count,
            &buckets,
            None,
        )?;
    }
    Ok(())
}

/// Latency-class groups: their boost (a volume's is in its series).
fn encode_group_boosts(ctl: &Control, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    // (The QoS core's view: `ctl.groups()` would list every group's volumes too.)
    let group_boost: Vec<(Labels, ConstGauge<f64>)> = ctl
        .qos
        .groups()
        .into_iter()
        .filter(|g| g.class == crate::qos::Class::Latency)
        .map(|g| (vec![("group", g.name)], ConstGauge::new(g.boost)))
        .collect();
    family(
        enc,
        "vhost_iocost_group_latency_boost",
        "What the latency class multiplies a latency-class group's weight by (1: none).",
        &group_boost,
    )?;
    Ok(())
}

/// vrate's configured bounds, so that an alert can tell vrate held at its floor.
fn encode_vrate_bounds(
    qos: &crate::qos::QosConfig,
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    for (name, help, value) in [
        (
            "vhost_iocost_device_vrate_min_percent",
            "Lower bound of vrate, percent.",
            qos.min,
        ),
        (
            "vhost_iocost_device_vrate_max_percent",
            "Upper bound of vrate, percent.",
            qos.max,
        ),
    ] {
        let g = ConstGauge::new(value);
        g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)?;
    }
    Ok(())
}

/// The device's vrate, busy level, period and contended periods.
fn encode_device(d: &DeviceStatsView, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let device: [(&str, &str, f64); 3] = [
        (
            "vhost_iocost_device_vrate_percent",
            "Base vrate, percent of the cost model's speed.",
            d.vrate_pct,
        ),
        (
            "vhost_iocost_device_busy_level",
            "Planner busy level (-1000..1000).",
            f64::from(d.busy_level),
        ),
        (
            "vhost_iocost_device_period_seconds",
            "Planning period.",
            d.period_us as f64 / 1e6,
        ),
    ];
    for (name, help, value) in device {
        let g = ConstGauge::new(value);
        g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)?;
    }
    let contended: [(&str, &str, u64); 2] = [
        (
            "vhost_iocost_device_contended_periods",
            "Planning periods with completions and more than one active volume.",
            d.contended_periods,
        ),
        (
            "vhost_iocost_device_contended_periods_missed",
            "Contended planning periods that missed a latency target.",
            d.contended_periods_missed,
        ),
    ];
    for (name, help, value) in contended {
        let c = ConstCounter::new(value);
        c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)?;
    }
    Ok(())
}

/// The cost model's coefficients and, while it learns, the learner's confidence.
fn encode_model(ctl: &Control, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    use crate::cost_model::learn::{coefs_ns, COEF_NAMES};
    let learned = ctl.qos.learned();
    let coefs = match &learned {
        Some(m) => m.status.coefs_ns,
        None => coefs_ns(&ctl.model().value.linear_params()),
    };
    let series = |value: &dyn Fn(usize) -> Option<f64>| -> Vec<(Labels, ConstGauge<f64>)> {
        (0..COEF_NAMES.len())
            .filter_map(|k| {
                value(k).map(|v| {
                    (
                        vec![("coef", COEF_NAMES[k].to_string())],
                        ConstGauge::new(v),
                    )
                })
            })
            .collect()
    };
    family(
        enc,
        "vhost_iocost_model_coefficient_seconds",
        "Cost-model coefficient: device time per 4 KiB page or per request.",
        &series(&|k| Some(coefs[k] / 1e9)),
    )?;
    let Some(m) = learned else {
        return Ok(());
    };
    family(
        enc,
        "vhost_iocost_model_learned_stderr_ratio",
        "Standard error of a learned coefficient over its estimate.",
        &series(&|k| m.status.se[k].is_finite().then_some(m.status.se[k])),
    )?;
    let moves = ConstCounter::new(m.status.moves);
    moves.encode(enc.encode_descriptor(
        "vhost_iocost_model_learned_moves",
        "Times the learned coefficients moved.",
        None,
        moves.metric_type(),
    )?)
}

/// Encode every metric as text.
pub fn render(ctl: &Arc<Control>, filter: &VolumeFilter) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ControlCollector(Arc::clone(ctl), filter.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}
