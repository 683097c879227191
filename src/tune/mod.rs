//! `vhost-iocost tune`: find the vrate bounds that protect a latency-sensitive tenant.
//!
//! The QoS-bound sweep of the IOCost paper and resctl-bench's `iocost-qos`: run the
//! daemon with vrate pinned (`min = max = v`) at a series of values, each time with a
//! protected tenant (QD1 4 KiB random reads) next to an aggressor (deep 1 MiB sequential
//! writes) at equal weights, and compare with the protected tenant alone. Too high a
//! vrate lets the aggressor flood the device and the protected tenant's latency explode;
//! too low a vrate starves both. The usable range is where the protected tenant keeps at
//! least 90 % of its solo throughput and the aggressor still progresses; its ends are the
//! suggested `min` and `max`.

use crate::config::ByteSize;
use crate::loadgen::{self, Pattern, TenantResult, TenantSpec};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Sweep a pinned vrate with a protected tenant and an aggressor; suggest vrate bounds.
///
/// Writes to PATH (the aggressor writes into the second half): PATH must not exist (a
/// scratch file of --size is created and removed afterwards) unless --destructive is given.
/// The cost model comes from --model, a file with a [device.model] table (the output of
/// `vhost-iocost profile`).
#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Block device or file to run on.
    #[arg(long, value_name = "DEV_OR_FILE")]
    path: PathBuf,
    /// A TOML file with the [device.model] table to use (e.g. from `vhost-iocost profile`).
    #[arg(long, value_name = "FILE")]
    model: PathBuf,
    /// Bytes to use (default 2GiB): split between the two tenants.
    #[arg(long, value_parser = ByteSize::parse, default_value = "2GiB")]
    size: ByteSize,
    /// The pinned vrates to try, percent.
    #[arg(long, value_delimiter = ',', default_value = "10,25,50,75,100,150,200")]
    vrates: Vec<f64>,
    /// Run time of each point.
    #[arg(long, value_parser = loadgen::parse_duration, default_value = "8s")]
    duration: Duration,
    /// Allow writing to an existing PATH (destroys its data).
    #[arg(long)]
    destructive: bool,
}

/// One point of the sweep.
#[derive(Clone, Debug)]
pub struct Point {
    pub vrate: f64,
    pub protected_pct: f64,
    pub aggressor_mib_s: f64,
}

/// The usable range: points where the protected tenant keeps ≥ 90 % of its solo IOPS and
/// the aggressor progresses (≥ 1 % of its solo bandwidth). Returns (min, max) vrate.
pub fn usable_range(points: &[Point], aggressor_solo_mib_s: f64) -> Option<(f64, f64)> {
    let ok: Vec<f64> = points
        .iter()
        .filter(|p| p.protected_pct >= 90.0 && p.aggressor_mib_s >= aggressor_solo_mib_s * 0.01)
        .map(|p| p.vrate)
        .collect();
    let lo = ok.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ok.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo <= hi).then_some((lo, hi))
}

pub fn run(args: &TuneArgs) -> Result<(), Box<dyn std::error::Error>> {
    let model = std::fs::read_to_string(&args.model)
        .map_err(|e| format!("--model {}: {e}", args.model.display()))?;
    let model_table = extract_table(&model, "device.model")
        .ok_or_else(|| format!("--model {}: no [device.model] table", args.model.display()))?;
    let created = !args.path.exists();
    if !created && !args.destructive {
        return Err(format!(
            "{} exists and the aggressor writes to it: pass --destructive, or name a path that does not exist",
            args.path.display()
        )
        .into());
    }
    if created {
        eprintln!(
            "creating {} ({}) and filling it",
            args.path.display(),
            args.size
        );
        crate::profile::allocation::create_filled(&args.path, args.size.0)
            .map_err(|e| format!("{}: cannot create: {e}", args.path.display()))?;
    }
    let work = tempdir()?;
    let path = std::fs::canonicalize(
        args.path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )?
    .join(args.path.file_name().ok_or("--path has no file name")?);
    let half = (args.size.0 / 2) & !((1 << 20) - 1);
    let config = |qos: &str| {
        format!(
            "[device]\npath = \"{}\"\n{model_table}\n[device.qos]\n{qos}\n\
             [[volume]]\nname = \"protected\"\nsocket = \"protected.sock\"\nsize = \"{half}\"\n\
             [[volume]]\nname = \"aggressor\"\nsocket = \"aggressor.sock\"\noffset = \"{half}\"\nsize = \"{half}\"\n",
            path.display(),
        )
    };
    let protected = TenantSpec {
        name: "protected".into(),
        socket: work.join("protected.sock").display().to_string(),
        rw: Pattern::RandRead,
        bs: 4096,
        iodepth: 1,
        runtime: args.duration,
        ramp: Duration::from_secs(1).min(args.duration / 4),
        ..TenantSpec::default()
    };
    let aggressor = TenantSpec {
        name: "aggressor".into(),
        socket: work.join("aggressor.sock").display().to_string(),
        rw: Pattern::Write,
        bs: 1 << 20,
        iodepth: 8,
        ..protected.clone()
    };
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        eprintln!("solo runs (QoS off) ...");
        let solo = with_daemon(&work, &config("enable = false"), || {
            Ok((
                loadgen::run(std::slice::from_ref(&protected))?,
                loadgen::run(std::slice::from_ref(&aggressor))?,
            ))
        })?;
        let (solo_iops, solo_mib) = (solo.0[0].iops, solo.1[0].mib_per_s);
        println!("solo: protected {solo_iops:.0} IOPS, aggressor {solo_mib:.0} MiB/s");
        println!(
            "{:>8} {:>14} {:>12} {:>16}",
            "vrate%", "protected IOPS", "% of solo", "aggressor MiB/s"
        );
        let mut points = Vec::new();
        for &v in &args.vrates {
            let qos = format!("rpct = 0.0\nwpct = 0.0\nmin = {v:.1}\nmax = {v:.1}");
            let r: Vec<TenantResult> = with_daemon(&work, &config(&qos), || {
                Ok(loadgen::run(&[protected.clone(), aggressor.clone()])?)
            })?;
            let p = Point {
                vrate: v,
                protected_pct: r[0].iops * 100.0 / solo_iops.max(1e-9),
                aggressor_mib_s: r[1].mib_per_s,
            };
            println!(
                "{:>8.1} {:>14.0} {:>11.0}% {:>16.0}",
                v, r[0].iops, p.protected_pct, p.aggressor_mib_s
            );
            points.push(p);
        }
        match usable_range(&points, solo_mib) {
            Some((lo, hi)) => println!(
                "usable vrate range: {lo:.0}%..{hi:.0}% (protected >= 90% of solo, aggressor progresses)\n\
                 suggested [device.qos]: min = {lo:.1}, max = {hi:.1}"
            ),
            None => println!(
                "no pinned vrate kept the protected tenant at >= 90% of solo with the aggressor progressing; \
                 try lower vrates or check the model"
            ),
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&work);
    if created {
        let _ = std::fs::remove_file(&path);
    }
    result
}

/// The lines of `[name]` (header included) up to the next table.
fn extract_table(text: &str, name: &str) -> Option<String> {
    let header = format!("[{name}]");
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    let first = lines.next()?;
    let body: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect();
    Some(format!("{first}\n{}", body.join("\n")))
}

fn tempdir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("vhost-iocost-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Runs the daemon on `config` (in `dir`) around `f`, and stops it with SIGTERM.
fn with_daemon<T>(
    dir: &Path,
    config: &str,
    f: impl FnOnce() -> Result<T, Box<dyn std::error::Error>>,
) -> Result<T, Box<dyn std::error::Error>> {
    std::fs::write(dir.join("config.toml"), config)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["run", "--config", "config.toml"])
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let ready = wait_ready(&mut child);
    let result = if ready {
        f()
    } else {
        Err("the daemon did not start".into())
    };
    // SAFETY: kill(2) on our own child's PID, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    result
}

/// Reads the daemon's log until it says it is serving (or exits).
fn wait_ready(child: &mut Child) -> bool {
    let Some(stderr) = child.stderr.take() else {
        return false;
    };
    let mut lines = BufReader::new(stderr).lines();
    let ready = lines.by_ref().map_while(Result::ok).any(|l| {
        if l.contains("ERROR") || l.starts_with("error") {
            eprintln!("{l}");
        }
        l.contains("vhost-iocost running")
    });
    // Keep draining the log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    ready
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_range_needs_protection_and_progress() {
        let p = |vrate, protected_pct, aggressor_mib_s| Point {
            vrate,
            protected_pct,
            aggressor_mib_s,
        };
        let points = [
            p(10.0, 99.0, 0.5),
            p(25.0, 97.0, 200.0),
            p(50.0, 91.0, 600.0),
            p(100.0, 40.0, 1500.0),
        ];
        // 10 %: the aggressor is starved (below 1 % of its 2000 MiB/s solo).
        assert_eq!(usable_range(&points, 2000.0), Some((25.0, 50.0)));
        assert_eq!(usable_range(&points[3..], 2000.0), None);
    }

    #[test]
    fn extracts_the_model_table_from_profile_output() {
        let text =
            "# comment\n[device.model]\nrbps = 1\nrseqiops = 2\n\n[device.qos]\nrpct = 95.0\n";
        assert_eq!(
            extract_table(text, "device.model").unwrap(),
            "[device.model]\nrbps = 1\nrseqiops = 2\n"
        );
        assert!(extract_table(text, "nope").is_none());
    }
}
