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
//! | `vhost_iocost_group_latency_boost{group}` | gauge | the same for a latency-class group's weight |
//! | `vhost_iocost_volume_wait_seconds_total` | counter | time with a throttled request |
//! | `vhost_iocost_volume_weight` | gauge | configured weight |
//! | `vhost_iocost_volume_usage_percent` | gauge | device time used in the last period |
//! | `vhost_iocost_volume_hweight_active_percent`, `..._inuse_percent`, `..._donated_percent` | gauge | shares |
//! | `vhost_iocost_volume_latency_seconds` | histogram | device latency since start (bounds are powers of two µs) |
//! | `vhost_iocost_device_vrate_percent`, `..._busy_level`, `..._period_seconds` | gauge | device |
//! | `vhost_iocost_device_contended_periods_total`, `..._contended_periods_missed_total` | counter | periods where QoS arbitrated, and those that missed a latency target |
//! | `vhost_iocost_model_coefficient_seconds{coef}` | gauge | the cost model's six coefficients (`rpage`, `rseqio`, `rrandio`, `wpage`, `wseqio`, `wrandio`), device seconds |
//! | `vhost_iocost_model_learned_stderr_ratio{coef}` | gauge | while learning: each coefficient's standard error over its estimate (absent: not estimated yet) |
//! | `vhost_iocost_model_learned_moves_total` | counter | while learning: times the coefficients moved |

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
        let labels = |name: &str, group: &str| -> Labels {
            vec![("volume", name.to_owned()), ("group", group.to_owned())]
        };
        let with_op = |l: &Labels, op: &str| -> Labels {
            let mut l = l.clone();
            l.push(("op", op.to_owned()));
            l
        };
        let mut requests = Vec::new();
        let mut bytes = Vec::new();
        let mut errors = Vec::new();
        let mut conns = Vec::new();
        let mut throttled = Vec::new();
        let mut capped = Vec::new();
        let mut background_held = Vec::new();
        let mut reserved = Vec::new();
        let mut boost = Vec::new();
        let mut wait = Vec::new();
        let mut weight = Vec::new();
        let mut usage = Vec::new();
        let mut hwa = Vec::new();
        let mut hwi = Vec::new();
        let mut donated = Vec::new();
        for v in &stats.volumes {
            let l = labels(&v.name, &v.group);
            for (op, n) in [
                ("read", v.reads),
                ("write", v.writes),
                ("flush", v.flushes),
                ("discard", v.discards),
                ("write_zeroes", v.write_zeroes),
            ] {
                requests.push((with_op(&l, op), ConstCounter::new(n)));
            }
            bytes.push((with_op(&l, "read"), ConstCounter::new(v.read_bytes)));
            bytes.push((with_op(&l, "write"), ConstCounter::new(v.write_bytes)));
            errors.push((l.clone(), ConstCounter::new(v.errors)));
            conns.push((l.clone(), ConstCounter::new(v.connections)));
            throttled.push((l.clone(), ConstCounter::new(v.throttled)));
            capped.push((l.clone(), ConstCounter::new(v.capped)));
            background_held.push((l.clone(), ConstCounter::new(v.background_held)));
            reserved.push((l.clone(), ConstCounter::new(v.reserved)));
            boost.push((l.clone(), ConstGauge::new(v.boost)));
            wait.push((l.clone(), ConstCounter::new(v.wait_us as f64 / 1e6)));
            weight.push((l.clone(), ConstGauge::new(i64::from(v.weight))));
            usage.push((l.clone(), ConstGauge::new(v.usage_pct)));
            hwa.push((l.clone(), ConstGauge::new(v.hweight_active_pct)));
            hwi.push((l.clone(), ConstGauge::new(v.hweight_inuse_pct)));
            donated.push((l, ConstGauge::new(v.donated_pct)));
        }
        let p = "vhost_iocost_volume_";
        family(
            &mut enc,
            &format!("{p}requests"),
            "Completed requests.",
            &requests,
        )?;
        family(
            &mut enc,
            &format!("{p}bytes"),
            "Bytes read and written.",
            &bytes,
        )?;
        family(
            &mut enc,
            &format!("{p}errors"),
            "Requests answered IOERR.",
            &errors,
        )?;
        family(
            &mut enc,
            &format!("{p}connections"),
            "Frontend connections accepted.",
            &conns,
        )?;
        family(
            &mut enc,
            &format!("{p}throttled"),
            "Requests that waited for budget.",
            &throttled,
        )?;
        family(
            &mut enc,
            &format!("{p}capped"),
            "Times a cap held the next request back.",
            &capped,
        )?;
        family(
            &mut enc,
            &format!("{p}background_held"),
            "Times a background volume's next request was held back for the foreground.",
            &background_held,
        )?;
        family(
            &mut enc,
            &format!("{p}reserved"),
            "Requests admitted on the volume's reservation.",
            &reserved,
        )?;
        family(
            &mut enc,
            &format!("{p}latency_boost"),
            "What the latency class multiplies the volume's weight by (1: none).",
            &boost,
        )?;
        family(
            &mut enc,
            &format!("{p}wait_seconds"),
            "Time with a throttled request.",
            &wait,
        )?;
        family(
            &mut enc,
            &format!("{p}weight"),
            "Weight (1..10000).",
            &weight,
        )?;
        family(
            &mut enc,
            &format!("{p}usage_percent"),
            "Device time used in the last planning period, percent.",
            &usage,
        )?;
        family(
            &mut enc,
            &format!("{p}hweight_active_percent"),
            "Fair share of the device, percent.",
            &hwa,
        )?;
        family(
            &mut enc,
            &format!("{p}hweight_inuse_percent"),
            "Share charged against, percent.",
            &hwi,
        )?;
        family(
            &mut enc,
            &format!("{p}donated_percent"),
            "Share lent to other volumes, percent.",
            &donated,
        )?;

        let name = format!("{p}latency_seconds");
        let mut m = enc.encode_descriptor(
            &name,
            "Device latency (admitted to completed) since start.",
            None,
            MetricType::Histogram,
        )?;
        let all = ctl.handles();
        let handles: std::collections::HashMap<&str, _> =
            all.iter().map(|v| (v.name.as_str(), v)).collect();
        for s in &stats.volumes {
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
            let l = labels(&s.name, &s.group);
            m.encode_family(&l)?.encode_histogram::<NoLabelSet>(
                h.sum_us as f64 / 1e6,
                h.count,
                &buckets,
                None,
            )?;
        }

        // Latency-class groups: their boost (a volume's is in its series above).
        // (The QoS core's view: `ctl.groups()` would list every group's volumes too.)
        let group_boost: Vec<(Labels, ConstGauge<f64>)> = ctl
            .qos
            .groups()
            .into_iter()
            .filter(|g| g.class == crate::qos::Class::Latency)
            .map(|g| (vec![("group", g.name)], ConstGauge::new(g.boost)))
            .collect();
        family(
            &mut enc,
            "vhost_iocost_group_latency_boost",
            "What the latency class multiplies a latency-class group's weight by (1: none).",
            &group_boost,
        )?;

        let d = &stats.device;
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
        encode_model(&self.0, &mut enc)
    }
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
