//! virtio-blk request parsing from an arbitrary descriptor layout over arbitrary guest
//! memory (`backend::virtio::request::parse`).
#![no_main]

mod common;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use vhost_iocost::backend::virtio::request::{parse, ChainLayout, Limits};

#[derive(Arbitrary, Debug)]
struct Input {
    /// (address, length, device-writable) per descriptor.
    descriptors: Vec<(u64, u32, bool)>,
    capacity: u64,
    read_only: bool,
    seg_max: u8,
    max_discard_sectors: u16,
    /// Guest memory, at address 0.
    memory: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let limits = Limits {
        capacity: input.capacity,
        read_only: input.read_only,
        seg_max: u32::from(input.seg_max).max(1),
        max_discard_sectors: u32::from(input.max_discard_sectors),
        max_write_zeroes_sectors: u32::from(input.max_discard_sectors),
    };
    let mut layout = ChainLayout::default();
    for &(addr, len, writable) in &input.descriptors {
        // Addresses mostly inside the small memory, some far outside.
        let addr = if addr >> 63 == 1 { addr } else { addr % 0x2_0000 };
        if layout.push(addr, len, writable).is_err() {
            return;
        }
    }
    let memory = &input.memory;
    let read = |addr: u64, buf: &mut [u8]| -> bool {
        let Some(end) = addr.checked_add(buf.len() as u64) else {
            return false;
        };
        if end > memory.len() as u64 {
            return false;
        }
        buf.copy_from_slice(&memory[addr as usize..end as usize]);
        true
    };
    match parse(&layout, &limits, read) {
        Ok(req) => common::check_accepted(&req, &limits),
        Err(e) => {
            // Every refusal maps to a status or to "nowhere to put one".
            let _ = e.status();
        }
    }
});
