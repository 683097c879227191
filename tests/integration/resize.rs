//! Growing a volume at run time (`PATCH {"size": ...}`): into the free
//! space after its range or by growing its own file; the connected frontend is told on
//! its backend channel (BACKEND_CONFIG_CHANGE_MSG), reads the new capacity and can use it;
//! what cannot be done is refused with what is in the way.

use crate::daemon::{config, control_call, control_get, volume, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK};

/// The OK status byte.
const OK: u8 = S_OK as u8;
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const CONTROL: &str = "[control]\nsocket = \"control.sock\"\n";
/// `VHOST_USER_BACKEND_CONFIG_CHANGE_MSG`.
const CONFIG_CHANGE_MSG: u32 = 2;
/// Header flags: the version, and the sender waits for an answer.
const VERSION: u32 = 0x1;
const NEED_REPLY: u32 = 0x8;
const REPLY: u32 = 0x4;

/// Reads one request of the daemon from the backend channel and answers it if asked to;
/// returns its code.
fn take_backend_request(f: &mut RawFrontend) -> u32 {
    let channel = f.backend_channel.as_mut().expect("a backend channel");
    channel
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut header = [0u8; 12];
    channel.read_exact(&mut header).expect("a backend request");
    let word = |i: usize| u32::from_le_bytes(header[i * 4..i * 4 + 4].try_into().unwrap());
    let (code, flags, size) = (word(0), word(1), word(2));
    let mut body = vec![0u8; size as usize];
    channel.read_exact(&mut body).unwrap();
    if flags & NEED_REPLY != 0 {
        let mut reply = Vec::new();
        for w in [code, VERSION | REPLY, 8] {
            reply.extend_from_slice(&w.to_le_bytes());
        }
        reply.extend_from_slice(&0u64.to_le_bytes());
        channel.write_all(&reply).unwrap();
    }
    code
}

/// The capacity in the config space, bytes.
fn capacity(f: &mut RawFrontend) -> u64 {
    let c = f.config(0, 8);
    u64::from_le_bytes(c[..8].try_into().unwrap()) * 512
}

#[test]
fn a_volume_grows_and_its_frontend_is_told() {
    let volumes = volume("v", 0, 8, "") + &volume("w", 16, 8, "");
    let file_volume =
        "[[volume]]\nname = \"f\"\nsocket = \"f.sock\"\npath = \"f.img\"\nsize = \"4MiB\"\n";
    let d = DaemonProcess::start(&config(CONTROL, &(volumes.clone() + file_volume)));
    let opts = Options {
        backend_channel: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    assert_eq!(capacity(&mut f), 8 * MIB);
    let old_end = 8 * MIB / 512;
    // Past the end: refused until the volume grows.
    assert_ne!(f.write_sectors(0, old_end, &[7u8; 4096]), OK);

    let patch = |name: &str, size: &str| {
        control_call(
            &d,
            "PATCH",
            &format!("/v1/volumes/{name}"),
            Some(&json!({ "size": size })),
        )
    };
    let (status, e) = control_call(
        &d,
        "PATCH",
        "/v1/volumes/v",
        Some(&json!({ "size": "16MiB", "weight": 50 })),
    );
    assert_eq!((status, e["field"].as_str()), (400, Some("size")), "{e}");
    let (status, e) = patch("v", "4MiB");
    assert_eq!((status, e["field"].as_str()), (400, Some("size")), "{e}");
    // w starts at 16 MiB: v can grow to 16 MiB, not past it.
    let (status, e) = patch("v", "20MiB");
    assert_eq!(status, 409, "{e}");
    assert!(e["error"].as_str().unwrap().contains("overlaps"), "{e}");
    let (status, v) = patch("v", "16MiB");
    assert_eq!((status, v["size"].as_u64()), (200, Some(16 * MIB)), "{v}");

    assert_eq!(take_backend_request(&mut f), CONFIG_CHANGE_MSG);
    assert_eq!(capacity(&mut f), 16 * MIB);
    let data = [0x5au8; 4096];
    assert_eq!(f.write_sectors(0, old_end, &data), OK);
    let (status, back) = f.read_sectors(0, old_end, data.len());
    assert_eq!(status, OK);
    assert_eq!(back, data);

    // A volume with its own file: the file grows.
    let (status, e) = patch("f", "8MiB");
    assert_eq!(status, 200, "{e}");
    assert_eq!(std::fs::metadata(d.path("f.img")).unwrap().len(), 8 * MIB);
    drop(f);
    let (status, dir) = d.stop();
    assert!(status.success());

    // Both sizes hold after a restart.
    let d = DaemonProcess::start_in(dir, &config(CONTROL, &(volumes.clone() + file_volume)));
    assert_eq!(control_get(&d, "/v1/volumes/v")["size"], 16 * MIB);
    assert_eq!(control_get(&d, "/v1/volumes/f")["size"], 8 * MIB);
    let mut f = RawFrontend::connect(&d.socket("v"), Options::default());
    let (status, back) = f.read_sectors(0, old_end, data.len());
    assert_eq!((status, back), (OK, data.to_vec()));
    drop(f);
    // And after the next one: the start-up that applied them keeps them on record.
    let (status, dir) = d.stop();
    assert!(status.success());
    let d = DaemonProcess::start_in(dir, &config(CONTROL, &(volumes + file_volume)));
    assert_eq!(control_get(&d, "/v1/volumes/v")["size"], 16 * MIB);
    assert_eq!(control_get(&d, "/v1/volumes/f")["size"], 8 * MIB);
}
