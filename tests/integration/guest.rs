//! Real Linux guests: QEMU (TCG) boots Debian's cloud kernel with a vhost-user-blk disk on
//! the daemon and runs fio inside (scripts/guest/). These check what only the real guest
//! driver exercises: feature negotiation, config space, multi-queue, flushes, reconnects.
//!
//! The guests saturate both cores of the CI machine, so they run one test at a time
//! (`GUEST_LOCK`). Missing prerequisites (QEMU, busybox-static, fio, the kernel download)
//! fail the tests, with the reason: `cargo test` is the CI gate, and a skip there would turn
//! a broken install into a green run. On a machine without them, either run
//! `scripts/guest/prepare.sh` as root once, or set `VHOST_IOCOST_GUEST_TESTS=0`, which skips
//! these tests with a printed reason.

use crate::daemon::DaemonProcess;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use vhost_iocost::lock::Locked;

/// One guest test at a time: two TCG guests already use both cores.
static GUEST_LOCK: Mutex<()> = Mutex::new(());

/// Hard limit for one guest run (run-guest.sh kills QEMU then); a healthy run takes 10–20 s.
pub(crate) const GUEST_TIMEOUT: Duration = Duration::from_secs(90);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// target/guest-cache: the kernel and initramfs, shared by every run.
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("guest-cache")
}

/// target/tmp/guest-logs: console and daemon logs, kept after the test.
pub(crate) fn log_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-logs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub(crate) struct Image {
    pub kernel: String,
    pub initrd: String,
    /// A QEMU 9.1 or later (scripts/guest/fetch-qemu.sh), if one could be unpacked.
    pub qemu_fixed: Option<String>,
}

/// Runs prepare.sh once per test process. `None`: skipped on purpose (printed).
pub(crate) fn image() -> Option<&'static Image> {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    if std::env::var("VHOST_IOCOST_GUEST_TESTS").is_ok_and(|v| v == "0") {
        eprintln!("SKIPPED: real-guest test, because VHOST_IOCOST_GUEST_TESTS=0");
        return None;
    }
    let image = IMAGE.get_or_init(|| {
        let t = Instant::now();
        let out = Command::new("timeout")
            .arg("900")
            .arg(repo().join("scripts/guest/prepare.sh"))
            .arg(cache_dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run scripts/guest/prepare.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(str::to_owned)
        };
        match (out.status.success(), field("KERNEL="), field("INITRD=")) {
            (true, Some(kernel), Some(initrd)) => {
                eprintln!(
                    "guest image ready in {:.1?}: {kernel}, {initrd}",
                    t.elapsed()
                );
                let qemu_fixed = field("QEMU_FIXED=");
                Ok(Image {
                    kernel,
                    initrd,
                    qemu_fixed,
                })
            }
            _ => Err(format!(
                "scripts/guest/prepare.sh failed ({}):\n{}{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    match image {
        Ok(i) => Some(i),
        Err(e) => panic!(
            "real-guest tests need qemu-system-x86, busybox-static, fio and a Debian cloud \
             kernel download; {e}\nRun scripts/guest/prepare.sh as root (CI does it through \
             .ci/run), or set VHOST_IOCOST_GUEST_TESTS=0 to skip these tests."
        ),
    }
}

/// Serializes guest tests; a failed (panicked) earlier test does not poison the rest. A
/// TCG guest keeps both cores busy, so the tests that count requests per second on time
/// (`daemon::busy_cpus`) do not run beside one either.
pub(crate) fn lock() -> (MutexGuard<'static, ()>, MutexGuard<'static, ()>) {
    let guest = GUEST_LOCK.locked();
    (guest, crate::daemon::busy_cpus())
}

/// Per-test context: on panic, saves the daemon logs next to the console logs and says where.
pub(crate) struct Ctx {
    name: &'static str,
    daemon_logs: Vec<Arc<Mutex<Vec<String>>>>,
}

impl Ctx {
    pub(crate) fn new(name: &'static str) -> Self {
        Ctx {
            name,
            daemon_logs: Vec::new(),
        }
    }

    pub(crate) fn watch(&mut self, d: &DaemonProcess) {
        self.daemon_logs.push(d.log.clone());
    }

    pub(crate) fn console_path(&self, guest: &str) -> PathBuf {
        log_dir().join(format!("{}-{guest}.console.log", self.name))
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut text = String::new();
        for (i, log) in self.daemon_logs.iter().enumerate() {
            text += &format!("--- daemon run {}\n", i + 1);
            text += &log.lock().map(|l| l.join("\n")).unwrap_or_default();
            text.push('\n');
        }
        let path = log_dir().join(format!("{}.daemon.log", self.name));
        let _ = std::fs::write(&path, &text);
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        eprintln!(
            "daemon log saved to {}; last lines:\n{}",
            path.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

#[derive(Clone)]
pub(crate) struct GuestSpec {
    pub smp: u32,
    pub reconnect: bool,
    /// Boot, print "HARNESS: ready" and wait for `Guest::go` before running fio.
    pub wait: bool,
    /// fio options without the leading `--`, in order (`name=...` starts a new job).
    pub fio: Vec<String>,
    /// A QMP socket at this path.
    pub qmp: Option<PathBuf>,
    /// Start as a migration's destination, listening on this URI.
    pub incoming: Option<String>,
    /// This qemu-system-x86_64 rather than the one on PATH.
    pub qemu: Option<String>,
}

impl GuestSpec {
    pub(crate) fn new(fio: Vec<String>) -> Self {
        GuestSpec {
            smp: 1,
            reconnect: false,
            wait: false,
            fio,
            qmp: None,
            incoming: None,
            qemu: None,
        }
    }
}

/// A running run-guest.sh (and so one QEMU), stopped by PID when dropped.
pub(crate) struct Guest {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pub(crate) log: PathBuf,
}

/// What a guest printed: the parsed fio JSON and the console, for assertions.
pub(crate) struct GuestRun {
    pub status: ExitStatus,
    pub console: String,
    pub log: PathBuf,
}

impl Guest {
    pub(crate) fn start(image: &Image, socket: &str, log: PathBuf, spec: &GuestSpec) -> Guest {
        let _ = std::fs::remove_file(&log);
        let mut args: Vec<String> = vec![
            "--socket".into(),
            socket.into(),
            "--log".into(),
            log.to_string_lossy().into_owned(),
            "--smp".into(),
            spec.smp.to_string(),
            "--timeout".into(),
            GUEST_TIMEOUT.as_secs().to_string(),
            "--kernel".into(),
            image.kernel.clone(),
            "--initrd".into(),
            image.initrd.clone(),
        ];
        if spec.reconnect {
            args.push("--reconnect".into());
        }
        if let Some(qmp) = &spec.qmp {
            args.push("--qmp".into());
            args.push(qmp.to_string_lossy().into_owned());
        }
        if let Some(qemu) = &spec.qemu {
            args.push("--qemu".into());
            args.push(qemu.clone());
        }
        if let Some(uri) = &spec.incoming {
            args.push("--incoming".into());
            args.push(uri.clone());
        }
        args.push("--".into());
        if spec.wait {
            args.push("harness.wait=1".into());
        }
        args.extend(spec.fio.iter().map(|o| format!("fio.{o}")));
        let mut child = Command::new(repo().join("scripts/guest/run-guest.sh"))
            .args(&args)
            .stdin(if spec.wait {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn scripts/guest/run-guest.sh");
        Guest {
            stdin: child.stdin.take(),
            child: Some(child),
            log,
        }
    }

    pub(crate) fn console(&self) -> String {
        console_text(&self.log)
    }

    /// Waits until the console shows `needle`; false if the guest exits or time runs out.
    pub(crate) fn wait_for(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.console().contains(needle) {
                return true;
            }
            let exited = self.child.as_mut().unwrap().try_wait().ok().flatten();
            if exited.is_some() {
                return self.console().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Releases a guest started with `wait`: a line on its serial console.
    /// Panics, saying so, if fio already finished before `what` (the job is too short).
    pub(crate) fn assert_fio_running(&self, what: &str) {
        if self.console().contains("HARNESS: fio exited") {
            panic!(
                "fio finished before {what}: make the job longer; console {}",
                self.log.display()
            );
        }
    }

    pub(crate) fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("guest started without wait");
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the guest to power off (run-guest.sh enforces GUEST_TIMEOUT; this waits a
    /// little longer, then stops it). Fails early if daemon `d` stops or panics meanwhile:
    /// the guest would only hang until the timeout.
    pub(crate) fn finish(mut self, d: &DaemonProcess) -> GuestRun {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + GUEST_TIMEOUT + Duration::from_secs(20);
        let mut daemon_gone: Option<Instant> = None;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            let gone = d.log.lock().unwrap().iter().find_map(|l| {
                (l.contains("stopping:") || l.contains("panicked")).then(|| l.clone())
            });
            if let Some(line) = gone {
                // Give the guest a moment in case it was finishing anyway.
                let since = *daemon_gone.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(5) {
                    stop_child(&mut child);
                    panic!(
                        "the daemon stopped while the guest ran ({line}); console {}:\n{}",
                        self.log.display(),
                        tail(&self.console(), 30)
                    );
                }
            }
            if Instant::now() > deadline {
                stop_child(&mut child);
                panic!(
                    "run-guest.sh did not exit within its own timeout; console {}:\n{}",
                    self.log.display(),
                    tail(&self.console(), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        GuestRun {
            status,
            console: self.console(),
            log: self.log.clone(),
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
    }
}

/// SIGTERM (run-guest.sh then stops QEMU by PID), SIGKILL after 10 s.
fn stop_child(child: &mut Child) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    // SAFETY: kill(2) on the PID of a child we own and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub(crate) fn console_text(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&bytes).replace('\r', "")
}

pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl GuestRun {
    pub(crate) fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nguest console kept at {}; last lines:\n{}",
            self.log.display(),
            tail(&self.console, 40)
        )
    }

    /// The value of `key=` on the first console line starting with `HARNESS: {prefix}`.
    pub(crate) fn harness_field(&self, prefix: &str, key: &str) -> Option<String> {
        let line = self
            .console
            .lines()
            .find(|l| l.starts_with(&format!("HARNESS: {prefix}")))?;
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    }

    /// fio's JSON and exit code from the console of a guest that ran to the end.
    pub(crate) fn fio_json(&self) -> (Value, String) {
        if !self.status.success() {
            self.fail(&format!("guest run failed: run-guest.sh {}", self.status));
        }
        let begin = self.console.find("HARNESS: BEGIN-JSON\n");
        let end = self.console.find("HARNESS: END-JSON rc=");
        let (Some(begin), Some(end)) = (begin, end) else {
            self.fail("no fio JSON on the console")
        };
        let rc = self.console[end..]
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("HARNESS: END-JSON rc="))
            .unwrap_or("?")
            .to_owned();
        let mut text = &self.console[begin + "HARNESS: BEGIN-JSON\n".len()..end];
        // fio puts warnings (e.g. "multiple writers may overwrite blocks") before the JSON.
        if let Some(start) = text.find("\n{") {
            if !text.starts_with('{') {
                eprintln!("fio: {}", &text[..start]);
                text = &text[start + 1..];
            }
        }
        match serde_json::from_str(text) {
            Ok(v) => (v, rc),
            Err(e) => self.fail(&format!("fio JSON does not parse ({e}):\n{text}")),
        }
    }

    /// The first console line showing a verify mismatch: data that came back wrong.
    pub(crate) fn bad_data(&self) -> Option<&str> {
        let bad = [
            "verify failed",
            "bad magic",
            "bad header",
            "verify type mismatch",
        ];
        self.console
            .lines()
            .find(|l| bad.iter().any(|b| l.contains(b)))
    }

    /// Checks the guest ran fio to the end without any error and returns fio's JSON.
    pub(crate) fn fio_ok(&self) -> Value {
        let (json, rc) = self.fio_json();
        // fio prints verify mismatches and I/O errors on stderr, which is the console.
        if let Some(l) = self.bad_data() {
            self.fail(&format!("guest read back wrong data: {l}"));
        }
        let bad = [
            "fio: io_u error",
            "I/O error",
            "Buffer I/O error",
            "blk_update_request",
            "hung_task",
            "blocked for more than",
        ];
        if let Some(l) = self
            .console
            .lines()
            .find(|l| bad.iter().any(|b| l.contains(b)))
        {
            self.fail(&format!("guest reported an error: {l}"));
        }
        let jobs = json["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            self.fail("fio JSON has no jobs");
        }
        for j in &jobs {
            if j["error"].as_i64() != Some(0) {
                self.fail(&format!(
                    "fio job {} failed: error {}",
                    j["jobname"], j["error"]
                ));
            }
        }
        if rc != "0" {
            self.fail(&format!("fio exited with {rc}"));
        }
        json
    }
}

/// Sum of `dir.key` (e.g. `write.total_ios`) over the jobs of a fio result.
pub(crate) fn sum(json: &Value, dir: &str, key: &str) -> f64 {
    json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j[dir][key].as_f64().unwrap_or(0.0))
        .sum()
}

/// The job named `name`.
pub(crate) fn job<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["jobname"] == name)
        .unwrap_or_else(|| panic!("no fio job {name} in {json}"))
}

/// A daemon config: one 512 MiB sparse file, 2-queue volumes of `size_mib` MiB each.
pub(crate) fn guest_config(device_extra: &str, volumes: &[(&str, u64, &str)]) -> String {
    let mut c =
        format!("[device]\npath = \"disk.img\"\ncreate_size = \"512MiB\"\n{device_extra}\n");
    let mut offset = 0;
    for (name, size_mib, extra) in volumes {
        c += &format!(
            "[[volume]]\nname = \"{name}\"\nsocket = \"{name}.sock\"\noffset = \"{offset}MiB\"\n\
             size = \"{size_mib}MiB\"\nnum_queues = 2\n{extra}\n"
        );
        offset += size_mib;
    }
    c
}

/// fio options every job uses: the guest's disk, direct async I/O.
const DISK: &[&str] = &["filename=/dev/vda", "ioengine=libaio", "direct=1"];

/// fio options for jobs run one after the other (`stonewall`), each on the guest's disk.
pub(crate) fn fio(jobs: &[&[&str]]) -> Vec<String> {
    let mut v = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        v.push(j[0].to_string());
        if i > 0 {
            v.push("stonewall".into());
        }
        v.extend(DISK.iter().chain(&j[1..]).map(|s| s.to_string()));
    }
    v
}

/// Boots one guest on volume `vol` of `d`, waits for it and checks fio succeeded.
pub(crate) fn run_one(
    ctx: &Ctx,
    image: &Image,
    d: &DaemonProcess,
    vol: &str,
    spec: &GuestSpec,
) -> (GuestRun, Value) {
    let t = Instant::now();
    let g = Guest::start(image, &d.socket(vol), ctx.console_path(vol), spec);
    let run = g.finish(d);
    let json = run.fio_ok();
    eprintln!("{}: guest on {vol} ran in {:.1?}", ctx.name, t.elapsed());
    (run, json)
}
