//! The cost model learned from live traffic on the emulated device: from a wrong start,
//! every coefficient reaches the device's truth and stays there, and vrate stays steady.

use crate::daemon::{control_get, volume, DaemonProcess};
use crate::devices::{reader, DEFAULTS};
use crate::emulated::measure;
use std::time::{Duration, Instant};
use vhost_iocost::cost_model::learn::{coefs_ns, COEF_NAMES};
use vhost_iocost::cost_model::LinearParams;
use vhost_iocost::loadgen::{self, Duty, Pattern, TenantSpec};

/// The device's truth: sequential requests cheaper than random ones, writes half as fast.
const TRUTH: LinearParams = LinearParams {
    rbps: 200_000_000,
    rseqiops: 20_000,
    rrandiops: 10_000,
    wbps: 100_000_000,
    wseqiops: 10_000,
    wrandiops: 5_000,
};
/// Run length, and by when every coefficient must be within the band.
const RUN_S: u64 = 80;
const LEARNED_BY_S: usize = 60;
/// Every coefficient within this of the truth, relative.
const BAND: f64 = 0.2;
/// Largest coefficient of variation of vrate's per-second values, once learned.
const VRATE_CV: f64 = 0.25;

fn six(p: &LinearParams) -> String {
    format!(
        "rbps = {}\nrseqiops = {}\nrrandiops = {}\nwbps = {}\nwseqiops = {}\nwrandiops = {}\n",
        p.rbps, p.rseqiops, p.rrandiops, p.wbps, p.wseqiops, p.wrandiops
    )
}

/// Six tenants, one per kind of request (random and sequential 4 KiB reads and writes,
/// 128 KiB sequential reads, 256 KiB sequential writes), each backlogged on its own duty
/// cycle, so that the device is saturated by a changing mix.
fn tenants(d: &DaemonProcess) -> Vec<TenantSpec> {
    let kinds: [(&str, Pattern, u64, usize, u64, u64); 6] = [
        ("rr", Pattern::RandRead, 4096, 16, 3, 1),
        ("sr", Pattern::Read, 128 << 10, 4, 3, 2),
        ("rw", Pattern::RandWrite, 4096, 16, 2, 3),
        ("sw", Pattern::Write, 256 << 10, 4, 4, 3),
        ("sr4", Pattern::Read, 4096, 8, 5, 4),
        ("sw4", Pattern::Write, 4096, 8, 3, 5),
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(i, &(name, rw, bs, depth, on, off))| TenantSpec {
            rw,
            bs,
            ramp: Duration::ZERO,
            delay: Duration::from_secs(i as u64),
            duty: Some(Duty {
                on: Duration::from_secs(on),
                off: Duration::from_secs(off),
            }),
            ..reader(d, name, depth, RUN_S - i as u64)
        })
        .collect()
}

/// What the daemon said each second: the six coefficients (ns) and vrate (%).
fn sample(d: &DaemonProcess) -> ([f64; 6], f64) {
    let m = control_get(d, "/v1/device/model");
    let coefs = COEF_NAMES.map(|k| m["learned"]["coefs_ns"][k].as_f64().unwrap_or(f64::NAN));
    let vrate = control_get(d, "/v1/device")["vrate_pct"]
        .as_f64()
        .unwrap_or(f64::NAN);
    (coefs, vrate)
}

/// `[device.model]` with the write numbers `factor` times the truth's (a cost `1 /
/// factor` of it) and `learn = true`, on an emulated device of the truth, default QoS,
/// mixed traffic: within 60 s every coefficient is within ±20 % of the truth and stays
/// there to the end (80 s), and from then on vrate's per-second CV is at most 0.25.
/// Once with writes priced 5× too high, once 5× too low.
#[test]
fn writes_priced_five_times_off_either_way_are_learned_within_a_minute() {
    let truth = coefs_ns(&TRUTH);
    // 128 MiB each: random requests land more than 16 MiB apart, where the model (and
    // the emulated truth) price them as random.
    let volumes: String = (0..6)
        .map(|i| {
            volume(
                ["rr", "sr", "rw", "sw", "sr4", "sw4"][i],
                128 * i as u64,
                128,
                "",
            )
        })
        .collect();
    let device = format!(
        "[device]\npath = \"disk.img\"\ncreate_size = \"768MiB\"\nkind = \"emulated\"\n\
         direct = false\n[device.emulated]\n{}channels = 4\nbase_latency = \"50us\"\n",
        six(&TRUTH)
    );
    for (what, factor) in [("writes 5× too dear", 0.2), ("writes 5× too cheap", 5.0)] {
        let wrong = LinearParams {
            wbps: (TRUTH.wbps as f64 * factor) as u64,
            wseqiops: (TRUTH.wseqiops as f64 * factor) as u64,
            wrandiops: (TRUTH.wrandiops as f64 * factor) as u64,
            ..TRUTH
        };
        measure(what, || {
            let model = format!("[device.model]\n{}learn = true\n", six(&wrong));
            let d = DaemonProcess::start(&format!("{device}{model}{DEFAULTS}\n{volumes}"));
            let specs = tenants(&d);
            let load = std::thread::spawn(move || loadgen::run(&specs));
            let start = Instant::now();
            let mut seconds = Vec::new();
            for s in 1..=RUN_S - 2 {
                // Sampled once a second on the test's clock; no synchronisation rests on it.
                std::thread::sleep(
                    (start + Duration::from_secs(s)).saturating_duration_since(Instant::now()),
                );
                seconds.push(sample(&d));
            }
            let r = load.join().unwrap()?;
            assert!(r.iter().all(|t| t.errors == 0), "{r:?}");
            let worst: Vec<f64> = seconds
                .iter()
                .map(|(c, _)| {
                    (0..6)
                        .map(|k| (c[k] / truth[k] - 1.0).abs())
                        .fold(0.0, f64::max)
                })
                .collect();
            let within = worst.iter().position(|&e| e <= BAND);
            let vrates: Vec<f64> = seconds.iter().map(|&(_, v)| v).collect();
            let summary = format!(
                "{what}: worst coefficient error each second {worst:.2?}; vrate {vrates:.0?}; \
                 last {:.0?} vs truth {truth:.0?}",
                seconds.last().map(|s| s.0)
            );
            eprintln!("{summary}");
            let Some(at) = within.filter(|&at| at < LEARNED_BY_S) else {
                return Err(format!("not within ±20 % by {LEARNED_BY_S} s: {summary}"));
            };
            if worst[at..].iter().any(|&e| e > BAND) {
                return Err(format!("left the ±20 % band after {at} s: {summary}"));
            }
            let after = &vrates[at..];
            let mean = after.iter().sum::<f64>() / after.len() as f64;
            let sd =
                (after.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / after.len() as f64).sqrt();
            if sd / mean > VRATE_CV {
                return Err(format!(
                    "vrate's CV {:.2} > {VRATE_CV} once learned: {summary}",
                    sd / mean
                ));
            }
            Ok(())
        });
    }
}
