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
