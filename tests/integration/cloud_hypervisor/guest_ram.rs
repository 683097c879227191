//! The guest's RAM as cloud-hypervisor lays it out, and the guest driver's side of the rings.

use super::*;

/// A guest RAM range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ram {
    Low,
    High,
    Hotplug,
}

impl Ram {
    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The first address buffers may be allocated at, and the end of the range.
    pub(super) fn bounds(self) -> (u64, u64) {
        match self {
            Ram::Low => (LOW_BUFFERS, LOW_GPA + LOW_SIZE),
            Ram::High => (HIGH_GPA, HIGH_GPA + HIGH_SIZE),
            Ram::Hotplug => (HOTPLUG_GPA, HOTPLUG_GPA + HOTPLUG_SIZE),
        }
    }
}

/// The guest: RAM, and the virtqueues its virtio-blk driver has set up (queue `i` is
/// `queues[i]`. Linux sets up queues 0..k, one per vCPU, so a subset is always a prefix).
/// Each queue's kick (ioeventfd) and call (irqfd) are kept across resets and reconnects,
/// as CH keeps them.
pub(crate) struct Guest {
    pub(crate) mem: GuestMemoryMmap<()>,
    /// How many ranges (in address order) the VMM has shared with the backend. The
    /// hot-pluggable range is shared only once plugged.
    pub(super) plugged: usize,
    pub(crate) queues: Vec<Vq>,
    /// Buffer allocation per range, for `alloc`.
    pub(super) buffers: [Arena; 3],
}

impl Guest {
    /// Guest RAM with low and high ranges present, the hot-plug range not yet plugged,
    /// and `active_queues` queues set up by the driver. As CH's `create_anonymous_file`
    /// does, each range is its own memfd.
    pub(super) fn new(active_queues: usize) -> Self {
        assert!(
            active_queues <= 8,
            "ring areas 8.. are for re-initialised rings"
        );
        let mem = virtqueue::guest_memory(&[
            (LOW_GPA, LOW_SIZE),
            (HIGH_GPA, HIGH_SIZE),
            (HOTPLUG_GPA, HOTPLUG_SIZE),
        ]);
        let mut g = Guest {
            mem,
            plugged: 2,
            queues: Vec::new(),
            buffers: [Ram::Low, Ram::High, Ram::Hotplug].map(|r| {
                let (start, end) = r.bounds();
                Arena::new(start, end)
            }),
        };
        for q in 0..active_queues {
            g.init_queue(q, RINGS_GPA + q as u64 * RING_AREA);
        }
        g
    }

    /// The driver (re)initialises queue `q` with fresh, zeroed rings at `at`: avail and
    /// used index 0, all descriptors free. The eventfds are kept.
    pub(super) fn init_queue(&mut self, q: usize, at: u64) {
        if q == self.queues.len() {
            let vq = Vq::new(&self.mem, q, QUEUE_SIZE, at);
            self.queues.push(vq);
        } else {
            self.queues[q].place(&self.mem, at);
        }
    }

    /// The memory table as CH sends it: every plugged range, in address order.
    pub(super) fn regions(&self) -> Vec<VhostUserMemoryRegionInfo> {
        let mut all = virtqueue::region_infos(&self.mem);
        all.truncate(self.plugged);
        all
    }

    /// Plugs the next range (memory hotplug) and returns it for ADD_MEM_REG.
    pub(super) fn plug(&mut self) -> VhostUserMemoryRegionInfo {
        let info = virtqueue::region_infos(&self.mem)
            .into_iter()
            .nth(self.plugged)
            .expect("a range left to plug");
        self.plugged += 1;
        info
    }

    /// The avail index in guest memory, as CH reads it for SET_VRING_BASE.
    pub(super) fn avail_idx_in_memory(&self, q: usize) -> u16 {
        self.queues[q].avail_idx_in_memory(&self.mem)
    }

    /// The used index the device has published on queue `q`.
    pub(crate) fn used_idx(&self, q: usize) -> u16 {
        self.queues[q].used_idx(&self.mem)
    }

    /// Reserves `len` zeroed bytes in `ram` (4 KiB aligned from 4 KiB up).
    pub(crate) fn alloc(&mut self, ram: Ram, len: usize) -> u64 {
        self.buffers[ram.index()].alloc(&self.mem, len)
    }

    /// Allocates guest RAM in `ram` holding `bytes`.
    pub(crate) fn put(&mut self, ram: Ram, bytes: &[u8]) -> u64 {
        self.buffers[ram.index()].put(&self.mem, bytes)
    }

    pub(crate) fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        virtqueue::read(&self.mem, addr, len)
    }

    /// Places `chain` in queue `q`'s descriptor table and publishes it (no kick).
    /// Returns the head index.
    pub(crate) fn submit(&mut self, q: usize, chain: &[Desc]) -> u16 {
        self.queues[q].submit(&self.mem, chain)
    }

    /// The guest's notification (with CH, a write to the queue's ioeventfd).
    pub(crate) fn kick(&self, q: usize) {
        self.queues[q].notify();
    }

    /// Waits (on the call eventfd) for the next used entry of queue `q` and returns it,
    /// freeing its descriptors. Linux acks EVENT_IDX, so used_event is always set.
    #[track_caller]
    pub(crate) fn wait_used(&mut self, q: usize) -> Used {
        self.queues[q].wait_used(&self.mem, 1, true)[0]
    }

    /// Whether queue `q` stays without a new used entry, and without a notification
    /// that announces one, for `probe`. An entry not yet taken counts as a new one: it
    /// may have landed after the caller last looked.
    pub(crate) fn no_completion_within(&self, q: usize, probe: Duration) -> bool {
        let vq = &self.queues[q];
        let before = vq.used_seen();
        if vq.used_idx(&self.mem) != before {
            return false;
        }
        // Any new entry must notify.
        vq.set_used_event(&self.mem, before);
        let deadline = Instant::now() + probe;
        loop {
            if vq.used_idx(&self.mem) != before {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            vq.wait_call(left);
        }
    }

    /// Submits `chain` on queue `q`, kicks and waits for its completion.
    #[track_caller]
    pub(super) fn run(&mut self, q: usize, chain: &[Desc]) -> Used {
        let head = self.submit(q, chain);
        self.kick(q);
        let used = self.wait_used(q);
        assert_eq!(used.head, head, "queue {q}: completion for another chain");
        used
    }

    /// Writes `data` at `sector` on queue `q`, with header, data and status in `ram`;
    /// returns the status.
    #[track_caller]
    pub(crate) fn write_sectors(&mut self, q: usize, ram: Ram, sector: u64, data: &[u8]) -> u8 {
        let hdr = self.put(ram, &header(T_OUT, sector));
        let buf = self.put(ram, data);
        let status = self.put(ram, &[STATUS_UNSET]);
        let used = self.run(
            q,
            &[
                Desc::r(hdr, 16),
                Desc::r(buf, data.len()),
                Desc::w(status, 1),
            ],
        );
        assert_eq!(used.len, 1, "a write returns only the status byte");
        self.read(status, 1)[0]
    }

    /// Reads `len` bytes at `sector` on queue `q` into `ram`; returns the status and the
    /// data.
    #[track_caller]
    pub(super) fn read_sectors(
        &mut self,
        q: usize,
        ram: Ram,
        sector: u64,
        len: usize,
    ) -> (u8, Vec<u8>) {
        let hdr = self.put(ram, &header(T_IN, sector));
        let buf = self.put(ram, &vec![0xEE; len]);
        let status = self.put(ram, &[STATUS_UNSET]);
        let used = self.run(
            q,
            &[Desc::r(hdr, 16), Desc::w(buf, len), Desc::w(status, 1)],
        );
        let st = self.read(status, 1)[0];
        if st == S_OK as u8 {
            assert_eq!(
                used.len as usize,
                len + 1,
                "a read returns its data and the status"
            );
        }
        (st, self.read(buf, len))
    }
}

// ---------------------------------------------------------------------------------------
// cloud-hypervisor's side of the connection (VhostUserHandle)
// ---------------------------------------------------------------------------------------
