use super::*;
use crate::backend::virtio::request::Segment;
use virtio_queue::QueueT;
use vm_memory::GuestMemoryMmap;

const SIZE: u16 = 8;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;
const NEXT: u16 = VRING_DESC_F_NEXT as u16;
const WRITE: u16 = VRING_DESC_F_WRITE as u16;
const INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;

type Memory = GuestMemoryMmap<()>;

/// Guest memory of 64 KiB in one region, or in two regions split at `split`.
fn memory(split: Option<u64>) -> Memory {
    let ranges = match split {
        None => vec![(GuestAddress(0), 0x10000)],
        Some(at) => vec![
            (GuestAddress(0), at as usize),
            (GuestAddress(at), 0x10000 - at as usize),
        ],
    };
    GuestMemoryMmap::from_ranges(&ranges).unwrap()
}

fn queue(mem: &Memory, desc: u64, avail: u64, used: u64, event_idx: bool) -> Queue {
    let mut q = Queue::new(SIZE).unwrap();
    q.set_size(SIZE);
    q.set_desc_table_address(Some(desc as u32), Some(0));
    q.set_avail_ring_address(Some(avail as u32), Some(0));
    q.set_used_ring_address(Some(used as u32), Some(0));
    q.set_event_idx(event_idx);
    q.set_ready(true);
    assert!(q.is_valid(mem));
    q
}

fn put_desc(mem: &Memory, table: u64, index: u16, desc: (u64, u32, u16, u16)) {
    let (addr, len, flags, next) = desc;
    mem.write_obj(
        Descriptor::new(addr, len, flags, next),
        GuestAddress(table + u64::from(index) * 16),
    )
    .unwrap();
}

/// Publishes `heads` on the avail ring at `avail`.
fn publish(mem: &Memory, avail: u64, heads: &[u16]) {
    for (i, &head) in heads.iter().enumerate() {
        mem.write_obj(head, GuestAddress(avail + 4 + 2 * i as u64))
            .unwrap();
    }
    mem.write_obj(heads.len() as u16, GuestAddress(avail + 2))
        .unwrap();
}

fn walked(ring: &SplitRing<'_, Memory>, head: u16) -> Result<ChainLayout, RequestError> {
    let mut layout = ChainLayout::default();
    ring.walk(head, &mut layout).map(|()| layout)
}

fn seg(addr: u64, len: u32) -> Segment {
    Segment { addr, len }
}

#[test]
fn a_chain_is_walked_into_its_readable_and_writable_buffers() {
    let mem = memory(None);
    let q = queue(&mem, DESC, AVAIL, USED, false);
    put_desc(&mem, DESC, 3, (0x5000, 16, NEXT, 5));
    put_desc(&mem, DESC, 5, (0x6000, 4096, NEXT | WRITE, 1));
    put_desc(&mem, DESC, 1, (0x7000, 1, WRITE, 0));
    publish(&mem, AVAIL, &[3]);
    let ring = SplitRing::map(&mem, &q).unwrap();
    assert_eq!(ring.published(0), Some(1));
    assert_eq!(ring.avail_head(0), Some(3));
    let layout = walked(&ring, 3).unwrap();
    assert_eq!(layout.readable, [seg(0x5000, 16)]);
    assert_eq!(layout.writable, [seg(0x6000, 4096), seg(0x7000, 1)]);
}

#[test]
fn an_indirect_table_is_walked_once_and_cannot_nest() {
    let mem = memory(None);
    let q = queue(&mem, DESC, AVAIL, USED, false);
    let table = 0x8000;
    put_desc(&mem, DESC, 0, (table, 3 * 16, INDIRECT, 0));
    put_desc(&mem, table, 0, (0x5000, 16, NEXT, 2));
    put_desc(&mem, table, 2, (0x6000, 512, NEXT | WRITE, 1));
    put_desc(&mem, table, 1, (0x7000, 1, WRITE, 0));
    let ring = SplitRing::map(&mem, &q).unwrap();
    let layout = walked(&ring, 0).unwrap();
    assert_eq!(layout.readable, [seg(0x5000, 16)]);
    assert_eq!(layout.writable, [seg(0x6000, 512), seg(0x7000, 1)]);

    // An indirect descriptor inside an indirect table.
    put_desc(&mem, table, 1, (table, 16, INDIRECT, 0));
    assert_eq!(walked(&ring, 0).unwrap_err(), RequestError::BrokenChain);
    // Tables that are empty, not a whole number of descriptors, or outside memory.
    for (addr, len) in [(table, 0), (table, 24), (0xfff0, 32)] {
        put_desc(&mem, DESC, 0, (addr, len, INDIRECT, 0));
        assert_eq!(
            walked(&ring, 0).unwrap_err(),
            RequestError::BrokenChain,
            "{addr:#x} {len}"
        );
    }
}

#[test]
fn loops_indices_outside_the_table_and_chains_over_4_gib_are_broken() {
    let mem = memory(None);
    let q = queue(&mem, DESC, AVAIL, USED, false);
    let ring = SplitRing::map(&mem, &q).unwrap();
    // 0 -> 1 -> 0 ...: ends after the table's size of descriptors, with what was walked.
    put_desc(&mem, DESC, 0, (0x5000, 16, NEXT, 1));
    put_desc(&mem, DESC, 1, (0x6000, 16, NEXT, 0));
    let mut layout = ChainLayout::default();
    assert_eq!(ring.walk(0, &mut layout), Err(RequestError::BrokenChain));
    assert_eq!(layout.readable.len(), usize::from(SIZE));
    // A next index, or a head, outside the table.
    put_desc(&mem, DESC, 1, (0x6000, 16, NEXT, SIZE));
    assert_eq!(walked(&ring, 0).unwrap_err(), RequestError::BrokenChain);
    assert_eq!(walked(&ring, SIZE).unwrap_err(), RequestError::BrokenChain);
    // Two descriptors of 2 GiB + 1 byte each.
    put_desc(&mem, DESC, 0, (0x5000, 0x8000_0001, NEXT | WRITE, 1));
    put_desc(&mem, DESC, 1, (0x6000, 0x8000_0001, WRITE, 0));
    assert_eq!(walked(&ring, 0).unwrap_err(), RequestError::BrokenChain);
}

#[test]
fn used_entries_are_written_at_their_position_and_published_by_the_index() {
    let mem = memory(None);
    let q = queue(&mem, DESC, AVAIL, USED, false);
    let ring = SplitRing::map(&mem, &q).unwrap();
    // Positions run free; the slot is the position modulo the size.
    ring.put_used(SIZE + 1, 6, 513).unwrap();
    assert_eq!(
        ring.put_used(0, SIZE, 0),
        Err(UsedError::HeadOutOfRange(SIZE))
    );
    let read = |offset: u64| mem.read_obj::<u32>(GuestAddress(USED + offset)).unwrap();
    assert_eq!((read(4 + 8), read(4 + 8 + 4)), (6, 513));
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 0);
    ring.publish_used_up_to(SIZE + 2).unwrap();
    assert_eq!(
        mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(),
        SIZE + 2
    );
}

#[test]
fn an_avail_index_beyond_the_ring_publishes_nothing() {
    let mem = memory(None);
    let q = queue(&mem, DESC, AVAIL, USED, false);
    let ring = SplitRing::map(&mem, &q).unwrap();
    mem.write_obj(SIZE + 1, GuestAddress(AVAIL + 2)).unwrap();
    assert_eq!(ring.published(0), None);
    assert_eq!(ring.published(1), Some(SIZE));
    // Free-running indices wrap.
    mem.write_obj(2u16, GuestAddress(AVAIL + 2)).unwrap();
    assert_eq!(ring.published(u16::MAX), Some(3));
}

#[test]
fn with_event_idx_the_driver_is_notified_when_its_used_event_is_passed() {
    let mem = memory(None);
    let used_event = GuestAddress(AVAIL + 4 + 2 * u64::from(SIZE));
    let plain = queue(&mem, DESC, AVAIL, USED, false);
    let ring = SplitRing::map(&mem, &plain).unwrap();
    mem.write_obj(100u16, used_event).unwrap();
    assert!(ring.needs_notification(10, 11), "without EVENT_IDX, always");

    let q = queue(&mem, DESC, AVAIL, USED, true);
    let ring = SplitRing::map(&mem, &q).unwrap();
    // The driver wants to hear once entry `used_event` is used: index used_event + 1.
    for (previous, next, notify) in [
        (98, 100, false),
        (99, 101, true),
        (100, 101, true),
        (101, 104, false),
        (100, 100, false),
    ] {
        assert_eq!(
            ring.needs_notification(previous, next),
            notify,
            "{previous}..{next}"
        );
    }
    mem.write_obj(u16::MAX, used_event).unwrap();
    assert!(ring.needs_notification(u16::MAX - 1, 1), "across the wrap");
}

#[test]
fn rings_across_two_regions_are_read_and_written_access_by_access() {
    // Each area straddles the boundary between the two regions.
    let (desc, avail, used) = (0x4000 - 64, 0x5000 - 8, 0x6000 - 16);
    for split in [0x4000, 0x5000, 0x6000] {
        let mem = memory(Some(split));
        let q = queue(&mem, desc, avail, used, true);
        put_desc(&mem, desc, 3, (0x9000, 16, NEXT, 4));
        put_desc(&mem, desc, 4, (0xa000, 1, WRITE, 0));
        publish(&mem, avail, &[0, 0, 0, 3]);
        let ring = SplitRing::map(&mem, &q).unwrap();
        let straddles = |area: &Area<'_, Memory>| matches!(area, Area::Spread { .. });
        let spread = [&ring.desc, &ring.avail, &ring.used].map(straddles);
        assert_eq!(
            spread.iter().filter(|&&s| s).count(),
            1,
            "split at {split:#x}"
        );
        // Nothing is read or written past an area, mapped or not (guest memory goes on
        // after it).
        let past_the_table = usize::from(SIZE) * 16;
        assert!(ring.desc.read::<Descriptor>(past_the_table).is_none());
        let past_the_used_ring = RING_HEADER + usize::from(SIZE) * USED_ENTRY + 2;
        assert!(ring.used.write(past_the_used_ring, 0u64).is_none());
        assert_eq!(ring.published(0), Some(4));
        assert_eq!(ring.avail_head(3), Some(3));
        let layout = walked(&ring, 3).unwrap();
        assert_eq!(layout.readable, [seg(0x9000, 16)]);
        assert_eq!(layout.writable, [seg(0xa000, 1)]);
        for position in 0..SIZE {
            ring.put_used(position, 3, u32::from(position)).unwrap();
        }
        ring.publish_used_up_to(SIZE).unwrap();
        let last = GuestAddress(used + 4 + 8 * u64::from(SIZE - 1));
        assert_eq!(
            mem.read_obj::<u64>(last).unwrap(),
            u64::from(SIZE - 1) << 32 | 3
        );
        assert_eq!(mem.read_obj::<u16>(GuestAddress(used + 2)).unwrap(), SIZE);
    }
}

#[test]
fn rings_outside_guest_memory_are_not_mapped() {
    let mem = memory(None);
    let mut q = queue(&mem, DESC, AVAIL, USED, false);
    // The frontend's new memory table no longer holds the used ring.
    q.set_used_ring_address(Some(0x10000 - 8), Some(0));
    assert!(SplitRing::map(&mem, &q).is_none());
}
