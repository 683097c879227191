//! The fio baseline: the same tenants run by fio directly on a file (io_uring, O_DIRECT),
//! without the daemon, reported in the same form.
//!
//! Tenant `i` of `n` uses the region `[i * size / n, (i + 1) * size / n)` of the file (rounded
//! down to 1 MiB). `runtime` includes `ramp` as in the load generator (fio's `runtime` is
//! what follows `ramp_time`), `delay` is fio's `startdelay`, and `rate_iops` is split
//! between reads and writes by `rwmixread` (fio caps each direction). `queues` has no fio
//! equivalent and is ignored. Latency percentiles are fio's total latency (`lat_ns`,
//! submission to completion, as the load generator measures); for `randrw` the larger of
//! the read and write percentiles is reported.
//!
//! Per-second samples come from fio's logs with `log_avg_msec=1000`: IOPS from
//! `write_iops_log`, p99 from the completion-latency histogram log (`write_hist_log`,
//! fio's 1856 latency bins). fio logs neither the ramp nor, usually, the last second of a
//! job, so its per-second series starts at `delay + ramp` and may end one second early.

use super::result::{SecondSample, TenantResult};
use super::spec::{Pattern, TenantSpec};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// fio's latency histogram: 29 groups of 64 bins.
const PLAT_BITS: u32 = 6;
const PLAT_VAL: usize = 1 << PLAT_BITS;
const PLAT_NR: usize = 29 * PLAT_VAL;

/// Runs `tenants` with fio on `file` (which must exist, at its full size) and returns
/// their results in order.
pub fn run(tenants: &[TenantSpec], file: &Path) -> Result<Vec<TenantResult>, String> {
    let version = Command::new("fio").arg("--version").output().map_err(|e| {
        format!(
            "--fio-file needs fio, which could not be run ({e}); install it (apt-get install fio)"
        )
    })?;
    if !version.status.success() {
        return Err("--fio-file needs fio: `fio --version` failed".into());
    }
    if let Some(t) = tenants.iter().find(|t| t.duty.is_some()) {
        return Err(format!(
            "tenant {}: on/off duty cycles have no fio equivalent; drop them for --fio-file",
            t.name
        ));
    }
    if let Some(t) = tenants.iter().find(|t| t.poll) {
        // fio's `hipri` polls the device's own poll queues, which a file may not have.
        return Err(format!(
            "tenant {}: poll is the vhost-user client's; drop it for --fio-file",
            t.name
        ));
    }
    let size = std::fs::metadata(file)
        .map_err(|e| format!("--fio-file {}: {e}", file.display()))?
        .len();
    let region = (size / tenants.len() as u64) & !((1 << 20) - 1);
    let max_bs = tenants.iter().map(|t| t.bs).max().unwrap_or(0);
    if region < max_bs.max(1 << 20) {
        return Err(format!(
            "--fio-file {}: {size} bytes is too small for {} tenant region(s) of at least 1 MiB",
            file.display(),
            tenants.len()
        ));
    }
    let dir = TempDir::new()?;
    let job = job_file(tenants, file, region, dir.path());
    let job_path = dir.path().join("job.fio");
    let out_path = dir.path().join("out.json");
    std::fs::write(&job_path, &job).map_err(|e| format!("{}: {e}", job_path.display()))?;
    let out = Command::new("fio")
        .arg("--output-format=json")
        .arg(format!("--output={}", out_path.display()))
        .arg(&job_path)
        .output()
        .map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "fio failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("fio output: {e}"))?;
    let mut results = parse_json(&text, tenants)?;
    for (i, (t, r)) in tenants.iter().zip(&mut results).enumerate() {
        let log = |kind: &str| {
            let p = dir.path().join(format!("t{}_{kind}.{}.log", i + 1, i + 1));
            std::fs::read_to_string(p).unwrap_or_default()
        };
        r.start_s = t.delay.as_secs_f64();
        r.per_second = per_second(t, &log("iops"), &log("clat_hist"));
    }
    Ok(results)
}

/// A private directory for the job file, the JSON and the logs, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("vhost-iocost-fio.{}.{nanos}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fio job file: one section per tenant, logs under `logs`.
pub fn job_file(tenants: &[TenantSpec], file: &Path, region: u64, logs: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "[global]\nioengine=io_uring\ndirect=1\nfilename={}\ntime_based=1\nlat_percentiles=1\n\
         log_avg_msec=1000\nlog_hist_msec=1000\nper_job_logs=1",
        file.display()
    );
    for (i, t) in tenants.iter().enumerate() {
        let ms = |d: std::time::Duration| d.as_millis();
        let _ = writeln!(
            s,
            "\n[{}]\nrw={}\nbs={}\niodepth={}\noffset={}\nsize={}\nruntime={}ms\nstartdelay={}ms",
            fio_name(&t.name),
            t.rw.as_str(),
            t.bs,
            t.iodepth,
            i as u64 * region,
            region,
            ms(t.runtime - t.ramp),
            ms(t.delay),
        );
        if !t.ramp.is_zero() {
            let _ = writeln!(s, "ramp_time={}ms", ms(t.ramp));
        }
        if t.rw == Pattern::RandRw {
            let _ = writeln!(s, "rwmixread={}", t.read_pct);
        }
        if let Some(rate) = t.rate_iops {
            let (r, w) = match t.rw {
                Pattern::RandRead | Pattern::Read => (rate, 0),
                Pattern::RandWrite | Pattern::Write => (0, rate),
                Pattern::RandRw => {
                    let r = (u64::from(rate) * u64::from(t.read_pct) / 100) as u32;
                    (r.max(1), (rate - r.min(rate)).max(1))
                }
            };
            let _ = writeln!(s, "rate_iops={r},{w}");
        }
        let log = logs.join(format!("t{}", i + 1));
        let _ = writeln!(
            s,
            "write_iops_log={}\nwrite_hist_log={}",
            log.display(),
            log.display()
        );
    }
    s
}

/// fio section names may not contain brackets or spaces.
fn fio_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Overall results from fio's JSON output, one per tenant in order.
pub fn parse_json(text: &str, tenants: &[TenantSpec]) -> Result<Vec<TenantResult>, String> {
    // fio may print notes before the JSON object.
    let start = text.find('{').ok_or("fio output holds no JSON")?;
    let v: serde_json::Value =
        serde_json::from_str(&text[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let jobs = v["jobs"].as_array().ok_or("fio JSON: no `jobs`")?;
    if jobs.len() != tenants.len() {
        return Err(format!(
            "fio JSON: {} jobs for {} tenants",
            jobs.len(),
            tenants.len()
        ));
    }
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    Ok(tenants
        .iter()
        .zip(jobs)
        .map(|(t, job)| {
            let dirs = [&job["read"], &job["write"]];
            let ios: u64 = dirs.iter().map(|d| u(&d["total_ios"])).sum();
            let bytes: u64 = dirs.iter().map(|d| u(&d["io_bytes"])).sum();
            let seconds = (t.runtime - t.ramp).as_secs_f64();
            // The larger of the directions that did I/O.
            let pct = |key: &str| {
                dirs.iter()
                    .filter(|d| u(&d["total_ios"]) > 0)
                    .map(|d| f(&d["lat_ns"]["percentile"][key]) / 1000.0)
                    .fold(0.0, f64::max)
            };
            TenantResult {
                name: t.name.clone(),
                ios,
                bytes,
                // fio reports the measured window only.
                completed: ios,
                errors: u(&job["error"]) + u(&job["total_err"]),
                seconds,
                iops: ios as f64 / seconds,
                mib_per_s: bytes as f64 / seconds / f64::from(1 << 20),
                lat_p50_us: pct("50.000000"),
                lat_p99_us: pct("99.000000"),
                lat_p999_us: pct("99.900000"),
                start_s: t.delay.as_secs_f64(),
                per_second: Vec::new(),
                // fio's own verify failures count as errors.
                mismatches: 0,
                first_mismatch: None,
            }
        })
        .collect())
}

/// Per-second samples from fio's IOPS log and completion-latency histogram log (times in
/// ms after the ramp; a line per direction). Seconds are numbered on the run's clock.
pub fn per_second(t: &TenantSpec, iops_log: &str, hist_log: &str) -> Vec<SecondSample> {
    let second = |ms: &str| -> Option<usize> {
        let ms: f64 = ms.trim().parse().ok()?;
        Some(((ms / 1000.0).round() as usize).max(1))
    };
    let mut samples: Vec<SecondSample> = Vec::new();
    let slot = |samples: &mut Vec<SecondSample>, n: usize| -> usize {
        while samples.len() < n {
            samples.push(SecondSample {
                t_s: (t.delay + t.ramp).as_secs_f64() + samples.len() as f64 + 1.0,
                ..SecondSample::default()
            });
        }
        n - 1
    };
    for line in iops_log.lines() {
        let cols: Vec<&str> = line.split(',').collect();
        let (Some(n), Some(iops)) = (
            cols.first().and_then(|c| second(c)),
            cols.get(1).and_then(|c| c.trim().parse::<u64>().ok()),
        ) else {
            continue;
        };
        let i = slot(&mut samples, n);
        samples[i].iops += iops;
        samples[i].mib_per_s = (samples[i].iops * t.bs) as f64 / f64::from(1 << 20);
    }
    let mut bins: Vec<Vec<u64>> = Vec::new();
    for line in hist_log.lines() {
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        if cols.len() < 3 + PLAT_NR {
            continue;
        }
        let Some(n) = second(cols[0]) else { continue };
        if bins.len() < n {
            bins.resize(n, vec![0; PLAT_NR]);
        }
        for (b, c) in bins[n - 1].iter_mut().zip(&cols[3..3 + PLAT_NR]) {
            *b += c.parse::<u64>().unwrap_or(0);
        }
    }
    for (n, b) in bins.iter().enumerate() {
        if let Some(p99_ns) = percentile(b, 0.99) {
            let i = slot(&mut samples, n + 1);
            samples[i].p99_us = p99_ns / 1000.0;
        }
    }
    samples
}

/// The value (ns) at quantile `q` of one interval of fio's latency histogram.
fn percentile(bins: &[u64], q: f64) -> Option<f64> {
    let total: u64 = bins.iter().sum();
    if total == 0 {
        return None;
    }
    let want = (total as f64 * q).ceil() as u64;
    let mut seen = 0;
    for (idx, &n) in bins.iter().enumerate() {
        seen += n;
        if seen >= want {
            return Some(bin_value(idx));
        }
    }
    Some(bin_value(bins.len() - 1))
}

/// fio's `plat_idx_to_val`: the middle of bin `idx`, in ns.
fn bin_value(idx: usize) -> f64 {
    if idx < PLAT_VAL << 1 {
        return idx as f64;
    }
    let error_bits = (idx >> PLAT_BITS) as u32 - 1;
    let base = 1u64 << (error_bits + PLAT_BITS);
    let k = (idx % PLAT_VAL) as f64;
    base as f64 + (k + 0.5) * f64::from(1u32 << error_bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tenant(name: &str, rw: Pattern) -> TenantSpec {
        TenantSpec {
            name: name.into(),
            socket: "-".into(),
            rw,
            runtime: Duration::from_secs(5),
            ramp: Duration::from_secs(1),
            delay: Duration::from_secs(2),
            rate_iops: Some(1000),
            read_pct: 70,
            ..TenantSpec::default()
        }
    }

    #[test]
    fn job_file_regions_and_timing() {
        let t = [
            tenant("a b", Pattern::RandRead),
            tenant("w", Pattern::RandRw),
        ];
        let job = job_file(&t, Path::new("/f.img"), 1 << 30, Path::new("/logs"));
        assert!(job.contains("filename=/f.img\n"));
        assert!(job.contains("[a_b]\nrw=randread\nbs=4096\niodepth=32\noffset=0\nsize=1073741824\nruntime=4000ms\nstartdelay=2000ms\nramp_time=1000ms\n"), "{job}");
        assert!(job.contains("[w]\nrw=randrw\n"));
        assert!(job.contains("offset=1073741824\n"));
        assert!(job.contains("rwmixread=70\nrate_iops=700,300\n"), "{job}");
        assert!(job.contains("rate_iops=1000,0\n"));
        assert!(job.contains("write_iops_log=/logs/t2\nwrite_hist_log=/logs/t2\n"));
    }

    #[test]
    fn histogram_bins_match_fio() {
        // Exact below 128 ns, then 64 bins per power of two.
        assert_eq!(bin_value(100), 100.0);
        assert_eq!(bin_value(128), 128.0 + 0.5 * 2.0);
        assert_eq!(bin_value(192), 256.0 + 0.5 * 4.0);
        let mut bins = vec![0; PLAT_NR];
        bins[50] = 98;
        bins[192] = 2;
        assert_eq!(percentile(&bins, 0.5), Some(50.0));
        assert_eq!(percentile(&bins, 0.99), Some(258.0));
        assert_eq!(percentile(&vec![0; PLAT_NR], 0.99), None);
    }

    #[test]
    fn per_second_from_logs() {
        let t = tenant("a", Pattern::RandRw);
        let iops = "1000, 500, 0, 0, 0\n1000, 200, 1, 0, 0\n2001, 600, 0, 0, 0\n";
        let mut bins = vec!["0"; PLAT_NR];
        bins[192] = "7";
        let hist = format!("1001, 0, 4096, {}\n", bins.join(", "));
        let s = per_second(&t, iops, &hist);
        assert_eq!(s.len(), 2);
        // delay 2 s + ramp 1 s, then the first logged second ends at 4 s.
        assert_eq!((s[0].t_s, s[0].iops, s[0].p99_us), (4.0, 700, 0.258));
        assert_eq!((s[1].t_s, s[1].iops, s[1].p99_us), (5.0, 600, 0.0));
    }

    #[test]
    fn overall_results_from_json() {
        let json = r#"note: something
{"jobs": [
 {"jobname": "r", "error": 0, "read": {"total_ios": 4000, "io_bytes": 16384000,
   "lat_ns": {"percentile": {"50.000000": 80000, "99.000000": 250000, "99.900000": 400000}}},
  "write": {"total_ios": 0, "io_bytes": 0, "lat_ns": {}}},
 {"jobname": "w", "error": 0, "read": {"total_ios": 100, "io_bytes": 409600,
   "lat_ns": {"percentile": {"50.000000": 1000, "99.000000": 9000000, "99.900000": 9000000}}},
  "write": {"total_ios": 300, "io_bytes": 1228800,
   "lat_ns": {"percentile": {"50.000000": 2000, "99.000000": 3000000, "99.900000": 9500000}}}}
]}"#;
        let t = [tenant("r", Pattern::RandRead), tenant("w", Pattern::RandRw)];
        let r = parse_json(json, &t).unwrap();
        assert_eq!((r[0].ios, r[0].errors), (4000, 0));
        assert_eq!(r[0].iops, 1000.0);
        assert_eq!((r[0].lat_p50_us, r[0].lat_p99_us), (80.0, 250.0));
        assert_eq!(r[1].ios, 400);
        assert_eq!(
            (r[1].lat_p50_us, r[1].lat_p99_us, r[1].lat_p999_us),
            (2.0, 9000.0, 9500.0)
        );
        assert!(parse_json("{\"jobs\": []}", &t)
            .unwrap_err()
            .contains("0 jobs"));
    }
}
