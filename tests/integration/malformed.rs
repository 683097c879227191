//! Requests a well-behaved frontend never sends, through the raw frontend: malformed
//! descriptor chains, writes to read-only volumes, out-of-range and overflowing sectors,
//! unsupported types and flags, indirect tables. Each is checked by the status byte and
//! used length the guest sees, and after each the same queue must still serve a valid
//! write and read. Also GET_ID, the config space, and GET_VRING_BASE draining.

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::*;

pub(crate) const IOERR: Option<u8> = Some(S_IOERR as u8);
pub(crate) const UNSUPP: Option<u8> = Some(S_UNSUPP as u8);
pub(crate) const OK: Option<u8> = Some(S_OK as u8);
/// The volume size used by most tests, in 512-byte sectors.
pub(crate) const SECTORS: u64 = (8 << 20) / 512;

/// A daemon with one 8 MiB volume "v" (page-cache I/O, so any 512-byte multiple works)
/// and a raw frontend connected to it.
pub(crate) fn setup(volume_extra: &str) -> (DaemonProcess, RawFrontend) {
    let d = DaemonProcess::start(&config("direct = false", &volume("v", 0, 8, volume_extra)));
    let f = RawFrontend::connect(&d.socket("v"), Options::default());
    (d, f)
}

/// The request was refused with `status`, and only the status byte was returned.
#[track_caller]
pub(crate) fn assert_refused(done: Done, status: Option<u8>) {
    assert_eq!(
        done,
        Done {
            used_len: 1,
            status
        },
        "want status {status:?} and used len 1"
    );
}

/// The chain was returned with nothing written (there was nowhere to put a status).
#[track_caller]
pub(crate) fn assert_dropped(done: Done) {
    assert_eq!(done.used_len, 0, "used len");
    assert!(
        matches!(done.status, None | Some(STATUS_UNSET)),
        "status byte touched: {done:?}"
    );
}

/// The queue still serves: a 4 KiB write at a sector that depends on `seed`, read back.
#[track_caller]
pub(crate) fn assert_serving(f: &mut RawFrontend, q: usize, seed: u8) {
    let sector = 8 * (1 + u64::from(seed));
    let data = pattern(sector * 512, 4096, seed);
    assert_eq!(
        f.write_sectors(q, sector, &data),
        S_OK as u8,
        "valid write after a bad request"
    );
    let (status, back) = f.read_sectors(q, sector, 4096);
    assert_eq!(status, S_OK as u8, "valid read after a bad request");
    assert!(back == data, "data read back differs");
}

#[test]
fn get_id_returns_the_serial_or_the_volume_name() {
    let twenty = "ABCDEFGHIJ0123456789";
    let d = DaemonProcess::start(&config(
        "direct = false",
        &(volume("with-serial", 0, 4, "serial = \"SN-0042\"")
            + &volume("vol-b", 4, 4, "")
            + &volume("long", 8, 4, &format!("serial = \"{twenty}\""))),
    ));
    for (vol, id) in [
        ("with-serial", "SN-0042"),
        ("vol-b", "vol-b"),
        ("long", twenty),
    ] {
        let mut f = RawFrontend::connect(&d.socket(vol), Options::default());
        // A 20-byte (VIRTIO_BLK_ID_BYTES) buffer full of garbage: the ID comes back
        // NUL-padded to all 20 bytes.
        let hdr = f.put(&header(T_GET_ID, 0));
        let buf = f.put(&[0xFF; 20]);
        let st = f.status_buf();
        let done = f.run(0, &[Desc::r(hdr, 16), Desc::w(buf, 20), Desc::w(st, 1)]);
        assert_eq!(
            done,
            Done {
                used_len: 21,
                status: OK
            },
            "{vol}"
        );
        let mut want = id.as_bytes().to_vec();
        want.resize(20, 0);
        assert_eq!(f.read(buf, 20), want, "{vol}");

        // The ID buffer split over two descriptors, the status sharing the second one.
        let buf = f.alloc(21);
        let done = f.run(
            0,
            &[Desc::r(hdr, 16), Desc::w(buf, 7), Desc::w(buf + 7, 14)],
        );
        assert_eq!(
            done,
            Done {
                used_len: 21,
                status: OK
            },
            "{vol}, split"
        );
        assert_eq!(f.read(buf, 20), want, "{vol}, split");
        assert_serving(&mut f, 0, 1);
    }
    // A buffer shorter than the ID gets the ID truncated to it (as QEMU does).
    let mut f = RawFrontend::connect(&d.socket("long"), Options::default());
    let hdr = f.put(&header(T_GET_ID, 0));
    let buf = f.alloc(8);
    let st = f.status_buf();
    let done = f.run(0, &[Desc::r(hdr, 16), Desc::w(buf, 8), Desc::w(st, 1)]);
    assert_eq!(
        done,
        Done {
            used_len: 9,
            status: OK
        }
    );
    assert_eq!(f.read(buf, 8), twenty.as_bytes()[..8].to_vec());
    // GET_ID with no buffer at all.
    let st = f.status_buf();
    assert_refused(f.run(0, &[Desc::r(hdr, 16), Desc::w(st, 1)]), IOERR);
    assert_serving(&mut f, 0, 2);
}

#[test]
fn config_space_reports_capacity_blk_size_queues_and_seg_max() {
    let d = DaemonProcess::start(&config(
        "direct = false",
        &volume("v", 0, 8, "num_queues = 2\nqueue_size = 128"),
    ));
    let opts = Options {
        num_queues: 2,
        queue_size: 128,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    let le32 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let c = f.config(0, 60);
    assert_eq!(c.len(), 60);
    assert_eq!(
        u64::from_le_bytes(c[0..8].try_into().unwrap()),
        SECTORS,
        "capacity in sectors"
    );
    assert_eq!(le32(&c, 12), 126, "seg_max = queue_size - 2");
    assert_eq!(le32(&c, 20), 512, "blk_size");
    assert_eq!(u16::from_le_bytes([c[34], c[35]]), 2, "num_queues");
    assert_eq!(le32(&c, 36), (1 << 30) / 512, "max_discard_sectors");
    assert_eq!(le32(&c, 40), 1, "max_discard_seg");
    assert_eq!(le32(&c, 44), 1, "discard_sector_alignment");
    assert_eq!(le32(&c, 48), (32 << 20) / 512, "max_write_zeroes_sectors");
    assert_eq!(le32(&c, 52), 1, "max_write_zeroes_seg");
    assert_eq!(c[56], 1, "write_zeroes_may_unmap");
    // Any window comes back at exactly its length, zero-padded past the fields we fill.
    assert_eq!(f.config(0, 8), c[0..8]);
    assert_eq!(f.config(12, 4), c[12..16]);
    assert_eq!(f.config(20, 4), c[20..24]);
    assert_eq!(f.config(34, 2), c[34..36]);
    assert_eq!(f.config(4, 40), c[4..44]);
    let tail = f.config(56, 16);
    assert_eq!(tail, [&c[56..60], &[0u8; 12][..]].concat());
    assert_eq!(f.config(0, 256)[..60], c[..]);
    // The same answers with the rings running.
    assert_serving(&mut f, 1, 3);
    assert_eq!(f.config(0, 60), c);

    // With O_DIRECT the block size is the device's; the discard alignment follows it.
    let d = DaemonProcess::start(&config("", &volume("v", 0, 8, "")));
    let mut f = RawFrontend::connect(&d.socket("v"), Options::default());
    let c = f.config(0, 60);
    let blk = le32(&c, 20);
    assert!(blk.is_power_of_two() && blk >= 512, "blk_size {blk}");
    assert_eq!(le32(&c, 44), blk / 512);
    assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), SECTORS);
    assert_eq!(u16::from_le_bytes([c[34], c[35]]), 1);
    assert_eq!(le32(&c, 12), 254);
}

#[test]
fn read_only_volume_refuses_writes_discards_and_write_zeroes() {
    // A backing file with known contents, so a discard or zeroing would show.
    let dir = tempfile::tempdir().unwrap();
    let image = pattern(0, 4 << 20, 0x5A);
    let mut file = image.clone();
    file.resize(64 << 20, 0);
    std::fs::write(dir.path().join("disk.img"), &file).unwrap();
    let d = DaemonProcess::start_in(
        dir,
        &config("direct = false", &volume("ro", 0, 4, "read_only = true")),
    );
    let mut f = RawFrontend::connect(&d.socket("ro"), Options::default());
    let ro = 1u64 << virtio_bindings::virtio_blk::VIRTIO_BLK_F_RO;
    assert_ne!(f.features & ro, 0, "VIRTIO_BLK_F_RO offered and acked");

    let (chain, buf) = f.rw_chain(T_OUT, 0, 4096);
    f.write(buf, &[0xAB; 4096]);
    assert_refused(f.run(0, &chain), IOERR);
    // Also through an indirect table, and in the middle of the volume.
    let (chain, buf) = f.rw_chain(T_OUT, 1000, 8192);
    f.write(buf, &[0xCD; 8192]);
    assert_refused(f.run_indirect(0, &chain), IOERR);
    assert_refused(f.range_op(0, T_DISCARD, 0, 8, 0), IOERR);
    assert_refused(f.range_op(0, T_WRITE_ZEROES, 8, 8, 0), IOERR);
    assert_refused(f.range_op(0, T_WRITE_ZEROES, 16, 8, 1), IOERR);

    // Reads and flushes are served, and see the original data.
    let (status, data) = f.read_sectors(0, 0, 64 << 10);
    assert_eq!(status, S_OK as u8);
    assert!(data == image[..64 << 10]);
    let hdr = f.put(&header(T_FLUSH, 0));
    let st = f.status_buf();
    assert_eq!(
        f.run(0, &[Desc::r(hdr, 16), Desc::w(st, 1)]),
        Done {
            used_len: 1,
            status: OK
        }
    );
    drop(f);
    let (status, dir) = d.stop();
    assert!(status.success());
    let after = std::fs::read(dir.path().join("disk.img")).unwrap();
    assert!(
        after[..4 << 20] == image[..],
        "the read-only volume's bytes changed"
    );
}

#[test]
fn header_shorter_than_16_bytes() {
    let (_d, mut f) = setup("");
    let hdr = f.put(&header(T_IN, 0));
    let st = f.status_buf();
    assert_refused(f.run(0, &[Desc::r(hdr, 8), Desc::w(st, 1)]), IOERR);
    assert_serving(&mut f, 0, 1);
    // No readable bytes at all.
    let data = f.alloc(512);
    let st = f.status_buf();
    assert_refused(f.run(0, &[Desc::w(data, 512), Desc::w(st, 1)]), IOERR);
    assert_serving(&mut f, 0, 2);
    // A 16-byte header split over two descriptors is still a header: this read works.
    let data = f.alloc(512);
    let st = f.status_buf();
    let done = f.run(
        0,
        &[
            Desc::r(hdr, 8),
            Desc::r(hdr + 8, 8),
            Desc::w(data, 512),
            Desc::w(st, 1),
        ],
    );
    assert_eq!(
        done,
        Done {
            used_len: 513,
            status: OK
        }
    );
}

#[test]
fn chain_without_a_writable_status_is_returned_untouched() {
    let (d, mut f) = setup("");
    let hdr = f.put(&header(T_OUT, 0));
    let data = f.put(&[0xAB; 4096]);
    assert_dropped(f.run(0, &[Desc::r(hdr, 16), Desc::r(data, 4096)]));
    assert_serving(&mut f, 0, 1);
    // A header alone.
    assert_dropped(f.run(0, &[Desc::r(hdr, 16)]));
    // A zero-length writable descriptor gives no status byte either.
    let st = f.status_buf();
    assert_dropped(f.run(0, &[Desc::r(hdr, 16), Desc::r(data, 4096), Desc::w(st, 0)]));
    assert_eq!(f.read(st, 1), [STATUS_UNSET]);
    assert_serving(&mut f, 0, 2);
    assert!(
        d.file("disk.img")[..4096].iter().all(|&b| b == 0),
        "the refused write reached the disk"
    );
}

#[test]
fn readable_descriptor_after_a_writable_one_is_returned_untouched() {
    let (_d, mut f) = setup("");
    let hdr = f.put(&header(T_IN, 0));
    let data = f.put(&[0xEE; 4096]);
    let junk = f.alloc(16);
    let st = f.status_buf();
    let done = f.run(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::w(data, 4096),
            Desc::r(junk, 16),
            Desc::w(st, 1),
        ],
    );
    assert_dropped(done);
    assert_eq!(f.read(st, 1), [STATUS_UNSET]);
    assert!(
        f.read(data, 4096).iter().all(|&b| b == 0xEE),
        "data buffer written"
    );
    assert_serving(&mut f, 0, 1);
}

#[test]
fn guest_addresses_outside_guest_ram_fail() {
    let (d, mut f) = setup("");
    let end_of_ram = GUEST_BASE + GUEST_SIZE;
    for (k, addr) in [
        OUTSIDE_RAM,
        0,
        GUEST_BASE - 4096,
        end_of_ram - 2048,
        u64::MAX - 4095,
    ]
    .into_iter()
    .enumerate()
    {
        let seed = k as u8 + 1;
        let hdr = f.put(&header(T_OUT, 0));
        let st = f.status_buf();
        let done = f.run(0, &[Desc::r(hdr, 16), Desc::r(addr, 4096), Desc::w(st, 1)]);
        assert_refused(done, IOERR);
        assert_serving(&mut f, 0, seed);
        let hdr = f.put(&header(T_IN, 0));
        let st = f.status_buf();
        let done = f.run(0, &[Desc::r(hdr, 16), Desc::w(addr, 4096), Desc::w(st, 1)]);
        assert_refused(done, IOERR);
        assert_serving(&mut f, 0, seed + 10);
    }
    // A header outside guest RAM.
    let st = f.status_buf();
    let data = f.alloc(512);
    assert_refused(
        f.run(
            0,
            &[Desc::r(OUTSIDE_RAM, 16), Desc::w(data, 512), Desc::w(st, 1)],
        ),
        IOERR,
    );
    // A discard segment outside guest RAM.
    let hdr = f.put(&header(T_DISCARD, 0));
    let st = f.status_buf();
    assert_refused(
        f.run(
            0,
            &[Desc::r(hdr, 16), Desc::r(OUTSIDE_RAM, 16), Desc::w(st, 1)],
        ),
        IOERR,
    );
    // A status byte outside guest RAM: nowhere to answer, the chain comes back with 0 bytes.
    let hdr = f.put(&header(T_IN, 0));
    let data = f.alloc(512);
    let used = {
        let head = f.submit(
            0,
            &[
                Desc::r(hdr, 16),
                Desc::w(data, 512),
                Desc::w(OUTSIDE_RAM, 1),
            ],
        );
        f.kick(0);
        let used = f.wait_used(0, 1)[0];
        assert_eq!(used.head, head);
        used
    };
    assert_eq!(used.len, 0);
    assert_serving(&mut f, 0, 30);
    assert!(
        d.file("disk.img")[..4096].iter().all(|&b| b == 0),
        "a refused write reached the disk"
    );
}

#[test]
fn data_length_must_be_a_non_zero_multiple_of_512() {
    let (_d, mut f) = setup("");
    for (k, (kind, len)) in [(T_OUT, 1000), (T_IN, 513), (T_OUT, 511), (T_IN, 4095)]
        .into_iter()
        .enumerate()
    {
        let (chain, _) = f.rw_chain(kind, 0, len);
        assert_refused(f.run(0, &chain), IOERR);
        assert_serving(&mut f, 0, k as u8 + 1);
    }
    // No data at all.
    for kind in [T_IN, T_OUT] {
        let hdr = f.put(&header(kind, 0));
        let st = f.status_buf();
        assert_refused(f.run(0, &[Desc::r(hdr, 16), Desc::w(st, 1)]), IOERR);
    }
    assert_serving(&mut f, 0, 9);
}

#[test]
fn data_in_the_wrong_direction_fails() {
    let (d, mut f) = setup("");
    // A read whose data buffer is device-readable.
    let hdr = f.put(&header(T_IN, 0));
    let data = f.put(&[0x11; 4096]);
    let st = f.status_buf();
    assert_refused(
        f.run(0, &[Desc::r(hdr, 16), Desc::r(data, 4096), Desc::w(st, 1)]),
        IOERR,
    );
    assert_eq!(f.read(data, 4096), vec![0x11; 4096]);
    assert_serving(&mut f, 0, 1);
    // A write whose data buffer is device-writable.
    let hdr = f.put(&header(T_OUT, 0));
    let st = f.status_buf();
    assert_refused(
        f.run(0, &[Desc::r(hdr, 16), Desc::w(data, 4096), Desc::w(st, 1)]),
        IOERR,
    );
    assert_serving(&mut f, 0, 2);
    // A flush with data, a discard with a writable payload.
    let hdr = f.put(&header(T_FLUSH, 0));
    let st = f.status_buf();
    assert_refused(
        f.run(0, &[Desc::r(hdr, 16), Desc::r(data, 512), Desc::w(st, 1)]),
        IOERR,
    );
    let hdr = f.put(&header(T_DISCARD, 0));
    let seg = f.put(&range_segment(0, 8, 0));
    let st = f.status_buf();
    assert_refused(
        f.run(0, &[Desc::r(hdr, 16), Desc::w(seg, 16), Desc::w(st, 1)]),
        IOERR,
    );
    assert_serving(&mut f, 0, 3);
    assert!(d.file("disk.img")[..4096].iter().all(|&b| b == 0));
}

#[test]
fn unknown_request_types_are_unsupported() {
    let (_d, mut f) = setup("");
    // 99: unknown; 10: GET_LIFETIME and 14: SECURE_ERASE are not offered.
    for (k, kind) in [99u32, 10, 14, u32::MAX].into_iter().enumerate() {
        let (chain, _) = f.rw_chain(kind, 0, 512);
        assert_refused(f.run(0, &chain), UNSUPP);
        assert_serving(&mut f, 0, k as u8 + 1);
    }
}
