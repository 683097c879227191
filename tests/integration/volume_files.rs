//! Volumes with files of their own (`path`): a volume's bytes are its
//! file from byte 0, an existing image is served as it is, a missing one is created with
//! the volume's size, and a file too small is refused naming the key. They share the
//! device's QoS with the volumes on ranges of `device.path`.

use crate::client::{pattern, Client, Op};
use crate::daemon::{config, control_get, volume, volume_stats, DaemonProcess};

const MIB: u64 = 1 << 20;
const CONTROL: &str = "[control]\nsocket = \"control.sock\"\n";

/// A `[[volume]]` on its own file `path`, `size_mib` MiB.
fn file_volume(name: &str, path: &str, size_mib: u64) -> String {
    format!(
        "[[volume]]\nname = \"{name}\"\nsocket = \"{name}.sock\"\npath = \"{path}\"\nsize = \"{size_mib}MiB\"\n"
    )
}

#[test]
fn volumes_with_their_own_files_keep_their_data_there() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("images")).unwrap();
    let old_image = pattern(0, 4 * MIB as usize, 9);
    std::fs::write(dir.path().join("images/old.img"), &old_image).unwrap();
    let volumes = volume("range", 0, 8, "")
        + &file_volume("old", "images/old.img", 4)
        + &file_volume("new", "images/new.img", 8);
    let d = DaemonProcess::start_in(dir, &config(CONTROL, &volumes));

    // The existing image is served as it is, from its first byte.
    let mut old = Client::connect(&d.socket("old"), 1, 4 * MIB as usize);
    assert_eq!(old.capacity, 4 * MIB);
    assert_eq!(
        old.run(Op::Read {
            off: 0,
            len: old_image.len(),
            buf: 0
        }),
        0
    );
    assert!(
        old.buf()[..old_image.len()] == old_image[..],
        "the image reads back as written"
    );
    // Past its end is an error, as for a range volume.
    assert_ne!(
        old.run(Op::Read {
            off: 4 * MIB,
            len: 4096,
            buf: 0
        }),
        0
    );

    // The missing file was created with the volume's size.
    let mut new = Client::connect(&d.socket("new"), 1, MIB as usize);
    assert_eq!(new.capacity, 8 * MIB);
    let new_data = pattern(MIB, 256 << 10, 3);
    assert!(new.write_and_verify(MIB, &new_data), "write and read back");
    let mut range = Client::connect(&d.socket("range"), 1, MIB as usize);
    let range_data = pattern(MIB, 256 << 10, 4);
    assert!(
        range.write_and_verify(MIB, &range_data),
        "write and read back"
    );

    let views = control_get(&d, "/v1/volumes");
    let view = |name: &str| {
        views["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(view("new")["path"], "images/new.img");
    assert_eq!(view("new")["offset"], 0);
    assert!(view("range").get("path").is_none(), "{}", view("range"));
    // All three are the device's volumes for QoS: each counts its own requests.
    assert_eq!(volume_stats(&d, "new")["writes"], 1);
    drop((old, new, range));
    let (status, dir) = d.stop();
    assert!(status.success(), "{status}");

    // Each write landed in its own file at the offset the guest gave.
    let file = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    let new_file = file("images/new.img");
    assert_eq!(new_file.len() as u64, 8 * MIB);
    assert!(new_file[MIB as usize..][..new_data.len()] == new_data[..]);
    let device = file("disk.img");
    assert!(device[MIB as usize..][..range_data.len()] == range_data[..]);
    assert_eq!(
        file("images/old.img"),
        old_image,
        "reads left the image alone"
    );
}

#[test]
fn a_volume_file_smaller_than_the_volume_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.img"), vec![0u8; MIB as usize]).unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        config("", &file_volume("v", "small.img", 2)),
    )
    .unwrap();
    let run = |command: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
            .args([command, "--config", "config.toml"])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    for command in ["check", "run"] {
        let out = run(command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {stderr}");
        assert!(
            stderr.contains("volume[0] \"v\".path")
                && stderr.contains("less than the volume's size"),
            "{command}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("v.sock").exists(),
        "no socket was left listening"
    );
}
