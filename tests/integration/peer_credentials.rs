//! `allowed_uids` / `allowed_gids`: a volume serves only frontends whose credentials (the
//! kernel's `SO_PEERCRED` on its socket) it allows. One that is not allowed is closed
//! before any message is read, its refusal logged and not counted as a connection; the
//! allowed ones, by user or by group, are served, on the socket and the hand-over socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::client::pattern;
use crate::daemon::{config, control_call, volume, volume_stats, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK};

#[test]
fn only_frontends_with_allowed_credentials_are_served() {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let d = DaemonProcess::start(&config(
        "[control]\nsocket = \"control.sock\"\n",
        &(volume("mine", 0, 8, &format!("allowed_uids = [{uid}]"))
            + &volume(
                "ours",
                8,
                8,
                &format!("allowed_uids = [{}]\nallowed_gids = [{gid}]", uid + 1),
            )
            + &volume("theirs", 16, 8, &format!("allowed_uids = [{}]", uid + 1))),
    ));
    for name in ["mine", "ours"] {
        for socket in [d.socket(name), format!("{}.handover", d.socket(name))] {
            let mut f = RawFrontend::connect(&socket, Options::default());
            let data = pattern(0, 4096, 7);
            assert_eq!(f.write_sectors(0, 0, &data), S_OK as u8, "{socket}");
            assert_eq!(
                f.read_sectors(0, 0, data.len()),
                (S_OK as u8, data),
                "{socket}"
            );
        }
    }
    // Not allowed: a first message (GET_FEATURES) gets no answer, the socket is closed.
    let mut s = UnixStream::connect(d.socket("theirs")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let get_features = [1u32, 0x1, 0].map(u32::to_le_bytes).concat();
    let _ = s.write_all(&get_features);
    let mut answer = Vec::new();
    let read = s.read_to_end(&mut answer);
    assert!(
        matches!(read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?} {answer:?}"
    );
    assert!(d.wait_for_log("frontend refused: its user and group are not allowed"));
    let log = d.log_text();
    assert!(
        log.contains(&format!("uid={uid}")) && log.contains("volume=theirs"),
        "{log}"
    );
    assert_eq!(volume_stats(&d, "theirs")["connections"], 0);
    let view = crate::daemon::control_get(&d, "/v1/volumes/ours");
    assert_eq!(
        (&view["allowed_uids"], &view["allowed_gids"]),
        (&serde_json::json!([uid + 1]), &serde_json::json!([gid]))
    );
    // The volume still takes an allowed frontend's turn afterwards: it was not wedged.
    assert_eq!(volume_stats(&d, "mine")["connections"], 2);
    // An empty list refuses everyone: it is refused itself, naming the key.
    let body = serde_json::json!({"name": "none", "socket": "none.sock", "size": "8MiB", "allowed_uids": []});
    let (status, answer) = control_call(&d, "POST", "/v1/volumes", Some(&body));
    assert_eq!(status, 400, "{answer}");
    let text = answer.to_string();
    assert!(
        text.contains("allowed_uids") && text.contains("refuse every frontend"),
        "{answer}"
    );
}
