//! One popped descriptor chain to a validated request: where virtio-queue's chain type
//! meets the transport-free parser of [`super::request`].
//!
//! The chain walk itself (descriptor table bounds, loops, indirect tables) is
//! virtio-queue's; this adds the two rules it leaves to the device: readable descriptors
//! come first, and a chain must end where the table says it ends.

use super::request::{self, ChainLayout, Limits, Request, RequestError, Segment};
use std::ops::Deref;
use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

/// Walks `chain` into `layout` (cleared first, reused to spare an allocation per request)
/// and parses it, with the request's data segments in `data` (see
/// [`request::parse_reusing`]). On error the layout holds what was walked, so the caller
/// can still find the status byte.
pub fn parse_chain<M>(
    chain: DescriptorChain<M>,
    layout: &mut ChainLayout,
    limits: &Limits,
    data: Vec<Segment>,
) -> Result<Request, RequestError>
where
    M: Deref + Clone,
    M::Target: GuestMemoryBackend,
{
    layout.readable.clear();
    layout.writable.clear();
    let mem = chain.memory();
    let mut ends_cleanly = true;
    for desc in chain.clone() {
        ends_cleanly = !desc.has_next();
        layout.push(desc.addr().0, desc.len(), desc.is_write_only())?;
    }
    // virtio-queue stops a walk that loops or leaves the table without an error; the
    // last descriptor it yielded then still points onwards.
    if !ends_cleanly {
        return Err(RequestError::BrokenChain);
    }
    request::parse_reusing(layout, limits, data, |addr, buf| {
        let addr = GuestAddress(addr);
        // A header (or discard segment) almost always lies in one region: one lookup,
        // one copy.
        match mem.get_slice(addr, buf.len()) {
            Ok(slice) => slice.copy_to(buf) == buf.len(),
            Err(_) => mem.read_slice(buf, addr).is_ok(),
        }
    })
}
