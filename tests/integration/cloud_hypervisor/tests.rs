//! The replay's tests against the daemon.

use super::*;

/// Where the volume starts in the backing file, and its size.
const VOLUME_OFFSET_MIB: u64 = 8;
const VOLUME_MIB: u64 = 16;
const SECTORS: u64 = (VOLUME_MIB << 20) / 512;

/// The config of a daemon with one volume "v" of `num_queues` queues. It uses page-cache
/// I/O, so blk_size is 512 and the backing file shows writes at once.
fn volume_config(num_queues: usize) -> String {
    config(
        "direct = false",
        &volume(
            "v",
            VOLUME_OFFSET_MIB,
            VOLUME_MIB,
            &format!("num_queues = {num_queues}"),
        ),
    )
}

/// `len` bytes of volume "v" at `sector`, read from the backing file.
fn on_disk(d: &DaemonProcess, sector: u64, len: usize) -> Vec<u8> {
    let file = std::fs::File::open(d.path("disk.img")).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, (VOLUME_OFFSET_MIB << 20) + sector * 512)
        .unwrap();
    buf
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// CH's creation handshake (E.2) gets what CH expects, on a one-queue and a four-queue
/// volume:
/// - the shared virtio features are exactly CH's wanted set ∩ the daemon's offer;
/// - the acked protocol features are 0x920B (INFLIGHT_SHMFD among them, so activation
///   sets up the inflight region);
/// - GET_QUEUE_NUM is answered, even for one queue;
/// - GET_CONFIG with flags WRITABLE (0x1), before SET_FEATURES, returns 60 bytes with
///   capacity in sectors at 0, blk_size at 20 and num_queues at 34.
///
/// Activation (E.3) then succeeds and the volume serves.
#[test]
fn creation_negotiates_what_cloud_hypervisor_expects() {
    for num_queues in [1, 4] {
        let d = DaemonProcess::start(&volume_config(num_queues));
        let (mut vm, config) = Vm::boot(&d.socket("v"), num_queues, 1);
        let s = vm.state;
        assert_eq!(
            s.avail_features,
            expected_shared_features(num_queues),
            "{num_queues} queues: shared features {:#x}, daemon offers {:#x}",
            s.avail_features,
            vm.vu.backend_features
        );
        assert_eq!(
            s.acked_protocol_features, EXPECTED_PROTOCOL_FEATURES,
            "{num_queues} queues: acked protocol features (daemon offers {:#x})",
            s.backend_protocol_features
        );
        assert_eq!(
            ch_protocol_features().bits(),
            0x8920B,
            "CH's wanted protocol features"
        );
        assert_eq!(s.backend_num_queues, num_queues as u64, "GET_QUEUE_NUM");
        // The guest sees what CH and the daemon share; SET_FEATURES carried what Linux
        // acks of it plus PROTOCOL_FEATURES: all of it but LOG_ALL, which only a
        // migration sets.
        assert_eq!(vm.acked_features, s.avail_features & !bits(&[bit::LOG_ALL]));

        assert_eq!(config.len(), CONFIG_LEN as usize);
        assert_eq!(le64(&config, 0), SECTORS, "capacity in 512-byte sectors");
        assert_eq!(le32(&config, 20), 512, "blk_size");
        assert_eq!(le16(&config, 34), num_queues as u16, "num_queues");

        let data = pattern(0, 8192, num_queues as u8);
        vm.write_and_verify(0, Ram::Low, 0, &data);
        assert!(on_disk(&d, 0, 8192) == data, "the write reached the volume");
    }
}

/// A guest with one vCPU sets up only queue 0 of a four-queue device, so CH activates
/// 1 of 4 queues. Guest RAM is two ranges, at GPA 0 and at 4 GiB. Requests with every
/// buffer in high RAM, and chains mixing both ranges, are served. The data lands at the
/// right place in the volume and reads back through either range.
#[test]
fn one_of_four_queues_serves_buffers_in_low_and_high_memory() {
    let d = DaemonProcess::start(&volume_config(4));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 4, 1);
    assert_eq!(vm.guest.regions().len(), 2, "SET_MEM_TABLE had both ranges");

    // Everything (header, data, status) in high RAM, read back through low RAM.
    let high = pattern(64 * 512, 16384, 1);
    assert_eq!(vm.guest.write_sectors(0, Ram::High, 64, &high), S_OK as u8);
    vm.verify(0, Ram::Low, 64, &high);
    vm.verify(0, Ram::High, 64, &high);
    assert!(on_disk(&d, 64, high.len()) == high);

    // Everything in low RAM, read back through high RAM.
    let low = pattern(256 * 512, 8192, 2);
    assert_eq!(vm.guest.write_sectors(0, Ram::Low, 256, &low), S_OK as u8);
    vm.verify(0, Ram::High, 256, &low);

    // One request whose chain crosses ranges: header in low RAM, the data's first 4 KiB
    // in high RAM and the rest in low RAM, status in high RAM.
    let mixed = pattern(512 * 512, 12288, 3);
    let hdr = vm.guest.put(Ram::Low, &header(T_OUT, 512));
    let first = vm.guest.put(Ram::High, &mixed[..4096]);
    let rest = vm.guest.put(Ram::Low, &mixed[4096..]);
    let status = vm.guest.put(Ram::High, &[STATUS_UNSET]);
    let used = vm.guest.run(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::r(first, 4096),
            Desc::r(rest, 8192),
            Desc::w(status, 1),
        ],
    );
    assert_eq!(used.len, 1);
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(on_disk(&d, 512, mixed.len()) == mixed);

    // And a read scattered the other way round.
    let hdr = vm.guest.put(Ram::High, &header(T_IN, 512));
    let first = vm.guest.alloc(Ram::Low, 8192);
    let rest = vm.guest.alloc(Ram::High, 4096);
    let status = vm.guest.put(Ram::Low, &[STATUS_UNSET]);
    let used = vm.guest.run(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::w(first, 8192),
            Desc::w(rest, 4096),
            Desc::w(status, 1),
        ],
    );
    assert_eq!(used.len as usize, mixed.len() + 1);
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(vm.guest.read(first, 8192) == mixed[..8192]);
    assert!(vm.guest.read(rest, 4096) == mixed[8192..]);
}

/// A guest device reset (E.4): SET_VRING_ENABLE 0 and GET_VRING_BASE per active queue.
/// Then the driver sets the device up again with fresh rings elsewhere in RAM (first in
/// high RAM, then back in low RAM), and CH repeats E.3 on the same socket without
/// SET_OWNER, with SET_FEATURES and the whole memory table again. GET_VRING_BASE reports
/// every published request consumed. After each re-activation the device serves from
/// the new rings, and data written before the reset reads back.
#[test]
fn guest_reset_then_reactivation_on_the_same_socket() {
    let d = DaemonProcess::start(&volume_config(4));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 4, 1);
    let before = pattern(8 * 512, 4096, 4);
    vm.write_and_verify(0, Ram::Low, 8, &before);

    let high_rings = vm.guest.alloc(Ram::High, RING_AREA as usize);
    for (round, ring_at) in [high_rings, RINGS_GPA + 8 * RING_AREA]
        .into_iter()
        .enumerate()
    {
        let published = vm.guest.avail_idx_in_memory(0);
        let bases = vm.reset_and_reactivate(&[ring_at]);
        assert_eq!(
            bases,
            vec![published],
            "round {round}: GET_VRING_BASE of the one active queue: everything consumed"
        );
        assert_eq!(vm.guest.avail_idx_in_memory(0), 0, "fresh rings");
        vm.verify(0, Ram::High, 8, &before);
        let after = pattern(16 * 512, 8192, 5 + round as u8);
        vm.write_and_verify(0, Ram::Low, 16, &after);
        assert!(on_disk(&d, 16, after.len()) == after, "round {round}");
    }
}

/// CH's pause (E.4) is SET_VRING_ENABLE 0 only. A write the guest published and kicked
/// while the ring is disabled is neither completed nor performed. The backing file
/// keeps the old data and the status byte stays unset. On resume (SET_VRING_ENABLE 1),
/// the pending write is served without another kick, and later requests are served as
/// usual.
#[test]
fn pause_holds_a_kicked_request_until_resume() {
    let d = DaemonProcess::start(&volume_config(1));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    let old = pattern(40 * 512, 4096, 6);
    vm.write_and_verify(0, Ram::Low, 40, &old);

    vm.vu.set_vrings_enabled(false);
    let new = pattern(40 * 512, 4096, 7);
    let hdr = vm.guest.put(Ram::Low, &header(T_OUT, 40));
    let buf = vm.guest.put(Ram::High, &new);
    let status = vm.guest.put(Ram::Low, &[STATUS_UNSET]);
    let head = vm.guest.submit(
        0,
        &[Desc::r(hdr, 16), Desc::r(buf, 4096), Desc::w(status, 1)],
    );
    vm.guest.kick(0);
    assert!(
        vm.guest.no_completion_within(0, PAUSE_PROBE),
        "a request completed while its ring was disabled"
    );
    assert_eq!(vm.guest.read(status, 1)[0], STATUS_UNSET);
    assert!(
        on_disk(&d, 40, 4096) == old,
        "the write was performed while its ring was disabled"
    );

    vm.vu.set_vrings_enabled(true);
    let used = vm.guest.wait_used(0);
    assert_eq!(used.head, head, "the pending request completed on resume");
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(on_disk(&d, 40, 4096) == new);
    vm.verify(0, Ram::Low, 40, &new);

    // A pause with nothing pending, and I/O after the resume.
    vm.vu.set_vrings_enabled(false);
    vm.vu.set_vrings_enabled(true);
    vm.write_and_verify(0, Ram::High, 48, &pattern(48 * 512, 4096, 8));
}

/// CH closes the socket without GET_VRING_BASE (shutdown, device removal). This happens
/// with both queues of a two-queue device running. The next connection is set up per
/// E.5: SET_OWNER, GET_FEATURES, SET_PROTOCOL_FEATURES(saved), NEED_REPLY, no GET_CONFIG.
/// Then E.3 runs with base = the avail index in guest memory, on the same rings. Both
/// queues serve again, the used ring continues where it was, and data written before
/// the close reads back.
#[test]
fn close_without_get_vring_base_then_reconnect_resumes_the_rings() {
    let d = DaemonProcess::start(&volume_config(2));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 2, 2);
    let a = pattern(0, 8192, 9);
    let b = pattern(64 * 512, 4096, 10);
    vm.write_and_verify(0, Ram::Low, 0, &a);
    vm.write_and_verify(1, Ram::High, 64, &b);
    let published = [0, 1].map(|q| vm.guest.avail_idx_in_memory(q));
    assert_eq!(published, [2, 2]);

    let mut vm = vm.reconnect(&d.socket("v"));
    // Each queue, read through the other's data.
    vm.verify(1, Ram::Low, 0, &a);
    vm.verify(0, Ram::High, 64, &b);
    for (q, published) in published.into_iter().enumerate() {
        assert_eq!(
            vm.guest.used_idx(q),
            published + 1,
            "queue {q}: the used ring continued from where it was"
        );
    }
    let c = pattern(128 * 512, 4096, 11);
    vm.write_and_verify(1, Ram::High, 128, &c);
    assert!(on_disk(&d, 128, 4096) == c);

    // And once more: a second close and reconnect.
    let mut vm = vm.reconnect(&d.socket("v"));
    vm.verify(0, Ram::Low, 128, &c);
    vm.verify(1, Ram::Low, 0, &a);
}

/// The daemon restarts under a running VM. CH sees the HUP and reconnects per E.5 (no
/// GET_CONFIG), at the avail index in guest memory, on the same rings. The new daemon
/// serves on the same rings, and what the VM wrote before the restart reads back.
#[test]
fn after_a_daemon_restart_cloud_hypervisor_reconnects_and_the_ring_continues() {
    let cfg = volume_config(1);
    let d = DaemonProcess::start(&cfg);
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    let a = pattern(24 * 512, 16384, 12);
    vm.write_and_verify(0, Ram::High, 24, &a);
    let published = vm.guest.avail_idx_in_memory(0);

    let (status, dir) = d.stop();
    assert!(status.success(), "daemon exit status {status} on SIGTERM");
    let d = DaemonProcess::start_in(dir, &cfg);

    let mut vm = vm.reconnect(&d.socket("v"));
    vm.verify(0, Ram::Low, 24, &a);
    assert_eq!(vm.guest.used_idx(0), published + 1);
    let b = pattern(32 * 512, 4096, 13);
    vm.write_and_verify(0, Ram::Low, 32, &b);
    assert!(on_disk(&d, 32, 4096) == b);
}

/// Memory hotplug with CONFIGURE_MEM_SLOTS acked: CH sends ADD_MEM_REG for the new range
/// while the queue runs. Requests with their buffers in the new range are served. The
/// next activation (after a guest reset) sends SET_MEM_TABLE with all three ranges, and
/// rings placed in the hot-plugged range work too.
#[test]
fn hot_plugged_memory_comes_with_add_mem_reg_and_stays_in_the_next_mem_table() {
    let d = DaemonProcess::start(&volume_config(1));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    assert_ne!(
        vm.state.acked_protocol_features & VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS.bits(),
        0,
        "CONFIGURE_MEM_SLOTS acked: CH hot-plugs with ADD_MEM_REG"
    );
    let before = pattern(0, 4096, 14);
    vm.write_and_verify(0, Ram::Low, 0, &before);

    let region = vm.guest.plug();
    assert_eq!(region.guest_phys_addr, HOTPLUG_GPA);
    vm.vu.add_memory_region(&region);
    let data = pattern(200 * 512, 16384, 15);
    vm.write_and_verify(0, Ram::Hotplug, 200, &data);
    assert!(on_disk(&d, 200, data.len()) == data);
    vm.verify(0, Ram::Hotplug, 0, &before);

    assert_eq!(vm.guest.regions().len(), 3);
    let hot_rings = vm.guest.alloc(Ram::Hotplug, RING_AREA as usize);
    vm.reset_and_reactivate(&[hot_rings]);
    vm.verify(0, Ram::Hotplug, 200, &data);
    vm.write_and_verify(0, Ram::High, 300, &pattern(300 * 512, 4096, 16));
}
