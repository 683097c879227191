//! `[security] user`: started as root, the daemon opens the disk, its sockets and the
//! state file, then runs as that user with no capabilities, in every thread, and still
//! serves, hot-adds volumes and keeps runtime changes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::client::pattern;
use crate::daemon::{config, control_call, tempdir_owned_by, volume, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK};
use serde_json::json;

/// Debian's `nobody` and `nogroup`.
pub(crate) const NOBODY: u32 = 65534;

/// Writes a pattern through a frontend on `socket` and reads it back.
fn write_and_read_back(socket: &str, seed: u8) {
    let mut f = RawFrontend::connect(socket, Options::default());
    let data = pattern(0, 4096, seed);
    assert_eq!(f.write_sectors(0, 0, &data), S_OK as u8, "{socket}");
    assert_eq!(
        f.read_sectors(0, 0, data.len()),
        (S_OK as u8, data),
        "{socket}"
    );
}

/// Every thread's `Uid:`, `Gid:`, `Groups:`, `CapEff:` and `CapPrm:` lines (a thread that ends while
/// they are read is left out: a connection thread whose frontend just left).
fn thread_credentials(pid: u32) -> Vec<(String, Vec<String>)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| {
            let t = t.ok()?.path();
            let status = std::fs::read_to_string(t.join("status")).ok()?;
            let lines = ["Uid:", "Gid:", "Groups:", "CapEff:", "CapPrm:"]
                .iter()
                .map(|k| {
                    let line = status.lines().find(|l| l.starts_with(k)).unwrap();
                    line.split_whitespace().collect::<Vec<_>>().join(" ")
                })
                .collect();
            Some((t.display().to_string(), lines))
        })
        .collect()
}

/// Every thread of process `pid` runs as `nobody`:`nogroup` with no capability.
pub(crate) fn assert_runs_as_nobody(pid: u32) {
    let threads = thread_credentials(pid);
    let nobody = format!("{NOBODY} {NOBODY} {NOBODY} {NOBODY}");
    for (task, lines) in &threads {
        assert_eq!(
            lines,
            &[
                format!("Uid: {nobody}"),
                format!("Gid: {nobody}"),
                format!("Groups: {NOBODY}"),
                "CapEff: 0000000000000000".to_owned(),
                "CapPrm: 0000000000000000".to_owned(),
            ],
            "{task}"
        );
    }
}

fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.uid(), m.gid())
}

#[test]
fn started_as_root_it_serves_as_the_configured_user_with_no_capability_left() {
    // SAFETY: a plain getter.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test starts the daemon as root"
    );
    let d = DaemonProcess::start_in(
        tempdir_owned_by(NOBODY, NOBODY),
        &config(
            "[control]\nsocket = \"control.sock\"\n[security]\nuser = \"nobody\"\n",
            &volume("a", 0, 8, ""),
        ),
    );
    assert!(
        d.log_text().contains("running unprivileged"),
        "{}",
        d.log_text()
    );
    write_and_read_back(&d.socket("a"), 3);
    // A frontend stays connected, so its connection and worker threads are counted too.
    let mut connected = RawFrontend::connect(&d.socket("a"), Options::default());
    // Hot added as that user: a range of the disk, and a volume with a file of its own.
    for (name, body) in [
        (
            "b",
            json!({ "name": "b", "socket": "b.sock", "size": "8MiB" }),
        ),
        (
            "c",
            json!({ "name": "c", "socket": "c.sock", "size": "4MiB", "path": "c.img" }),
        ),
    ] {
        let (status, added) = control_call(&d, "POST", "/v1/volumes", Some(&body));
        assert_eq!(status, 201, "{added}");
        write_and_read_back(&d.socket(name), 5);
        assert_eq!(owner(&d.path(&format!("{name}.sock"))), (NOBODY, NOBODY));
    }
    assert_eq!(owner(&d.path("c.img")), (NOBODY, NOBODY));
    assert_runs_as_nobody(d.pid());
    assert_eq!(
        connected.read_sectors(0, 0, 4096),
        (S_OK as u8, pattern(0, 4096, 3))
    );
    // A runtime change is kept: the state file is written as that user.
    let (status, answer) = control_call(
        &d,
        "PATCH",
        "/v1/volumes/a",
        Some(&json!({ "weight": 300 })),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(owner(&d.path("config.toml.state.json")), (NOBODY, NOBODY));
    assert!(!d.log_text().contains("cannot be kept"), "{}", d.log_text());
}

#[test]
fn an_unknown_or_root_user_is_refused_naming_the_key() {
    for (security, says) in [
        ("user = \"no-such-user-here\"", "no user named"),
        ("user = \"root\"", "is root"),
        ("group = \"nogroup\"", "needs security.user"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let text = config(&format!("[security]\n{security}\n"), &volume("a", 0, 8, ""));
        std::fs::write(&file, text).unwrap();
        for command in ["check", "run"] {
            let out = std::process::Command::new(support::binary())
                .args([command, "--config"])
                .arg(&file)
                .current_dir(dir.path())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command} {security}: {stderr}");
            assert!(
                stderr.contains("security.") && stderr.contains(says),
                "{command} {security}: {stderr}"
            );
        }
    }
}
