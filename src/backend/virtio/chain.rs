//! One popped descriptor chain to a validated request: where the split ring's chain walk
//! ([`crate::backend::virtio::split_ring`]) meets the transport-free parser of [`crate::backend::virtio::request`].

use crate::backend::virtio::request::{self, ChainLayout, Limits, Request, RequestError, Segment};
use crate::backend::virtio::split_ring::SplitRing;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, VolatileMemory};

const HEADER_LEN: usize = request::HEADER_LEN as usize;

/// Walks the chain at `head` of `ring` into `layout` (reused to spare an allocation per
/// request) and parses it, with the request's data segments in `data` (see
/// [`request::parse_reusing`]). On error the layout holds what was walked, so the caller
/// can still find the status byte.
pub fn parse_chain<M: GuestMemoryBackend>(
    ring: &SplitRing<'_, M>,
    head: u16,
    layout: &mut ChainLayout,
    limits: &Limits,
    data: Vec<Segment>,
) -> Result<Request, RequestError> {
    ring.walk(head, layout)?;
    let mem = ring.memory();
    request::parse_reusing(layout, limits, data, |addr, buf| {
        let addr = GuestAddress(addr);
        // A header (or discard segment) almost always lies in one region: one lookup,
        // and a whole header in one 16-byte copy rather than vm-memory's general one.
        match mem.get_slice(addr, buf.len()) {
            Ok(slice) => match <&mut [u8; HEADER_LEN]>::try_from(&mut *buf) {
                Ok(header) => slice
                    .get_ref::<[u8; HEADER_LEN]>(0)
                    .map(|r| *header = r.load())
                    .is_ok(),
                Err(_) => slice.copy_to(buf) == buf.len(),
            },
            Err(_) => mem.read_slice(buf, addr).is_ok(),
        }
    })
}
