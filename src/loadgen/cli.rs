//! `vhost-iocost bench`: options and the command.

use super::job::{build_tenants, JobFile};
use super::progress::ProgressMode;
use super::result::format_table;
use super::runner::run_with;
use super::{fio, plot};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A job file (TOML): a [defaults] table and [[tenant]] tables with the --tenant keys
    /// (see configs/bench/).
    #[arg(long, value_name = "FILE")]
    pub job: Option<PathBuf>,
    /// A tenant (repeat for several; they run together with the job file's tenants).
    #[arg(long = "tenant", value_name = "KEY=VALUE,...")]
    pub tenants: Vec<String>,
    /// Default access pattern [default: randread].
    #[arg(long)]
    pub rw: Option<String>,
    /// Default block size [default: 4k].
    #[arg(long)]
    pub bs: Option<String>,
    /// Default requests in flight per tenant [default: 32].
    #[arg(long)]
    pub iodepth: Option<usize>,
    /// Default run time, ramp included (e.g. 10s, 500ms, 2m) [default: 10s].
    #[arg(long)]
    pub runtime: Option<String>,
    /// Default warm-up time excluded from the results [default: 0s].
    #[arg(long)]
    pub ramp: Option<String>,
    /// Relative socket paths (job file or --tenant) are taken inside this directory
    /// [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<PathBuf>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write PREFIX.svg and PREFIX.png: per-tenant IOPS and p99 latency per second.
    #[arg(long, value_name = "PREFIX")]
    pub plot: Option<PathBuf>,
    /// Title of the pictures [default: the job file's name, or "vhost-iocost bench"].
    #[arg(long)]
    pub title: Option<String>,
    /// Progress line on stderr: auto = updated in place when stderr is a terminal, nothing
    /// otherwise; lines = one line per second; off.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Baseline: run the same tenants with fio (io_uring, O_DIRECT) directly on this
    /// existing file, tenant i of n on its i-th n-th of it, instead of the sockets.
    #[arg(long, value_name = "PATH")]
    pub fio_file: Option<PathBuf>,
}

pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let job = args.job.as_deref().map(JobFile::load).transpose()?;
    let mut flags: Vec<(&str, String)> = Vec::new();
    let given = [
        ("rw", args.rw.clone()),
        ("bs", args.bs.clone()),
        ("iodepth", args.iodepth.map(|d| d.to_string())),
        ("runtime", args.runtime.clone()),
        ("ramp", args.ramp.clone()),
    ];
    for (key, value) in given {
        if let Some(v) = value {
            flags.push((key, v));
        }
    }
    let mut specs = build_tenants(
        job.as_ref(),
        &flags,
        &args.tenants,
        args.socket_dir.as_deref(),
    )?;
    let results = match &args.fio_file {
        Some(file) => {
            for t in &mut specs {
                t.socket = format!("fio:{}", file.display());
            }
            if !args.json {
                eprintln!(
                    "running {} tenant(s) with fio on {} ...",
                    specs.len(),
                    file.display()
                );
            }
            fio::run(&specs, file)?
        }
        None => {
            if !args.json {
                let total = specs.iter().map(|t| t.delay + t.runtime).max();
                eprintln!(
                    "running {} tenant(s) for {:?} ...",
                    specs.len(),
                    total.unwrap_or_default()
                );
            }
            let results = run_with(&specs, args.progress)?;
            if let Err(e) = crate::stage_trace::write("client") {
                eprintln!(
                    "warning: cannot write the stage trace ({}): {e}",
                    crate::stage_trace::ENV
                );
            }
            results
        }
    };
    if let Some(prefix) = &args.plot {
        let title = args.title.clone().unwrap_or_else(|| {
            let base = args
                .job
                .as_deref()
                .and_then(|p| p.file_stem())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "vhost-iocost bench".into());
            if args.fio_file.is_some() {
                format!("{base} (fio on a file)")
            } else {
                base
            }
        });
        let (svg, png) = plot::write(prefix, &title, &results)?;
        eprintln!("wrote {} and {}", svg.display(), png.display());
    }
    if args.json {
        let engine = if args.fio_file.is_some() {
            "fio"
        } else {
            "vhost-user"
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "engine": engine,
                "tenants": specs,
                "results": results,
            }))?
        );
    } else {
        print!("{}", format_table(&specs, &results));
    }
    Ok(())
}
