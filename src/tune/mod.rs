//! `vhost-iocost tune`: check `profile`'s suggestion on the real device, and show the
//! vrate frontier behind it.
//!
//! The scenario is the one every suggestion is checked with ([`crate::profile::suggest`]):
//! a protected tenant (QD1 4 KiB random reads) beside an aggressor (QD8 1 MiB sequential
//! writes) at equal weights, each compared with itself alone (QoS off). `tune` runs it
//! with vrate pinned (`min = max = v`) at a series of values (the QoS-bound sweep of the
//! IOCost paper and resctl-bench's `iocost-qos`), then with the controller free under the
//! `[device.qos]` of the --model file (the one `profile` printed), and reports for each
//! the protected tenant's and the aggressor's share of solo.
//!
//! Its bounds: too high a vrate lets the aggressor flood the device; the sweep shows the
//! highest vrate at which the protected tenant still keeps [`READER_KEEPS`] of its solo
//! IOPS. The controller protects only if it may go down that far, so `min` must not be
//! above it (a `min` of 60, say, stops it at 60 where 50 was needed). `max` matters only
//! when the model underrates the device and is left as suggested. So `tune` agrees with
//! `profile` unless the suggested `min` is above every vrate that protected, and then
//! says so and suggests that vrate.

use crate::loadgen::{self, Pattern, TenantResult, TenantSpec};
use crate::profile::suggest::{READER_KEEPS, WRITER_KEEPS};
use crate::qos::QosConfig;
use crate::size::ByteSize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Check profile's suggestion with a protected reader beside a writer, and sweep a pinned
/// vrate to show where protection lies.
///
/// Writes to PATH (the aggressor writes into the second half): PATH must not exist (a
/// scratch file of --size is created and removed afterwards) unless --destructive is given.
/// The cost model and the QoS settings come from --model, the output of
/// `vhost-iocost profile` ([device.model], and [device.qos] for the controller's run).
#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Block device or file to run on.
    #[arg(long, value_name = "DEV_OR_FILE")]
    path: PathBuf,
    /// A TOML file with the [device.model] table to use and the [device.qos] to check
    /// (the output of `vhost-iocost profile`).
    #[arg(long, value_name = "FILE")]
    model: PathBuf,
    /// Bytes to use (default 2GiB): split between the two tenants.
    #[arg(long, value_parser = ByteSize::parse, default_value = "2GiB")]
    size: ByteSize,
    /// The pinned vrates to try, percent.
    #[arg(long, value_delimiter = ',', default_value = "10,25,50,75,100,150,200")]
    vrates: Vec<f64>,
    /// Run time of each point.
    #[arg(long, value_parser = crate::duration::parse_duration, default_value = "8s")]
    duration: Duration,
    /// Allow writing to an existing PATH (destroys its data).
    #[arg(long)]
    destructive: bool,
}

/// One run of the scenario: the protected tenant's IOPS and the aggressor's MiB/s, each
/// as a percentage of its solo run.
#[derive(Clone, Debug)]
pub struct Point {
    pub vrate: f64,
    pub protected_pct: f64,
    pub aggressor_pct: f64,
}

impl Point {
    fn protects(&self) -> bool {
        self.protected_pct >= READER_KEEPS * 100.0
    }

    fn balanced(&self) -> bool {
        self.protects() && self.aggressor_pct >= WRITER_KEEPS * 100.0
    }
}

/// The `(min, max)` to use, given the pinned sweep and the suggested `qos`, and why it
/// differs from the suggestion when it does (see the module header).
pub fn bounds(points: &[Point], qos: &QosConfig) -> ((f64, f64), Option<String>) {
    let highest = points
        .iter()
        .filter(|p| p.protects())
        .map(|p| p.vrate)
        .fold(f64::NEG_INFINITY, f64::max);
    if highest == f64::NEG_INFINITY {
        let why = format!(
            "no pinned vrate kept the protected tenant at >= {:.0}% of solo: try lower \
             --vrates, or check the model",
            READER_KEEPS * 100.0
        );
        return ((qos.min, qos.max), Some(why));
    }
    if qos.min > highest {
        let why = format!(
            "min = {:.1} is above every vrate that protected (highest {highest:.1}): the \
             controller could not slow the aggressor enough",
            qos.min
        );
        return ((highest, qos.max.max(highest)), Some(why));
    }
    ((qos.min, qos.max), None)
}

type BoxError = Box<dyn std::error::Error>;

pub fn run(args: &TuneArgs) -> Result<(), BoxError> {
    let (model_table, suggested_body, suggested) = read_model(&args.model)?;
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
    let bench = Bench {
        work: &work,
        config: &config,
        protected,
        aggressor,
        solo: (0.0, 0.0),
    };
    let result = sweep(bench, &args.vrates, &suggested_body, &suggested);
    let _ = std::fs::remove_dir_all(&work);
    if created {
        let _ = std::fs::remove_file(&path);
    }
    result
}

/// The `--model` file's `[device.model]` table, its `[device.qos]` body and that parsed.
fn read_model(file: &Path) -> Result<(String, String, QosConfig), String> {
    let model =
        std::fs::read_to_string(file).map_err(|e| format!("--model {}: {e}", file.display()))?;
    let model_table = extract_table(&model, "device.model")
        .ok_or_else(|| format!("--model {}: no [device.model] table", file.display()))?;
    let suggested_table = extract_table(&model, "device.qos").ok_or_else(|| {
        format!(
            "--model {}: no [device.qos] table to check (the output of `vhost-iocost profile` has one)",
            file.display()
        )
    })?;
    let suggested_body = suggested_table
        .split_once('\n')
        .map_or("", |(_, body)| body)
        .to_string();
    let suggested: QosConfig = toml::from_str(&suggested_body)
        .map_err(|e| format!("--model {}: [device.qos]: {e}", file.display()))?;
    Ok((model_table, suggested_body, suggested))
}

/// The two tenants against daemons started in `work` from `config(qos)`.
struct Bench<'a> {
    work: &'a Path,
    config: &'a dyn Fn(&str) -> String,
    protected: TenantSpec,
    aggressor: TenantSpec,
    /// Alone with QoS off: the protected tenant's IOPS, the aggressor's MiB/s.
    solo: (f64, f64),
}

impl Bench<'_> {
    /// One run of both tenants, printed as a row; `vrate` is the pinned one (NaN: the
    /// controller's).
    fn together(&self, qos: &str, vrate: f64) -> Result<Point, BoxError> {
        let r: Vec<TenantResult> = with_daemon(self.work, &(self.config)(qos), || {
            Ok(loadgen::run(&[
                self.protected.clone(),
                self.aggressor.clone(),
            ])?)
        })?;
        let (solo_iops, solo_mib) = self.solo;
        let p = Point {
            vrate,
            protected_pct: r[0].iops * 100.0 / solo_iops.max(1e-9),
            aggressor_pct: r[1].mib_per_s * 100.0 / solo_mib.max(1e-9),
        };
        let label = if vrate.is_nan() {
            "free".to_string()
        } else {
            format!("{vrate:.1}")
        };
        println!(
            "{label:>8} {:>14.0} {:>9.0}% {:>16.0} {:>9.0}%{}",
            r[0].iops,
            p.protected_pct,
            r[1].mib_per_s,
            p.aggressor_pct,
            if p.balanced() { "  both kept" } else { "" }
        );
        Ok(p)
    }
}

/// The solo runs, a run per pinned vrate, one with the controller free under the
/// suggested `[device.qos]`, and the bounds they suggest.
fn sweep(
    mut bench: Bench,
    vrates: &[f64],
    suggested_body: &str,
    suggested: &QosConfig,
) -> Result<(), BoxError> {
    eprintln!("solo runs (QoS off) ...");
    let solo = with_daemon(bench.work, &(bench.config)("enable = false"), || {
        Ok((
            loadgen::run(std::slice::from_ref(&bench.protected))?,
            loadgen::run(std::slice::from_ref(&bench.aggressor))?,
        ))
    })?;
    bench.solo = (solo.0[0].iops, solo.1[0].mib_per_s);
    println!(
        "solo: protected {:.0} IOPS, aggressor {:.0} MiB/s",
        bench.solo.0, bench.solo.1
    );
    println!(
        "{:>8} {:>14} {:>10} {:>16} {:>10}",
        "vrate%", "protected IOPS", "% of solo", "aggressor MiB/s", "% of solo"
    );
    let mut points = Vec::new();
    for &v in vrates {
        let qos = format!("rpct = 0.0\nwpct = 0.0\nmin = {v:.1}\nmax = {v:.1}");
        points.push(bench.together(&qos, v)?);
    }
    let free = bench.together(suggested_body, f64::NAN)?;
    println!(
        "free: the controller under the --model file's [device.qos] (min = {:.1}, max = {:.1}): \
         protected {:.0}% and aggressor {:.0}% of solo ({})",
        suggested.min,
        suggested.max,
        free.protected_pct,
        free.aggressor_pct,
        if free.balanced() {
            format!(
                "both kept: >= {:.0}% and >= {:.0}%",
                READER_KEEPS * 100.0,
                WRITER_KEEPS * 100.0
            )
        } else {
            format!(
                "the aim is >= {:.0}% and >= {:.0}%; bench-frontier.sh shows whether the disk allows it",
                READER_KEEPS * 100.0,
                WRITER_KEEPS * 100.0
            )
        }
    );
    match bounds(&points, suggested) {
        ((min, max), None) => println!(
            "suggested [device.qos]: min = {min:.1}, max = {max:.1}, as profile suggested: \
             the controller can reach the vrates that protected"
        ),
        ((min, max), Some(why)) => {
            println!("suggested [device.qos]: min = {min:.1}, max = {max:.1}, not profile's: {why}")
        }
    }
    Ok(())
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
    fn the_suggested_min_stands_unless_it_is_above_every_protecting_vrate() {
        let p = |vrate, protected_pct, aggressor_pct| Point {
            vrate,
            protected_pct,
            aggressor_pct,
        };
        let points = [
            p(10.0, 99.0, 5.0),
            p(25.0, 97.0, 30.0),
            p(50.0, 65.0, 55.0),
            p(100.0, 40.0, 90.0),
        ];
        assert!(points[2].balanced() && !points[1].balanced() && !points[3].protects());
        let suggested = QosConfig::default();
        assert_eq!(bounds(&points, &suggested), ((25.0, 400.0), None));
        // min = 60: the controller could not get down to 50.
        let old = QosConfig {
            min: 60.0,
            max: 100.0,
            ..suggested.clone()
        };
        let ((min, max), why) = bounds(&points, &old);
        assert_eq!((min, max), (50.0, 100.0));
        assert!(why
            .unwrap()
            .contains("min = 60.0 is above every vrate that protected"));
        let ((min, _), why) = bounds(&points[3..], &suggested);
        assert_eq!(min, 25.0);
        assert!(why.unwrap().starts_with("no pinned vrate kept"));
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
