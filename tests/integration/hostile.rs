//! Guests that break the virtqueue protocol on purpose: the daemon must neither hang nor
//! hold unbounded state, and must keep serving everything else.

use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::*;
use std::sync::mpsc;
use std::time::Duration;

/// GET_VRING_BASE(q) on a thread, failing the test if the reply does not come: a hung
/// worker holds the lock this message needs.
fn get_vring_base_within(f: RawFrontend, q: usize, d: &DaemonProcess) -> (u16, RawFrontend) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut f = f;
        let base = f.get_vring_base(q);
        let _ = tx.send((base, f));
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("GET_VRING_BASE({q}) hung; daemon log:\n{}", d.log_text()))
}

fn serves(f: &mut RawFrontend, q: usize, sector: u64) {
    let data: Vec<u8> = (0..4096u32)
        .map(|i| (i * 7 + sector as u32) as u8)
        .collect();
    assert_eq!(
        f.write_sectors(q, sector, &data),
        S_OK as u8,
        "write on queue {q}"
    );
    let (status, back) = f.read_sectors(q, sector, 4096);
    assert_eq!(status, S_OK as u8);
    assert!(back == data, "read back on queue {q}");
}

#[test]
fn an_impossible_avail_index_stops_that_queue_only() {
    let d = DaemonProcess::start(&config("", &volume("v", 0, 8, "num_queues = 2")));
    let opts = Options {
        num_queues: 2,
        event_idx: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    // More entries "available" than the ring has: the daemon refuses to pop, and a naive
    // "enable notifications, more arrived, pop again" loop would spin forever.
    f.set_avail_idx_raw(1, 256 + 7);
    f.kick(1);
    serves(&mut f, 0, 0);
    // Logged before GET_VRING_BASE, so the worker has seen the kick (see the note in the
    // test below).
    assert!(
        d.wait_for_log("broke the ring protocol"),
        "{}",
        d.log_text()
    );
    let (base, mut f) = get_vring_base_within(f, 1, &d);
    assert_eq!(base, 0, "nothing was popped from the broken ring");
    // Restarted with a sane index, the queue serves again.
    f.restore_avail_idx(1);
    f.start_queue(1, base);
    serves(&mut f, 1, 8);
    serves(&mut f, 0, 16);
}

/// 10 random 4 KiB reads per second at a pinned vrate: requests stay parked for seconds
/// (while a neighbour is active: a volume alone on the device is not throttled).
const CRAWLING_MODEL: &str = r#"
[device.model]
rbps = 200000000
rseqiops = 10
rrandiops = 10
wbps = 200000000
wseqiops = 10
wrandiops = 10
[device.qos]
min = 100.0
max = 100.0
[control]
socket = "control.sock"
"#;

#[test]
fn republishing_heads_beyond_the_ring_size_is_refused() {
    let d = DaemonProcess::start(&config(
        CRAWLING_MODEL,
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    let _neighbour = crate::daemon::busy_neighbour(&d, "n", 4);
    let opts = Options {
        queue_size: 16,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    let (chain, _) = f.rw_chain(T_IN, 0, 4096);
    let head = f.submit(0, &chain);
    // The same chain published again and again while the first copies are still parked:
    // 16 fill the ring, the next 16 can only be descriptor reuse.
    for _ in 0..15 {
        f.publish(0, head);
    }
    f.kick(0);
    f.wait_used(0, 1);
    for _ in 0..16 {
        f.publish(0, head);
    }
    f.kick(0);
    // The worker stops popping at the ring size and stops the queue. Wait for it to say so
    // before GET_VRING_BASE: the kick and the message travel on different fds, so the
    // daemon may otherwise handle the message first and never see the reused heads.
    assert!(
        d.wait_for_log("more chains outstanding than the ring size"),
        "{}",
        d.log_text()
    );
    let (base, f) = get_vring_base_within(f, 0, &d);
    assert!(
        base <= 16 + 1,
        "popped at most a ring's worth plus completions: {base}"
    );
    assert_eq!(f.used_idx(0), base, "every popped chain was answered");
}

#[test]
fn unaligned_requests_too_large_to_bounce_fail_with_ioerr() {
    // O_DIRECT (the default) with guest buffers at an odd address: they must be bounced.
    let d = DaemonProcess::start(&config("", &volume("v", 0, 32, "")));
    let mut f = RawFrontend::connect(&d.socket("v"), Options::default());
    let buf = f.alloc((1 << 20) + 4096) + 1;
    let hdr = f.put(&header(T_OUT, 0));
    // 1 MiB unaligned: bounced and written.
    let st = f.status_buf();
    let done = f.run(
        0,
        &[Desc::r(hdr, 16), Desc::r(buf, 1 << 20), Desc::w(st, 1)],
    );
    assert_eq!(done.status, Some(S_OK as u8));
    // 24 segments of the same unaligned MiB: 24 MiB would need a 24 MiB bounce buffer.
    let mut chain = vec![Desc::r(hdr, 16)];
    chain.extend((0..24).map(|_| Desc::r(buf, 1 << 20)));
    let st = f.status_buf();
    chain.push(Desc::w(st, 1));
    let done = f.run(0, &chain);
    assert_eq!(done.status, Some(S_IOERR as u8));
    assert!(d.wait_for_log("bounce buffer"), "{}", d.log_text());
    let mut f = f;
    serves(&mut f, 0, 4096);
}

/// A vhost-user connection through the feature handshake, with acked requests and
/// CONFIGURE_MEM_SLOTS, and no memory yet.
fn bare_frontend(socket: &str) -> vhost::vhost_user::Frontend {
    use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
    use vhost::vhost_user::{Frontend, VhostUserFrontend};
    use vhost::VhostBackend;
    let mut f = Frontend::connect(socket, 1).unwrap();
    f.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    f.set_owner().unwrap();
    let features = f.get_features().unwrap();
    f.set_features(features).unwrap();
    f.get_protocol_features().unwrap();
    f.set_protocol_features(
        VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS,
    )
    .unwrap();
    f
}

/// A memfd of `len` bytes, as a frontend's guest RAM.
fn memfd(len: u64) -> std::fs::File {
    crate::virtqueue::memfd_file(len)
}

fn region(gpa: u64, size: u64, file: &std::fs::File) -> vhost::VhostUserMemoryRegionInfo {
    use std::os::fd::AsRawFd;
    vhost::VhostUserMemoryRegionInfo {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: 0x7f00_0000_0000 + gpa,
        mmap_offset: 0,
        mmap_handle: file.as_raw_fd(),
    }
}

/// The other volume still serves, and this one takes a well-behaved frontend.
fn both_volumes_serve(d: &DaemonProcess) {
    let mut n = RawFrontend::connect(&d.socket("n"), Options::default());
    serves(&mut n, 0, 0);
    let mut v = RawFrontend::connect(&d.socket("v"), Options::default());
    serves(&mut v, 0, 8);
}

#[test]
fn a_memory_region_larger_than_its_file_is_refused() {
    use vhost::vhost_user::VhostUserFrontend;
    use vhost::VhostBackend;
    let d = DaemonProcess::start(&config(
        "",
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    {
        let f = bare_frontend(&d.socket("v"));
        let ram = memfd(1 << 20);
        // 4 MiB declared over a 1 MiB file: an access past 1 MiB would be SIGBUS. The
        // request fails and the daemon ends this connection.
        assert!(f.set_mem_table(&[region(0, 4 << 20, &ram)]).is_err());
    }
    {
        let mut f = bare_frontend(&d.socket("v"));
        let ram = memfd(1 << 20);
        assert!(f.add_mem_region(&region(0, 2 << 20, &ram)).is_err());
    }
    assert!(
        d.wait_for_log("frontend memory table refused"),
        "{}",
        d.log_text()
    );
    both_volumes_serve(&d);
}

#[test]
fn memory_regions_beyond_the_advertised_slots_are_refused() {
    use vhost::vhost_user::VhostUserFrontend;
    let d = DaemonProcess::start(&config(
        "",
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    {
        let mut f = bare_frontend(&d.socket("v"));
        let slots = f.get_max_mem_slots().unwrap();
        let files: Vec<_> = (0..=slots).map(|_| memfd(4096)).collect();
        for (i, file) in files.iter().enumerate().take(slots as usize) {
            f.add_mem_region(&region((i as u64) << 20, 4096, file))
                .unwrap_or_else(|e| panic!("region {i}: {e}"));
        }
        let over = region(slots << 20, 4096, &files[slots as usize]);
        assert!(f.add_mem_region(&over).is_err(), "region {slots} was taken");
    }
    both_volumes_serve(&d);
}

/// A frontend truncates its guest memory file under the daemon's mapping after the
/// memory table was accepted, then kicks: the daemon's next look at the ring would be a
/// SIGBUS, which by default kills every volume. It reads zeroes instead, says so, and
/// the other volume and the next frontend of this one are served.
#[test]
fn a_frontend_shrinking_its_memory_does_not_take_the_daemon_down() {
    let d = DaemonProcess::start(&config(
        "",
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    let mut f = RawFrontend::connect(&d.socket("v"), Options::default());
    serves(&mut f, 0, 0);
    let (chain, _) = f.rw_chain(T_IN, 0, 4096);
    f.submit(0, &chain);
    f.shrink_memory(0);
    f.kick(0);
    assert!(
        d.wait_for_log("shrank its guest memory file"),
        "{}",
        d.log_text()
    );
    drop(f);
    both_volumes_serve(&d);
}

/// A frontend removes a memory region (REM_MEM_REG) while a request whose status byte
/// lies in it is in flight, and truncates the region's file. The request completes
/// through the memory table it was popped with, where the region is still mapped: its
/// status byte write faults, and must read as zeroes for the daemon, not kill it.
#[test]
fn a_region_removed_and_shrunk_under_a_request_in_flight_does_not_take_the_daemon_down() {
    region_removed_and_shrunk_under_a_request_in_flight(false);
}

/// The same with guest RAM in huge pages, where the kernel refuses a small zero page
/// inside a huge mapping.
#[test]
fn a_huge_page_region_removed_and_shrunk_under_a_request_does_not_take_the_daemon_down() {
    region_removed_and_shrunk_under_a_request_in_flight(true);
}

fn region_removed_and_shrunk_under_a_request_in_flight(huge_pages: bool) {
    use vhost::vhost_user::VhostUserFrontend;
    let d = DaemonProcess::start(&config(
        &format!(
            "{}{}",
            crate::devices::FAST_DEVICE,
            crate::devices::stalled_read("v", "2s")
        ),
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    let opts = Options {
        split_memory: true,
        huge_pages,
        add_mem_region: true,
        // The avail event says when the daemon has popped the request.
        event_idx: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    let hdr = f.put(&header(T_IN, 0));
    let data = f.alloc(4096);
    assert!(
        data + 4096 <= SPLIT_AT,
        "the data buffer is in the first region"
    );
    let status = SPLIT_AT + 0x1000;
    f.write(status, &[STATUS_UNSET]);
    f.submit(
        0,
        &[Desc::r(hdr, 16), Desc::w(data, 4096), Desc::w(status, 1)],
    );
    f.kick(0);
    assert!(f.wait_consumed(0, 1), "the daemon popped the request");
    let second = crate::virtqueue::region_infos(&f.mem)[1];
    f.frontend.remove_mem_region(&second).unwrap();
    let region =
        vm_memory::GuestMemoryBackend::find_region(&f.mem, vm_memory::GuestAddress(SPLIT_AT))
            .unwrap();
    region.file_offset().unwrap().file().set_len(0).unwrap();
    // The stall ends after 2 s and the request fails: its status goes to the shrunk page.
    assert!(
        d.wait_for_log("shrank its guest memory file"),
        "{}",
        d.log_text()
    );
    // The used ring is in the first region: the chain came back, with its status byte.
    let used = f.wait_used(0, 1);
    assert_eq!((used[0].head, used[0].len), (0, 1));
    drop(f);
    both_volumes_serve(&d);
}

/// A client that connects and says nothing, or half a message header, would keep the
/// volume from its real frontend: after the handshake deadline the daemon hangs up.
#[test]
fn a_frontend_that_never_starts_the_handshake_is_disconnected() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let volumes = volume("a", 0, 16, "") + &volume("b", 16, 16, "") + &volume("c", 32, 16, "");
    let d = DaemonProcess::start(&config("", &volumes));
    let started = std::time::Instant::now();
    let silent = UnixStream::connect(d.socket("a")).unwrap();
    let mut half = UnixStream::connect(d.socket("b")).unwrap();
    // GET_FEATURES' request code, and nothing of the rest of the header.
    half.write_all(&1u32.to_le_bytes()).unwrap();
    // Meanwhile the third volume serves as usual.
    let mut c = crate::client::Client::connect(&d.socket("c"), 1, 4096);
    let read = crate::client::Op::Read {
        off: 0,
        len: 4096,
        buf: 0,
    };
    assert_eq!(c.run(read), 0);
    for mut stream in [silent, half] {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let n = stream.read(&mut [0u8; 16]).expect("the daemon hangs up");
        assert_eq!(n, 0, "end of file, not a reply");
    }
    let waited = started.elapsed();
    assert!(
        (Duration::from_millis(4_900)..Duration::from_secs(20)).contains(&waited),
        "hung up after {waited:?} (deadline 5 s)"
    );
    assert!(d.wait_for_log("sent no GET_FEATURES"));
    // Both volumes take their next frontend.
    for name in ["a", "b"] {
        let mut f = crate::client::Client::connect(&d.socket(name), 1, 4096);
        assert_eq!(f.run(read), 0, "volume {name}");
    }
    assert_eq!(c.run(read), 0);
}

/// A frontend sets a migration log (SET_LOG_BASE) and then truncates the log's file: the
/// daemon's next mark in the log faults, and must not kill it.
#[test]
fn a_dirty_log_shrunk_under_the_daemon_does_not_take_it_down() {
    use std::os::fd::AsRawFd;
    use vhost::{VhostBackend, VhostUserDirtyLogRegion};
    let d = DaemonProcess::start(&config(
        "",
        &(volume("v", 0, 8, "") + &volume("n", 8, 8, "")),
    ));
    let opts = Options {
        dirty_log: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    let log = memfd(4096);
    f.frontend
        .set_log_base(
            0,
            Some(VhostUserDirtyLogRegion {
                mmap_size: 4096,
                mmap_offset: 0,
                mmap_handle: log.as_raw_fd(),
            }),
        )
        .unwrap();
    log.set_len(0).unwrap();
    let (chain, _) = f.rw_chain(T_IN, 0, 4096);
    // The read itself is served; only its marks in the log fault.
    assert_eq!(f.run(0, &chain).status, Some(S_OK as u8));
    assert!(
        d.wait_for_log("shrank its migration log"),
        "{}",
        d.log_text()
    );
    drop(f);
    both_volumes_serve(&d);
}
