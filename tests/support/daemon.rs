//! Runs the `vhost-iocost` binary on a config in a private temporary directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vhost_iocost::lock::Locked;

/// How long the daemon may take to start or stop before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct DaemonProcess {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    /// Every line the daemon logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl DaemonProcess {
    /// Writes `config` (relative paths are inside the temp dir) and starts the daemon; returns
    /// once it logged that it is serving.
    pub fn start(config: &str) -> Self {
        // An emulated device's backing file in the page cache (`direct = false`) goes in
        // memory: on the host's disk, writeback of its dirty pages stalls the daemon for a
        // second now and then, the host disk's noise leaking into a device whose timing
        // the test asserts.
        let in_memory = config.contains("kind = \"emulated\"")
            && config.contains("direct = false")
            && Path::new("/dev/shm").is_dir();
        let dir = if in_memory {
            tempfile::Builder::new()
                .prefix("vhost-iocost-test")
                .tempdir_in("/dev/shm")
        } else {
            tempfile::tempdir()
        };
        Self::start_in(dir.expect("tempdir"), config)
    }

    /// Like `start`, reusing a directory (and so the backing file) from an earlier run.
    pub fn start_in(dir: tempfile::TempDir, config: &str) -> Self {
        Self::start_with_env(dir, config, &[])
    }

    /// Like `start_in`, with extra environment variables for the daemon.
    pub fn start_with_env(dir: tempfile::TempDir, config: &str, env: &[(&str, &str)]) -> Self {
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let mut child = Command::new(crate::binary())
            .args(["run", "--config", "config.toml"])
            .envs(env.iter().copied())
            .current_dir(dir.path())
            // DAEMON_RUST_LOG=vhost_iocost=debug shows each planner period in the log.
            .env(
                "RUST_LOG",
                std::env::var("DAEMON_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vhost-iocost");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("vhost-iocost running") {
                    let _ = ready_tx.send(true);
                }
                sink.lock().unwrap().push(line);
            }
            let _ = ready_tx.send(false);
        });
        let ready = ready_rx.recv_timeout(START_TIMEOUT).unwrap_or(false);
        let d = DaemonProcess {
            child: Some(child),
            dir,
            log,
        };
        assert!(ready, "daemon did not start; log:\n{}", d.log_text());
        d
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn socket(&self, volume: &str) -> String {
        self.path(&format!("{volume}.sock"))
            .to_string_lossy()
            .into_owned()
    }

    /// Waits (up to 10 s) until the daemon has logged a line containing `needle`; the log
    /// is read by another thread, so a line just written may not be there yet.
    pub fn wait_for_log(&self, needle: &str) -> bool {
        self.wait_for_log_lines(needle, 1)
    }

    /// Like `wait_for_log`, until `n` lines contain `needle`.
    pub fn wait_for_log_lines(&self, needle: &str, n: usize) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let seen = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.contains(needle))
                .count();
            if seen >= n {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// DAEMON_LOG_DIR=dir keeps each daemon's log there as <pid>.log when it is stopped or
    /// dropped, for a test whose failure needs the planner's periods (with
    /// DAEMON_RUST_LOG above).
    fn keep_log(&self) {
        if let (Ok(dir), Some(child)) = (std::env::var("DAEMON_LOG_DIR"), &self.child) {
            let path = Path::new(&dir).join(format!("{}.log", child.id()));
            let _ = std::fs::write(path, self.log_text());
        }
    }

    /// SIGTERM, then wait for exit; returns the status and the directory (for restarts).
    pub fn stop(mut self) -> (ExitStatus, tempfile::TempDir) {
        self.keep_log();
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on the PID of a child we own and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_timeout(&mut child, START_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "daemon did not exit after SIGTERM; log:\n{}",
                self.log_text()
            )
        });
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (status, dir)
    }

    /// SIGKILL, as an OOM kill or `kill -9` would; returns the directory (for restarts).
    pub fn kill(mut self) -> tempfile::TempDir {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// Waits for the daemon to kill itself (a crash point): its exit must be by SIGKILL.
    /// Returns the directory (for restarts).
    pub fn wait_killed(mut self) -> tempfile::TempDir {
        use std::os::unix::process::ExitStatusExt;
        let mut child = self.child.take().unwrap();
        let status = wait_timeout(&mut child, START_TIMEOUT)
            .unwrap_or_else(|| panic!("daemon did not crash; log:\n{}", self.log_text()));
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "{status}; log:\n{}",
            self.log_text()
        );
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    pub fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        self.keep_log();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A temporary directory owned by `uid`:`gid`, for a daemon that drops to that user
/// (`[security] user`) and must still write its state file and hot-added sockets there.
pub fn tempdir_owned_by(uid: u32, gid: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown the tempdir");
    dir
}

/// A config with one sparse backing file and the given `[[volume]]` tables.
pub fn config(device_extra: &str, volumes: &str) -> String {
    format!("[device]\npath = \"disk.img\"\ncreate_size = \"64MiB\"\n{device_extra}\n{volumes}")
}

/// A test whose threads spin (a polling client, a worker polling through long windows)
/// and one that counts requests per second on time do not run side by side on a 2-core
/// machine: each holds this while it runs.
static BUSY_CPUS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn busy_cpus() -> std::sync::MutexGuard<'static, ()> {
    BUSY_CPUS.locked()
}

/// A `[[volume]]` table with its socket named after the volume.
pub fn volume(name: &str, offset_mib: u64, size_mib: u64, extra: &str) -> String {
    format!(
        "[[volume]]\nname = \"{name}\"\nsocket = \"{name}.sock\"\noffset = \"{offset_mib}MiB\"\nsize = \"{size_mib}MiB\"\n{extra}\n"
    )
}

/// A cost model that says the device does 4000 random 4 KiB reads per second, with vrate
/// pinned at 100 %: QoS, not the machine, is the bottleneck, so shares are exact weights
/// even in short runs on a busy machine.
pub const SLOW_MODEL: &str = r#"
[device.model]
rbps = 200000000
rseqiops = 4000
rrandiops = 4000
wbps = 200000000
wseqiops = 4000
wrandiops = 4000
[device.qos]
min = 100.0
max = 100.0
"#;

/// A volume alone on the device is not throttled. Tests that need throttling run this
/// neighbour on volume `name`: it reads a little for `secs` seconds, and this returns once
/// the daemon counts it active (the config must have `control.sock`).
pub fn busy_neighbour(
    d: &DaemonProcess,
    name: &str,
    secs: u64,
) -> std::thread::JoinHandle<Result<Vec<vhost_iocost::loadgen::TenantResult>, String>> {
    let neighbour = vhost_iocost::loadgen::TenantSpec {
        name: name.into(),
        socket: d.socket(name),
        iodepth: 1,
        rate_iops: Some(20),
        runtime: Duration::from_secs(secs),
        ..Default::default()
    };
    let handle = std::thread::spawn(move || vhost_iocost::loadgen::run(&[neighbour]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while volume_stats(d, name)["active"] != true {
        assert!(
            std::time::Instant::now() < deadline,
            "the neighbour never became active"
        );
        std::thread::yield_now();
    }
    handle
}

/// A volume's statistics from the control socket (the daemon must have one at
/// `control.sock`).
pub fn volume_stats(d: &DaemonProcess, name: &str) -> serde_json::Value {
    stats_of(&control_get(d, "/v1/stats"), name).clone()
}

/// Volume `name`'s entry in a `GET /v1/stats` document.
pub fn stats_of<'a>(all: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    all["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name} in {all}"))
}

/// Polls until `ready` holds for the daemon's statistics (10 s at most).
pub fn wait_for_stats(d: &DaemonProcess, what: &str, ready: impl Fn(&serde_json::Value) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready(&control_get(d, "/v1/stats")) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Over the next `total` reads of the volumes `names` together, from the daemon's own
/// counters: the reads each completed, and the reads per second of all of them.
pub fn reads_over<const N: usize>(
    d: &DaemonProcess,
    names: [&str; N],
    total: u64,
) -> ([u64; N], f64) {
    let reads = |s: &serde_json::Value| names.map(|v| stats_of(s, v)["reads"].as_u64().unwrap());
    let start = reads(&control_get(d, "/v1/stats"));
    let started = std::time::Instant::now();
    let goal = start.iter().sum::<u64>() + total;
    wait_for_stats(d, "reads", |s| reads(s).iter().sum::<u64>() >= goal);
    let end = reads(&control_get(d, "/v1/stats"));
    let done: [u64; N] = std::array::from_fn(|i| end[i] - start[i]);
    let per_sec = done.iter().sum::<u64>() as f64 / started.elapsed().as_secs_f64();
    (done, per_sec)
}

/// `GET path` on the daemon's control socket (`control.sock`), as JSON.
pub fn control_get(d: &DaemonProcess, path: &str) -> serde_json::Value {
    vhost_iocost::control::client::request(&d.path("control.sock"), "GET", path, None)
        .map_err(|e| e.to_string())
        .and_then(|r| r.json())
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Waits (up to 10 s) until GET shows `n` frontends connected to volume `name` (the
/// daemon counts a frontend, and a closed connection, on the connection's own thread).
pub fn wait_frontends(d: &DaemonProcess, name: &str, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while control_get(d, &format!("/v1/volumes/{name}"))["frontends"] != n {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never had {n} frontends"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `method path` with a JSON body on the daemon's control socket: the status and the
/// JSON answer (null when there is none).
pub fn control_call(
    d: &DaemonProcess,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let body = body.map(|b| b.to_string());
    let r = vhost_iocost::control::client::request(
        &d.path("control.sock"),
        method,
        path,
        body.as_deref(),
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let json = if r.body.trim().is_empty() {
        serde_json::Value::Null
    } else {
        r.json().unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };
    (r.status, json)
}

/// `vhost-iocost ctl --socket <daemon's control socket> ARGS...`; returns stdout, panics
/// with stderr when it fails.
pub fn ctl(d: &DaemonProcess, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::binary())
        .arg("ctl")
        .arg("--socket")
        .arg(d.path("control.sock"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ctl {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// The address the daemon logged for its `[metrics] listen` listener.
pub fn metrics_address(d: &DaemonProcess) -> String {
    assert!(d.wait_for_log("metrics listening"), "{}", d.log_text());
    let log = d.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("metrics listening"))
        .unwrap();
    let at = line.find("address=").expect("address field") + "address=".len();
    line[at..].split_whitespace().next().unwrap().to_owned()
}
