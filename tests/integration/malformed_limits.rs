//! Malformed requests, continued: discard and write-zeroes ranges and flags, sectors out
//! of range, more segments than `seg_max`, indirect tables, rings that wrap, and
//! GET_VRING_BASE draining. The helpers and the first cases are in `malformed.rs`.

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::malformed::*;
use crate::raw_frontend::*;

/// A discard or write-zeroes request's one segment and its expected status:
/// (type, sector, num_sectors, flags, status, what).
type RangeCase = (u32, u64, u32, u32, Option<u8>, &'static str);
const RANGE_CASES: &[RangeCase] = &[
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
    for &(kind, sector, num, flags, want, what) in RANGE_CASES {
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
