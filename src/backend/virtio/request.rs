//! virtio-blk request parsing and validation, free of any vhost or virtqueue type.
//!
//! A request arrives as a descriptor chain: device-readable buffers followed by
//! device-writable ones. Like QEMU, we treat the chain as two byte streams rather than
//! insisting on one descriptor per part: the 16-byte header is the start of the readable
//! stream, the status byte is the last byte of the writable stream, and what lies between
//! is data. Everything a guest controls is checked here before any I/O is built: the layout,
//! the data direction for the request type, lengths, segment counts, and that the sector
//! range lies inside the volume (with overflow-safe arithmetic). The caller only maps the
//! returned guest segments to host memory.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_FLUSH,
    VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES,
    VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};

/// virtio-blk addresses the disk in 512-byte sectors whatever the block size.
pub const SECTOR_SIZE: u64 = 512;
pub const SECTOR_SHIFT: u32 = 9;
pub const HEADER_LEN: u64 = 16;
const DISCARD_SEGMENT_LEN: u64 = 16;

/// One guest buffer: a guest-physical address and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
}

/// The descriptor chain reduced to its two byte streams.
#[derive(Debug, Default)]
pub struct ChainLayout {
    pub readable: Vec<Segment>,
    pub writable: Vec<Segment>,
}

impl ChainLayout {
    /// Adds the next descriptor of the chain. Returns an error when a readable descriptor
    /// follows a writable one (the virtio spec orders readable first).
    pub fn push(&mut self, addr: u64, len: u32, write_only: bool) -> Result<(), RequestError> {
        if write_only {
            self.writable.push(Segment { addr, len });
        } else if !self.writable.is_empty() {
            return Err(RequestError::ReadableAfterWritable);
        } else {
            self.readable.push(Segment { addr, len });
        }
        Ok(())
    }
}

/// Limits the device advertises in its config space and enforces here.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Volume capacity in bytes.
    pub capacity: u64,
    pub read_only: bool,
    /// Maximum data segments in one request (`seg_max`).
    pub seg_max: u32,
    /// Maximum sectors in one discard or write-zeroes segment.
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Read,
    Write,
    Flush,
    GetId,
    Discard,
    WriteZeroes { unmap: bool },
}

/// A validated request: every range is inside the volume and every guest segment has the
/// right direction. Offsets are relative to the start of the volume.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: RequestKind,
    /// Byte offset within the volume (0 for flush and GET_ID).
    pub offset: u64,
    /// Bytes of disk touched (data length, or the discard/write-zeroes range).
    pub len: u64,
    /// Guest buffers holding the data (reads: filled; writes and GET_ID: see kind).
    pub data: Vec<Segment>,
    /// Guest address of the status byte.
    pub status_addr: u64,
}

/// Why a request was refused. [`RequestError::status`] says what the guest is told.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("a device-readable descriptor follows a device-writable one")]
    ReadableAfterWritable,
    #[error("descriptor chain is truncated or loops")]
    BrokenChain,
    #[error("no writable byte for the status")]
    NoStatus,
    #[error("header shorter than 16 bytes")]
    ShortHeader,
    #[error("cannot read guest memory at {0:#x}")]
    BadGuestAddress(u64),
    #[error("request type {0} is not supported")]
    Unsupported(u32),
    #[error("{kind:?} request has {readable} readable and {writable} writable data bytes")]
    WrongDirection {
        kind: RequestKind,
        readable: u64,
        writable: u64,
    },
    #[error("data length {0} is not a non-zero multiple of 512")]
    BadLength(u64),
    #[error("{0} data segments exceed seg_max {1}")]
    TooManySegments(usize, u32),
    #[error("sector {sector} + {len} bytes is outside the volume ({capacity} bytes)")]
    OutOfRange {
        sector: u64,
        len: u64,
        capacity: u64,
    },
    #[error("write to a read-only volume")]
    ReadOnly,
    #[error(
        "discard/write-zeroes payload of {0} bytes (exactly one 16-byte segment is supported)"
    )]
    BadSegmentPayload(u64),
    #[error("discard/write-zeroes of {0} sectors exceeds the limit of {1}")]
    SegmentTooLarge(u32, u32),
    #[error("discard/write-zeroes flags {0:#x} are not supported")]
    UnsupportedFlags(u32),
}

impl RequestError {
    /// The virtio status byte for this error, or `None` when there is nowhere to put it.
    pub fn status(&self) -> Option<u8> {
        match self {
            RequestError::NoStatus
            | RequestError::ReadableAfterWritable
            | RequestError::BrokenChain => None,
            RequestError::Unsupported(_) | RequestError::UnsupportedFlags(_) => {
                Some(VIRTIO_BLK_S_UNSUPP as u8)
            }
            _ => Some(VIRTIO_BLK_S_IOERR as u8),
        }
    }
}

/// Appends to `out` the segments covering bytes `start..start + len` of the stream
/// `segments`.
fn byte_range(segments: &[Segment], mut start: u64, mut len: u64, out: &mut Vec<Segment>) {
    for s in segments {
        let seg_len = u64::from(s.len);
        if start >= seg_len {
            start -= seg_len;
            continue;
        }
        if len == 0 {
            break;
        }
        let n = (seg_len - start).min(len);
        out.push(Segment {
            addr: s.addr + start,
            len: n as u32,
        });
        len -= n;
        start = 0;
    }
}

fn total(segments: &[Segment]) -> u64 {
    segments.iter().map(|s| u64::from(s.len)).sum()
}

/// Reads `buf.len()` bytes from offset `skip` of the stream `segments` through `read`.
fn gather(
    segments: &[Segment],
    mut skip: u64,
    buf: &mut [u8],
    read: &mut impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<(), RequestError> {
    let mut done = 0;
    for s in segments {
        if done == buf.len() {
            break;
        }
        let seg_len = u64::from(s.len);
        if skip >= seg_len {
            skip -= seg_len;
            continue;
        }
        // Below buf.len(), so it fits in usize.
        let n = (seg_len - skip).min((buf.len() - done) as u64) as usize;
        let addr = s.addr + skip;
        if !read(addr, &mut buf[done..done + n]) {
            return Err(RequestError::BadGuestAddress(addr));
        }
        done += n;
        skip = 0;
    }
    if done < buf.len() {
        return Err(RequestError::ShortHeader);
    }
    Ok(())
}

/// Finds the status byte, the last byte of the writable stream: its address and the
/// number of writable bytes before it. Also usable on a chain that fails later
/// validation, so the guest still learns the error.
pub fn locate_status(layout: &ChainLayout) -> Result<(u64, u64), RequestError> {
    let last = layout
        .writable
        .iter()
        .rev()
        .find(|s| s.len > 0)
        .ok_or(RequestError::NoStatus)?;
    // A status buffer reaching past the end of the address space has no status byte.
    let status_addr = last
        .addr
        .checked_add(u64::from(last.len) - 1)
        .ok_or(RequestError::NoStatus)?;
    Ok((status_addr, total(&layout.writable) - 1))
}

/// Parses and validates one request. `read` copies guest memory (returns false when the
/// address is not guest RAM).
pub fn parse(
    layout: &ChainLayout,
    limits: &Limits,
    read: impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<Request, RequestError> {
    parse_reusing(layout, limits, Vec::new(), read)
}

/// [`parse`], with the request's data segments put in `data` (emptied first): a caller
/// that recycles the vectors of finished requests spares an allocation per request.
pub fn parse_reusing(
    layout: &ChainLayout,
    limits: &Limits,
    mut data: Vec<Segment>,
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<Request, RequestError> {
    data.clear();
    let (status_addr, writable_len) = locate_status(layout)?;
    // Any other buffer wrapping around the address space is not guest RAM; refusing it
    // here keeps every offset computation below overflow-free.
    if let Some(s) = layout
        .readable
        .iter()
        .chain(&layout.writable)
        .find(|s| s.addr.checked_add(u64::from(s.len)).is_none())
    {
        return Err(RequestError::BadGuestAddress(s.addr));
    }
    let mut header = [0u8; HEADER_LEN as usize];
    gather(&layout.readable, 0, &mut header, &mut read)?;
    let request_type = u32::from_le_bytes(header[0..4].try_into().unwrap());
    let sector = u64::from_le_bytes(header[8..16].try_into().unwrap());
    let readable_len = total(&layout.readable) - HEADER_LEN;
    // The data buffers, built only for the request types that have data.
    let readable_data = |mut data| {
        byte_range(&layout.readable, HEADER_LEN, readable_len, &mut data);
        data
    };
    let writable_data = |mut data| {
        byte_range(&layout.writable, 0, writable_len, &mut data);
        data
    };

    let kind = match request_type {
        VIRTIO_BLK_T_IN => RequestKind::Read,
        VIRTIO_BLK_T_OUT => RequestKind::Write,
        VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
        VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
        VIRTIO_BLK_T_DISCARD => RequestKind::Discard,
        VIRTIO_BLK_T_WRITE_ZEROES => RequestKind::WriteZeroes { unmap: false },
        other => return Err(RequestError::Unsupported(other)),
    };
    let wrong_direction = || RequestError::WrongDirection {
        kind,
        readable: readable_len,
        writable: writable_len,
    };

    let request = |kind, offset, len, data| Request {
        kind,
        offset,
        len,
        data,
        status_addr,
    };
    match kind {
        RequestKind::Read | RequestKind::Write => {
            let (data, other_len) = if kind == RequestKind::Read {
                (writable_data(data), readable_len)
            } else {
                (readable_data(data), writable_len)
            };
            if other_len != 0 {
                return Err(wrong_direction());
            }
            let len = total(&data);
            if len == 0 || len % SECTOR_SIZE != 0 {
                return Err(RequestError::BadLength(len));
            }
            if data.len() > limits.seg_max as usize {
                return Err(RequestError::TooManySegments(data.len(), limits.seg_max));
            }
            let offset = check_range(sector, len, limits.capacity)?;
            if kind == RequestKind::Write && limits.read_only {
                return Err(RequestError::ReadOnly);
            }
            Ok(request(kind, offset, len, data))
        }
        RequestKind::Flush => {
            if readable_len != 0 || writable_len != 0 {
                return Err(wrong_direction());
            }
            Ok(request(kind, 0, 0, data))
        }
        RequestKind::GetId => {
            if readable_len != 0 || writable_len == 0 {
                return Err(wrong_direction());
            }
            Ok(request(kind, 0, 0, writable_data(data)))
        }
        RequestKind::Discard | RequestKind::WriteZeroes { .. } => {
            if writable_len != 0 {
                return Err(wrong_direction());
            }
            let (kind, offset, len) =
                parse_range_segment(layout, limits, kind, readable_len, &mut read)?;
            Ok(request(kind, offset, len, data))
        }
    }
}

/// A discard or write-zeroes request's one segment (sector, count, flags), checked against
/// `limits`: the kind with its unmap flag, and the byte range.
fn parse_range_segment(
    layout: &ChainLayout,
    limits: &Limits,
    kind: RequestKind,
    readable_len: u64,
    read: &mut impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<(RequestKind, u64, u64), RequestError> {
    if readable_len != DISCARD_SEGMENT_LEN {
        return Err(RequestError::BadSegmentPayload(readable_len));
    }
    let mut seg = [0u8; DISCARD_SEGMENT_LEN as usize];
    gather(&layout.readable, HEADER_LEN, &mut seg, read)?;
    let seg_sector = u64::from_le_bytes(seg[0..8].try_into().unwrap());
    let num_sectors = u32::from_le_bytes(seg[8..12].try_into().unwrap());
    let flags = u32::from_le_bytes(seg[12..16].try_into().unwrap());
    let (kind, limit) = if kind == RequestKind::Discard {
        // The spec: discard with the unmap flag (or any flag) is UNSUPP.
        if flags != 0 {
            return Err(RequestError::UnsupportedFlags(flags));
        }
        (kind, limits.max_discard_sectors)
    } else {
        if flags & !VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0 {
            return Err(RequestError::UnsupportedFlags(flags));
        }
        let unmap = flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0;
        (
            RequestKind::WriteZeroes { unmap },
            limits.max_write_zeroes_sectors,
        )
    };
    if num_sectors == 0 {
        return Err(RequestError::BadLength(0));
    }
    if num_sectors > limit {
        return Err(RequestError::SegmentTooLarge(num_sectors, limit));
    }
    if limits.read_only {
        return Err(RequestError::ReadOnly);
    }
    let len = u64::from(num_sectors) << SECTOR_SHIFT;
    let offset = check_range(seg_sector, len, limits.capacity)?;
    Ok((kind, offset, len))
}

/// Converts a sector and a length to a byte offset, refusing anything that overflows or
/// ends past the volume.
fn check_range(sector: u64, len: u64, capacity: u64) -> Result<u64, RequestError> {
    let out_of_range = RequestError::OutOfRange {
        sector,
        len,
        capacity,
    };
    let offset = sector
        .checked_mul(SECTOR_SIZE)
        .ok_or(out_of_range.clone())?;
    let end = offset.checked_add(len).ok_or(out_of_range.clone())?;
    if end > capacity {
        return Err(out_of_range);
    }
    Ok(offset)
}

#[cfg(test)]
mod tests;
