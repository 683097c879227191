//! `profile` on a real file: it must measure the disk, not the holes of a sparse file.

use std::process::{Command, Output};
use vhost_iocost::profile::allocation::allocated_bytes;

fn profile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .arg("profile")
        .args(args)
        .output()
        .expect("run vhost-iocost profile")
}

/// A fresh sparse file reads at memory speed (its holes never reach the disk): `profile`
/// refuses it, naming the file and the way out, and leaves it as it was; with
/// `--destructive` it fills the measured range first, so every read it times hits data.
#[test]
fn a_sparse_file_is_refused_and_destructive_fills_it_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.img");
    let size = 16u64 << 20;
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    let p = path.to_str().unwrap();

    let out = profile(&["--path", p, "--duration", "50ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a sparse file was measured: {err}");
    assert!(err.contains("sparse.img is only 0 % allocated"), "{err}");
    assert!(err.contains("--destructive"), "{err}");
    assert!(out.stdout.is_empty(), "printed a model: {:?}", out.stdout);
    let file = std::fs::File::open(&path).unwrap();
    assert_eq!(
        allocated_bytes(&file, size),
        0,
        "the refused run wrote to the file"
    );

    let out = profile(&["--path", p, "--duration", "50ms", "--destructive"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("filling the first 16MiB with data"), "{err}");
    assert_eq!(
        allocated_bytes(&file, size),
        size,
        "holes left in the measured range"
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("[device.model]"), "{printed}");
}
