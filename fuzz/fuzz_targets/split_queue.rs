//! The ring path: a split virtqueue whose descriptor table, avail ring and buffers are all
//! arbitrary guest memory, popped as the worker pops it through
//! `backend::virtio::split_ring::SplitRing` (at most the queue size of chains outstanding), each
//! chain parsed by `backend::virtio::chain::parse_chain` and returned to the used ring.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use vhost_iocost::backend::virtio::chain::parse_chain;
use vhost_iocost::backend::virtio::request::{ChainLayout, Limits};
use vhost_iocost::backend::virtio::split_ring::SplitRing;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap};

/// Guest memory: the first bytes of the input, the rest zero.
const MEMORY: usize = 64 << 10;
const DESC_TABLE: u64 = 0;
const AVAIL_RING: u64 = 0x1000;
const USED_RING: u64 = 0x2000;
const SPLIT: u64 = AVAIL_RING + 2;

fuzz_target!(|data: &[u8]| {
    let Some((&control, memory)) = data.split_first() else {
        return;
    };
    // Queue sizes 1..=256, powers of two as a split queue needs.
    let size = 1u16 << (control & 7);
    // Guest memory in one region, or in two adjacent ones split inside the avail ring (the
    // rings are then read access by access where they straddle the split).
    let mem: GuestMemoryMmap<()> = if control & 32 == 0 {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEMORY)]).unwrap()
    } else {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), SPLIT as usize),
            (GuestAddress(SPLIT), MEMORY - SPLIT as usize),
        ])
        .unwrap()
    };
    let n = memory.len().min(MEMORY);
    vm_memory::Bytes::write_slice(&mem, &memory[..n], GuestAddress(0)).unwrap();

    let mut queue = Queue::new(size).unwrap();
    queue.set_size(size);
    queue.set_desc_table_address(Some(DESC_TABLE as u32), Some(0));
    queue.set_avail_ring_address(Some(AVAIL_RING as u32), Some(0));
    queue.set_used_ring_address(Some(USED_RING as u32), Some(0));
    queue.set_event_idx(control & 8 != 0);
    queue.set_ready(true);
    assert!(queue.is_valid(&mem));

    let limits = Limits {
        capacity: 1 << 20,
        read_only: control & 16 != 0,
        seg_max: u32::from(size).saturating_sub(2).max(1),
        max_discard_sectors: 1024,
        max_write_zeroes_sectors: 1024,
    };
    let mut layout = ChainLayout::default();
    // The last request's data vector, reused uncleared as the worker reuses them.
    let mut spare = Vec::new();
    let ring = SplitRing::map(&mem, &queue).expect("the rings are in guest memory");
    let Some(published) = ring.published(0) else {
        return;
    };
    // At most the ring's size of chains, as the worker holds at most that many.
    let mut used = 0u16;
    for position in 0..published {
        // The head comes from the avail ring unchecked: it may lie outside the table.
        let head = ring
            .avail_head(position)
            .expect("the avail ring is in guest memory");
        if let Ok(req) = parse_chain(
            &ring,
            head,
            &mut layout,
            &limits,
            std::mem::take(&mut spare),
        ) {
            common::check_accepted(&req, &limits);
            spare = req.data;
        }
        // Returned at once, as the worker returns a refused chain (a head outside the
        // table is refused; the worker logs that).
        if ring.put_used(used, head, 0).is_ok() {
            used += 1;
        }
    }
    ring.publish_used_up_to(used)
        .expect("the used ring is in guest memory");
    let _ = ring.needs_notification(0, used);
});
