//! `vhost-iocost profile`: measure a disk or file and print `[device.model]` and
//! `[device.qos]` tables for the config.

use super::allocation::{allocated_bytes, check_allocated, create_filled, fill};
use super::plan::{profile, Plan};
use super::suggest::DEFAULT_PERCENTILE;
use super::uring::UringTarget;
use crate::size::ByteSize;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Measure a disk (or a file) and derive its cost model and suggested QoS targets.
///
/// Runs saturating workloads with io_uring and O_DIRECT (large sequential reads and writes
/// for bandwidth; 4 KiB sequential and random reads and writes at depth 64 for IOPS), then
/// paced random reads and writes for latency, and prints a `[device.model]` and a
/// `[device.qos]` table ready to paste into the config. It reads any path; it writes only
/// to a file it creates itself (a missing PATH is created with --size and removed
/// afterwards), inside the range --scratch names, or when --destructive is given.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// Block device or file to measure.
    #[arg(long, value_name = "DEV_OR_FILE")]
    path: PathBuf,
    /// Bytes to use: the size of a file to create (default 1GiB), or the part of an
    /// existing device or file to touch (default: all of it, at most 16GiB).
    #[arg(long, value_parser = parse_size)]
    size: Option<ByteSize>,
    /// Run time of each of the 8 jobs (default 20s; 3s with --quick).
    #[arg(long, value_parser = crate::duration::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Finish in under a minute, with wider error bars (for CI and first trials).
    #[arg(long)]
    quick: bool,
    /// Allow writing to an existing PATH (destroys its data). Without it or --scratch, the
    /// read coefficients of an existing PATH are measured and the write ones estimated.
    #[arg(long, conflicts_with = "scratch")]
    destructive: bool,
    /// Measure writes only inside this byte range of an existing PATH, whose data they
    /// overwrite (e.g. `--scratch 60GiB:4GiB`: 4 GiB from offset 60 GiB). Reads still cover
    /// --size. At least 64MiB, 4 KiB aligned, inside the file or device.
    #[arg(long, value_name = "OFFSET:SIZE", value_parser = parse_scratch)]
    scratch: Option<Scratch>,
    /// Latency percentile of the suggested read target: 50, 90, 95 or 99 (default 90, as
    /// the daemon's calibrated defaults; 50 suits a spinning disk, whose seeks spread its
    /// latency widely). Higher percentiles react to queueing sooner.
    #[arg(long, value_parser = parse_percentile)]
    percentile: Option<f64>,
    /// Also write the tables to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn parse_percentile(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("not a number: {s:?}"))?;
    if super::plan::PERCENTILES.contains(&p) {
        Ok(p)
    } else {
        Err(format!("must be one of 50, 90, 95, 99 (got {s})"))
    }
}

fn parse_size(s: &str) -> Result<ByteSize, String> {
    ByteSize::parse(s)
}

/// A byte range of an existing PATH that `profile` may overwrite to measure writes.
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    offset: u64,
    size: u64,
}

/// The smallest scratch range: the bandwidth job keeps 4 requests of 4 MiB in flight, and
/// sequential writes should not wrap around within a handful of requests.
const MIN_SCRATCH: u64 = 64 << 20;

fn parse_scratch(s: &str) -> Result<Scratch, String> {
    let (offset, size) = s
        .split_once(':')
        .ok_or_else(|| format!("expected OFFSET:SIZE, e.g. 60GiB:4GiB (got {s:?})"))?;
    let offset = ByteSize::parse(offset)
        .map_err(|e| format!("OFFSET: {e}"))?
        .0;
    let size = ByteSize::parse(size).map_err(|e| format!("SIZE: {e}"))?.0;
    if offset % 4096 != 0 || size % 4096 != 0 {
        return Err(format!(
            "OFFSET and SIZE must be multiples of 4096 (O_DIRECT) (got {offset}:{size})"
        ));
    }
    if size < MIN_SCRATCH {
        return Err(format!(
            "SIZE must be at least {} (got {})",
            ByteSize(MIN_SCRATCH),
            ByteSize(size)
        ));
    }
    Ok(Scratch { offset, size })
}

const DEFAULT_NEW_FILE: u64 = 1 << 30;
const MAX_EXISTING: u64 = 16 << 30;

pub fn run(args: &ProfileArgs) -> Result<(), Box<dyn std::error::Error>> {
    let path = &args.path;
    let created = !path.exists();
    if created {
        let size = args.size.map_or(DEFAULT_NEW_FILE, |s| s.0);
        eprintln!(
            "creating {} ({}) and filling it",
            path.display(),
            ByteSize(size)
        );
        create_filled(path, size).map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
    }
    let result = measure(args, created);
    if created {
        let _ = std::fs::remove_file(path);
    }
    result
}

fn measure(args: &ProfileArgs, created: bool) -> Result<(), Box<dyn std::error::Error>> {
    let path = &args.path;
    let writes = created || args.destructive || args.scratch.is_some();
    let file = OpenOptions::new()
        .read(true)
        .write(writes)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("{}: cannot open with O_DIRECT: {e}", path.display()))?;
    let available = (&file).seek(SeekFrom::End(0))?;
    let size = args
        .size
        .map_or(available.min(MAX_EXISTING), |s| s.0.min(available));
    if size < 8 << 20 {
        return Err(format!(
            "{}: at least 8MiB needed, {} available",
            path.display(),
            ByteSize(size)
        )
        .into());
    }
    if let Err(why) = check_allocated(&file, size, path) {
        if !writes {
            return Err(format!(
                "{why}. Pass --destructive to fill it first (overwrites its data), or a \
                 --size that covers only written data"
            )
            .into());
        }
        eprintln!(
            "{why}; --destructive: filling the first {} with data before measuring",
            ByteSize(size)
        );
        let buffered = OpenOptions::new().write(true).open(path)?;
        fill(&buffered, 0, size).map_err(|e| format!("{}: cannot fill: {e}", path.display()))?;
    }
    if let Some(scratch) = args.scratch {
        prepare_scratch(&file, path, scratch, available)?;
    }
    if !writes {
        eprintln!(
            "{} exists: measuring reads only (pass --scratch OFFSET:SIZE or --destructive to \
             measure writes)",
            path.display()
        );
    }
    let mut plan = if args.quick {
        Plan::quick(writes)
    } else {
        Plan::standard(writes)
    };
    if let Some(d) = args.duration {
        plan.duration = d;
    }
    let jobs = if writes { 8 } else { 4 };
    eprintln!(
        "profiling {} ({} used, {jobs} jobs x {:?})",
        path.display(),
        ByteSize(size),
        plan.duration
    );
    let mut target = UringTarget::new(file, size);
    if let Some(s) = args.scratch {
        target = target.with_scratch(s.offset, s.size);
    }
    let mut report = |job: &str, fraction: f64| {
        eprint!("\r  {job:<14} {:>3.0}%", fraction * 100.0);
        let _ = std::io::stderr().flush();
        if fraction >= 1.0 {
            eprintln!();
        }
    };
    let p = profile(&mut target, &plan, &mut report)?;
    eprintln!();
    let percentile = args.percentile.unwrap_or(DEFAULT_PERCENTILE);
    let header = format!(
        "vhost-iocost profile of {} ({} used, {:?} per job{})\nread latency p50/p90/p95/p99 at 90% load: {:?} us{}",
        path.display(),
        ByteSize(size),
        plan.duration,
        if args.quick { ", quick" } else { "" },
        p.read_latency_us,
        if writes { format!("\nwrite latency p50/p90/p95/p99 at 90% load: {:?} us", p.write_latency_us) } else { String::new() },
    );
    let header = match args.scratch {
        Some(s) => format!(
            "{header}\nwrites measured in the scratch range {}..{} only",
            s.offset,
            s.offset + s.size
        ),
        None => header,
    };
    let text = p.to_toml(percentile, &header);
    print!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// Checks that `scratch` lies inside the `available` bytes of `path` and fills its holes,
/// so that the writes timed there are overwrites of allocated blocks, as a guest's are.
fn prepare_scratch(
    file: &std::fs::File,
    path: &std::path::Path,
    scratch: Scratch,
    available: u64,
) -> Result<(), String> {
    let end = scratch.offset + scratch.size;
    if end > available {
        return Err(format!(
            "--scratch {}:{} ends at byte {end}, past the end of {} ({available} bytes)",
            ByteSize(scratch.offset),
            ByteSize(scratch.size),
            path.display()
        ));
    }
    let allocated = allocated_bytes(file, end) - allocated_bytes(file, scratch.offset);
    if allocated < scratch.size {
        eprintln!(
            "--scratch: {} of the range is unallocated; filling it before measuring",
            ByteSize(scratch.size - allocated)
        );
        let buffered = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        fill(&buffered, scratch.offset, scratch.size)
            .map_err(|e| format!("{}: cannot fill the scratch range: {e}", path.display()))?;
    }
    eprintln!(
        "measuring writes in the scratch range {}..{} of {} (its data is overwritten); \
         the rest is only read",
        scratch.offset,
        end,
        path.display()
    );
    Ok(())
}
