//! Requests a well-behaved frontend never sends, through the raw frontend: malformed
//! descriptor chains, writes to read-only volumes, out-of-range and overflowing sectors,
//! unsupported types and flags, indirect tables. Each is checked by the status byte and
//! used length the guest sees, and after each the same queue must still serve a valid
//! write and read. Also GET_ID, the config space, and GET_VRING_BASE draining.

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::*;

const IOERR: Option<u8> = Some(S_IOERR as u8);
const UNSUPP: Option<u8> = Some(S_UNSUPP as u8);
const OK: Option<u8> = Some(S_OK as u8);
/// The volume size used by most tests, in 512-byte sectors.
const SECTORS: u64 = (8 << 20) / 512;

/// A daemon with one 8 MiB volume "v" (page-cache I/O, so any 512-byte multiple works)
/// and a raw frontend connected to it.
fn setup(volume_extra: &str) -> (DaemonProcess, RawFrontend) {
    let d = DaemonProcess::start(&config("direct = false", &volume("v", 0, 8, volume_extra)));
    let f = RawFrontend::connect(&d.socket("v"), Options::default());
    (d, f)
}

/// The request was refused with `status`, and only the status byte was returned.
#[track_caller]
fn assert_refused(done: Done, status: Option<u8>) {
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
fn assert_dropped(done: Done) {
    assert_eq!(done.used_len, 0, "used len");
    assert!(
        matches!(done.status, None | Some(STATUS_UNSET)),
        "status byte touched: {done:?}"
    );
}

/// The queue still serves: a 4 KiB write at a sector that depends on `seed`, read back.
#[track_caller]
fn assert_serving(f: &mut RawFrontend, q: usize, seed: u8) {
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

#[test]
fn discard_and_write_zeroes_flags_sizes_and_ranges() {
    let (_d, mut f) = setup("");
    let mut seed = 0;
    let mut check = |f: &mut RawFrontend, done: Done, want: Option<u8>| {
        if want == OK {
            assert_eq!(
                done,
                Done {
                    used_len: 1,
                    status: OK
                }
            );
        } else {
            assert_refused(done, want);
        }
        seed += 1;
        assert_serving(f, 0, seed);
    };
    // (type, sector, num_sectors, flags, expected status, what)
    type Case = (u32, u64, u32, u32, Option<u8>, &'static str);
    let cases: &[Case] = &[
        (T_DISCARD, 0, 8, 1, UNSUPP, "discard with the unmap flag"),
        (T_DISCARD, 0, 8, 2, UNSUPP, "discard with an unknown flag"),
        (
            T_WRITE_ZEROES,
            0,
            8,
            2,
            UNSUPP,
            "write-zeroes with an unknown flag",
        ),
        (T_DISCARD, 0, u32::MAX, 0, IOERR, "huge discard"),
        (T_WRITE_ZEROES, 0, u32::MAX, 0, IOERR, "huge write-zeroes"),
        (
            T_WRITE_ZEROES,
            0,
            (32 << 20) / 512 + 1,
            0,
            IOERR,
            "write-zeroes over max_write_zeroes_sectors",
        ),
        (T_DISCARD, 0, 0, 0, IOERR, "discard of 0 sectors"),
        (
            T_DISCARD,
            SECTORS - 8,
            16,
            0,
            IOERR,
            "discard ending past the volume",
        ),
        (
            T_WRITE_ZEROES,
            SECTORS - 8,
            16,
            1,
            IOERR,
            "write-zeroes ending past the volume",
        ),
        (
            T_DISCARD,
            SECTORS,
            1,
            0,
            IOERR,
            "discard starting at the end",
        ),
        (
            T_DISCARD,
            u64::MAX / 512 + 1,
            8,
            0,
            IOERR,
            "discard whose sector * 512 overflows",
        ),
        (
            T_WRITE_ZEROES,
            u64::MAX - 3,
            8,
            0,
            IOERR,
            "write-zeroes whose sector overflows",
        ),
        (
            T_DISCARD,
            SECTORS - 8,
            8,
            0,
            OK,
            "discard of the last 4 KiB",
        ),
        (
            T_WRITE_ZEROES,
            SECTORS - 16,
            16,
            0,
            OK,
            "write-zeroes of the last 8 KiB",
        ),
        (T_WRITE_ZEROES, 0, 8, 1, OK, "write-zeroes with unmap"),
    ];
    for &(kind, sector, num, flags, want, what) in cases {
        eprintln!("case: {what}");
        let done = f.range_op(0, kind, sector, num, flags);
        check(&mut f, done, want);
    }
    // The payload must be exactly one 16-byte segment.
    let hdr = f.put(&header(T_DISCARD, 0));
    let segs = f.put(&[range_segment(0, 8, 0), range_segment(8, 8, 0)].concat());
    let st = f.status_buf();
    let done = f.run(0, &[Desc::r(hdr, 16), Desc::r(segs, 32), Desc::w(st, 1)]);
    check(&mut f, done, IOERR);
    let st = f.status_buf();
    let done = f.run(0, &[Desc::r(hdr, 16), Desc::r(segs, 8), Desc::w(st, 1)]);
    check(&mut f, done, IOERR);
}

#[test]
fn sectors_out_of_range_or_overflowing_fail() {
    let (_d, mut f) = setup("");
    let cases = [
        (T_IN, SECTORS, 512),
        (T_OUT, SECTORS - 1, 1024),
        (T_IN, u64::MAX / 512 + 1, 512),
        (T_OUT, u64::MAX / 512, 512),
        (T_IN, u64::MAX, 4096),
        (T_OUT, 1 << 55, 4096),
    ];
    for (k, (kind, sector, len)) in cases.into_iter().enumerate() {
        let (chain, _) = f.rw_chain(kind, sector, len);
        assert_refused(f.run(0, &chain), IOERR);
        assert_serving(&mut f, 0, k as u8 + 1);
    }
    // The last sector itself is fine.
    assert_eq!(f.write_sectors(0, SECTORS - 1, &[7; 512]), S_OK as u8);
    assert_eq!(
        f.read_sectors(0, SECTORS - 1, 512),
        (S_OK as u8, vec![7; 512])
    );
}

#[test]
fn more_data_segments_than_seg_max_fail() {
    // queue_size 16 gives seg_max 14; an indirect table may hold more than the ring.
    let d = DaemonProcess::start(&config(
        "direct = false",
        &volume("v", 0, 8, "queue_size = 16"),
    ));
    let mut f = RawFrontend::connect(
        &d.socket("v"),
        Options {
            queue_size: 16,
            ..Options::default()
        },
    );
    let seg_max = u32::from_le_bytes(f.config(12, 4).try_into().unwrap()) as usize;
    assert_eq!(seg_max, 14);
    let chain_of = |f: &mut RawFrontend, kind: u32, segments: usize| {
        let hdr = f.put(&header(kind, 0));
        let data = f.alloc(segments * 4096);
        let st = f.status_buf();
        let mut chain = vec![Desc::r(hdr, 16)];
        let dir = if kind == T_IN { Desc::w } else { Desc::r };
        chain.extend((0..segments).map(|i| dir(data + i as u64 * 4096, 4096)));
        chain.push(Desc::w(st, 1));
        (chain, data)
    };
    // seg_max segments work, in both directions.
    let (chain, data) = chain_of(&mut f, T_OUT, seg_max);
    let want = pattern(0, seg_max * 4096, 4);
    f.write(data, &want);
    assert_eq!(
        f.run_indirect(0, &chain),
        Done {
            used_len: 1,
            status: OK
        }
    );
    let (chain, data) = chain_of(&mut f, T_IN, seg_max);
    assert_eq!(
        f.run_indirect(0, &chain),
        Done {
            used_len: (seg_max * 4096 + 1) as u32,
            status: OK
        }
    );
    assert!(f.read(data, seg_max * 4096) == want);
    // One more fails.
    for (k, kind) in [T_OUT, T_IN].into_iter().enumerate() {
        let (chain, _) = chain_of(&mut f, kind, seg_max + 1);
        assert_refused(f.run_indirect(0, &chain), IOERR);
        // (Sectors past the ones written above.)
        assert_serving(&mut f, 0, k as u8 + 20);
    }
    // Nothing of the refused write reached the disk beyond what the valid one wrote.
    assert!(d.file("disk.img")[..seg_max * 4096] == want[..]);
}

#[test]
fn indirect_descriptor_tables_carry_valid_requests() {
    let (d, mut f) = setup("");
    let data = pattern(65536, 8192, 9);
    let hdr = f.put(&header(T_OUT, 128));
    let buf = f.put(&data);
    let st = f.status_buf();
    let chain = [
        Desc::r(hdr, 16),
        Desc::r(buf, 3072),
        Desc::r(buf + 3072, 5120),
        Desc::w(st, 1),
    ];
    assert_eq!(
        f.run_indirect(0, &chain),
        Done {
            used_len: 1,
            status: OK
        }
    );
    // Read back through a direct chain, and through an indirect one.
    assert_eq!(f.read_sectors(0, 128, 8192), (S_OK as u8, data.clone()));
    let (chain, back) = f.rw_chain(T_IN, 128, 8192);
    assert_eq!(
        f.run_indirect(0, &chain),
        Done {
            used_len: 8193,
            status: OK
        }
    );
    assert!(f.read(back, 8192) == data);
    assert!(d.file("disk.img")[65536..65536 + 8192] == data[..]);
    // Mixed with direct chains on the same ring, several in flight.
    let mut heads = Vec::new();
    for k in 0..6u64 {
        let (chain, _) = f.rw_chain(T_IN, 128, 8192);
        heads.push(if k % 2 == 0 {
            f.submit_indirect(0, &chain)
        } else {
            f.submit(0, &chain)
        });
    }
    f.kick(0);
    let mut used: Vec<u16> = f.wait_used(0, 6).iter().map(|u| u.head).collect();
    used.sort_unstable();
    heads.sort_unstable();
    assert_eq!(used, heads);
    assert_serving(&mut f, 0, 1);
}

#[test]
fn rings_wrap_with_and_without_event_idx_and_add_mem_region() {
    let d = DaemonProcess::start(&config(
        "direct = false",
        &volume("v", 0, 8, "queue_size = 16"),
    ));
    for (k, (event_idx, add_mem_region)) in
        [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .enumerate()
    {
        let opts = Options {
            queue_size: 16,
            event_idx,
            add_mem_region,
            ..Options::default()
        };
        let mut f = RawFrontend::connect(&d.socket("v"), opts);
        let idx_bit = 1 << virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
        assert_eq!(f.features & idx_bit != 0, event_idx);
        // 20 batches of 5 requests wrap the 16-entry rings several times.
        for batch in 0..20u64 {
            let mut bufs = Vec::new();
            for i in 0..5u64 {
                let sector = (batch * 5 + i) * 8;
                let seed = (k * 50) as u8 + i as u8;
                let (chain, buf) = f.rw_chain(T_OUT, sector, 4096);
                f.write(buf, &pattern(sector * 512, 4096, seed));
                f.submit(0, &chain);
                bufs.push((sector, seed));
            }
            f.kick(0);
            assert!(f.wait_used(0, 5).iter().all(|u| u.len == 1));
            for (sector, seed) in bufs {
                let (status, back) = f.read_sectors(0, sector, 4096);
                assert_eq!(status, S_OK as u8);
                assert!(
                    back == pattern(sector * 512, 4096, seed),
                    "event_idx {event_idx}, sector {sector}"
                );
            }
        }
        assert_eq!(f.used_idx(0), 200);
    }
}

#[test]
fn get_vring_base_completes_every_popped_request_first() {
    // O_DIRECT and 1 MiB writes: the requests are likely still on the device when
    // GET_VRING_BASE arrives.
    let d = DaemonProcess::start(&config("", &volume("v", 0, 48, "num_queues = 2")));
    let opts = Options {
        num_queues: 2,
        event_idx: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    const N: u16 = 32;
    const LEN: usize = 1 << 20;
    let mut statuses = Vec::new();
    for k in 0..u64::from(N) {
        let (chain, buf) = f.rw_chain(T_OUT, k * (LEN as u64 / 512), LEN);
        f.write(buf, &pattern(k * LEN as u64, LEN, 0x33));
        statuses.push(chain[2].addr);
        f.submit(1, &chain);
    }
    f.kick(1);
    // Once the worker has consumed the ring (it publishes avail_event when it re-enables
    // notifications) every chain was popped; most are still on the device.
    assert!(f.wait_consumed(1, N), "the worker popped all {N} chains");
    let before = f.used_idx(1);
    let base = f.get_vring_base(1);
    let after = f.used_idx(1);
    eprintln!("used idx {before} before GET_VRING_BASE, {after} after; base {base}");
    assert_eq!(base, N, "next_avail: every published chain was popped");
    assert_eq!(base, f.avail_idx(1));
    assert_eq!(
        after, base,
        "every popped request completed before the reply"
    );
    for (k, st) in statuses.iter().enumerate() {
        assert_eq!(f.read(*st, 1), [S_OK as u8], "request {k}");
    }
    // The other queue served throughout; the stopped one restarts where it stopped.
    assert_serving(&mut f, 0, 1);
    f.wait_used(1, N);
    f.start_queue(1, base);
    assert_serving(&mut f, 1, 2);
    let file = d.file("disk.img");
    for k in 0..N as usize {
        // assert_serving wrote sectors 16..24 and 24..32 of the first MiB.
        let skip = if k == 0 { 32 * 512 } else { 0 };
        let at = k * LEN;
        assert!(
            file[at + skip..at + LEN] == pattern(at as u64, LEN, 0x33)[skip..],
            "write {k} did not reach the disk"
        );
    }
}
