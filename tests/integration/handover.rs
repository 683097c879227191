//! Same-host migration hand-over (design §8.9): a second frontend
//! attaches through the volume's hand-over socket while the first is connected, and only
//! one of them uses the rings at a time. The raw frontends here play QEMU's source and
//! destination message for message; `guest.rs` migrates a real guest.

use crate::client::pattern;
use crate::daemon::{config, control_call, control_get, volume, wait_frontends, DaemonProcess};
use crate::raw_frontend::{Options, RawFrontend, S_OK, T_OUT};

/// The daemon's line for a kick that waits for the other connection's rings.
const WAITS: &str = "this one waits until they are stopped";

/// Waits until the daemon has logged `needle` `n` times.
fn wait_for_lines(d: &DaemonProcess, needle: &str, n: usize) {
    assert!(
        d.wait_for_log_lines(needle, n),
        "{needle:?} logged fewer than {n} times:\n{}",
        d.log_text()
    );
}

/// Submits a write of `data` at `sector` on queue 0 and kicks, without waiting.
fn submit_write(f: &mut RawFrontend, sector: u64, data: &[u8]) {
    let (chain, buf) = f.rw_chain(T_OUT, sector, data.len());
    f.write(buf, data);
    f.submit(0, &chain);
    f.kick(0);
}

#[test]
fn the_destination_attaches_beside_the_source_and_takes_the_rings_when_they_stop() {
    let d = DaemonProcess::start(&config(
        "[control]\nsocket = \"control.sock\"\n",
        &volume("v", 0, 8, ""),
    ));
    let view = control_get(&d, "/v1/volumes/v");
    let handover = d.socket("v") + ".handover";
    let expected = format!("{}.handover", view["socket"].as_str().unwrap());
    assert_eq!(view["handover_socket"], expected.as_str());

    // The source serves the guest.
    let mut source = RawFrontend::connect(&d.socket("v"), Options::default());
    let first = pattern(0, 8 * 512, 1);
    assert_eq!(source.write_sectors(0, 0, &first), S_OK as u8);

    // The destination completes its handshake and starts its ring while the source runs
    // (as QEMU's would only after the source stopped): its request waits.
    let mut dest = RawFrontend::connect(&handover, Options::default());
    wait_frontends(&d, "v", 2);
    let second = pattern(8 * 512, 8 * 512, 2);
    submit_write(&mut dest, 8, &second);
    wait_for_lines(&d, WAITS, 1);
    // The source keeps being served meanwhile.
    let (status, back) = source.read_sectors(0, 0, first.len());
    assert_eq!((status, back), (S_OK as u8, first.clone()));
    assert_eq!(
        dest.used_idx(0),
        0,
        "the destination was served beside the source"
    );

    // GET_VRING_BASE stops the source's ring: the destination's waiting request goes.
    assert_eq!(source.get_vring_base(0), 2);
    let used = dest.wait_used(0, 1);
    assert_eq!(used.len(), 1);
    assert!(d.wait_for_log("this one serves the volume now"));
    let (status, back) = dest.read_sectors(0, 0, first.len());
    assert_eq!(
        (status, back),
        (S_OK as u8, first.clone()),
        "the source's data"
    );
    let (status, back) = dest.read_sectors(0, 8, second.len());
    assert_eq!(
        (status, back),
        (S_OK as u8, second.clone()),
        "its own write"
    );

    // A source resumed by mistake after the hand-over waits instead of writing beside
    // the destination ...
    let base = source.avail_idx(0);
    source.start_queue(0, base);
    let third = pattern(16 * 512, 8 * 512, 3);
    submit_write(&mut source, 16, &third);
    wait_for_lines(&d, WAITS, 2);
    let (status, _) = dest.read_sectors(0, 16, third.len());
    assert_eq!(status, S_OK as u8);
    assert_eq!(source.used_idx(0), 2, "the stale source was served");

    // ... until the destination goes away, which frees the rings.
    drop(dest);
    let used = source.wait_used(0, 1);
    assert_eq!(used.len(), 1);
    let (status, back) = source.read_sectors(0, 16, third.len());
    assert_eq!((status, back), (S_OK as u8, third));
    assert_eq!(control_get(&d, "/v1/volumes/v")["frontends"], 1);
}

/// After a hand-over the volume serves the next frontend on either socket, and both
/// socket files go when the daemon stops.
#[test]
fn both_sockets_take_frontends_again_after_a_hand_over() {
    let d = DaemonProcess::start(&config("", &volume("v", 0, 8, "")));
    let data = pattern(0, 4096, 7);
    let handover = d.socket("v") + ".handover";
    for (round, socket) in [d.socket("v"), handover.clone(), d.socket("v")]
        .iter()
        .enumerate()
    {
        let mut f = RawFrontend::connect(socket, Options::default());
        assert_eq!(
            f.write_sectors(0, round as u64 * 8, &data),
            S_OK as u8,
            "round {round}"
        );
        let (status, back) = f.read_sectors(0, round as u64 * 8, data.len());
        assert_eq!((status, back), (S_OK as u8, data.clone()), "round {round}");
        // Connection end frees the rings for the next one, stopped or not.
        drop(f);
    }
    let (status, dir) = d.stop();
    assert!(status.success());
    assert!(!dir.path().join("v.sock").exists());
    assert!(!std::path::Path::new(&handover).exists());
}

/// Removing a volume counts a frontend on either socket: refused while only the hand-over
/// socket has one; forced, it closes both connections and both socket files go.
#[test]
fn removal_sees_and_closes_both_connections() {
    let d = DaemonProcess::start(&config(
        "[control]\nsocket = \"control.sock\"\n",
        &volume("v", 0, 8, ""),
    ));
    let handover = d.socket("v") + ".handover";
    let alone = RawFrontend::connect(&handover, Options::default());
    wait_frontends(&d, "v", 1);
    let (status, body) = control_call(&d, "DELETE", "/v1/volumes/v", None);
    assert_eq!(status, 409, "{body}");
    drop(alone);
    wait_frontends(&d, "v", 0);

    let mut source = RawFrontend::connect(&d.socket("v"), Options::default());
    assert_eq!(source.write_sectors(0, 0, &pattern(0, 4096, 5)), S_OK as u8);
    let _dest = RawFrontend::connect(&handover, Options::default());
    wait_frontends(&d, "v", 2);
    let (status, body) = control_call(&d, "DELETE", "/v1/volumes/v?force=true", None);
    assert_eq!(status, 204, "{body}");
    assert!(!std::path::Path::new(&d.socket("v")).exists());
    assert!(!std::path::Path::new(&handover).exists());
    let (status, _) = control_call(&d, "GET", "/v1/volumes/v", None);
    assert_eq!(status, 404);
    assert!(d.wait_for_log("socket=v.sock.handover in_flight=0"));
}
