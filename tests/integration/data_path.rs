//! The data path against a real frontend (blkio): data integrity, isolation between
//! volumes, errors, multi-queue, reconnect, the null device and graceful shutdown.

use crate::client::{pattern, Client, Op, Rng};
use crate::daemon::{config, volume, DaemonProcess};

const MIB: u64 = 1 << 20;
const EIO: i32 = -libc::EIO;

fn two_volume_daemon() -> DaemonProcess {
    DaemonProcess::start(&config(
        "",
        &(volume("a", 0, 8, "num_queues = 4") + &volume("b", 8, 8, "")),
    ))
}

#[test]
fn random_writes_read_back_with_several_segments() {
    let d = two_volume_daemon();
    let mut c = Client::connect(&d.socket("a"), 1, 4 << 20);
    assert_eq!(c.capacity, 8 * MIB);
    let mut rng = Rng(7);
    let mut written = Vec::new();
    for i in 0..40u8 {
        let len = ((rng.below(2048) + 1) * 512) as usize; // 512 B ..= 1 MiB
        let off = rng.below((c.capacity - len as u64) / 512) * 512;
        let data = pattern(off, len, i);
        c.buf()[..len].copy_from_slice(&data);
        let op = if i % 2 == 0 {
            Op::Write { off, len, buf: 0 }
        } else {
            Op::WriteV {
                off,
                len,
                buf: 0,
                parts: 3,
            }
        };
        assert_eq!(c.run(op), 0, "write {len} bytes at {off}");
        written.push((off, len, i));
    }
    assert_eq!(c.run(Op::Flush), 0);
    // Later writes may overlap earlier ones: check each against a model of the disk.
    let mut model = vec![0u8; c.capacity as usize];
    for &(off, len, seed) in &written {
        model[off as usize..off as usize + len].copy_from_slice(&pattern(off, len, seed));
    }
    for (k, &(off, len, _)) in written.iter().enumerate() {
        c.buf()[2 << 20..(2 << 20) + len].fill(0xEE);
        let op = if k % 2 == 0 {
            Op::ReadV {
                off,
                len,
                buf: 2 << 20,
                parts: 4,
            }
        } else {
            Op::Read {
                off,
                len,
                buf: 2 << 20,
            }
        };
        assert_eq!(c.run(op), 0);
        assert!(
            c.buf()[2 << 20..(2 << 20) + len] == model[off as usize..off as usize + len],
            "read back {len} bytes at {off} differ"
        );
    }
}

#[test]
fn write_zeroes_where_the_filesystem_cannot_zero_writes_the_zeroes() {
    // tmpfs has no FALLOC_FL_ZERO_RANGE: the daemon writes the zeroes from a buffer.
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on tmpfs");
    let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
    // SAFETY: fallocate on a file this test owns.
    let zeroed = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&probe),
            libc::FALLOC_FL_ZERO_RANGE,
            0,
            4096,
        )
    };
    assert_eq!(
        zeroed, -1,
        "tmpfs zeroed a range: this test needs one that cannot"
    );
    // tmpfs takes O_DIRECT only from Linux 6.6 on.
    let d = DaemonProcess::start_in(dir, &config("direct = false", &volume("a", 0, 8, "")));
    let mut c = Client::connect(&d.socket("a"), 1, 1 << 20);
    c.buf().fill(0xAB);
    let write = Op::Write {
        off: 0,
        len: 1 << 20,
        buf: 0,
    };
    assert_eq!(c.run(write), 0);
    let zeroes = Op::WriteZeroes {
        off: 4096,
        len: 8192,
        unmap: false,
    };
    assert_eq!(c.run(zeroes), 0);
    let read = Op::Read {
        off: 0,
        len: 1 << 20,
        buf: 0,
    };
    assert_eq!(c.run(read), 0);
    let b = c.buf();
    assert!(b[..4096].iter().all(|&x| x == 0xAB), "bytes before kept");
    assert!(
        b[4096..12288].iter().all(|&x| x == 0),
        "the range reads zero"
    );
    assert!(b[12288..].iter().all(|&x| x == 0xAB), "bytes after kept");
}

#[test]
fn discard_and_write_zeroes_read_back_as_zeros() {
    let d = two_volume_daemon();
    let mut c = Client::connect(&d.socket("a"), 1, 1 << 20);
    c.buf().fill(0xAB);
    for off in [0, MIB, 2 * MIB] {
        assert_eq!(
            c.run(Op::Write {
                off,
                len: 1 << 20,
                buf: 0
            }),
            0
        );
    }
    assert_eq!(
        c.run(Op::WriteZeroes {
            off: 4096,
            len: 8192,
            unmap: false
        }),
        0
    );
    assert_eq!(
        c.run(Op::WriteZeroes {
            off: MIB,
            len: 65536,
            unmap: true
        }),
        0
    );
    assert_eq!(
        c.run(Op::Discard {
            off: 2 * MIB,
            len: MIB
        }),
        0
    );
    assert_eq!(
        c.run(Op::Read {
            off: 0,
            len: 1 << 20,
            buf: 0
        }),
        0
    );
    let b = c.buf();
    assert!(
        b[..4096].iter().all(|&x| x == 0xAB),
        "bytes before the zeroed range kept"
    );
    assert!(
        b[4096..12288].iter().all(|&x| x == 0),
        "write-zeroes range reads zero"
    );
    assert!(
        b[12288..].iter().all(|&x| x == 0xAB),
        "bytes after the zeroed range kept"
    );
    assert_eq!(
        c.run(Op::Read {
            off: MIB,
            len: 65536 + 512,
            buf: 0
        }),
        0
    );
    let b = c.buf();
    assert!(b[..65536].iter().all(|&x| x == 0));
    assert!(b[65536..65536 + 512].iter().all(|&x| x == 0xAB));
    // The file backend punches a hole, so discarded data reads as zeros too.
    assert_eq!(
        c.run(Op::Read {
            off: 2 * MIB,
            len: 1 << 20,
            buf: 0
        }),
        0
    );
    assert!(c.buf()[..1 << 20].iter().all(|&x| x == 0));
}

#[test]
fn filling_one_volume_never_touches_its_neighbour() {
    let d = two_volume_daemon();
    let mut b = Client::connect(&d.socket("b"), 1, 1 << 20);
    for i in 0..8u64 {
        let data = pattern(i * MIB, 1 << 20, 0xB);
        b.buf().copy_from_slice(&data);
        assert_eq!(
            b.run(Op::Write {
                off: i * MIB,
                len: 1 << 20,
                buf: 0
            }),
            0
        );
    }
    let mut a = Client::connect(&d.socket("a"), 1, 1 << 20);
    a.buf().fill(0xA5);
    for i in 0..8u64 {
        assert_eq!(
            a.run(Op::Write {
                off: i * MIB,
                len: 1 << 20,
                buf: 0
            }),
            0
        );
    }
    // Requests that end past A's end fail, whether they start inside or outside it.
    assert_eq!(
        a.run(Op::Write {
            off: 8 * MIB - 512,
            len: 1024,
            buf: 0
        }),
        EIO
    );
    assert_eq!(
        a.run(Op::Read {
            off: 8 * MIB - 4096,
            len: 8192,
            buf: 0
        }),
        EIO
    );
    assert_eq!(
        a.run(Op::Write {
            off: 8 * MIB,
            len: 512,
            buf: 0
        }),
        EIO
    );
    assert_eq!(
        a.run(Op::Read {
            off: u64::MAX - 511,
            len: 512,
            buf: 0
        }),
        EIO
    );
    assert_eq!(
        a.run(Op::Discard {
            off: 8 * MIB - 512,
            len: 4096
        }),
        EIO
    );
    assert_eq!(a.run(Op::Flush), 0);
    // B is unchanged, seen from B and in the backing file itself.
    for i in 0..8u64 {
        assert_eq!(
            b.run(Op::Read {
                off: i * MIB,
                len: 1 << 20,
                buf: 0
            }),
            0
        );
        assert!(
            b.buf() == pattern(i * MIB, 1 << 20, 0xB).as_slice(),
            "B's MiB {i} changed"
        );
    }
    let file = d.file("disk.img");
    assert!(file[..8 << 20].iter().all(|&x| x == 0xA5), "A filled");
    for i in 0..8u64 {
        let at = (8 + i as usize) << 20;
        assert!(
            file[at..at + (1 << 20)] == pattern(i * MIB, 1 << 20, 0xB),
            "file: B's MiB {i}"
        );
    }
}

#[test]
fn daemon_keeps_serving_after_errors() {
    let d = two_volume_daemon();
    let mut c = Client::connect(&d.socket("b"), 1, 1 << 20);
    for _ in 0..100 {
        assert_eq!(
            c.run(Op::Read {
                off: 16 * MIB,
                len: 4096,
                buf: 0
            }),
            EIO
        );
    }
    assert!(c.round_trip(0, &[9; 4096]), "the volume still serves");
    assert!(d.wait_for_log("refused request"), "the refusal is logged");
    let log = d.log_text();
    let refusals = log.matches("refused request").count() + log.matches("request failed").count();
    assert!(
        (1..50).contains(&refusals),
        "warnings are rate-limited, got {refusals}:\n{log}"
    );
}

#[test]
fn multi_queue_volume_serves_all_queues_at_once() {
    let d = two_volume_daemon();
    let mut c = Client::connect(&d.socket("a"), 4, 4 << 20);
    let per_queue = (c.capacity / 4) as usize;
    let chunk = 64 << 10;
    // Each queue writes its own quarter of the disk, 16 requests in flight per queue.
    for round in 0..2 {
        for q in 0..4 {
            for k in 0..16 {
                let off = (q * per_queue + (round * 16 + k) * chunk) as u64;
                let buf = (q * 16 + k) * chunk;
                let data = pattern(off, chunk, q as u8);
                c.buf()[buf..buf + chunk].copy_from_slice(&data);
                c.submit(
                    q,
                    Op::Write {
                        off,
                        len: chunk,
                        buf,
                    },
                    k,
                );
            }
        }
        for q in 0..4 {
            assert!(
                c.wait(q, 16).iter().all(|&(_, ret)| ret == 0),
                "queue {q} write failed"
            );
        }
    }
    for q in 0..4 {
        for k in 0..32 {
            let off = (q * per_queue + k * chunk) as u64;
            c.submit(
                q,
                Op::Read {
                    off,
                    len: chunk,
                    buf: q * chunk,
                },
                k,
            );
            assert_eq!(c.wait(q, 1)[0].1, 0);
            assert!(
                c.buf()[q * chunk..(q + 1) * chunk] == pattern(off, chunk, q as u8),
                "queue {q} chunk {k}"
            );
        }
    }
}

#[test]
fn unaligned_guest_buffers_go_through_the_bounce_buffer() {
    let d = two_volume_daemon();
    let mut c = Client::connect(&d.socket("a"), 1, 1 << 20);
    let data = pattern(12288, 8192, 3);
    c.buf()[1..8193].copy_from_slice(&data);
    assert_eq!(
        c.run(Op::Write {
            off: 12288,
            len: 8192,
            buf: 1
        }),
        0
    );
    assert_eq!(
        c.run(Op::Read {
            off: 12288,
            len: 8192,
            buf: 16387
        }),
        0
    );
    assert!(c.buf()[16387..16387 + 8192] == data[..]);
    let file = d.file("disk.img");
    assert!(file[12288..12288 + 8192] == data[..]);
}

#[test]
fn data_survives_a_reconnect() {
    let d = two_volume_daemon();
    {
        let mut c = Client::connect(&d.socket("a"), 2, 1 << 20);
        c.buf()[..65536].copy_from_slice(&pattern(MIB, 65536, 1));
        assert_eq!(
            c.run(Op::Write {
                off: MIB,
                len: 65536,
                buf: 0
            }),
            0
        );
    }
    for round in 0..3u8 {
        let mut c = Client::connect(&d.socket("a"), 1, 1 << 20);
        assert_eq!(
            c.run(Op::Read {
                off: MIB,
                len: 65536,
                buf: 0
            }),
            0,
            "round {round}; daemon log:\n{}",
            d.log_text()
        );
        assert!(
            c.buf()[..65536] == pattern(MIB, 65536, 1)[..],
            "round {round}"
        );
    }
    // The other volume served throughout.
    let mut b = Client::connect(&d.socket("b"), 1, 4096);
    assert_eq!(
        b.run(Op::Read {
            off: 0,
            len: 4096,
            buf: 0
        }),
        0
    );
}

#[test]
fn read_only_volume_is_advertised_read_only_and_serves_reads() {
    let d = DaemonProcess::start(&config("", &volume("ro", 0, 4, "read_only = true")));
    let refused = Client::try_connect(&d.socket("ro"), 1, 4096)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        refused.as_deref(),
        Some("Device is read-only"),
        "RO is advertised"
    );
    let mut c = Client::connect_read_only(&d.socket("ro"), 4096);
    assert_eq!(
        c.run(Op::Read {
            off: 0,
            len: 4096,
            buf: 0
        }),
        0
    );
    // blkio refuses writes itself once it sees VIRTIO_BLK_F_RO; the daemon-side check is
    // covered by the raw-frontend tests.
    assert_ne!(
        c.run(Op::Write {
            off: 0,
            len: 4096,
            buf: 0
        }),
        0
    );
}

#[test]
fn null_device_serves_reads_and_writes() {
    let d = DaemonProcess::start(
        "[device]\nkind = \"null\"\ncreate_size = \"1GiB\"\n[[volume]]\nname = \"n\"\nsocket = \"n.sock\"\nsize = \"1GiB\"\n",
    );
    let mut c = Client::connect(&d.socket("n"), 1, 1 << 20);
    assert_eq!(c.capacity, 1 << 30);
    for i in 0..64u64 {
        c.submit(
            0,
            Op::Write {
                off: i * 8192,
                len: 4096,
                buf: 0,
            },
            0,
        );
        c.submit(
            0,
            Op::Read {
                off: i * 8192,
                len: 4096,
                buf: 4096,
            },
            1,
        );
    }
    assert!(c.wait(0, 128).iter().all(|&(_, r)| r == 0));
    assert_eq!(c.run(Op::Flush), 0);
    assert_eq!(
        c.run(Op::Read {
            off: 1 << 30,
            len: 512,
            buf: 0
        }),
        EIO,
        "range still checked"
    );
    assert!(
        !d.path("disk.img").exists(),
        "the null device creates no file"
    );
}

#[test]
fn sigterm_completes_in_flight_io_and_exits_zero() {
    let d = two_volume_daemon();
    let sock = d.socket("a");
    let mut c = Client::connect(&sock, 1, 4 << 20);
    for k in 0..32 {
        c.submit(
            0,
            Op::Write {
                off: k * 131072,
                len: 131072,
                buf: 0,
            },
            k as usize,
        );
    }
    // Make blkio hand the requests to the daemon, then stop it with requests in flight.
    let first = c.wait(0, 1);
    let (status, _dir) = d.stop();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(first[0].1, 0);
    assert!(!std::path::Path::new(&sock).exists(), "socket removed");
    let handover = sock + ".handover";
    assert!(
        !std::path::Path::new(&handover).exists(),
        "hand-over socket removed"
    );
}

/// A guest buffer across two memory regions (RAM around a hole, or hot-plugged memory)
/// is written and read back whole, with and without O_DIRECT: the data path maps it as
/// two iovecs (`backend::worker::inflight`, the fallback after the one-region lookup).
#[test]
fn a_buffer_across_two_memory_regions_is_written_and_read_whole() {
    use crate::raw_frontend::*;
    for device in ["direct = false", "direct = true"] {
        let d = DaemonProcess::start(&config(device, &volume("v", 0, 8, "")));
        let mut f = RawFrontend::connect(
            &d.socket("v"),
            Options {
                split_memory: true,
                ..Options::default()
            },
        );
        let data = pattern(8 * 512, 8192, 7);
        let buf = SPLIT_AT - 4096;
        f.write(buf, &data);
        let (hdr, st) = (f.put(&header(T_OUT, 8)), f.status_buf());
        let done = f.run(0, &[Desc::r(hdr, 16), Desc::r(buf, 8192), Desc::w(st, 1)]);
        assert_eq!(done.status, Some(S_OK as u8), "{device}: write");
        f.write(buf, &[0; 8192]);
        let (hdr, st) = (f.put(&header(T_IN, 8)), f.status_buf());
        let done = f.run(0, &[Desc::r(hdr, 16), Desc::w(buf, 8192), Desc::w(st, 1)]);
        assert_eq!(
            (done.status, done.used_len),
            (Some(S_OK as u8), 8193),
            "{device}: read"
        );
        assert!(f.read(buf, 8192) == data, "{device}: the straddling read");
        let (status, back) = f.read_sectors(0, 8, 8192);
        assert_eq!(status, S_OK as u8);
        assert!(back == data, "{device}: a read into one region");
    }
}
