//! The issue path's view of one device, shared by every volume handle and the planner:
//! the published configuration, the global virtual clock, the device-wide counters the
//! issue path reads atomically, and the state behind the device lock with the helpers
//! that keep the weight tree, reservations and latency groups consistent.

use crate::lock::Locked;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cost_model::CostModel;

use super::clock::Clock;
use super::config::QosConfig;
use super::error::QosError;
use super::learning::Learning;
use super::params::{Margins, QosParams};
use super::reserve::reservable_ppm;
use super::reserve_shares;
use super::stats::PeriodRecord;
use super::tree::{NodeId, Tree, ROOT};
pub use super::tunables::ALONE_AFTER_NS;
use super::vclock::{Now, VClock};
use super::volume_core::VolumeCore;

/// State behind the device lock.
#[derive(Debug)]
pub(crate) struct DeviceState {
    pub tree: Tree,
    /// Some volume is active; the planner has work.
    pub running: bool,
    /// Active volumes (node id and handle, so the planner needs no lookups).
    pub active: Vec<(NodeId, Arc<VolumeCore>)>,
    /// Planner-controlled vrate (vtime per µs). Budgets, margins and usage use it.
    pub vtime_base_rate: u64,
    /// The planner's verdict on saturation (design §5.6), published for the statistics.
    pub busy_level: i32,
    pub margins: Margins,
    pub last: PeriodRecord,
    /// See [`DeviceStats::contended_periods`].
    pub contended_periods: u64,
    pub contended_periods_missed: u64,
    /// Some group has a reservation: the planner splits it among the group's active
    /// volumes every period.
    pub group_reserves: bool,
    /// When a volume last activated beside one that had the device alone and still had
    /// requests in flight, ns (0: never): the lone one works off the queue it built
    /// unthrottled (design §5.9).
    pub lone_queue_at_ns: u64,
    /// Every configuration ever published; `DeviceShared::cfg` points into one of
    /// them. Never shrinks while the device lives (see the module docs).
    pub cfg_history: Vec<Arc<DeviceCfg>>,
}

/// The replaceable configuration: QoS parameters and the cost model they were derived
/// with (the model's preset supplies default latency targets). Immutable once published.
#[derive(Debug)]
pub(crate) struct DeviceCfg {
    pub params: QosParams,
    /// Shared between successive configurations when only the QoS parameters change.
    pub model: Arc<dyn CostModel>,
    /// The configuration `params` were derived from (kept to re-derive on a model change).
    pub qos: QosConfig,
}

/// Everything shared between the device handle, the volume handles and the planner.
pub(crate) struct DeviceShared {
    /// Parameters and model: points at the newest entry of `DeviceState::cfg_history`,
    /// replaced as a whole under the device lock. Read through [`DeviceShared::cfg`].
    cfg: AtomicPtr<DeviceCfg>,
    pub clock: Arc<dyn Clock>,
    pub vclock: VClock,
    /// Planner period counter; volumes record the period they last issued in.
    pub cur_period: AtomicU64,
    /// Bumped whenever any weight changes; invalidates cached hweights.
    pub hweight_gen: AtomicU32,
    /// Mirrors of `DeviceState` values the issue path reads without the lock.
    pub base_rate: AtomicU64,
    pub margin_low: AtomicI64,
    pub margin_target: AtomicI64,
    /// `DeviceState::active.len()`: a volume that is active alone is not throttled.
    pub nr_active: AtomicUsize,
    /// When a volume active alone stops being throttled, ns on the QoS clock:
    /// [`ALONE_AFTER_NS`] after more than one volume was last active.
    pub alone_from_ns: AtomicU64,
    /// `Tree::foreground_active`: some normal or latency-class volume is active.
    pub foreground_active: Arc<std::sync::atomic::AtomicBool>,
    /// The planner's verdict at the last period: a foreground volume was short of
    /// budget, or latency was rising above its floor. Background volumes then get only
    /// their floor (design §13).
    pub hold_background: std::sync::atomic::AtomicBool,
    /// Completions summed for the cost-model learner, and the learner itself (None:
    /// the model is pinned). See [`super::learned`].
    pub learning: Learning,
    state: Mutex<DeviceState>,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared")
            .field("cfg", self.cfg())
            .finish_non_exhaustive()
    }
}

impl DeviceShared {
    /// The shared state of a new device, vrate and margins as `state` holds them.
    pub(super) fn new(state: DeviceState, clock: Arc<dyn Clock>, now_ns: u64) -> Self {
        let cfg = Arc::as_ptr(&state.cfg_history[0]).cast_mut();
        let rate = state.vtime_base_rate;
        let margins = state.margins;
        DeviceShared {
            cfg: AtomicPtr::new(cfg),
            clock,
            vclock: VClock::new(now_ns, rate),
            cur_period: AtomicU64::new(0),
            hweight_gen: AtomicU32::new(0),
            base_rate: AtomicU64::new(rate),
            margin_low: AtomicI64::new(margins.low),
            margin_target: AtomicI64::new(margins.target),
            nr_active: AtomicUsize::new(0),
            alone_from_ns: AtomicU64::new(0),
            foreground_active: Arc::clone(&state.tree.foreground_active),
            hold_background: std::sync::atomic::AtomicBool::new(false),
            learning: Default::default(),
            state: Mutex::new(state),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, DeviceState> {
        // A panic elsewhere must not take QoS down with it: keep using the state.
        self.state.locked()
    }

    /// At most one volume is active and none other has been for [`ALONE_AFTER_NS`]:
    /// there is nobody to protect (`VolumeQos::admit_at`, `planner::plan`). The delay
    /// keeps a neighbour that pauses between requests, as a paced reader does for a
    /// millisecond or two, from handing the device to a writer in every pause.
    pub(crate) fn alone(&self, now_ns: u64) -> bool {
        self.nr_active.load(Relaxed) <= 1 && now_ns >= self.alone_from_ns.load(Relaxed)
    }

    /// Note that more than one volume is active at `now_ns`.
    pub(crate) fn contended(&self, now_ns: u64) {
        self.alone_from_ns
            .fetch_max(now_ns.saturating_add(ALONE_AFTER_NS), Relaxed);
    }

    /// Note the active volumes' count after a change (device lock held).
    pub(crate) fn set_nr_active(&self, nr_active: usize, now_ns: u64) {
        self.nr_active.store(nr_active, Relaxed);
        if nr_active > 1 {
            self.contended(now_ns);
        }
    }

    /// Publish node `id`'s competing weight after its configured weight, class or boost
    /// changed (device lock held): an active node's share changes at once.
    pub(crate) fn refresh_weight(&self, st: &mut DeviceState, id: NodeId) {
        let w = st.tree.nodes[id].competing_weight();
        let cells = Arc::clone(&st.tree.nodes[id].weights);
        if w == cells.weight.load(Relaxed) {
            return;
        }
        // Parents read their own weight while propagating, so store it first for groups;
        // a volume's weight only enters through `active`.
        cells.weight.store(w, Relaxed);
        let active = cells.active.load(Relaxed);
        if active != 0 {
            // The in-use weight keeps its fraction of the weight: left at the old value,
            // a volume raised from 100 to 300 would be charged at its old share (and its
            // neighbour at theirs) until its next throttle, which a device-bound volume
            // may not meet for tens of milliseconds.
            let inuse = u64::from(cells.inuse.load(Relaxed)) * u64::from(w) / u64::from(active);
            let inuse = inuse.clamp(1, u64::from(w)) as u32;
            let now = self.now();
            st.tree.propagate(id, w, inuse, Some(now.vnow));
            st.tree.commit_weights(&self.hweight_gen);
        } else {
            // The in-use weight it would come back with was for the old weight.
            st.tree.nodes[id].last_inuse = 0;
        }
    }

    /// Hand every volume its reserved share (design §14): after a change of
    /// reservations, classes or the model, and every period while a group's reservation
    /// is split among its active volumes (device lock held).
    pub(crate) fn apply_reservations(&self, st: &DeviceState) {
        let model = &*self.cfg().model;
        let now_ns = self.clock.now_ns();
        let shares = reserve_shares::volume_shares(&st.tree, model);
        for &id in &st.tree.volumes {
            if let Some(core) = &st.tree.nodes[id].volume {
                if core.reserve.share_ppm.load(Relaxed) != shares[id] {
                    core.reserve.set(shares[id], now_ns);
                }
            }
        }
    }

    /// Consistent wall + virtual time snapshot (design §3.1).
    pub(crate) fn now(&self) -> Now {
        self.now_at(self.clock.now_ns())
    }

    /// Both clocks at a wall-clock reading taken by the caller.
    pub(crate) fn now_at(&self, now_ns: u64) -> Now {
        Now {
            now_ns,
            vnow: self.vclock.vnow_at(now_ns),
        }
    }

    /// Start a planning period at `now`.
    pub(crate) fn start_period(&self, st: &mut DeviceState, now: Now) {
        self.vclock
            .set(now.now_ns, now.vnow, st.vtime_base_rate.max(1));
    }

    /// The current parameters and model (one acquire load).
    pub(crate) fn cfg(&self) -> &DeviceCfg {
        // SAFETY: `cfg` always points into an `Arc<DeviceCfg>` held by
        // `DeviceState::cfg_history`, which never drops an entry while `self` lives, and
        // a `DeviceCfg` is never mutated after publication. The returned reference cannot
        // outlive `self`.
        unsafe { &*self.cfg.load(Acquire) }
    }

    /// Publish `cfg` (device lock held): reuse an equal earlier one, else keep it.
    pub(crate) fn publish_cfg(&self, st: &mut DeviceState, cfg: DeviceCfg) {
        let existing = st.cfg_history.iter().find(|c| {
            c.params == cfg.params && c.qos == cfg.qos && Arc::ptr_eq(&c.model, &cfg.model)
        });
        let ptr = match existing {
            Some(c) => Arc::as_ptr(c),
            None => {
                let c = Arc::new(cfg);
                let ptr = Arc::as_ptr(&c);
                st.cfg_history.push(c);
                ptr
            }
        };
        self.cfg.store(ptr.cast_mut(), Release);
    }

    /// The current QoS parameters (a copy; one lock-free load).
    pub(crate) fn params(&self) -> QosParams {
        self.cfg().params
    }

    /// Set the base vrate and everything derived from it.
    pub(crate) fn set_base_rate(&self, st: &mut DeviceState, rate: u64) {
        st.vtime_base_rate = rate;
        st.margins = self.params().margins(rate);
        self.base_rate.store(rate, Relaxed);
        self.margin_low.store(st.margins.low, Relaxed);
        self.margin_target.store(st.margins.target, Relaxed);
    }

    /// Let vnow run at the base rate from `now` on, rebasing it so that it stays
    /// continuous (device lock held). The planner calls it at the end of every period, a
    /// runtime change of the bounds or the period at once.
    ///
    /// Deviation: Linux runs vnow at an *effective* rate that hands budget the planner
    /// discarded out again, up to twice the base rate (design §5.8). That budget is mostly
    /// that of readers going idle, and a faster vnow gives it to whoever is throttled, a
    /// deep-queued writer, just as those readers return. Here vnow runs at the base rate
    /// and the vrate search recovers capacity that is really spare.
    pub(crate) fn refresh_rate(&self, st: &DeviceState, now: Now) {
        let rate = st.vtime_base_rate.max(1);
        let (_, _, running_at) = self.vclock.read();
        if rate != running_at {
            let vnow = self.vclock.vnow_at(now.now_ns);
            self.vclock.set(now.now_ns, vnow, rate);
        }
    }
}

impl DeviceState {
    /// Whether some group has a reservation (the planner splits those every period).
    pub(super) fn refresh_group_reserves(&mut self) {
        self.group_reserves = self
            .tree
            .nodes
            .iter()
            .any(|n| n.volume.is_none() && n.reserve.is_some());
    }

    pub(super) fn parent_id(&self, parent: Option<&str>) -> Result<NodeId, QosError> {
        match parent {
            None => Ok(ROOT),
            Some(p) => {
                let id = *self
                    .tree
                    .by_name
                    .get(p)
                    .ok_or_else(|| QosError::UnknownName(p.to_owned()))?;
                if self.tree.nodes[id].volume.is_some() {
                    return Err(QosError::NotAGroup(p.to_owned()));
                }
                Ok(id)
            }
        }
    }

    pub(super) fn refresh_caps_path(&self, volume: NodeId) {
        if let Some(core) = &self.tree.nodes[volume].volume {
            core.set_caps_path(self.tree.caps_path(volume));
        }
    }

    pub(super) fn node_id(&self, name: &str) -> Result<NodeId, QosError> {
        self.tree
            .by_name
            .get(name)
            .copied()
            .ok_or_else(|| QosError::UnknownName(name.to_owned()))
    }

    /// Does volume `id` feed a latency-class group's window (it is under one)? Set its
    /// flag and start its group window afresh: what it holds was seen under other groups
    /// (device lock held).
    pub(super) fn refresh_latency_group(&self, id: NodeId, now_ns: u64) {
        let node = &self.tree.nodes[id];
        let Some(core) = &node.volume else { return };
        let under = node.ancestors[..node.level]
            .iter()
            .any(|&g| self.tree.nodes[g].latency);
        core.in_latency_group.store(under, Relaxed);
        if under {
            core.hist.locked().group.reset(now_ns);
        }
    }

    /// Is the device's reserved total within what may be reserved? `changed`: the node
    /// to name in the error.
    pub(super) fn check_reservations(
        &self,
        model: &dyn CostModel,
        min_pct: f64,
        changed: NodeId,
    ) -> Result<(), QosError> {
        let total = reserve_shares::total_ppm(&self.tree, model);
        let limit = reservable_ppm(min_pct);
        if total <= limit {
            return Ok(());
        }
        Err(QosError::Overcommitted {
            name: self.tree.nodes[changed].name.clone(),
            share_pct: reserve_shares::own_ppm(&self.tree.nodes[changed], model) as f64 / 1e4,
            total_pct: total as f64 / 1e4,
            reservable_pct: limit as f64 / 1e4,
        })
    }
}
