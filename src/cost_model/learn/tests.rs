//! The learner against the emulated disk's arithmetic: backlogged tenants of every kind
//! coming and going keep the disk saturated in changing mixes.

use super::tap::{LearnTap, TapBatch};
use super::*;
use crate::cost_model::{CostInput, IoKind, LinearModel};
use crate::emulated::EmulatedDisk;

/// The truth: seq and random base costs apart, writes half as fast as reads.
fn truth() -> LinearParams {
    LinearParams {
        rbps: 400_000_000,
        rseqiops: 40_000,
        rrandiops: 20_000,
        wbps: 200_000_000,
        wseqiops: 20_000,
        wrandiops: 10_000,
    }
}

struct Tenant {
    kind: IoKind,
    seq: bool,
    len: u64,
    depth: usize,
    /// On for `on_s` seconds out of every `cycle_s`, starting `phase_s` in.
    on_s: u64,
    cycle_s: u64,
    phase_s: u64,
    done_at: Vec<(u64, u64)>,
}

impl Tenant {
    fn on(&self, now_ns: u64) -> bool {
        ((now_ns / 1_000_000_000 + self.phase_s) % self.cycle_s) < self.on_s
    }
}

fn tenants() -> Vec<Tenant> {
    let t = |kind, seq, len, depth, on_s, cycle_s, phase_s| Tenant {
        kind,
        seq,
        len,
        depth,
        on_s,
        cycle_s,
        phase_s,
        done_at: Vec::new(),
    };
    vec![
        t(IoKind::Read, false, 4096, 16, 3, 4, 0),
        t(IoKind::Read, true, 128 << 10, 4, 3, 5, 1),
        t(IoKind::Write, false, 4096, 16, 2, 5, 2),
        t(IoKind::Write, true, 256 << 10, 4, 4, 7, 3),
        t(IoKind::Read, true, 4096, 8, 5, 9, 4),
        t(IoKind::Write, true, 4096, 8, 3, 8, 5),
    ]
}

/// Runs the tenants on an emulated disk of the truth for `secs`, the learner starting
/// from `start` and ticking every 10 ms; returns the learner and its coefficients'
/// worst relative error at every second.
fn run(start: LinearParams, secs: u64) -> (Learner, Vec<f64>) {
    let truth_ns = coefs_ns(&truth());
    let mut disk = EmulatedDisk::new(LinearModel::new(truth()), 1.0, 4, 50_000);
    let tap = LearnTap::default();
    let mut learner = Learner::new(coefs_ns(&start), 0);
    let mut tenants = tenants();
    let mut worst = Vec::new();
    const STEP_NS: u64 = 20_000;
    for step in 0..secs * 1_000_000_000 / STEP_NS {
        let now = step * STEP_NS;
        let mut batch = TapBatch::default();
        for t in &mut tenants {
            t.done_at.retain(|&(submitted, done)| {
                if done > now {
                    return true;
                }
                batch.data(&tap, t.kind, t.seq, t.len, done - submitted);
                false
            });
            while t.on(now) && t.done_at.len() < t.depth {
                let input = CostInput {
                    kind: t.kind,
                    offset: 0,
                    len: t.len,
                    prev_end: Some(if t.seq { 0 } else { 1 << 40 }),
                };
                t.done_at.push((now, disk.serve(now, &input).done_ns));
            }
        }
        tap.add(&batch);
        if now % 10_000_000 == 0 {
            learner.tick(&tap, now);
        }
        if now % 1_000_000_000 == 0 {
            let c = learner.status().coefs_ns;
            let err = (0..FEATURES)
                .map(|k| (c[k] / truth_ns[k] - 1.0).abs())
                .fold(0.0, f64::max);
            worst.push(err);
        }
    }
    (learner, worst)
}

fn wrong_writes(factor: f64) -> LinearParams {
    let t = truth();
    // Slower by `factor`: every write coefficient `factor` times its true value.
    LinearParams {
        wbps: (t.wbps as f64 / factor) as u64,
        wseqiops: (t.wseqiops as f64 / factor) as u64,
        wrandiops: (t.wrandiops as f64 / factor) as u64,
        ..t
    }
}

#[test]
fn writes_priced_five_times_too_high_or_too_low_are_learned_within_a_minute() {
    for factor in [5.0, 0.2] {
        let (learner, worst) = run(wrong_writes(factor), 90);
        let s = learner.status();
        eprintln!("start ×{factor}: worst error per second {worst:.2?}; {s:?}");
        let settled = worst
            .iter()
            .position(|&e| e <= 0.2)
            .expect("never within 20 %");
        assert!(
            settled <= 60,
            "×{factor}: within 20 % only after {settled} s"
        );
        assert!(
            worst[settled..].iter().all(|&e| e <= 0.2),
            "×{factor}: left the 20 % band after {settled} s: {worst:.2?}"
        );
    }
}

#[test]
fn a_right_model_stays_where_it_is() {
    let (learner, worst) = run(truth(), 40);
    assert!(worst.iter().all(|&e| e <= 0.1), "{worst:.3?}");
    assert!(learner.status().windows >= MIN_WINDOWS);
}

#[test]
fn coefficients_and_measured_numbers_convert_both_ways() {
    let back = params_from_coefs_ns(&coefs_ns(&truth()));
    let (a, b) = (coefs_ns(&back), coefs_ns(&truth()));
    for k in 0..FEATURES {
        assert!((a[k] / b[k] - 1.0).abs() < 1e-3, "{k}: {a:?} vs {b:?}");
    }
}

#[test]
fn an_idle_device_teaches_nothing() {
    let tap = LearnTap::default();
    let mut learner = Learner::new(coefs_ns(&truth()), 0);
    let mut batch = TapBatch::default();
    for _ in 0..1000 {
        batch.data(&tap, IoKind::Read, false, 4096, 100_000);
    }
    tap.add(&batch);
    for s in 1..=30 {
        assert_eq!(learner.tick(&tap, s * 1_000_000_000), None);
    }
    assert_eq!(learner.status().windows, 0);
}
