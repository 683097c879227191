//! The state of one volume that the device lock, the planner and the issue path share:
//! its place in the weight tree, its vtime cursor, its counters and its class flags.
//! [`super::volume::VolumeQos`] is the issue path built on it; the weight tree holds it
//! for the planner.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::cap_meter::NodeCaps;
use super::histogram::LatencyWindows;
use super::node_id::NodeId;
use super::reserve::ReserveBudget;
use super::weights::{compute_hweights, pack_cache, unpack_cache, NodeWeights};
use crate::vtime::{vdiff, WEIGHT_ONE};

/// Latency-QoS counters, per volume (the kernel keeps them per CPU). Monotonic and
/// wrapping; the planner takes differences.
#[derive(Debug, Default)]
pub(crate) struct LatCounters {
    pub nr_met: [AtomicU32; 2],
    pub nr_missed: [AtomicU32; 2],
    pub rq_wait_ns: AtomicU64,
    /// `[read, write]` Σ device latency (admitted → completed) minus transfer time, µs.
    pub lat_sum_us: [AtomicU64; 2],
    /// `[read, write]` Σ of the squares of the same latencies, each capped at
    /// [`LAT_SQ_CAP_US`], µs²: the planner's measure of how noisy a period's mean is.
    pub lat_sq_sum: [AtomicU64; 2],
}

/// Latencies above this (µs, ~17 s) count as this in the sum of squares, which then
/// cannot wrap within a period short of 65 536 completions at the cap.
pub(crate) const LAT_SQ_CAP_US: u64 = 1 << 24;

/// Monotonic per-volume counters for statistics. (Requests and bytes are counted by the
/// data path, which knows whether they succeeded.)
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    pub throttled: AtomicU64,
    /// Admissions refused by a cap (each makes the caller wait and ask again).
    pub capped: AtomicU64,
    /// Admissions of a background volume refused because of its device time in flight.
    pub background_held: AtomicU64,
    /// Requests admitted on the reservation after their vtime budget refused them.
    pub reserved: AtomicU64,
    pub wait_ns: AtomicU64,
    pub lat_met: AtomicU64,
    pub lat_missed: AtomicU64,
    /// Time held back by a cap and by its class, ns (see [`VolumeCore::held`]).
    pub held_ns: [AtomicU64; 2],
    /// Latency class: windows of its own target judged, and of those missed.
    pub target_windows: AtomicU64,
    pub target_windows_missed: AtomicU64,
}

/// [`VolumeCore::held`]: a cap holds the volume's next request back.
pub(crate) const HELD_CAP: u8 = 1;
/// [`VolumeCore::held`]: its class holds it back (background behind the foreground).
pub(crate) const HELD_CLASS: u8 = 2;

/// The shared state of one volume: everything the issue path touches.
#[derive(Debug)]
pub(crate) struct VolumeCore {
    pub name: String,
    pub node: NodeId,
    /// Root-to-volume path of weight cells, for lock-free hweights. Replaced only when
    /// the volume moves to another group (under the device lock, followed by a
    /// generation bump); read only when the hweight cache is stale.
    pub path: ArcSwap<Box<[Arc<NodeWeights>]>>,
    /// The volume's own weight cell (the last element of every path it ever has).
    pub own: Arc<NodeWeights>,
    /// Local vtime: advanced by every admitted request's local cost.
    pub vtime: AtomicU64,
    /// Advanced by the cost of every completed request; `vtime - done_vtime` is in flight.
    pub done_vtime: AtomicU64,
    /// Last planner period in which the volume offered a request.
    pub active_period: AtomicU64,
    /// Counted in the weight tree (set under the device lock).
    pub on_active: AtomicBool,
    /// End of the previous admitted request + 1 (0 = none yet), for seq/rand detection.
    pub cursor: AtomicU64,
    /// `(generation, hwa, hwi)` packed, see [`pack_cache`].
    pub hw_cache: AtomicU64,
    /// Budget (`vnow - vtime`) at the last saving propagation: snapback reference.
    pub saved_margin: AtomicI64,
    /// Σ absolute cost admitted (usage), monotonic. Written only by the admitting thread
    /// (see [`VolumeQos`]), read by the planner.
    pub abs_vusage: AtomicU64,
    /// The caller has a parked request (its FIFO head got Wait and has not gone yet).
    pub waiting: AtomicBool,
    /// When the current wait began, ns.
    pub wait_since_ns: AtomicU64,
    /// Held back by a cap or by its class ([`HELD_CAP`], [`HELD_CLASS`]; 0: not held)
    /// since `held_since_ns`: pressure of those causes (a budget wait is `waiting`).
    pub held: AtomicU8,
    pub held_since_ns: AtomicU64,
    pub lat: LatCounters,
    pub io: IoCounters,
    /// Device time used in the last period, ppm of the period (planner-written).
    pub usage_ppm: AtomicU32,
    /// Cumulative device time used, µs (planner-written).
    pub usage_us: AtomicU64,
    pub hist: Mutex<LatencyWindows>,
    /// The caps on the root-to-volume path, root first (design §12); replaced under the
    /// device lock when a node's caps change or the volume moves. `has_caps` spares
    /// uncapped volumes the load.
    pub caps: ArcSwap<Box<[Arc<NodeCaps>]>>,
    pub has_caps: AtomicBool,
    /// Class `background` (design §13); set under the device lock.
    pub background: AtomicBool,
    /// Absolute cost of the background requests in flight.
    pub background_inflight: AtomicU64,
    /// The reservation (design §14).
    pub reserve: ReserveBudget,
    /// Class `latency` (design §15): completions feed `hist.target`.
    pub latency_class: AtomicBool,
    /// Under a latency-class group (design §15): completions feed `hist.group`, which the
    /// planner takes into the group's window every period. Set under the device lock.
    pub in_latency_group: AtomicBool,
    /// The latency class's boost of the weight, ppm (planner-written, for statistics).
    pub boost_ppm: AtomicU64,
    /// Operations with caps of their own (`op_caps`), one bit per `IoKind`: a waiting one
    /// may be passed by the requests behind it.
    pub own_caps_ops: std::sync::atomic::AtomicU8,
}

impl VolumeCore {
    pub(crate) fn new(
        name: &str,
        node: NodeId,
        path: Box<[Arc<NodeWeights>]>,
        vnow: u64,
        period: u64,
    ) -> Self {
        let own = path
            .last()
            .cloned()
            .unwrap_or_else(|| Arc::new(NodeWeights::default()));
        VolumeCore {
            name: name.to_owned(),
            node,
            path: ArcSwap::from_pointee(path),
            own,
            vtime: AtomicU64::new(vnow),
            done_vtime: AtomicU64::new(vnow),
            active_period: AtomicU64::new(period),
            on_active: AtomicBool::new(false),
            cursor: AtomicU64::new(0),
            hw_cache: AtomicU64::new(pack_cache(u32::MAX, WEIGHT_ONE, WEIGHT_ONE)),
            saved_margin: AtomicI64::new(0),
            abs_vusage: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            wait_since_ns: AtomicU64::new(0),
            held: AtomicU8::new(0),
            held_since_ns: AtomicU64::new(0),
            lat: LatCounters::default(),
            io: IoCounters::default(),
            usage_ppm: AtomicU32::new(0),
            usage_us: AtomicU64::new(0),
            hist: Mutex::new(LatencyWindows::default()),
            caps: ArcSwap::from_pointee(Box::default()),
            has_caps: AtomicBool::new(false),
            background: AtomicBool::new(false),
            background_inflight: AtomicU64::new(0),
            reserve: ReserveBudget::default(),
            latency_class: AtomicBool::new(false),
            in_latency_group: AtomicBool::new(false),
            boost_ppm: AtomicU64::new(1_000_000),
            own_caps_ops: std::sync::atomic::AtomicU8::new(0),
        }
    }

    /// This volume's own weight cell.
    pub(crate) fn weights(&self) -> &NodeWeights {
        &self.own
    }

    /// Replace the caps on the volume's path (device lock held).
    pub(crate) fn set_caps_path(&self, caps: Box<[Arc<NodeCaps>]>) {
        self.has_caps.store(!caps.is_empty(), Release);
        self.caps.store(Arc::new(caps));
    }

    /// Replace the root-to-volume path (the volume moved; device lock held).
    pub(crate) fn set_path(&self, path: Box<[Arc<NodeWeights>]>) {
        self.path.store(Arc::new(path));
    }

    /// `(hweight_active, hweight_inuse)`, from the cache when the generation matches.
    pub(crate) fn hweights(&self, gen: u32) -> (u32, u32) {
        let (cgen, hwa, hwi) = unpack_cache(self.hw_cache.load(Relaxed));
        if cgen == gen {
            return (hwa, hwi);
        }
        let (hwa, hwi) = compute_hweights(&self.path.load());
        self.hw_cache.store(pack_cache(gen, hwa, hwi), Relaxed);
        (hwa, hwi)
    }

    /// Force the next [`VolumeCore::hweights`] to recompute.
    pub(crate) fn invalidate_hweights(&self, gen: u32) {
        self.hw_cache.store(
            pack_cache(gen.wrapping_sub(1), WEIGHT_ONE, WEIGHT_ONE),
            Relaxed,
        );
    }

    /// Is the volume idle: nothing offered this period and nothing in flight (design §6.1)?
    pub(crate) fn is_idle(&self, cur_period: u64) -> bool {
        self.active_period.load(Relaxed) != cur_period && !self.has_in_flight()
    }

    /// Has the volume requests in flight?
    pub(crate) fn has_in_flight(&self) -> bool {
        self.done_vtime.load(Relaxed) != self.vtime.load(Relaxed)
    }

    /// Pull both clocks back so that the volume owes no more than what it has in flight:
    /// what it completed ahead of `vnow` while alone is forgiven (design §5.9; device
    /// lock held, the volume's worker may be charging concurrently).
    pub(crate) fn forgive_completed_ahead(&self, vnow: u64) {
        let ahead = vdiff(self.done_vtime.load(Relaxed), vnow);
        if ahead > 0 {
            self.vtime.fetch_sub(ahead as u64, Relaxed);
            self.done_vtime.fetch_sub(ahead as u64, Relaxed);
        }
    }

    /// Held back by `cause` ([`HELD_CAP`] or [`HELD_CLASS`]) from `now_ns` on, unless
    /// already; a hold for another cause ends here.
    pub(crate) fn hold(&self, cause: u8, now_ns: u64) {
        let was = self.held.swap(cause, Relaxed);
        if was != cause {
            self.end_hold(was, now_ns);
            self.held_since_ns.store(now_ns, Relaxed);
        }
    }

    /// No longer held back (its request went, or was dropped).
    pub(crate) fn release(&self, now_ns: u64) {
        let was = self.held.swap(0, Relaxed);
        self.end_hold(was, now_ns);
    }

    fn end_hold(&self, cause: u8, now_ns: u64) {
        if cause != 0 {
            let since = self.held_since_ns.load(Relaxed);
            self.io.held_ns[usize::from(cause - 1)]
                .fetch_add(now_ns.saturating_sub(since), Relaxed);
        }
    }

    /// Time held back by a cap and by the class, ns, including a hold in progress.
    pub(crate) fn held_ns_total(&self, now_ns: u64) -> [u64; 2] {
        let mut t = [0, 1].map(|i| self.io.held_ns[i].load(Relaxed));
        let cause = self.held.load(Relaxed);
        if cause != 0 {
            t[usize::from(cause - 1)] += now_ns.saturating_sub(self.held_since_ns.load(Relaxed));
        }
        t
    }

    /// Total wait time including a wait still in progress.
    pub(crate) fn wait_ns_total(&self, now_ns: u64) -> u64 {
        let mut t = self.io.wait_ns.load(Relaxed);
        if self.waiting.load(Relaxed) {
            t += now_ns.saturating_sub(self.wait_since_ns.load(Relaxed));
        }
        t
    }
}
