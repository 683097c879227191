//! One QoS domain: a host disk shared by many volumes.
//!
//! [`QosDevice`] owns the weight tree, the global virtual clock, the state the planner
//! steers (vrate, busy_level, margins, the last period's record) and the cost model. It is shared (`Arc`, `Send + Sync`) by every worker thread, which
//! hold [`VolumeQos`] handles, and by one planner thread that calls `planner::Planner::plan`
//! once per period.
//!
//! Locking mirrors the kernel: one device mutex for the planner, activation, snapback
//! and tree changes; everything the issue path reads is atomic. Lock order: the
//! planner's own state, then the device lock (the per-volume latency-histogram mutex is
//! never held together with it).
//!
//! # Runtime changes (control plane)
//!
//! The QoS parameters and the cost model can be replaced while requests flow
//! ([`QosDevice::set_qos`], [`QosDevice::set_model`]). Both live together in one
//! immutable `DeviceCfg`, published through an atomic pointer: the issue path reads the
//! current one with a single acquire load (no reference counting, no lock) and uses it
//! for the whole request, so it never sees a new model with old parameters. Writers
//! publish under the device lock, so the planner (which also holds the lock) sees one
//! configuration for a whole run. Superseded configurations are not freed while the
//! device lives (a reader may still be using one, and tracking readers costs the issue
//! path extra atomics per request: `ArcSwap` here measured about +20 ns per request):
//! each is a few hundred bytes, changes are operator-driven, and publishing a
//! configuration equal to an earlier one reuses it, so the history stays small. The vrate bounds
//! apply at once (the base vrate is clamped into them) and a new period length from the
//! next planner run on.
//!
//! Volumes can move between groups ([`QosDevice::set_parent`]): under the device lock the
//! volume leaves its old parent's sums (as if it went idle), its tree path is replaced
//! (the issue path reads the path only to recompute hweights after a generation change)
//! and it re-enters under the new parent with the same active/inuse weights.

use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cost_model::{CostModel, ModelConfig};
use crate::vtime::VTIME_PER_USEC;

use super::caps::{CapsConfig, NodeCaps, OpCapsConfig};
use super::class::{Class, GroupPolicy, LatencyTarget, ServiceChange, VolumePolicy};
use super::clock::Clock;
use super::config::QosConfig;
use super::error::QosError;
use super::histogram::TargetWindow;
use super::params::{Margins, QosParams};
use super::reserve::{self, reservable_ppm, ReserveConfig};
use super::stats::{DeviceStats, PeriodRecord};
use super::tree::{NodeId, Tree, ROOT};
use super::vclock::{Now, VClock};
use super::volume::{rate_to_ppm, VolumeCore, VolumeQos};
use super::weights::NodeWeights;

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

/// How long after the last moment of contention a volume active alone stops being
/// throttled.
pub const ALONE_AFTER_NS: u64 = 1_000_000_000;

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
    pub learning: super::learned::Learning,
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
    pub(crate) fn lock(&self) -> MutexGuard<'_, DeviceState> {
        // A panic elsewhere must not take QoS down with it: keep using the state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
        if cells.active.load(Relaxed) != 0 {
            let now = self.now();
            st.tree
                .propagate(id, w, cells.inuse.load(Relaxed), Some(now.vnow));
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
        let shares = reserve::volume_shares(&st.tree, model);
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

/// A group or volume as the control plane sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    /// User weight, 1..=10000.
    pub weight: u32,
    /// The parent group; None = the root.
    pub parent: Option<String>,
    /// The node's caps; None = uncapped.
    pub caps: Option<CapsConfig>,
    /// Volumes: caps per operation.
    pub op_caps: Option<OpCapsConfig>,
    /// The node's reservation as configured.
    pub reserve: Option<ReserveConfig>,
    pub class: Class,
    /// The latency target (used in class `latency`).
    pub latency_target: Option<super::class::LatencyTarget>,
    /// What the latency class multiplies the weight by now (1: none).
    pub boost: f64,
}

/// The QoS controller of one host disk.
#[derive(Debug, Clone)]
pub struct QosDevice {
    shared: Arc<DeviceShared>,
}

fn check_weight(name: &str, weight: u32) -> Result<(), QosError> {
    super::weights::check_weight(weight).map_err(|reason| QosError::InvalidWeight {
        name: name.to_owned(),
        reason,
    })
}

impl QosDevice {
    /// A controller using `model` to price requests. `qos` should have been validated
    /// ([`QosConfig::validate`]); out-of-range values are clamped, never rejected here.
    pub fn new(model: Box<dyn CostModel>, qos: &QosConfig, clock: Arc<dyn Clock>) -> Self {
        let params = QosParams::from_config(qos, model.default_latency_us());
        let now_ns = clock.now_ns();
        // Start at 100 %, or at the nearest bound if 100 % is outside [min, max] (the
        // kernel approaches the bounds gradually; at creation there is no reason to).
        let rate = VTIME_PER_USEC.clamp(params.vrate_min(), params.vrate_max());
        let margins = params.margins(rate);
        let state = DeviceState {
            tree: Tree::new(),
            running: false,
            active: Vec::new(),
            vtime_base_rate: rate,
            busy_level: 0,
            margins,
            last: PeriodRecord::default(),
            contended_periods: 0,
            contended_periods_missed: 0,
            group_reserves: false,
            cfg_history: vec![Arc::new(DeviceCfg {
                params,
                model: Arc::from(model),
                qos: qos.clone(),
            })],
        };
        let cfg = Arc::as_ptr(&state.cfg_history[0]).cast_mut();
        let foreground_active = Arc::clone(&state.tree.foreground_active);
        QosDevice {
            shared: Arc::new(DeviceShared {
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
                foreground_active,
                hold_background: std::sync::atomic::AtomicBool::new(false),
                learning: Default::default(),
                state: Mutex::new(state),
            }),
        }
    }

    fn parent_id(st: &DeviceState, parent: Option<&str>) -> Result<NodeId, QosError> {
        match parent {
            None => Ok(ROOT),
            Some(p) => {
                let id = *st
                    .tree
                    .by_name
                    .get(p)
                    .ok_or_else(|| QosError::UnknownName(p.to_owned()))?;
                if st.tree.nodes[id].volume.is_some() {
                    return Err(QosError::NotAGroup(p.to_owned()));
                }
                Ok(id)
            }
        }
    }

    fn check_new_name(st: &DeviceState, name: &str) -> Result<(), QosError> {
        if name.is_empty() {
            return Err(QosError::EmptyName);
        }
        if st.tree.by_name.contains_key(name) {
            return Err(QosError::DuplicateName(name.to_owned()));
        }
        Ok(())
    }

    /// Add a group under `parent` (None = the root). Names are unique per device.
    pub fn add_group(&self, name: &str, parent: Option<&str>, weight: u32) -> Result<(), QosError> {
        check_weight(name, weight)?;
        let mut st = self.shared.lock();
        Self::check_new_name(&st, name)?;
        let parent = Self::parent_id(&st, parent)?;
        st.tree
            .add_node(name, parent, Arc::new(NodeWeights::new(weight)));
        Ok(())
    }

    /// Add a volume (a throttled leaf) under `group` (None = the root).
    pub fn add_volume(
        &self,
        name: &str,
        group: Option<&str>,
        weight: u32,
    ) -> Result<Arc<VolumeQos>, QosError> {
        check_weight(name, weight)?;
        let mut st = self.shared.lock();
        Self::check_new_name(&st, name)?;
        let parent = Self::parent_id(&st, group)?;
        let id = st
            .tree
            .add_node(name, parent, Arc::new(NodeWeights::new(weight)));
        let path = st.tree.path(id);
        let now = self.shared.now();
        let core = Arc::new(VolumeCore::new(
            name,
            id,
            path,
            now.vnow,
            self.shared.cur_period.load(Relaxed),
        ));
        core.set_caps_path(st.tree.caps_path(id));
        st.tree.nodes[id].volume = Some(Arc::clone(&core));
        st.tree.volumes.push(id);
        Self::refresh_latency_group(&st, id, now.now_ns);
        Ok(Arc::new(VolumeQos::new(Arc::clone(&self.shared), core)))
    }

    /// Remove a volume (design §4.6): it leaves the active list and the weight tree at
    /// once, as an idle one does, and its name is free again. The caller has ended its
    /// connection: nothing of it is in flight or waiting, and its handle admits nothing
    /// more.
    pub fn remove_volume(&self, name: &str) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        if st.tree.nodes[id].volume.is_none() {
            return Err(QosError::NotAVolume(name.to_owned()));
        }
        if let Some(i) = st.active.iter().position(|(a, _)| *a == id) {
            let (_, core) = st.active.swap_remove(i);
            st.tree.propagate(id, 0, 0, None);
            core.on_active.store(false, Release);
            core.usage_ppm.store(0, Relaxed);
            let now_ns = self.shared.clock.now_ns();
            self.shared.set_nr_active(st.active.len(), now_ns);
        }
        st.tree.remove(id);
        st.tree.weights_updated = true;
        st.tree.commit_weights(&self.shared.hweight_gen);
        self.shared.apply_reservations(&st);
        Ok(())
    }

    /// Move a group, with everything under it, under `parent` (None = the root; design
    /// §4.5): it leaves its old parent's sums as if it went idle, the paths of its
    /// volumes are rebuilt, and it re-enters the new parent with its volumes' state.
    pub fn move_group(&self, name: &str, parent: Option<&str>) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        if st.tree.nodes[id].volume.is_some() {
            return Err(QosError::NotAGroup(name.to_owned()));
        }
        let parent_id = Self::parent_id(&st, parent)?;
        if st.tree.nodes[parent_id].ancestors.contains(&id) {
            return Err(QosError::Cycle {
                name: name.to_owned(),
                parent: parent.unwrap_or_default().to_owned(),
            });
        }
        if st.tree.nodes[id].parent() == Some(parent_id) {
            return Ok(());
        }
        let cells = Arc::clone(&st.tree.nodes[id].weights);
        let was_active = cells.active.load(Relaxed) != 0;
        if was_active {
            st.tree.propagate(id, 0, 0, None);
        }
        st.tree.reparent(id, parent_id);
        let now_ns = self.shared.clock.now_ns();
        let volumes: Vec<NodeId> = st.tree.volumes_under(id).collect();
        for &v in &volumes {
            if let Some(core) = st.tree.nodes[v].volume.clone() {
                core.set_path(st.tree.path(v));
                Self::refresh_caps_path(&st, v);
                Self::refresh_latency_group(&st, v, now_ns);
            }
        }
        if was_active {
            // A group's own active weight follows from its weight and its children.
            let weight = cells.weight.load(Relaxed);
            let now = self.shared.now();
            st.tree.propagate(id, weight, weight, Some(now.vnow));
        }
        st.tree.weights_updated = true;
        st.tree.commit_weights(&self.shared.hweight_gen);
        let generation = self.shared.hweight_gen.load(Acquire);
        for &v in &volumes {
            if let Some(core) = &st.tree.nodes[v].volume {
                core.invalidate_hweights(generation);
            }
        }
        self.shared.apply_reservations(&st);
        Ok(())
    }

    /// Whether some group has a reservation (the planner splits those every period).
    fn refresh_group_reserves(st: &mut DeviceState) {
        st.group_reserves = st
            .tree
            .nodes
            .iter()
            .any(|n| n.volume.is_none() && n.reserve.is_some());
    }

    /// Remove a group that has no members (design §4.6).
    pub fn remove_group(&self, name: &str) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        if st.tree.nodes[id].volume.is_some() {
            return Err(QosError::NotAGroup(name.to_owned()));
        }
        let members: Vec<String> = st
            .tree
            .children(id)
            .map(|c| st.tree.nodes[c].name.clone())
            .collect();
        if !members.is_empty() {
            return Err(QosError::NotEmpty {
                name: name.to_owned(),
                members: members.join(", "),
            });
        }
        st.tree.remove(id);
        Self::refresh_group_reserves(&mut st);
        self.shared.apply_reservations(&st);
        Ok(())
    }

    /// Change the weight of a group or volume (design §4.5). Takes effect on the next
    /// admission of every affected volume.
    pub fn set_weight(&self, name: &str, weight: u32) -> Result<(), QosError> {
        check_weight(name, weight)?;
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        self.set_weight_locked(&mut st, id, weight);
        Ok(())
    }

    /// Change a volume's weight and/or group in one step (under one lock acquisition, so
    /// no admission sees one change without the other). `group`: None = keep, Some(None)
    /// = the root, Some(Some(g)) = group `g`. Nothing changes if any part is invalid.
    pub fn update_volume(
        &self,
        name: &str,
        weight: Option<u32>,
        group: Option<Option<&str>>,
    ) -> Result<(), QosError> {
        if let Some(w) = weight {
            check_weight(name, w)?;
        }
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        let Some(core) = st.tree.nodes[id].volume.clone() else {
            return Err(QosError::NotAVolume(name.to_owned()));
        };
        let parent = group.map(|g| Self::parent_id(&st, g)).transpose()?;
        if let Some(parent) = parent {
            self.set_parent_locked(&mut st, id, &core, parent);
        }
        if let Some(w) = weight {
            self.set_weight_locked(&mut st, id, w);
        }
        Ok(())
    }

    /// Set or clear (None, or a config with no limit) the caps of a volume or group
    /// (design §12). A group's caps bound the sum of its members. The buckets start
    /// empty, as QEMU's do after a change, which grants a fresh burst; requests waiting
    /// for the old caps are re-evaluated when they ask again.
    pub fn set_caps(&self, name: &str, caps: Option<&CapsConfig>) -> Result<(), QosError> {
        let caps = caps.filter(|c| c.is_set());
        if let Some(c) = caps {
            c.validate().map_err(QosError::InvalidConfig)?;
        }
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        let now_ns = self.shared.clock.now_ns();
        st.tree.nodes[id].caps = caps.map(|c| Arc::new(NodeCaps::new(*c, now_ns)));
        let volumes: Vec<NodeId> = st.tree.volumes_under(id).collect();
        for v in volumes {
            Self::refresh_caps_path(&st, v);
        }
        Ok(())
    }

    /// Set or clear a volume's caps per operation (design §12.3). The buckets start empty.
    pub fn set_op_caps(&self, name: &str, op_caps: Option<&OpCapsConfig>) -> Result<(), QosError> {
        let op_caps = op_caps.filter(|c| c.each().next().is_some());
        if let Some(c) = op_caps {
            c.validate().map_err(QosError::InvalidConfig)?;
        }
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        let Some(core) = st.tree.nodes[id].volume.clone() else {
            return Err(QosError::NotAVolume(name.to_owned()));
        };
        let now_ns = self.shared.clock.now_ns();
        let mut kinds = 0u8;
        st.tree.nodes[id].op_caps = op_caps.map(|c| {
            let meters = c
                .each()
                .map(|(kind, _, caps)| {
                    kinds |= 1 << kind as u8;
                    Arc::new(NodeCaps::for_op(*caps, kind, now_ns))
                })
                .collect();
            (*c, meters)
        });
        core.own_caps_ops.store(kinds, Relaxed);
        Self::refresh_caps_path(&st, id);
        Ok(())
    }

    /// Give a new volume its settings beyond the weight (start-up: config, simulator).
    pub fn set_volume_policy(&self, name: &str, p: &VolumePolicy) -> Result<(), QosError> {
        self.set_caps(name, p.caps.as_ref())?;
        self.set_op_caps(name, p.op_caps.as_ref())?;
        let service = ServiceChange {
            class: Some(p.class),
            latency_target: p.latency_target,
            reserve: Some(p.reserve),
        };
        self.set_service(name, &service)
    }

    /// Give a new group its settings beyond the weight (start-up: config, simulator).
    pub fn set_group_policy(&self, name: &str, p: &GroupPolicy) -> Result<(), QosError> {
        self.set_caps(name, p.caps.as_ref())?;
        self.set_reserve(name, p.reserve.as_ref())?;
        self.set_group_class(name, Some(p.class), p.latency_target)
    }

    /// The caps of a volume or group (None: uncapped).
    pub fn caps(&self, name: &str) -> Result<Option<CapsConfig>, QosError> {
        let st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        Ok(st.tree.nodes[id].caps.as_ref().map(|c| c.config))
    }

    fn refresh_caps_path(st: &DeviceState, volume: NodeId) {
        if let Some(core) = &st.tree.nodes[volume].volume {
            core.set_caps_path(st.tree.caps_path(volume));
        }
    }

    fn node_id(st: &DeviceState, name: &str) -> Result<NodeId, QosError> {
        st.tree
            .by_name
            .get(name)
            .copied()
            .ok_or_else(|| QosError::UnknownName(name.to_owned()))
    }

    fn set_weight_locked(&self, st: &mut DeviceState, id: NodeId, weight: u32) {
        st.tree.nodes[id].weights.configured.store(weight, Relaxed);
        self.shared.refresh_weight(st, id);
    }

    /// Set or clear a volume's reservation (design §14). Refused, changing nothing, when
    /// the reservations of all volumes would take more of the device than may be
    /// reserved.
    pub fn set_reserve(&self, name: &str, reserve: Option<&ReserveConfig>) -> Result<(), QosError> {
        let is_group = {
            let st = self.shared.lock();
            let id = Self::node_id(&st, name)?;
            st.tree.nodes[id].volume.is_none()
        };
        if is_group {
            return self.set_group_reserve(name, reserve);
        }
        self.set_service(
            name,
            &ServiceChange {
                reserve: Some(reserve.copied()),
                ..ServiceChange::default()
            },
        )
    }

    /// A group's reservation: its volumes together get at least that much while they have
    /// demand, split among the active ones by weight (design §14).
    fn set_group_reserve(
        &self,
        name: &str,
        reserve: Option<&ReserveConfig>,
    ) -> Result<(), QosError> {
        let reserve = reserve.filter(|r| r.is_set()).copied();
        if let Some(r) = &reserve {
            r.validate().map_err(QosError::InvalidConfig)?;
        }
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        let old = std::mem::replace(&mut st.tree.nodes[id].reserve, reserve);
        let cfg = self.shared.cfg();
        if let Err(e) = Self::check_reservations(&st, &*cfg.model, cfg.qos.min, id) {
            st.tree.nodes[id].reserve = old;
            return Err(e);
        }
        Self::refresh_group_reserves(&mut st);
        self.shared.apply_reservations(&st);
        Ok(())
    }

    /// Set a group's class (design §13, §15). `Background` makes the whole group yield to
    /// its foreground siblings, whatever its members' classes; its active volumes leave
    /// the weight tree and re-enter at once. `Latency` judges its volumes' latency
    /// together against `latency_target` (None: keep the group's) and boosts the group's
    /// weight. `class` None keeps the group's class.
    pub fn set_group_class(
        &self,
        name: &str,
        class: Option<Class>,
        latency_target: Option<LatencyTarget>,
    ) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        if st.tree.nodes[id].volume.is_some() {
            return Err(QosError::NotAGroup(name.to_owned()));
        }
        let class = class.unwrap_or(st.tree.nodes[id].class());
        let target = latency_target.or(st.tree.nodes[id].latency_target);
        if class == Class::Latency && target.is_none() {
            return Err(QosError::InvalidConfig(format!(
                "latency_target: class \"latency\" of {name:?} needs a target, e.g. \"p99 2ms\""
            )));
        }
        st.tree.nodes[id].latency_target = target;
        let latency = class == Class::Latency;
        if st.tree.nodes[id].latency != latency {
            let now_ns = self.shared.clock.now_ns();
            let node = &mut st.tree.nodes[id];
            node.latency = latency;
            node.boost = 1.0;
            node.group_window = latency.then(|| {
                let mut w = Box::<TargetWindow>::default();
                w.reset(now_ns);
                w
            });
            self.shared.refresh_weight(&mut st, id);
            let members: Vec<NodeId> = st.tree.volumes_under(id).collect();
            for v in members {
                Self::refresh_latency_group(&st, v, now_ns);
            }
        }
        let background = class.is_background();
        if st.tree.nodes[id].background == background {
            return Ok(());
        }
        // Like a move (`set_parent_locked`): the group's active volumes leave the sums,
        // the group changes, and they come back.
        let members: Vec<(NodeId, u32, u32)> = st
            .tree
            .volumes_under(id)
            .map(|v| {
                let w = &st.tree.nodes[v].weights;
                (v, w.active.load(Relaxed), w.inuse.load(Relaxed))
            })
            .filter(|&(_, active, _)| active != 0)
            .collect();
        for &(v, ..) in &members {
            st.tree.propagate(v, 0, 0, None);
        }
        st.tree.nodes[id].background = background;
        let now = self.shared.now();
        for &(v, active, inuse) in &members {
            st.tree.propagate(v, active, inuse, Some(now.vnow));
        }
        st.tree.weights_updated = true;
        st.tree.commit_weights(&self.shared.hweight_gen);
        Ok(())
    }

    /// Does volume `id` feed a latency-class group's window (it is under one)? Set its
    /// flag and start its group window afresh: what it holds was seen under other groups
    /// (device lock held).
    fn refresh_latency_group(st: &DeviceState, id: NodeId, now_ns: u64) {
        let node = &st.tree.nodes[id];
        let Some(core) = &node.volume else { return };
        let under = node.ancestors[..node.level]
            .iter()
            .any(|&g| st.tree.nodes[g].latency);
        core.in_latency_group.store(under, Relaxed);
        if under {
            core.hist
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .group
                .reset(now_ns);
        }
    }

    /// Set a volume's class (design §13, §15). An active volume leaves the weight tree and
    /// re-enters with its new weight at once, so its neighbours' shares change from their
    /// next admission on. Refused like [`QosDevice::set_reserve`] when a background
    /// volume's floor would not fit, and for class `latency` without a target.
    pub fn set_class(&self, name: &str, class: Class) -> Result<(), QosError> {
        self.set_service(
            name,
            &ServiceChange {
                class: Some(class),
                ..ServiceChange::default()
            },
        )
    }

    /// Change a volume's class, latency target and/or reservation in one step, checked
    /// together; nothing changes when any part is refused.
    pub fn set_service(&self, name: &str, change: &ServiceChange) -> Result<(), QosError> {
        self.set_services(&[(name, *change)])
    }

    /// [`QosDevice::set_service`] for several volumes, checked together once: the state
    /// file at start-up holds changes that were each valid in the order they were made,
    /// and applied one by one in another order they could pass through an over-committed
    /// state that the final one is not.
    pub fn set_services(&self, changes: &[(&str, ServiceChange)]) -> Result<(), QosError> {
        for (_, change) in changes {
            if let Some(Some(r)) = &change.reserve {
                r.validate().map_err(QosError::InvalidConfig)?;
            }
        }
        let mut st = self.shared.lock();
        let mut staged = Vec::with_capacity(changes.len());
        for (name, change) in changes {
            let id = Self::node_id(&st, name)?;
            let Some(core) = st.tree.nodes[id].volume.clone() else {
                return Err(QosError::NotAVolume((*name).to_owned()));
            };
            let node = &st.tree.nodes[id];
            let class = change.class.unwrap_or(node.class());
            let target = change.latency_target.or(node.latency_target);
            if class == Class::Latency && target.is_none() {
                return Err(QosError::InvalidConfig(format!(
                    "latency_target: class \"latency\" of {name:?} needs a target, e.g. \"p99 2ms\""
                )));
            }
            staged.push((
                id,
                core,
                class,
                target,
                change.reserve.map(|r| r.filter(|r| r.is_set())),
            ));
        }
        // Stage the reservations and floors, check them once, undo them all if refused.
        let old: Vec<_> = staged
            .iter()
            .map(|(id, ..)| (st.tree.nodes[*id].background, st.tree.nodes[*id].reserve))
            .collect();
        for (id, _, class, _, reserve) in &staged {
            let node = &mut st.tree.nodes[*id];
            node.background = class.is_background();
            if let Some(r) = reserve {
                node.reserve = *r;
            }
        }
        let cfg = self.shared.cfg();
        let named = staged
            .iter()
            .map(|(id, ..)| *id)
            .max_by_key(|&id| reserve::own_ppm(&st.tree.nodes[id], &*cfg.model));
        if let Some(named) = named {
            if let Err(e) = Self::check_reservations(&st, &*cfg.model, cfg.qos.min, named) {
                for ((id, ..), (background, reserve)) in staged.iter().zip(old).rev() {
                    let node = &mut st.tree.nodes[*id];
                    (node.background, node.reserve) = (background, reserve);
                }
                return Err(e);
            }
        }
        self.shared.apply_reservations(&st);
        for ((id, core, class, target, _), (was_background, _)) in staged.into_iter().zip(old) {
            let node = &mut st.tree.nodes[id];
            node.latency_target = target;
            let latency = class == Class::Latency;
            if node.latency != latency {
                node.latency = latency;
                node.boost = 1.0;
                core.boost_ppm.store(1_000_000, Relaxed);
                core.latency_class.store(latency, Relaxed);
                let now_ns = self.shared.clock.now_ns();
                core.hist
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .target
                    .reset(now_ns);
                self.shared.refresh_weight(&mut st, id);
            }
            if class.is_background() != was_background {
                self.change_class_locked(&mut st, id, &core, class.is_background());
            }
        }
        Ok(())
    }

    /// Re-enter volume `id` into the weight tree as (not) background, its flag already
    /// set (device lock held).
    fn change_class_locked(
        &self,
        st: &mut DeviceState,
        id: NodeId,
        core: &VolumeCore,
        background: bool,
    ) {
        let cells = Arc::clone(&st.tree.nodes[id].weights);
        let active = cells.active.load(Relaxed) != 0;
        if active {
            // Leave the sums as the old class (propagate reads the flag) ...
            st.tree.nodes[id].background = !background;
            st.tree.propagate(id, 0, 0, None);
            st.tree.nodes[id].background = background;
        }
        core.background.store(background, Relaxed);
        let w = st.tree.nodes[id].competing_weight();
        cells.weight.store(w, Relaxed);
        if active {
            // ... and re-enter as the new one.
            let now = self.shared.now();
            st.tree.propagate(id, w, w, Some(now.vnow));
        } else {
            // Its in-use weight from before is for the old weight: start from the full one.
            st.tree.nodes[id].last_inuse = 0;
        }
        st.tree.weights_updated = true;
        st.tree.commit_weights(&self.shared.hweight_gen);
        core.invalidate_hweights(self.shared.hweight_gen.load(Acquire));
    }

    /// Is the device's reserved total within what may be reserved? `changed`: the node
    /// to name in the error.
    fn check_reservations(
        st: &DeviceState,
        model: &dyn CostModel,
        min_pct: f64,
        changed: NodeId,
    ) -> Result<(), QosError> {
        let total = reserve::total_ppm(&st.tree, model);
        let limit = reservable_ppm(min_pct);
        if total <= limit {
            return Ok(());
        }
        Err(QosError::Overcommitted {
            name: st.tree.nodes[changed].name.clone(),
            share_pct: reserve::own_ppm(&st.tree.nodes[changed], model) as f64 / 1e4,
            total_pct: total as f64 / 1e4,
            reservable_pct: limit as f64 / 1e4,
        })
    }

    /// A volume's reservation as configured.
    pub fn reserve(&self, name: &str) -> Result<Option<ReserveConfig>, QosError> {
        let st = self.shared.lock();
        let id = Self::node_id(&st, name)?;
        Ok(st.tree.nodes[id].reserve)
    }

    /// The state the planner steers (`planner::Planner`).
    pub(crate) fn shared(&self) -> &Arc<DeviceShared> {
        &self.shared
    }

    /// The planning period, ns.
    pub fn period_ns(&self) -> u64 {
        self.shared.params().period_ns()
    }

    /// The derived QoS parameters.
    pub fn params(&self) -> QosParams {
        self.shared.params()
    }

    /// The QoS configuration in effect (as given to [`QosDevice::new`] or
    /// [`QosDevice::set_qos`]).
    pub fn qos_config(&self) -> QosConfig {
        self.shared.cfg().qos.clone()
    }

    /// Throttling enabled (`enable = true`).
    pub fn enabled(&self) -> bool {
        self.shared.params().enable
    }

    /// Replace the QoS parameters at runtime. The new latency targets, percentiles and
    /// `enable` apply to the next request; the vrate bounds at once (the base vrate is
    /// clamped into them, a deliberate deviation from the kernel's 4 %-per-period
    /// approach so that an operator's bounds hold within a period); the period length from
    /// the next planner run. Missing latency targets come from the current model.
    pub fn set_qos(&self, qos: &QosConfig) -> Result<(), QosError> {
        qos.validate().map_err(QosError::InvalidConfig)?;
        let mut st = self.shared.lock();
        Self::check_all_reservations(&st, &*self.shared.cfg().model, qos.min)?;
        let model_lat = self.shared.cfg().model.default_latency_us();
        let params = QosParams::from_config(qos, model_lat);
        let model = Arc::clone(&self.shared.cfg().model);
        self.publish(&mut st, params, model, qos.clone());
        Ok(())
    }

    /// Replace the cost model at runtime (see [`QosDevice::set_qos`] for when changes
    /// apply). Latency targets left to the preset are re-derived from the new model.
    pub fn set_model(&self, model: &ModelConfig) -> Result<(), QosError> {
        let built = model.build_boxed().map_err(QosError::InvalidConfig)?;
        self.set_model_boxed(built)
    }

    /// [`QosDevice::set_model`] for an already built model. Refused when the
    /// reservations, priced by the new model, would take more than may be reserved.
    pub fn set_model_boxed(&self, model: Box<dyn CostModel>) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let qos = self.shared.cfg().qos.clone();
        Self::check_all_reservations(&st, &*model, qos.min)?;
        let params = QosParams::from_config(&qos, model.default_latency_us());
        self.publish(&mut st, params, Arc::from(model), qos);
        self.shared.apply_reservations(&st);
        Ok(())
    }

    /// [`QosDevice::check_reservations`] naming the volume with the largest reservation.
    fn check_all_reservations(
        st: &DeviceState,
        model: &dyn CostModel,
        min_pct: f64,
    ) -> Result<(), QosError> {
        let largest = st
            .tree
            .volumes
            .iter()
            .copied()
            .max_by_key(|&v| reserve::own_ppm(&st.tree.nodes[v], model));
        match largest {
            Some(id) => Self::check_reservations(st, model, min_pct, id),
            None => Ok(()),
        }
    }

    /// Publish a new configuration; called with the device lock held.
    fn publish(
        &self,
        st: &mut DeviceState,
        params: QosParams,
        model: Arc<dyn CostModel>,
        qos: QosConfig,
    ) {
        let was_enabled = self.shared.params().enable;
        self.shared
            .publish_cfg(st, DeviceCfg { params, model, qos });
        let now = self.shared.now();
        let rate = st
            .vtime_base_rate
            .clamp(params.vrate_min(), params.vrate_max());
        // Also recomputes the margins for the new period length.
        self.shared.set_base_rate(st, rate);
        if params.enable && !was_enabled && st.running {
            // The planner did not run while disabled: start a fresh period now rather
            // than judging the whole disabled time as one period.
            self.shared.start_period(st, now);
        }
        self.shared.refresh_rate(st, now);
    }

    /// Move a volume to another group (None = the root). Its weights, budget and
    /// statistics stay; its share is recomputed among its new siblings from the next
    /// admission on.
    pub fn set_parent(&self, volume: &str, group: Option<&str>) -> Result<(), QosError> {
        self.update_volume(volume, None, Some(group))
    }

    fn set_parent_locked(
        &self,
        st: &mut DeviceState,
        id: NodeId,
        core: &VolumeCore,
        parent: NodeId,
    ) {
        if st.tree.nodes[id].parent() == Some(parent) {
            return;
        }
        let cells = Arc::clone(&st.tree.nodes[id].weights);
        let (active, inuse) = (cells.active.load(Relaxed), cells.inuse.load(Relaxed));
        if active != 0 {
            // Leave the old parent's sums exactly as deactivation does.
            st.tree.propagate(id, 0, 0, None);
        }
        st.tree.reparent(id, parent);
        core.set_path(st.tree.path(id));
        Self::refresh_caps_path(st, id);
        Self::refresh_latency_group(st, id, self.shared.clock.now_ns());
        if active != 0 {
            let now = self.shared.now();
            st.tree.propagate(id, active, inuse, Some(now.vnow));
        }
        st.tree.weights_updated = true;
        st.tree.commit_weights(&self.shared.hweight_gen);
        core.invalidate_hweights(self.shared.hweight_gen.load(Acquire));
    }

    /// Every group, parents before children.
    pub fn groups(&self) -> Vec<NodeInfo> {
        let st = self.shared.lock();
        st.tree
            .nodes
            .iter()
            .skip(1)
            .filter(|n| n.volume.is_none() && !n.removed)
            .map(|n| Self::info(&st, n))
            .collect()
    }

    /// Every volume, in creation order.
    pub fn volumes(&self) -> Vec<NodeInfo> {
        let st = self.shared.lock();
        st.tree
            .volumes
            .iter()
            .map(|&id| Self::info(&st, &st.tree.nodes[id]))
            .collect()
    }

    fn info(st: &DeviceState, n: &super::tree::TreeNode) -> NodeInfo {
        NodeInfo {
            name: n.name.clone(),
            weight: n.weights.configured.load(Relaxed),
            parent: n
                .parent()
                .filter(|&p| p != ROOT)
                .map(|p| st.tree.nodes[p].name.clone()),
            caps: n.caps.as_ref().map(|c| c.config),
            op_caps: n.op_caps.as_ref().map(|(c, _)| *c),
            reserve: n.reserve,
            class: n.class(),
            latency_target: n.latency_target,
            boost: n.boost,
        }
    }

    /// The base vrate, ppm of 100 %.
    pub fn vrate_ppm(&self) -> u64 {
        rate_to_ppm(self.shared.base_rate.load(Relaxed))
    }

    /// Device and per-volume statistics.
    pub fn stats(&self) -> DeviceStats {
        let (running, busy_level, last, contended, volumes) = {
            let st = self.shared.lock();
            let vols: Vec<Arc<VolumeCore>> = st
                .tree
                .volumes
                .iter()
                .filter_map(|&id| st.tree.nodes[id].volume.clone())
                .collect();
            let contended = (st.contended_periods, st.contended_periods_missed);
            (st.running, st.busy_level, st.last, contended, vols)
        };
        let volumes = volumes
            .into_iter()
            .map(|core| VolumeQos::new(Arc::clone(&self.shared), core).stats())
            .collect();
        let params = self.shared.params();
        DeviceStats {
            enabled: params.enable,
            running,
            vrate_pct: self.vrate_ppm() as f64 / 10_000.0,
            busy_level,
            period_us: params.period_us,
            missed_ppm: last.missed_ppm,
            rq_wait_pct: last.rq_wait_pct,
            last_period: last,
            contended_periods: contended.0,
            contended_periods_missed: contended.1,
            volumes,
        }
    }

    /// The last planner record (cheap; no per-volume work).
    pub fn last_period(&self) -> PeriodRecord {
        self.shared.lock().last
    }
}
