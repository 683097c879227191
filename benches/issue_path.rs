//! Cost of the QoS issue path and of one planner run.
//!
//! * `admit_complete`: one `VolumeQos::admit` (Go, fast path) plus its `complete`, on
//!   the real monotonic clock with a budget that never runs out (vrate at its maximum
//!   and a cheap model), i.e. the per-request overhead the data path pays.
//! * `admit_complete_batch32`: the same as the data path calls it, per batch of 32: one
//!   clock read, 32 `admit_at`, one `complete_batch` of 32. Criterion reports the time
//!   per batch; divide by 32 for the cost per request.
//! * `plan_2k_volumes`, `plan_10k_volumes`: one `Planner::plan` with 2 000 or 10 000
//!   active volumes (in 100 groups), each with a request in flight, on a manual clock
//!   advanced by one period before each run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use vhost_iocost::cost_model::{ModelConfig, Preset};
use vhost_iocost::planner::Planner;
use vhost_iocost::qos::{
    Charge, Clock, Decision, IoKind, IoRequest, ManualClock, MonotonicClock, QosConfig, QosDevice,
    Timing, VolumeQos,
};

/// A device whose budget never runs out (vrate at its maximum, a cheap model) with two
/// volumes; returns both and the clock.
fn unthrottled_volume() -> (Arc<VolumeQos>, Arc<VolumeQos>, Arc<MonotonicClock>) {
    let model = ModelConfig {
        preset: Preset::FastSsd,
        ..Default::default()
    };
    let qos = QosConfig {
        min: 10_000.0,
        max: 10_000.0,
        ..QosConfig::default()
    };
    let clock = Arc::new(MonotonicClock::new());
    let dev = QosDevice::new(model.build_boxed().unwrap(), &qos, clock.clone());
    let vol = dev.add_volume("v", None, 100).unwrap();
    let other = dev.add_volume("w", None, 100).unwrap();
    (vol, other, clock)
}

fn admit_complete_batch32(c: &mut Criterion) {
    let (vol, _other, clock) = unthrottled_volume();
    let mut offset = 0u64;
    let mut done = Vec::with_capacity(32);
    c.bench_function("admit_complete_batch32", |b| {
        b.iter(|| {
            let now = clock.now_ns();
            for _ in 0..32 {
                offset = (offset + 4096) % (1 << 30);
                let io = IoRequest {
                    kind: IoKind::Read,
                    offset,
                    len: 4096,
                };
                if let Decision::Go(ch) = vol.admit_at(black_box(&io), now) {
                    let timing = Timing {
                        arrived_ns: now,
                        admitted_ns: now,
                        submitted_ns: now,
                        completed_ns: now + 1,
                    };
                    done.push((ch, timing));
                }
            }
            vol.complete_batch(black_box(&done));
            done.clear();
        })
    });
}

fn admit_complete(c: &mut Criterion) {
    let (vol, _other, _clock) = unthrottled_volume();
    let mut offset = 0u64;
    c.bench_function("admit_complete", |b| {
        b.iter(|| {
            offset = (offset + 4096) % (1 << 30);
            let io = IoRequest {
                kind: IoKind::Read,
                offset,
                len: 4096,
            };
            match vol.admit(black_box(&io)) {
                Decision::Go(ch) => vol.complete(&ch, 1, 2, 3),
                Decision::Wait { until_ns } => {
                    black_box(until_ns);
                }
            }
        })
    });
}

fn plan_2k(c: &mut Criterion) {
    plan_active(c, 2_000, "plan_2k_volumes");
}

fn plan_10k(c: &mut Criterion) {
    plan_active(c, 10_000, "plan_10k_volumes");
}

/// One planner run with `n` active volumes, reported as `name`.
fn plan_active(c: &mut Criterion, n: usize, name: &str) {
    let clock = Arc::new(ManualClock::default());
    let dev = QosDevice::new(
        ModelConfig::default().build_boxed().unwrap(),
        &QosConfig::default(),
        clock.clone(),
    );
    for g in 0..100 {
        dev.add_group(&format!("g{g}"), None, 100).unwrap();
    }
    let vols: Vec<_> = (0..n)
        .map(|i| {
            dev.add_volume(
                &format!("v{i}"),
                Some(&format!("g{}", i % 100)),
                100 + (i % 7) as u32,
            )
            .unwrap()
        })
        .collect();
    let period = dev.period_ns();
    let io = IoRequest {
        kind: IoKind::Read,
        offset: 0,
        len: 4096,
    };
    let mut inflight: Vec<Option<Charge>> = vec![None; vols.len()];
    let planner = Planner::new(&dev);
    c.bench_function(name, |b| {
        b.iter_batched(
            || {
                // Keep every volume active: complete the previous request, issue a new one.
                for (v, slot) in vols.iter().zip(inflight.iter_mut()) {
                    if let Some(ch) = slot.take() {
                        v.complete(&ch, 1, 2, 3);
                    }
                    if let Decision::Go(ch) = v.admit(&io) {
                        *slot = Some(ch);
                    }
                }
                clock.advance(period);
            },
            |()| black_box(planner.plan()),
            BatchSize::PerIteration,
        )
    });
    assert_eq!(dev.last_period().nr_active as usize, n);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = admit_complete, admit_complete_batch32, plan_2k, plan_10k
}
criterion_main!(benches);
