//! Safe operation: what an operator's mistake must not destroy. A second instance of the
//! same configuration, a volume socket that names a file, and a state file the daemon
//! cannot read each stop start-up with a message naming the culprit, and touch nothing.

use crate::client::{pattern, Client, Op};
use crate::daemon::{config, volume, DaemonProcess};
use std::path::Path;
use std::process::{Command, Output};

/// Run the binary with `args` in `dir` and wait for it (each case here exits at once).
fn vhost_iocost(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .output()
        .expect("run vhost-iocost")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_second_instance_fails_at_once_and_the_first_keeps_serving() {
    let d = DaemonProcess::start(&config("", &volume("a", 0, 16, "")));
    let mut c = Client::connect(&d.socket("a"), 1, 1 << 20);
    let data = pattern(4096, 64 << 10, 3);
    c.buf()[..data.len()].copy_from_slice(&data);
    let write = Op::Write {
        off: 0,
        len: data.len(),
        buf: 0,
    };
    assert_eq!(c.run(write), 0);

    let second = vhost_iocost(d.dir.path(), &["run", "--config", "config.toml"]);
    assert!(!second.status.success());
    let e = stderr(&second);
    let holder = format!("in use by process {}", d.pid());
    assert!(e.contains("disk.img") && e.contains(&holder), "{e}");

    // The first instance's socket is still there and still serves.
    c.buf()[..data.len()].fill(0);
    let read = Op::Read {
        off: 0,
        len: data.len(),
        buf: 0,
    };
    assert_eq!(c.run(read), 0);
    assert_eq!(&c.buf()[..data.len()], &data[..]);
    drop(c);
    let mut again = Client::connect(&d.socket("a"), 1, 1 << 20);
    assert_eq!(again.run(read), 0);
}

#[test]
fn a_volume_socket_naming_a_file_is_refused_and_the_file_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.img"), b"guest data").unwrap();
    let cfg = config(
        "",
        &volume("a", 0, 16, "").replace("socket = \"a.sock\"", "socket = \"precious.img\""),
    );
    std::fs::write(dir.path().join("config.toml"), cfg).unwrap();
    let run = vhost_iocost(dir.path(), &["run", "--config", "config.toml"]);
    assert!(!run.status.success());
    let e = stderr(&run);
    assert!(
        e.contains("volume a: socket")
            && e.contains("precious.img")
            && e.contains("is not a socket"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("precious.img")).unwrap(),
        b"guest data"
    );
}

#[test]
fn check_and_run_refuse_a_corrupt_state_file_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config("[device.model]\npreset = \"ssd\"", &volume("a", 0, 16, ""));
    std::fs::write(dir.path().join("config.toml"), cfg).unwrap();
    let ok = vhost_iocost(dir.path(), &["check", "--config", "config.toml"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    std::fs::write(
        dir.path().join("config.toml.state.json"),
        b"{\"version\": 1, ",
    )
    .unwrap();
    for cmd in ["check", "run"] {
        let o = vhost_iocost(dir.path(), &[cmd, "--config", "config.toml"]);
        assert!(!o.status.success(), "{cmd} accepted a corrupt state file");
        let e = stderr(&o);
        assert!(
            e.contains("config.toml.state.json") && e.contains("move it aside"),
            "{cmd}: {e}"
        );
    }
}

/// `socket_mode` and `socket_group` give the socket the access QEMU's user needs; a group
/// that does not exist is refused by `check` and `run`, naming the key.
#[test]
fn volume_sockets_get_the_configured_mode_and_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // Debian's "disk" group: present on every install, and not root's own group.
    let disk_gid = vhost_iocost::config::group_id("disk").expect("group disk");
    let volumes = volume(
        "a",
        0,
        16,
        "socket_mode = \"0660\"\nsocket_group = \"disk\"",
    ) + &volume("b", 16, 16, "");
    let d = DaemonProcess::start(&config("", &volumes));
    for socket in [d.socket("a"), d.socket("a") + ".handover"] {
        let a = std::fs::metadata(&socket).unwrap();
        assert_eq!(a.permissions().mode() & 0o7777, 0o660, "{socket}");
        assert_eq!(a.gid(), disk_gid, "{socket}");
    }
    // Without the keys the socket keeps what the umask and the daemon's group give.
    let b = std::fs::metadata(d.socket("b")).unwrap();
    assert_eq!(b.gid(), effective_gid());
    let mut c = Client::connect(&d.socket("a"), 1, 4096);
    assert_eq!(
        c.run(Op::Read {
            off: 0,
            len: 4096,
            buf: 0
        }),
        0
    );
    drop(c);
    drop(d);

    let dir = tempfile::tempdir().unwrap();
    let cfg = config("", &volume("a", 0, 16, "socket_group = \"no-such-group\""));
    std::fs::write(dir.path().join("config.toml"), cfg).unwrap();
    for cmd in ["check", "run"] {
        let out = vhost_iocost(dir.path(), &[cmd, "--config", "config.toml"]);
        assert!(!out.status.success(), "{cmd}");
        let e = stderr(&out);
        assert!(
            e.contains("volume[0] \"a\".socket_group") && e.contains("no group named"),
            "{cmd}: {e}"
        );
    }
    assert!(!dir.path().join("a.sock").exists(), "run bound nothing");
}

fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions.
    unsafe { libc::getegid() }
}

/// `Type=notify`: READY=1 comes once every volume socket listens (so nothing ordered after
/// the unit finds one missing), STOPPING=1 on SIGTERM.
#[test]
fn systemd_hears_ready_once_every_socket_listens_and_stopping_on_sigterm() {
    use std::os::unix::net::{UnixDatagram, UnixStream};
    let dir = tempfile::tempdir().unwrap();
    let volumes = volume("a", 0, 16, "") + &volume("b", 16, 16, "");
    std::fs::write(dir.path().join("config.toml"), config("", &volumes)).unwrap();
    let notify = UnixDatagram::bind(dir.path().join("notify")).unwrap();
    notify
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["run", "--config", "config.toml"])
        .current_dir(dir.path())
        .env("NOTIFY_SOCKET", dir.path().join("notify"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("READY=1 within 30 s");
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains("STATUS=serving 2 volumes"), "{ready}");
    for name in ["a", "b"] {
        UnixStream::connect(dir.path().join(format!("{name}.sock")))
            .unwrap_or_else(|e| panic!("volume {name} not listening at READY=1: {e}"));
    }
    // SAFETY: kill has no memory preconditions; the child is ours and still running.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let n = notify.recv(&mut buf).expect("STOPPING=1 after SIGTERM");
    assert!(buf[..n].starts_with(b"STOPPING=1"));
    assert!(child.wait().unwrap().success());
}

/// The systemd unit shipped in configs/ passes `systemd-analyze verify` without a single
/// warning (an unknown or misspelt sandboxing key is only a warning to systemd, and would
/// silently leave the daemon unsandboxed).
#[test]
fn the_systemd_unit_verifies_cleanly() {
    let unit = include_str!("../../configs/vhost-iocost@.service").replace(
        "/usr/local/bin/vhost-iocost",
        env!("CARGO_BIN_EXE_vhost-iocost"),
    );
    assert!(unit.contains("Type=notify") && unit.contains("SystemCallFilter="));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vhost-iocost@.service"), unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "./vhost-iocost@nvme0n1.service"])
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze (Debian package systemd; .ci/run installs it)");
    let e = stderr(&out);
    assert!(out.status.success() && e.trim().is_empty(), "{e}");
}

/// `check` judges reservations with the model `run` would use: on the emulated slow
/// device (20k random reads/s, measured as `run` measures it), two reservations of 10,000
/// random reads/s (50 % each) are more than it may promise (72 %), and both commands
/// refuse the second naming it; one of 6,000 passes. (The preset model says 8,500
/// reads/s.)
#[test]
fn check_and_run_agree_on_reservations_priced_by_the_emulated_model() {
    use crate::devices::SLOW_DEVICE;
    let dir = tempfile::tempdir().unwrap();
    let over = config(
        SLOW_DEVICE,
        &(volume("a", 0, 16, "reserve = { iops = 10000 }")
            + &volume("b", 16, 16, "reserve = { iops = 10000 }")),
    );
    std::fs::write(dir.path().join("config.toml"), over).unwrap();
    for cmd in ["check", "run"] {
        let o = vhost_iocost(dir.path(), &[cmd, "--config", "config.toml"]);
        assert!(
            !o.status.success(),
            "{cmd} accepted 2 x 10,000 IOPS on 20,000"
        );
        let e = stderr(&o);
        assert!(
            e.contains("\"b\" (50.0 % of the device)") && e.contains("100.0 %"),
            "{cmd}: {e}"
        );
    }
    let fits = config(
        SLOW_DEVICE,
        &volume("a", 0, 16, "reserve = { iops = 6000 }"),
    );
    std::fs::write(dir.path().join("config.toml"), fits).unwrap();
    let ok = vhost_iocost(dir.path(), &["check", "--config", "config.toml"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}
