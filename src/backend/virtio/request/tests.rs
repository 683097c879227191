use super::*;

/// A flat fake guest memory of 64 KiB starting at address 0.
struct Mem(Vec<u8>);

impl Mem {
    fn new() -> Self {
        Mem(vec![0; 64 << 10])
    }
    fn put(&mut self, addr: u64, bytes: &[u8]) {
        self.0[addr as usize..addr as usize + bytes.len()].copy_from_slice(bytes);
    }
    fn header(&mut self, addr: u64, kind: u32, sector: u64) {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        self.put(addr, &h);
    }
    fn read(&self) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
        move |addr, buf| {
            let end = addr as usize + buf.len();
            if end > self.0.len() {
                return false;
            }
            buf.copy_from_slice(&self.0[addr as usize..end]);
            true
        }
    }
}

const LIMITS: Limits = Limits {
    capacity: 1 << 20,
    read_only: false,
    seg_max: 4,
    max_discard_sectors: 1024,
    max_write_zeroes_sectors: 1024,
};

fn layout(descs: &[(u64, u32, bool)]) -> ChainLayout {
    let mut l = ChainLayout::default();
    for &(addr, len, w) in descs {
        l.push(addr, len, w).unwrap();
    }
    l
}

#[test]
fn read_with_separate_header_data_status() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_IN, 8);
    let l = layout(&[(0, 16, false), (4096, 4096, true), (100, 1, true)]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(r.kind, RequestKind::Read);
    assert_eq!(r.offset, 4096);
    assert_eq!(r.len, 4096);
    assert_eq!(
        r.data,
        vec![Segment {
            addr: 4096,
            len: 4096
        }]
    );
    assert_eq!(r.status_addr, 100);
}

#[test]
fn header_and_status_may_share_descriptors_with_data() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_OUT, 1);
    // header + 512 data bytes in one readable descriptor; status in the data's last byte.
    let l = layout(&[(0, 16 + 512, false), (8192, 1, true)]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(r.kind, RequestKind::Write);
    assert_eq!(r.data, vec![Segment { addr: 16, len: 512 }]);
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_IN, 0);
    let l = layout(&[(0, 16, false), (4096, 513, true)]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(
        r.data,
        vec![Segment {
            addr: 4096,
            len: 512
        }]
    );
    assert_eq!(r.status_addr, 4096 + 512);
}

#[test]
fn a_header_and_a_segment_split_across_descriptors_are_gathered() {
    let mut m = Mem::new();
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
    h[8..16].copy_from_slice(&3u64.to_le_bytes());
    // 5 header bytes, an empty descriptor, the other 11 elsewhere.
    m.put(0x1000, &h[..5]);
    m.put(0x2000, &h[5..]);
    let l = layout(&[
        (0x1000, 5, false),
        (0x3000, 0, false),
        (0x2000, 11, false),
        (0x4000, 512, true),
        (0x5000, 1, true),
    ]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!((r.kind, r.offset), (RequestKind::Read, 3 * 512));
    assert_eq!(
        r.data,
        vec![Segment {
            addr: 0x4000,
            len: 512
        }]
    );
    assert_eq!(r.status_addr, 0x5000);

    // A write-zeroes segment that starts inside the header's second descriptor.
    let mut m = Mem::new();
    m.header(0x100, VIRTIO_BLK_T_WRITE_ZEROES, 0);
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(&m.0[0x100..0x110]);
    discard_seg(&mut m, 0x200, 8, 16, 0);
    bytes[16..].copy_from_slice(&m.0[0x200..0x210]);
    m.put(0x1000, &bytes[..10]);
    m.put(0x2000, &bytes[10..]);
    let l = layout(&[(0x1000, 10, false), (0x2000, 22, false), (100, 1, true)]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(r.kind, RequestKind::WriteZeroes { unmap: false });
    assert_eq!((r.offset, r.len), (4096, 8192));
}

#[test]
fn a_reused_vector_holds_only_the_new_requests_segments() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_IN, 0);
    let l = layout(&[
        (0, 16, false),
        (4096, 512, true),
        (8192, 512, true),
        (100, 1, true),
    ]);
    let stale = vec![Segment { addr: 1, len: 1 }; 8];
    let r = parse_reusing(&l, &LIMITS, stale, m.read()).unwrap();
    assert_eq!(
        r.data,
        vec![
            Segment {
                addr: 4096,
                len: 512
            },
            Segment {
                addr: 8192,
                len: 512
            }
        ]
    );
    m.header(0, VIRTIO_BLK_T_FLUSH, 0);
    let flush = layout(&[(0, 16, false), (100, 1, true)]);
    let r = parse_reusing(&flush, &LIMITS, r.data, m.read()).unwrap();
    assert_eq!((r.kind, r.data), (RequestKind::Flush, vec![]));
}

#[test]
fn out_of_range_and_overflowing_sectors_are_ioerr() {
    let mut m = Mem::new();
    let l = layout(&[(0, 16, false), (4096, 4096, true), (100, 1, true)]);
    for sector in [2048 - 7, 2048, u64::MAX / 512, u64::MAX] {
        m.header(0, VIRTIO_BLK_T_IN, sector);
        let e = parse(&l, &LIMITS, m.read()).unwrap_err();
        assert!(
            matches!(e, RequestError::OutOfRange { .. }),
            "{sector}: {e}"
        );
        assert_eq!(e.status(), Some(VIRTIO_BLK_S_IOERR as u8));
    }
    m.header(0, VIRTIO_BLK_T_IN, 2048 - 8);
    assert!(parse(&l, &LIMITS, m.read()).is_ok(), "last 4 KiB is inside");
}

#[test]
fn bad_lengths_directions_and_segment_counts_are_ioerr() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_IN, 0);
    let odd = layout(&[(0, 16, false), (4096, 100, true), (100, 1, true)]);
    assert_eq!(
        parse(&odd, &LIMITS, m.read()),
        Err(RequestError::BadLength(100))
    );
    // A read whose data is device-readable.
    let wrong = layout(&[(0, 16, false), (4096, 512, false), (100, 1, true)]);
    let e = parse(&wrong, &LIMITS, m.read()).unwrap_err();
    assert!(matches!(e, RequestError::WrongDirection { .. }));
    assert_eq!(e.status(), Some(VIRTIO_BLK_S_IOERR as u8));
    let mut l = layout(&[(0, 16, false)]);
    for i in 0..5 {
        l.push(4096 + i * 512, 512, true).unwrap();
    }
    l.push(100, 1, true).unwrap();
    assert_eq!(
        parse(&l, &LIMITS, m.read()),
        Err(RequestError::TooManySegments(5, 4))
    );
}

#[test]
fn writes_to_read_only_volumes_are_ioerr() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_OUT, 0);
    let l = layout(&[(0, 16, false), (4096, 512, false), (100, 1, true)]);
    let ro = Limits {
        read_only: true,
        ..LIMITS
    };
    let e = parse(&l, &ro, m.read()).unwrap_err();
    assert_eq!(e, RequestError::ReadOnly);
    assert_eq!(e.status(), Some(VIRTIO_BLK_S_IOERR as u8));
}

#[test]
fn unknown_types_are_unsupp() {
    let mut m = Mem::new();
    m.header(0, 99, 0);
    let l = layout(&[(0, 16, false), (100, 1, true)]);
    let e = parse(&l, &LIMITS, m.read()).unwrap_err();
    assert_eq!(e.status(), Some(VIRTIO_BLK_S_UNSUPP as u8));
}

#[test]
fn missing_status_or_header_are_detected() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_FLUSH, 0);
    let no_status = layout(&[(0, 16, false)]);
    let e = parse(&no_status, &LIMITS, m.read()).unwrap_err();
    assert_eq!(e, RequestError::NoStatus);
    assert_eq!(e.status(), None);
    let short = layout(&[(0, 8, false), (100, 1, true)]);
    assert_eq!(
        parse(&short, &LIMITS, m.read()),
        Err(RequestError::ShortHeader)
    );
    let unmapped = layout(&[(1 << 40, 16, false), (100, 1, true)]);
    assert!(matches!(
        parse(&unmapped, &LIMITS, m.read()),
        Err(RequestError::BadGuestAddress(_))
    ));
    let mut l = ChainLayout::default();
    l.push(100, 1, true).unwrap();
    assert_eq!(
        l.push(0, 16, false),
        Err(RequestError::ReadableAfterWritable)
    );
}

fn discard_seg(m: &mut Mem, addr: u64, sector: u64, n: u32, flags: u32) {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&sector.to_le_bytes());
    s[8..12].copy_from_slice(&n.to_le_bytes());
    s[12..16].copy_from_slice(&flags.to_le_bytes());
    m.put(addr, &s);
}

#[test]
fn discard_and_write_zeroes_segments_are_validated() {
    let mut m = Mem::new();
    let l = layout(&[(0, 16, false), (512, 16, false), (100, 1, true)]);
    m.header(0, VIRTIO_BLK_T_WRITE_ZEROES, 0);
    discard_seg(&mut m, 512, 8, 16, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(r.kind, RequestKind::WriteZeroes { unmap: true });
    assert_eq!((r.offset, r.len), (4096, 8192));

    m.header(0, VIRTIO_BLK_T_DISCARD, 0);
    discard_seg(&mut m, 512, 0, 16, 1);
    let e = parse(&l, &LIMITS, m.read()).unwrap_err();
    assert_eq!(
        e.status(),
        Some(VIRTIO_BLK_S_UNSUPP as u8),
        "discard with unmap flag"
    );

    discard_seg(&mut m, 512, 0, u32::MAX, 0);
    assert!(matches!(
        parse(&l, &LIMITS, m.read()),
        Err(RequestError::SegmentTooLarge(..))
    ));
    discard_seg(&mut m, 512, 2040, 16, 0);
    assert!(matches!(
        parse(&l, &LIMITS, m.read()),
        Err(RequestError::OutOfRange { .. })
    ));
    discard_seg(&mut m, 512, u64::MAX, 16, 0);
    assert!(matches!(
        parse(&l, &LIMITS, m.read()),
        Err(RequestError::OutOfRange { .. })
    ));

    let two = layout(&[(0, 16, false), (512, 32, false), (100, 1, true)]);
    assert_eq!(
        parse(&two, &LIMITS, m.read()),
        Err(RequestError::BadSegmentPayload(32))
    );
}

#[test]
fn get_id_and_flush_layouts() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_GET_ID, 0);
    let l = layout(&[(0, 16, false), (4096, 20, true), (100, 1, true)]);
    let r = parse(&l, &LIMITS, m.read()).unwrap();
    assert_eq!(r.kind, RequestKind::GetId);
    assert_eq!(
        r.data,
        vec![Segment {
            addr: 4096,
            len: 20
        }]
    );
    m.header(0, VIRTIO_BLK_T_FLUSH, 0);
    let l = layout(&[(0, 16, false), (100, 1, true)]);
    assert_eq!(
        parse(&l, &LIMITS, m.read()).unwrap().kind,
        RequestKind::Flush
    );
}

#[test]
fn buffers_wrapping_around_the_address_space_are_refused() {
    let mut m = Mem::new();
    m.header(0, VIRTIO_BLK_T_IN, 0);
    // A wrapping status buffer: there is no status byte to write.
    let l = layout(&[(0, 16, false), (4096, 512, true), (u64::MAX, 3, true)]);
    assert_eq!(parse(&l, &LIMITS, m.read()), Err(RequestError::NoStatus));
    // A wrapping data buffer: IOERR in a valid status byte.
    let l = layout(&[(0, 16, false), (u64::MAX - 4, 512, true), (100, 1, true)]);
    let e = parse(&l, &LIMITS, m.read()).unwrap_err();
    assert_eq!(e, RequestError::BadGuestAddress(u64::MAX - 4));
    assert_eq!(e.status(), Some(VIRTIO_BLK_S_IOERR as u8));
    // Ending exactly at the top of the address space is fine for the parser.
    let l = layout(&[(0, 16, false), (u64::MAX - 512, 512, true), (100, 1, true)]);
    assert!(parse(&l, &LIMITS, m.read()).is_ok());
}
