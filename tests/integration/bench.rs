//! `vhost-iocost bench` as a user runs it: a job file against the daemon, JSON, progress
//! lines and pictures; and the same job with fio on a plain file when fio is installed.

use crate::daemon::{busy_cpus, config, volume, DaemonProcess, SLOW_MODEL};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Two tenants; `heavy` spreads its requests over two queues.
const JOB: &str = r#"
[defaults]
rw = "randread"
bs = "4k"
iodepth = 16
runtime = "2s"
ramp = "500ms"

[[tenant]]
name = "light"
socket = "light.sock"

[[tenant]]
name = "heavy"
socket = "heavy.sock"
queues = 2
"#;

fn bench(dir: &Path, args: &[&str]) -> Output {
    bench_with_env(dir, args, &[])
}

fn bench_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .arg("bench")
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run vhost-iocost bench");
    assert!(
        out.status.success(),
        "bench failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The result of tenant `name` from bench's JSON.
fn result<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["results"]
        .as_array()
        .expect("results array")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no result for {name}: {json}"))
}

fn check_pictures(prefix: &Path, names: &[&str]) {
    let png = std::fs::read(prefix.with_extension("png")).expect("PNG written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG magic");
    assert!(png.len() > 10_000, "PNG of {} bytes", png.len());
    let svg = std::fs::read_to_string(prefix.with_extension("svg")).expect("SVG written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for name in names {
        assert!(svg.contains(name), "SVG legend lacks {name}");
    }
    assert!(svg.contains("<polyline"), "SVG has no lines");
}

#[test]
fn bench_job_file_json_progress_and_pictures() {
    let d = DaemonProcess::start(&config(
        SLOW_MODEL,
        &(volume("light", 0, 16, "weight = 100")
            + &volume("heavy", 16, 16, "weight = 300\nnum_queues = 2")),
    ));
    let job = d.path("job.toml");
    std::fs::write(&job, JOB).unwrap();
    let dir = d.dir.path().to_str().unwrap();
    let prefix = d.path("pic");
    let out = bench(
        d.dir.path(),
        &[
            "--job",
            job.to_str().unwrap(),
            "--socket-dir",
            dir,
            "--json",
            "--progress",
            "lines",
            "--plot",
            prefix.to_str().unwrap(),
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["engine"], "vhost-user");
    assert_eq!(json["tenants"].as_array().unwrap().len(), 2);
    assert_eq!(json["tenants"][1]["queues"], 2);
    let mut iops = Vec::new();
    for name in ["light", "heavy"] {
        let r = result(&json, name);
        assert_eq!(r["errors"], 0, "{name}: {r}");
        assert!(r["ios"].as_u64().unwrap() > 0, "{name}: {r}");
        assert!(r["lat_p99_us"].as_f64().unwrap() > 0.0, "{name}: {r}");
        let per_second = r["per_second"].as_array().unwrap();
        assert_eq!(per_second.len(), 2, "{name}: one sample per second of 2 s");
        for (i, s) in per_second.iter().enumerate() {
            assert!(s["iops"].as_u64().unwrap() > 0, "{name} second {i}: {s}");
            assert!(
                s["p99_us"].as_f64().unwrap() > 0.0,
                "{name} second {i}: {s}"
            );
            let t = s["t_s"].as_f64().unwrap();
            assert!((t - (i + 1) as f64).abs() < 0.1, "{name} second {i} at {t}");
        }
        iops.push(r["iops"].as_f64().unwrap());
    }
    // The weights still decide the split through the job file and two queues.
    let ratio = iops[1] / iops[0];
    assert!(
        (2.2..=3.8).contains(&ratio),
        "heavy/light {ratio:.2}: {iops:?}"
    );

    // One progress line per second on stderr (not a terminal), naming both tenants.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr.lines().filter(|l| l.contains("s/2s]")).collect();
    assert!(!lines.is_empty(), "no progress lines in:\n{stderr}");
    assert!(
        lines[0].contains("light") && lines[0].contains("heavy") && lines[0].contains("IOPS"),
        "{}",
        lines[0]
    );
    check_pictures(&prefix, &["light", "heavy"]);
}

/// A daemon whose stage trace (`VHOST_IOCOST_STAGE_TRACE`) goes into its directory, and
/// `bench` runs traced into the same prefix.
struct TracedDaemon {
    daemon: DaemonProcess,
    prefix: String,
}

impl TracedDaemon {
    fn start(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("trace").to_str().unwrap().to_owned();
        let daemon = DaemonProcess::start_with_env(
            dir,
            config,
            &[(vhost_iocost::stage_trace::ENV, &prefix)],
        );
        TracedDaemon { daemon, prefix }
    }

    /// `bench` with the trace on; its JSON.
    fn bench(&self, args: &[&str]) -> Value {
        let out = bench_with_env(
            self.daemon.dir.path(),
            args,
            &[(vhost_iocost::stage_trace::ENV, &self.prefix)],
        );
        serde_json::from_slice(&out.stdout).expect("JSON on stdout")
    }

    /// Stops the daemon, which writes its trace; returns the directory holding the trace
    /// files (they go with it) and their prefix.
    fn stop(self) -> (tempfile::TempDir, String) {
        let (status, dir) = self.daemon.stop();
        assert!(status.success(), "daemon exit {status}");
        (dir, self.prefix)
    }
}

/// A stage event: its letter, time (ns) and count.
type Event = (char, u64, u64);

/// The events of `PREFIX.ROLE`.
fn events(prefix: &str, role: &str) -> Vec<Event> {
    let path = format!("{prefix}.{role}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let letter = f[0].chars().next().unwrap();
            (letter, f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect()
}

fn count(events: &[Event], letter: char) -> usize {
    events.iter().filter(|e| e.0 == letter).count()
}

fn sum(events: &[Event], letter: char) -> u64 {
    events.iter().filter(|e| e.0 == letter).map(|e| e.2).sum()
}

/// `VHOST_IOCOST_STAGE_TRACE` as scripts/bench-stages.sh uses it: the daemon and the
/// client each write their stage events, on one clock, and the breakdown script cuts them
/// into round trips.
#[test]
fn stage_trace_of_daemon_and_client_accounts_for_every_request() {
    let d = TracedDaemon::start(&config(
        "[device.qos]\nenable = false",
        &volume("v", 0, 16, ""),
    ));
    let tenant = format!(
        "socket={},rw=randread,bs=4k,iodepth=1",
        d.daemon.socket("v")
    );
    let json = d.bench(&[
        "--json",
        "--runtime",
        "1s",
        "--ramp",
        "0s",
        "--tenant",
        &tenant,
    ]);
    let completed = json["results"][0]["completed"].as_u64().unwrap();
    assert!(completed > 0, "{json}");
    let (_dir, prefix) = d.stop();
    let (daemon, client) = (events(&prefix, "daemon"), events(&prefix, "client"));
    // The client woke from nearly every wait (a wait that times out with nothing marks no
    // wake), and every request it saw complete was submitted and reaped by the daemon
    // (which drained the rest before exiting).
    let (waits, wakes) = (count(&client, 'K'), count(&client, 'W'));
    assert!(
        wakes <= waits && waits - wakes <= waits / 10,
        "{waits} waits, {wakes} wakes"
    );
    assert!(
        sum(&daemon, 's') >= completed,
        "{} submitted",
        sum(&daemon, 's')
    );
    assert_eq!(
        sum(&daemon, 'R'),
        sum(&daemon, 's'),
        "every submitted operation reaped"
    );
    assert!(count(&daemon, 'P') > 0 && count(&daemon, 'U') > 0 && count(&daemon, 'N') > 0);
    // One clock for both: the daemon popped nothing before the client's first kick.
    let first = |ev: &[Event], c: char| ev.iter().find(|e| e.0 == c).unwrap().1;
    assert!(first(&client, 'K') <= first(&daemon, 'P'));

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/stage_breakdown.py");
    let out = Command::new("python3")
        .args([script, &prefix])
        .output()
        .expect("run python3 scripts/stage_breakdown.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let breakdown: Value = serde_json::from_slice(&out.stdout).unwrap();
    // At QD1 every wake-up of the client ends one round trip through the daemon.
    let round_trips = breakdown["round_trips"].as_u64().unwrap();
    let wake_ups = count(&client, 'W') as u64;
    assert_eq!(breakdown["client_wake_ups"].as_u64(), Some(wake_ups));
    assert!(
        round_trips * 2 >= wake_ups,
        "{round_trips} round trips of {wake_ups} client wake-ups"
    );
    let stages = breakdown["stages_us"].as_object().unwrap();
    assert_eq!(stages.len(), 7, "{breakdown}");
    let kernel = &stages["daemon: submit system calls (kernel)"];
    assert!(
        kernel.as_f64().unwrap() > 0.0,
        "reads of a file enter the kernel: {breakdown}"
    );
    assert_eq!(
        breakdown["completions_per_reap"]["most_common"], 1,
        "{breakdown}"
    );
}

/// `poll = true`: the client spins on polled queues, so the daemon has no one to notify,
/// and what it reads back is what it wrote.
#[test]
fn a_polling_client_is_served_without_notifications() {
    // Its client threads spin: kept short, and apart from the timing test below.
    let _cpu = busy_cpus();
    let d = TracedDaemon::start(&config("", &volume("v", 0, 16, "num_queues = 2")));
    let socket = d.daemon.socket("v");
    let tenant = format!("socket={socket},rw=randrw,bs=4k,iodepth=4,verify=true,poll=true");
    let json = d.bench(&[
        "--json",
        "--runtime",
        "300ms",
        "--ramp",
        "0s",
        "--tenant",
        &tenant,
    ]);
    let r = &json["results"][0];
    assert!(r["completed"].as_u64().unwrap() > 100, "{r}");
    assert_eq!(
        (r["errors"].as_u64(), r["mismatches"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    // Two polled queues on two client threads work too.
    let out = bench(
        d.daemon.dir.path(),
        &[
            "--json",
            "--runtime",
            "300ms",
            "--tenant",
            &format!("socket={socket},bs=4k,iodepth=4,queues=2,queue_threads=true,poll=true"),
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert!(
        json["results"][0]["completed"].as_u64().unwrap() > 100,
        "{json}"
    );
    let (_dir, prefix) = d.stop();
    let daemon = events(&prefix, "daemon");
    let (notified, reaped) = (count(&daemon, 'N') as u64, sum(&daemon, 'R'));
    // With EVENT_IDX a driver cannot switch notifications off, only ask for one at a
    // used index far ahead: a queue's first completion, then one per 65,536. Three
    // queues were opened here. A notified client at QD4 takes one per few completions.
    assert!(reaped > 200, "{reaped} completions reaped");
    assert!(
        notified <= 3 + reaped / 32_768,
        "{notified} notifications for {reaped} completions"
    );
}

#[test]
fn bench_rejects_unknown_job_keys_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("bad.toml");
    std::fs::write(
        &job,
        "[[tenant]]\nsocket = \"a.sock\"\nblocksize = \"4k\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["bench", "--job", job.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[[tenant]] 1: unknown key `blocksize`"),
        "{stderr}"
    );
}

#[test]
fn bench_fio_baseline_on_a_file() {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED bench_fio_baseline_on_a_file: fio is not installed (apt-get install fio)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("disk.img");
    // Written, not sparse: reads of holes would not reach the disk.
    std::fs::write(&file, vec![0x5a; 64 << 20]).unwrap();
    let job = dir.path().join("job.toml");
    std::fs::write(&job, JOB).unwrap();
    let prefix = dir.path().join("fio");
    let out = bench(
        dir.path(),
        &[
            "--job",
            job.to_str().unwrap(),
            "--fio-file",
            file.to_str().unwrap(),
            "--ramp",
            "0s",
            "--iodepth",
            "4",
            "--json",
            "--plot",
            prefix.to_str().unwrap(),
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["engine"], "fio");
    for name in ["light", "heavy"] {
        let r = result(&json, name);
        assert_eq!(r["errors"], 0, "{name}: {r}");
        assert!(r["ios"].as_u64().unwrap() > 100, "{name}: {r}");
        assert!(r["lat_p99_us"].as_f64().unwrap() > 0.0, "{name}: {r}");
        let per_second = r["per_second"].as_array().unwrap();
        assert!(!per_second.is_empty(), "{name}: no per-second samples: {r}");
        assert!(per_second[0]["iops"].as_u64().unwrap() > 0, "{name}: {r}");
    }
    check_pictures(&prefix, &["light", "heavy"]);
}

/// `verify=true` finds nothing wrong on the daemon under a deep mixed load, and does find
/// data changed behind the tenant's back (another writer on the backing file).
#[test]
fn bench_verify_passes_on_the_daemon_and_catches_data_changed_underneath() {
    use std::os::unix::fs::FileExt;
    let d = DaemonProcess::start(&config(
        "direct = false\n[device.qos]\nenable = false\n",
        &volume("v", 0, 8, ""),
    ));
    let tenant = format!(
        "socket={},rw=randrw,bs=4k,iodepth=64,runtime=2s,verify=true",
        d.socket("v")
    );
    let run = |d: &DaemonProcess| -> Value {
        let out = bench(
            d.dir.path(),
            &["--json", "--progress", "off", "--tenant", &tenant],
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["results"][0].clone()
    };
    let clean = run(&d);
    assert_eq!(
        (clean["errors"].as_u64(), clean["mismatches"].as_u64()),
        (Some(0), Some(0)),
        "{clean}"
    );
    assert!(clean["completed"].as_u64().unwrap() > 1000, "{clean}");

    // Zeroes over the volume's first MiB through the page cache, over and over, while
    // the tenant runs: some of its reads must come back different from what it wrote.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scribbler = {
        let (stop, file) = (stop.clone(), d.path("disk.img"));
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all_at(&[0u8; 1 << 20], 0).unwrap();
            }
        })
    };
    let dirty = run(&d);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    scribbler.join().unwrap();
    assert!(dirty["mismatches"].as_u64().unwrap() > 0, "{dirty}");
    assert!(
        dirty["first_mismatch"]
            .as_str()
            .unwrap()
            .starts_with("block "),
        "{dirty}"
    );
}

/// A tenant with `on=1s,off=1s` issues in its on seconds and is idle in its off seconds,
/// paced or not: the per-second series alternates.
#[test]
fn bench_duty_cycle_alternates_busy_and_idle_seconds() {
    // Counts requests per second: not beside a test whose client spins.
    let _cpu = busy_cpus();
    let d = DaemonProcess::start(&config(
        "direct = false\n[device.qos]\nenable = false\n",
        &(volume("paced", 0, 8, "") + &volume("flat", 8, 8, "")),
    ));
    let tenant = |name: &str, rest: &str| {
        format!(
            "socket={},name={name},rw=randread,bs=4k,runtime=4s,on=1s,off=1s,{rest}",
            d.socket(name)
        )
    };
    let out = bench(
        d.dir.path(),
        &[
            "--json",
            "--progress",
            "off",
            "--tenant",
            &tenant("paced", "iodepth=1,rate_iops=500"),
            "--tenant",
            &tenant("flat", "iodepth=8"),
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["paced", "flat"] {
        let r = result(&json, name);
        let iops: Vec<u64> = r["per_second"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["iops"].as_u64().unwrap())
            .collect();
        assert_eq!(iops.len(), 4, "{name}: {iops:?}");
        let (on, off) = (iops[0].min(iops[2]), iops[1].max(iops[3]));
        // Requests issued just before a pause may complete just after it.
        assert!(off <= 8 && on >= 400, "{name}: per second {iops:?}");
        if name == "paced" {
            // Paced: no catching up after a pause.
            assert!(iops[2] <= 520, "{name}: per second {iops:?}");
        }
    }
}
