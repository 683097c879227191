//! cloud-hypervisor's vhost-user-blk frontend, replayed message for message against the
//! daemon.
//!
//! The replay follows cloud-hypervisor at commit ae44c29 (vhost 0.17; the wire format is
//! the same as vhost 0.18's `Frontend`, used here):
//! - `virtio-devices/src/vhost_user/blk.rs`: `Blk::new`, the creation handshake.
//! - `virtio-devices/src/vhost_user/vu_common_ctrl.rs`: `connect_vhost_user`,
//!   `negotiate_features_vhost_user`, `setup_vhost_user`, `reset_vhost_user`,
//!   `pause/resume_vhost_user`, `reinitialize_vhost_user`, `add_memory_region`.
//! - `virtio-devices/src/vhost_user/mod.rs`: `DEFAULT_VIRTIO_FEATURES`, the reconnect on
//!   HUP, memory hotplug.
//!
//! Four ways this differs from `RawFrontend::connect` (the QEMU-like handshake):
//! - NEED_REPLY is set only after SET_PROTOCOL_FEATURES.
//! - GET_CONFIG (offset 0, 60 bytes, flags WRITABLE = 0x1) comes before any SET_FEATURES.
//! - Activation (the guest's DRIVER_OK) is separate from negotiation. It sends
//!   SET_FEATURES, SET_MEM_TABLE with every region, SET_VRING_NUM for each queue, then per
//!   queue ADDR, BASE (the avail index read from guest memory), CALL and KICK, and last
//!   SET_VRING_ENABLE for each queue.
//! - Only the queues the guest driver set up take part.
//!
//! Guest RAM is laid out as CH lays it out on x86_64: one memfd per range at file offset
//! 0, one range at GPA 0 and one at 4 GiB. The ranges are small, sparse memfds. A third
//! memfd is the memory that gets hot-plugged.
//!
//! Inflight tracking (INFLIGHT_SHMFD) as CH does it: at activation, after the
//! SET_VRING_NUMs, GET_INFLIGHT_FD once per device and SET_INFLIGHT_FD with the reply,
//! and on every later activation and reconnect SET_INFLIGHT_FD with the same region.
//!
//! Left out: migration and DEVICE_STATE (not offered, so CH skips it).
//!
//! Completions are awaited on the call eventfd with `poll(2)` and a timeout, never by
//! sleeping.

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserInflight, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vm_memory::GuestMemoryMmap;

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::{header, STATUS_UNSET, S_OK, T_IN, T_OUT};
use crate::virtqueue::{self, Arena, Desc, Used, Vq};

// ---------------------------------------------------------------------------------------
// What cloud-hypervisor asks for (E.1)
// ---------------------------------------------------------------------------------------

/// Virtio feature bits by number, named as CH names them.
mod bit {
    pub const SIZE_MAX: u32 = 1;
    pub const SEG_MAX: u32 = 2;
    pub const GEOMETRY: u32 = 4;
    pub const RO: u32 = 5;
    pub const BLK_SIZE: u32 = 6;
    pub const FLUSH: u32 = 9;
    pub const TOPOLOGY: u32 = 10;
    pub const CONFIG_WCE: u32 = 11;
    pub const MQ: u32 = 12;
    pub const DISCARD: u32 = 13;
    pub const WRITE_ZEROES: u32 = 14;
    /// `VhostUserVirtioFeatures::LOG_ALL`.
    pub const LOG_ALL: u32 = 26;
    pub const INDIRECT_DESC: u32 = 28;
    pub const EVENT_IDX: u32 = 29;
    /// `VhostUserVirtioFeatures::PROTOCOL_FEATURES`.
    pub const PROTOCOL_FEATURES: u32 = 30;
    pub const VERSION_1: u32 = 32;
    pub const IN_ORDER: u32 = 35;
    pub const ORDER_PLATFORM: u32 = 36;
    pub const NOTIFICATION_DATA: u32 = 38;
}

fn bits(list: &[u32]) -> u64 {
    list.iter().fold(0u64, |acc, b| acc | (1u64 << b))
}

/// The virtio features CH is willing to negotiate. These are the device bits of
/// `blk.rs:99-113` plus `DEFAULT_VIRTIO_FEATURES` (`mod.rs:257-264`); MQ is included
/// only with more than one queue.
fn ch_avail_features(num_queues: usize) -> u64 {
    use self::bit::*;
    let mut f = bits(&[
        SIZE_MAX,
        SEG_MAX,
        GEOMETRY,
        RO,
        BLK_SIZE,
        FLUSH,
        TOPOLOGY,
        CONFIG_WCE,
        DISCARD,
        WRITE_ZEROES,
        INDIRECT_DESC,
        EVENT_IDX,
        VERSION_1,
        IN_ORDER,
        ORDER_PLATFORM,
        NOTIFICATION_DATA,
        PROTOCOL_FEATURES,
        LOG_ALL,
    ]);
    if num_queues > 1 {
        f |= 1u64 << MQ;
    }
    f
}

/// CH's protocol features (`blk.rs:115-121`): 0x8920B. Never BACKEND_REQ.
fn ch_protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::INFLIGHT_SHMFD
        | VhostUserProtocolFeatures::LOG_SHMFD
        | VhostUserProtocolFeatures::DEVICE_STATE
}

/// What CH and today's daemon share on a writable volume: LOG_ALL included (CH's
/// migration logs dirty pages). The daemon offers none of SIZE_MAX, GEOMETRY, TOPOLOGY,
/// CONFIG_WCE, IN_ORDER, ORDER_PLATFORM or NOTIFICATION_DATA. If the daemon starts
/// offering one of them, update this set (and check what CH then does differently:
/// IN_ORDER changes the reconnect base).
fn expected_shared_features(num_queues: usize) -> u64 {
    use self::bit::*;
    let mut f = bits(&[
        SEG_MAX,
        BLK_SIZE,
        FLUSH,
        DISCARD,
        WRITE_ZEROES,
        INDIRECT_DESC,
        EVENT_IDX,
        PROTOCOL_FEATURES,
        VERSION_1,
        LOG_ALL,
    ]);
    if num_queues > 1 {
        f |= 1u64 << MQ;
    }
    f
}

/// CH's protocol features intersected with the daemon's offer: MQ | REPLY_ACK | CONFIG |
/// CONFIGURE_MEM_SLOTS | LOG_SHMFD | INFLIGHT_SHMFD. (CH never asks for BACKEND_REQ.)
const EXPECTED_PROTOCOL_FEATURES: u64 = 0x920B;

/// Which of the features offered to the guest the Linux virtio-blk driver acks. It acks
/// every offered bit it knows, which here means all of them except PROTOCOL_FEATURES (a
/// vhost-user bit CH adds back itself) and LOG_ALL.
fn linux_driver_acks(offered_to_guest: u64) -> u64 {
    offered_to_guest & !bits(&[bit::PROTOCOL_FEATURES, bit::LOG_ALL])
}

/// `size_of::<VirtioBlockConfig>()` (`block/src/lib.rs:214-234`).
const CONFIG_LEN: u32 = 60;
/// CH's default queue size (`vmm/src/vm_config.rs`). The volumes here allow 256.
const QUEUE_SIZE: u16 = 128;

// ---------------------------------------------------------------------------------------
// Guest RAM and the guest driver's virtqueues
// ---------------------------------------------------------------------------------------

/// Low RAM: CH maps it from GPA 0 (up to 3 GiB; kept small here).
const LOW_GPA: u64 = 0;
const LOW_SIZE: u64 = 16 << 20;
/// High RAM: CH puts the rest of RAM at 4 GiB (`arch/src/x86_64/mod.rs`).
const HIGH_GPA: u64 = 0x1_0000_0000;
const HIGH_SIZE: u64 = 16 << 20;
/// Hot-plugged RAM, after the end of the boot RAM.
const HOTPLUG_GPA: u64 = HIGH_GPA + HIGH_SIZE;
const HOTPLUG_SIZE: u64 = 8 << 20;
/// The driver's rings sit in low RAM from 1 MiB, one 64 KiB area per queue (16 areas).
const RINGS_GPA: u64 = 1 << 20;
const RING_AREA: u64 = 64 << 10;
/// Buffers in low RAM start after the ring areas.
const LOW_BUFFERS: u64 = RINGS_GPA + 16 * RING_AREA;
/// How long a request published while its ring is disabled must stay unanswered.
const PAUSE_PROBE: Duration = Duration::from_millis(300);

/// A guest RAM range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ram {
    Low,
    High,
    Hotplug,
}

impl Ram {
    fn index(self) -> usize {
        self as usize
    }

    /// The first address buffers may be allocated at, and the end of the range.
    fn bounds(self) -> (u64, u64) {
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
    plugged: usize,
    pub(crate) queues: Vec<Vq>,
    /// Buffer allocation per range, for `alloc`.
    buffers: [Arena; 3],
}

impl Guest {
    /// Guest RAM with low and high ranges present, the hot-plug range not yet plugged,
    /// and `active_queues` queues set up by the driver. As CH's `create_anonymous_file`
    /// does, each range is its own memfd.
    fn new(active_queues: usize) -> Self {
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
    fn init_queue(&mut self, q: usize, at: u64) {
        if q == self.queues.len() {
            let vq = Vq::new(&self.mem, q, QUEUE_SIZE, at);
            self.queues.push(vq);
        } else {
            self.queues[q].place(&self.mem, at);
        }
    }

    /// The memory table as CH sends it: every plugged range, in address order.
    fn regions(&self) -> Vec<VhostUserMemoryRegionInfo> {
        let mut all = virtqueue::region_infos(&self.mem);
        all.truncate(self.plugged);
        all
    }

    /// Plugs the next range (memory hotplug) and returns it for ADD_MEM_REG.
    fn plug(&mut self) -> VhostUserMemoryRegionInfo {
        let info = virtqueue::region_infos(&self.mem)
            .into_iter()
            .nth(self.plugged)
            .expect("a range left to plug");
        self.plugged += 1;
        info
    }

    /// The avail index in guest memory, as CH reads it for SET_VRING_BASE.
    fn avail_idx_in_memory(&self, q: usize) -> u16 {
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
    /// that announces one, for `probe`.
    pub(crate) fn no_completion_within(&self, q: usize, probe: Duration) -> bool {
        let vq = &self.queues[q];
        let before = vq.used_seen();
        assert_eq!(
            vq.used_idx(&self.mem),
            before,
            "queue {q}: unconsumed completions"
        );
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
    fn run(&mut self, q: usize, chain: &[Desc]) -> Used {
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
    fn read_sectors(&mut self, q: usize, ram: Ram, sector: u64, len: usize) -> (u8, Vec<u8>) {
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

/// What `Blk::new` keeps for the device's lifetime (blk.rs `State`).
#[derive(Clone, Copy, Debug)]
struct BlkState {
    /// The features offered to the guest: CH's ∩ the backend's (`avail_features`).
    avail_features: u64,
    /// CH's protocol features ∩ the backend's, saved for reconnects.
    acked_protocol_features: u64,
    /// GET_PROTOCOL_FEATURES' answer (for assertions only).
    backend_protocol_features: u64,
    /// GET_QUEUE_NUM's answer (1 without MQ).
    backend_num_queues: u64,
}

/// CH's `Inflight`: the inflight region the backend gave at the first activation, kept
/// for the device's lifetime (`VhostUserCommon::inflight`).
struct Inflight {
    reply: VhostUserInflight,
    file: std::fs::File,
}

/// CH's `VhostUserHandle`: one connection to the backend.
struct VhostUserHandle {
    vu: Frontend,
    /// The protocol features acked on this connection.
    acked_protocol: u64,
    /// GET_FEATURES' answer on this connection.
    backend_features: u64,
    /// The queues the last activation set up (`queue_indexes`).
    queue_indexes: Vec<usize>,
}

/// Unwraps a vhost-user call, naming the message if it failed.
#[track_caller]
fn ok<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

impl VhostUserHandle {
    /// `connect_vhost_user` (client mode). Every connection starts with SET_OWNER and
    /// GET_FEATURES. CH retries the connect every 100 ms for 60 s; here the daemon's
    /// socket is already listening.
    fn connect(socket: &str, max_queue_num: usize) -> Self {
        let vu = ok("connect", Frontend::connect(socket, max_queue_num as u64));
        ok("SET_OWNER", vu.set_owner());
        let backend_features = ok("GET_FEATURES", vu.get_features());
        VhostUserHandle {
            vu,
            acked_protocol: 0,
            backend_features,
            queue_indexes: Vec::new(),
        }
    }

    /// `Blk::new` (E.2): connect, negotiate, GET_QUEUE_NUM, GET_CONFIG. Returns the
    /// connection, what CH keeps, and the config space as read.
    fn create(
        socket: &str,
        num_queues: usize,
        allowed: VhostUserProtocolFeatures,
    ) -> (Self, BlkState, Vec<u8>) {
        let mut h = Self::connect(socket, num_queues);

        // negotiate_features_vhost_user: GET/SET_PROTOCOL_FEATURES without NEED_REPLY,
        // then NEED_REPLY on every later message if REPLY_ACK was acked.
        let avail_features = ch_avail_features(num_queues) & h.backend_features;
        let mut backend_protocol_features = 0;
        let acked_protocol =
            if avail_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
                let offered = ok("GET_PROTOCOL_FEATURES", h.vu.get_protocol_features());
                backend_protocol_features = offered.bits();
                let acked = ch_protocol_features() & offered & allowed;
                ok("SET_PROTOCOL_FEATURES", h.vu.set_protocol_features(acked));
                acked
            } else {
                VhostUserProtocolFeatures::empty()
            };
        h.acked_protocol = acked_protocol.bits();
        if acked_protocol.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            h.vu.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }

        // GET_QUEUE_NUM whenever MQ is acked, even for one queue.
        let backend_num_queues = if acked_protocol.contains(VhostUserProtocolFeatures::MQ) {
            ok("GET_QUEUE_NUM", h.vu.get_queue_num())
        } else {
            1
        };
        assert!(
            num_queues as u64 <= backend_num_queues,
            "CH would fail with BadQueueNum: it wants {num_queues}, the backend has \
             {backend_num_queues}"
        );

        // GET_CONFIG at offset 0 with flags WRITABLE, before any SET_FEATURES. CH caches
        // it and never reads it again.
        let (_, config) = ok(
            "GET_CONFIG",
            h.vu.get_config(
                0,
                CONFIG_LEN,
                VhostUserConfigFlags::WRITABLE,
                &[0u8; CONFIG_LEN as usize],
            ),
        );
        let state = BlkState {
            avail_features,
            acked_protocol_features: acked_protocol.bits(),
            backend_protocol_features,
            backend_num_queues,
        };
        (h, state, config)
    }

    /// `setup_vhost_user` (E.3), at the guest's DRIVER_OK. `acked_features` is what the
    /// guest acked plus PROTOCOL_FEATURES. SET_VRING_BASE is the avail index in guest
    /// memory. With INFLIGHT_SHMFD acked, GET_INFLIGHT_FD when `inflight` holds no region
    /// yet (queue 0's size, the active queues), then SET_INFLIGHT_FD with it. No
    /// SET_BACKEND_REQ_FD.
    fn setup(&mut self, guest: &Guest, acked_features: u64, inflight: &mut Option<Inflight>) {
        self.queue_indexes.clear();
        // Frontend-only features are masked out.
        ok(
            "SET_FEATURES",
            self.vu.set_features(acked_features & self.backend_features),
        );
        // The whole table, even with CONFIGURE_MEM_SLOTS acked.
        ok("SET_MEM_TABLE", self.vu.set_mem_table(&guest.regions()));
        for q in 0..guest.queues.len() {
            ok("SET_VRING_NUM", self.vu.set_vring_num(q, QUEUE_SIZE));
        }
        if self.acked_protocol & VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits() != 0 {
            let region = inflight.get_or_insert_with(|| {
                let ask = VhostUserInflight {
                    num_queues: guest.queues.len() as u16,
                    queue_size: QUEUE_SIZE,
                    ..Default::default()
                };
                let (reply, file) = ok("GET_INFLIGHT_FD", self.vu.get_inflight_fd(&ask));
                Inflight { reply, file }
            });
            ok(
                "SET_INFLIGHT_FD",
                self.vu
                    .set_inflight_fd(&region.reply, region.file.as_raw_fd()),
            );
        }
        for q in 0..guest.queues.len() {
            let vq = &guest.queues[q];
            ok(
                "SET_VRING_ADDR",
                self.vu.set_vring_addr(q, &vq.vring_config(&guest.mem)),
            );
            ok(
                "SET_VRING_BASE",
                self.vu.set_vring_base(q, guest.avail_idx_in_memory(q)),
            );
            ok("SET_VRING_CALL", self.vu.set_vring_call(q, &vq.call));
            ok("SET_VRING_KICK", self.vu.set_vring_kick(q, &vq.kick));
            self.queue_indexes.push(q);
        }
        self.set_vrings_enabled(true);
    }

    /// SET_VRING_ENABLE for each queue of the last activation. Pause is `false` and
    /// resume is `true` (`pause_vhost_user`/`resume_vhost_user`); the end of activation
    /// is `true`.
    fn set_vrings_enabled(&mut self, enable: bool) {
        for q in self.queue_indexes.clone() {
            ok("SET_VRING_ENABLE", self.vu.set_vring_enable(q, enable));
        }
    }

    /// `reset_vhost_user` (guest device reset): SET_VRING_ENABLE 0 and GET_VRING_BASE per
    /// queue. CH drops the bases; they are returned here for assertions.
    fn reset(&mut self) -> Vec<u16> {
        let mut bases = Vec::new();
        for q in std::mem::take(&mut self.queue_indexes) {
            ok("SET_VRING_ENABLE", self.vu.set_vring_enable(q, false));
            bases.push(ok("GET_VRING_BASE", self.vu.get_vring_base(q)) as u16);
        }
        bases
    }

    /// Memory hotplug with CONFIGURE_MEM_SLOTS acked: ADD_MEM_REG for the new range.
    fn add_memory_region(&mut self, region: &VhostUserMemoryRegionInfo) {
        ok("ADD_MEM_REG", self.vu.add_mem_region(region));
    }

    /// `reinitialize_vhost_user` on a new connection (E.5). The sequence is SET_OWNER,
    /// GET_FEATURES, SET_PROTOCOL_FEATURES(saved), NEED_REPLY, then E.3. There is no
    /// GET_PROTOCOL_FEATURES, GET_QUEUE_NUM or GET_CONFIG. CH connects with as many
    /// queues as are active.
    fn reconnect(
        socket: &str,
        guest: &Guest,
        state: &BlkState,
        acked_features: u64,
        inflight: &mut Option<Inflight>,
    ) -> Self {
        let mut h = Self::connect(socket, guest.queues.len());
        if acked_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            let saved = VhostUserProtocolFeatures::from_bits(state.acked_protocol_features)
                .expect("saved protocol features are known bits");
            ok("SET_PROTOCOL_FEATURES", h.vu.set_protocol_features(saved));
            h.acked_protocol = saved.bits();
            if saved.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                h.vu.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
        }
        // With IN_ORDER (and no inflight) CH would restart at the used index and kick;
        // the daemon does not offer IN_ORDER, so the base is the avail index.
        assert_eq!(acked_features & (1u64 << bit::IN_ORDER), 0);
        h.setup(guest, acked_features, inflight);
        h
    }
}

/// A cloud-hypervisor VM with one vhost-user-blk disk: the guest, CH's connection and
/// what CH keeps across connections.
pub(crate) struct Vm {
    pub(crate) guest: Guest,
    vu: VhostUserHandle,
    state: BlkState,
    /// What CH sends in SET_FEATURES. CH's `acked_features` starts as
    /// PROTOCOL_FEATURES (when shared) and the guest driver's ack is added to it.
    acked_features: u64,
    /// The inflight region, once the first activation got one.
    inflight: Option<Inflight>,
}

impl Vm {
    /// `Blk::new` on a device of `num_queues` queues, then the guest driver's DRIVER_OK
    /// with queues `0..active` set up. Returns the VM and the config space read at
    /// creation.
    pub(crate) fn boot(socket: &str, num_queues: usize, active: usize) -> (Self, Vec<u8>) {
        Self::boot_with(socket, num_queues, active, VhostUserProtocolFeatures::all())
    }

    /// [`Vm::boot`] with CH's protocol features limited to `allowed` (a frontend without
    /// inflight tracking, for instance).
    pub(crate) fn boot_with(
        socket: &str,
        num_queues: usize,
        active: usize,
        allowed: VhostUserProtocolFeatures,
    ) -> (Self, Vec<u8>) {
        let (mut vu, state, config) = VhostUserHandle::create(socket, num_queues, allowed);
        let guest = Guest::new(active);
        let acked_features = (state.avail_features
            & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits())
            | linux_driver_acks(state.avail_features);
        let mut inflight = None;
        vu.setup(&guest, acked_features, &mut inflight);
        let vm = Vm {
            guest,
            vu,
            state,
            acked_features,
            inflight,
        };
        (vm, config)
    }

    /// A guest device reset, then the driver sets its queues up again with fresh rings
    /// (queue `q` at `ring_at[q]`) and sets DRIVER_OK: E.3 again on the same socket,
    /// without SET_OWNER. Returns GET_VRING_BASE's answers.
    fn reset_and_reactivate(&mut self, ring_at: &[u64]) -> Vec<u16> {
        let bases = self.vu.reset();
        assert_eq!(ring_at.len(), self.guest.queues.len());
        for (q, &at) in ring_at.iter().enumerate() {
            self.guest.init_queue(q, at);
        }
        self.vu
            .setup(&self.guest, self.acked_features, &mut self.inflight);
        bases
    }

    /// Closes CH's connection (if still open), then reconnects as after a HUP (E.5).
    pub(crate) fn reconnect(self, socket: &str) -> Self {
        let Vm {
            guest,
            vu,
            state,
            acked_features,
            mut inflight,
        } = self;
        // Closed without GET_VRING_BASE, as at CH shutdown, or after the backend went
        // away. The daemon serves one frontend at a time, so this must come first.
        drop(vu);
        let vu = VhostUserHandle::reconnect(socket, &guest, &state, acked_features, &mut inflight);
        Vm {
            guest,
            vu,
            state,
            acked_features,
            inflight,
        }
    }

    /// Writes `data` at `sector` through `ram` on queue `q` and reads it back.
    #[track_caller]
    pub(crate) fn write_and_verify(&mut self, q: usize, ram: Ram, sector: u64, data: &[u8]) {
        assert_eq!(
            self.guest.write_sectors(q, ram, sector, data),
            S_OK as u8,
            "write at sector {sector} through {ram:?} RAM on queue {q}"
        );
        self.verify(q, ram, sector, data);
    }

    /// Reads `data.len()` bytes at `sector` into `ram` on queue `q`; they must be `data`.
    #[track_caller]
    pub(crate) fn verify(&mut self, q: usize, ram: Ram, sector: u64, data: &[u8]) {
        let (status, back) = self.guest.read_sectors(q, ram, sector, data.len());
        assert_eq!(
            status, S_OK as u8,
            "read at sector {sector} through {ram:?} RAM"
        );
        assert!(
            back == data,
            "data read back at sector {sector} through {ram:?} RAM differs"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The daemon
// ---------------------------------------------------------------------------------------

/// Where the volume starts in the backing file, and its size.
const VOLUME_OFFSET_MIB: u64 = 8;
const VOLUME_MIB: u64 = 16;
const SECTORS: u64 = (VOLUME_MIB << 20) / 512;

/// The config of a daemon with one volume "v" of `num_queues` queues. It uses page-cache
/// I/O, so blk_size is 512 and the backing file shows writes at once.
fn volume_config(num_queues: usize) -> String {
    config(
        "direct = false",
        &volume(
            "v",
            VOLUME_OFFSET_MIB,
            VOLUME_MIB,
            &format!("num_queues = {num_queues}"),
        ),
    )
}

/// `len` bytes of volume "v" at `sector`, read from the backing file.
fn on_disk(d: &DaemonProcess, sector: u64, len: usize) -> Vec<u8> {
    let file = std::fs::File::open(d.path("disk.img")).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, (VOLUME_OFFSET_MIB << 20) + sector * 512)
        .unwrap();
    buf
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// CH's creation handshake (E.2) gets what CH expects, on a one-queue and a four-queue
/// volume:
/// - the shared virtio features are exactly CH's wanted set ∩ the daemon's offer;
/// - the acked protocol features are 0x920B (INFLIGHT_SHMFD among them, so activation
///   sets up the inflight region);
/// - GET_QUEUE_NUM is answered, even for one queue;
/// - GET_CONFIG with flags WRITABLE (0x1), before SET_FEATURES, returns 60 bytes with
///   capacity in sectors at 0, blk_size at 20 and num_queues at 34.
///
/// Activation (E.3) then succeeds and the volume serves.
#[test]
fn creation_negotiates_what_cloud_hypervisor_expects() {
    for num_queues in [1, 4] {
        let d = DaemonProcess::start(&volume_config(num_queues));
        let (mut vm, config) = Vm::boot(&d.socket("v"), num_queues, 1);
        let s = vm.state;
        assert_eq!(
            s.avail_features,
            expected_shared_features(num_queues),
            "{num_queues} queues: shared features {:#x}, daemon offers {:#x}",
            s.avail_features,
            vm.vu.backend_features
        );
        assert_eq!(
            s.acked_protocol_features, EXPECTED_PROTOCOL_FEATURES,
            "{num_queues} queues: acked protocol features (daemon offers {:#x})",
            s.backend_protocol_features
        );
        assert_eq!(
            ch_protocol_features().bits(),
            0x8920B,
            "CH's wanted protocol features"
        );
        assert_eq!(s.backend_num_queues, num_queues as u64, "GET_QUEUE_NUM");
        // The guest sees what CH and the daemon share; SET_FEATURES carried what Linux
        // acks of it plus PROTOCOL_FEATURES: all of it but LOG_ALL, which only a
        // migration sets.
        assert_eq!(vm.acked_features, s.avail_features & !bits(&[bit::LOG_ALL]));

        assert_eq!(config.len(), CONFIG_LEN as usize);
        assert_eq!(le64(&config, 0), SECTORS, "capacity in 512-byte sectors");
        assert_eq!(le32(&config, 20), 512, "blk_size");
        assert_eq!(le16(&config, 34), num_queues as u16, "num_queues");

        let data = pattern(0, 8192, num_queues as u8);
        vm.write_and_verify(0, Ram::Low, 0, &data);
        assert!(on_disk(&d, 0, 8192) == data, "the write reached the volume");
    }
}

/// A guest with one vCPU sets up only queue 0 of a four-queue device, so CH activates
/// 1 of 4 queues. Guest RAM is two ranges, at GPA 0 and at 4 GiB. Requests with every
/// buffer in high RAM, and chains mixing both ranges, are served. The data lands at the
/// right place in the volume and reads back through either range.
#[test]
fn one_of_four_queues_serves_buffers_in_low_and_high_memory() {
    let d = DaemonProcess::start(&volume_config(4));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 4, 1);
    assert_eq!(vm.guest.regions().len(), 2, "SET_MEM_TABLE had both ranges");

    // Everything (header, data, status) in high RAM, read back through low RAM.
    let high = pattern(64 * 512, 16384, 1);
    assert_eq!(vm.guest.write_sectors(0, Ram::High, 64, &high), S_OK as u8);
    vm.verify(0, Ram::Low, 64, &high);
    vm.verify(0, Ram::High, 64, &high);
    assert!(on_disk(&d, 64, high.len()) == high);

    // Everything in low RAM, read back through high RAM.
    let low = pattern(256 * 512, 8192, 2);
    assert_eq!(vm.guest.write_sectors(0, Ram::Low, 256, &low), S_OK as u8);
    vm.verify(0, Ram::High, 256, &low);

    // One request whose chain crosses ranges: header in low RAM, the data's first 4 KiB
    // in high RAM and the rest in low RAM, status in high RAM.
    let mixed = pattern(512 * 512, 12288, 3);
    let hdr = vm.guest.put(Ram::Low, &header(T_OUT, 512));
    let first = vm.guest.put(Ram::High, &mixed[..4096]);
    let rest = vm.guest.put(Ram::Low, &mixed[4096..]);
    let status = vm.guest.put(Ram::High, &[STATUS_UNSET]);
    let used = vm.guest.run(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::r(first, 4096),
            Desc::r(rest, 8192),
            Desc::w(status, 1),
        ],
    );
    assert_eq!(used.len, 1);
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(on_disk(&d, 512, mixed.len()) == mixed);

    // And a read scattered the other way round.
    let hdr = vm.guest.put(Ram::High, &header(T_IN, 512));
    let first = vm.guest.alloc(Ram::Low, 8192);
    let rest = vm.guest.alloc(Ram::High, 4096);
    let status = vm.guest.put(Ram::Low, &[STATUS_UNSET]);
    let used = vm.guest.run(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::w(first, 8192),
            Desc::w(rest, 4096),
            Desc::w(status, 1),
        ],
    );
    assert_eq!(used.len as usize, mixed.len() + 1);
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(vm.guest.read(first, 8192) == mixed[..8192]);
    assert!(vm.guest.read(rest, 4096) == mixed[8192..]);
}

/// A guest device reset (E.4): SET_VRING_ENABLE 0 and GET_VRING_BASE per active queue.
/// Then the driver sets the device up again with fresh rings elsewhere in RAM (first in
/// high RAM, then back in low RAM), and CH repeats E.3 on the same socket without
/// SET_OWNER, with SET_FEATURES and the whole memory table again. GET_VRING_BASE reports
/// every published request consumed. After each re-activation the device serves from
/// the new rings, and data written before the reset reads back.
#[test]
fn guest_reset_then_reactivation_on_the_same_socket() {
    let d = DaemonProcess::start(&volume_config(4));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 4, 1);
    let before = pattern(8 * 512, 4096, 4);
    vm.write_and_verify(0, Ram::Low, 8, &before);

    let high_rings = vm.guest.alloc(Ram::High, RING_AREA as usize);
    for (round, ring_at) in [high_rings, RINGS_GPA + 8 * RING_AREA]
        .into_iter()
        .enumerate()
    {
        let published = vm.guest.avail_idx_in_memory(0);
        let bases = vm.reset_and_reactivate(&[ring_at]);
        assert_eq!(
            bases,
            vec![published],
            "round {round}: GET_VRING_BASE of the one active queue: everything consumed"
        );
        assert_eq!(vm.guest.avail_idx_in_memory(0), 0, "fresh rings");
        vm.verify(0, Ram::High, 8, &before);
        let after = pattern(16 * 512, 8192, 5 + round as u8);
        vm.write_and_verify(0, Ram::Low, 16, &after);
        assert!(on_disk(&d, 16, after.len()) == after, "round {round}");
    }
}

/// CH's pause (E.4) is SET_VRING_ENABLE 0 only. A write the guest published and kicked
/// while the ring is disabled is neither completed nor performed. The backing file
/// keeps the old data and the status byte stays unset. On resume (SET_VRING_ENABLE 1),
/// the pending write is served without another kick, and later requests are served as
/// usual.
#[test]
fn pause_holds_a_kicked_request_until_resume() {
    let d = DaemonProcess::start(&volume_config(1));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    let old = pattern(40 * 512, 4096, 6);
    vm.write_and_verify(0, Ram::Low, 40, &old);

    vm.vu.set_vrings_enabled(false);
    let new = pattern(40 * 512, 4096, 7);
    let hdr = vm.guest.put(Ram::Low, &header(T_OUT, 40));
    let buf = vm.guest.put(Ram::High, &new);
    let status = vm.guest.put(Ram::Low, &[STATUS_UNSET]);
    let head = vm.guest.submit(
        0,
        &[Desc::r(hdr, 16), Desc::r(buf, 4096), Desc::w(status, 1)],
    );
    vm.guest.kick(0);
    assert!(
        vm.guest.no_completion_within(0, PAUSE_PROBE),
        "a request completed while its ring was disabled"
    );
    assert_eq!(vm.guest.read(status, 1)[0], STATUS_UNSET);
    assert!(
        on_disk(&d, 40, 4096) == old,
        "the write was performed while its ring was disabled"
    );

    vm.vu.set_vrings_enabled(true);
    let used = vm.guest.wait_used(0);
    assert_eq!(used.head, head, "the pending request completed on resume");
    assert_eq!(vm.guest.read(status, 1)[0], S_OK as u8);
    assert!(on_disk(&d, 40, 4096) == new);
    vm.verify(0, Ram::Low, 40, &new);

    // A pause with nothing pending, and I/O after the resume.
    vm.vu.set_vrings_enabled(false);
    vm.vu.set_vrings_enabled(true);
    vm.write_and_verify(0, Ram::High, 48, &pattern(48 * 512, 4096, 8));
}

/// CH closes the socket without GET_VRING_BASE (shutdown, device removal). This happens
/// with both queues of a two-queue device running. The next connection is set up per
/// E.5: SET_OWNER, GET_FEATURES, SET_PROTOCOL_FEATURES(saved), NEED_REPLY, no GET_CONFIG.
/// Then E.3 runs with base = the avail index in guest memory, on the same rings. Both
/// queues serve again, the used ring continues where it was, and data written before
/// the close reads back.
#[test]
fn close_without_get_vring_base_then_reconnect_resumes_the_rings() {
    let d = DaemonProcess::start(&volume_config(2));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 2, 2);
    let a = pattern(0, 8192, 9);
    let b = pattern(64 * 512, 4096, 10);
    vm.write_and_verify(0, Ram::Low, 0, &a);
    vm.write_and_verify(1, Ram::High, 64, &b);
    let published = [0, 1].map(|q| vm.guest.avail_idx_in_memory(q));
    assert_eq!(published, [2, 2]);

    let mut vm = vm.reconnect(&d.socket("v"));
    // Each queue, read through the other's data.
    vm.verify(1, Ram::Low, 0, &a);
    vm.verify(0, Ram::High, 64, &b);
    for (q, published) in published.into_iter().enumerate() {
        assert_eq!(
            vm.guest.used_idx(q),
            published + 1,
            "queue {q}: the used ring continued from where it was"
        );
    }
    let c = pattern(128 * 512, 4096, 11);
    vm.write_and_verify(1, Ram::High, 128, &c);
    assert!(on_disk(&d, 128, 4096) == c);

    // And once more: a second close and reconnect.
    let mut vm = vm.reconnect(&d.socket("v"));
    vm.verify(0, Ram::Low, 128, &c);
    vm.verify(1, Ram::Low, 0, &a);
}

/// The daemon restarts under a running VM. CH sees the HUP and reconnects per E.5 (no
/// GET_CONFIG), at the avail index in guest memory, on the same rings. The new daemon
/// serves on the same rings, and what the VM wrote before the restart reads back.
#[test]
fn after_a_daemon_restart_cloud_hypervisor_reconnects_and_the_ring_continues() {
    let cfg = volume_config(1);
    let d = DaemonProcess::start(&cfg);
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    let a = pattern(24 * 512, 16384, 12);
    vm.write_and_verify(0, Ram::High, 24, &a);
    let published = vm.guest.avail_idx_in_memory(0);

    let (status, dir) = d.stop();
    assert!(status.success(), "daemon exit status {status} on SIGTERM");
    let d = DaemonProcess::start_in(dir, &cfg);

    let mut vm = vm.reconnect(&d.socket("v"));
    vm.verify(0, Ram::Low, 24, &a);
    assert_eq!(vm.guest.used_idx(0), published + 1);
    let b = pattern(32 * 512, 4096, 13);
    vm.write_and_verify(0, Ram::Low, 32, &b);
    assert!(on_disk(&d, 32, 4096) == b);
}

/// Memory hotplug with CONFIGURE_MEM_SLOTS acked: CH sends ADD_MEM_REG for the new range
/// while the queue runs. Requests with their buffers in the new range are served. The
/// next activation (after a guest reset) sends SET_MEM_TABLE with all three ranges, and
/// rings placed in the hot-plugged range work too.
#[test]
fn hot_plugged_memory_comes_with_add_mem_reg_and_stays_in_the_next_mem_table() {
    let d = DaemonProcess::start(&volume_config(1));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    assert_ne!(
        vm.state.acked_protocol_features & VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS.bits(),
        0,
        "CONFIGURE_MEM_SLOTS acked: CH hot-plugs with ADD_MEM_REG"
    );
    let before = pattern(0, 4096, 14);
    vm.write_and_verify(0, Ram::Low, 0, &before);

    let region = vm.guest.plug();
    assert_eq!(region.guest_phys_addr, HOTPLUG_GPA);
    vm.vu.add_memory_region(&region);
    let data = pattern(200 * 512, 16384, 15);
    vm.write_and_verify(0, Ram::Hotplug, 200, &data);
    assert!(on_disk(&d, 200, data.len()) == data);
    vm.verify(0, Ram::Hotplug, 0, &before);

    assert_eq!(vm.guest.regions().len(), 3);
    let hot_rings = vm.guest.alloc(Ram::Hotplug, RING_AREA as usize);
    vm.reset_and_reactivate(&[hot_rings]);
    vm.verify(0, Ram::Hotplug, 200, &data);
    vm.write_and_verify(0, Ram::High, 300, &pattern(300 * 512, 4096, 16));
}
