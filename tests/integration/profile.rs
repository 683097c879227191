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

/// `--scratch OFFSET:SIZE` measures writes inside that range only: the printed model has
/// measured write coefficients (no estimates) that the config accepts, the range was
/// written, and every byte outside it reads back as before. A range past the end of the
/// file is refused before anything is touched.
#[test]
fn scratch_measures_writes_inside_the_range_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.img");
    let (size, scratch) = (128usize << 20, 64usize << 20);
    let original: Vec<u8> = (0..size).map(|i| (i % 251) as u8 | 1).collect();
    std::fs::write(&path, &original).unwrap();
    let p = path.to_str().unwrap();

    let out = profile(&[
        "--path",
        p,
        "--duration",
        "50ms",
        "--scratch",
        "64MiB:128MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a range past the end was accepted");
    assert!(err.contains("--scratch 64MiB:128MiB ends at byte"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        std::fs::read(&path).unwrap() == original,
        "the refused run wrote"
    );

    let out = profile(&[
        "--path",
        p,
        "--duration",
        "50ms",
        "--scratch",
        "64MiB:64MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(!printed.contains("estimated"), "{printed}");
    assert!(
        printed.contains("writes measured in the scratch range 67108864..134217728 only"),
        "{printed}"
    );
    let config = format!(
        "[device]\npath = \"x\"\n{printed}\n[[volume]]\nname = \"v\"\nsocket = \"v.sock\"\nsize = 4096\n"
    );
    let parsed = vhost_iocost::config::Config::parse(&config).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        parsed.device.model.linear_params().wrandiops > 1,
        "{printed}"
    );

    let after = std::fs::read(&path).unwrap();
    assert!(
        after[..scratch] == original[..scratch],
        "a byte outside the scratch range changed"
    );
    assert!(
        after[scratch..] != original[scratch..],
        "nothing was written in the scratch range"
    );
}

/// `--scratch` and `--destructive` say different things about what may be written.
#[test]
fn scratch_and_destructive_are_exclusive() {
    let out = profile(&["--path", "x", "--destructive", "--scratch", "0:64MiB"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cannot be used with"), "{err}");
}
