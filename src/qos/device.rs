//! One QoS domain: a host disk shared by many volumes.
//!
//! [`QosDevice`] is the control plane's handle: it builds the weight tree (groups,
//! volumes, moves) and publishes the QoS configuration and the cost model. What the issue
//! path and the planner share lives in [`super::shared`]; a volume's service settings
//! (weight, caps, reservation, class) in [`super::device_service`]. It is shared (`Arc`,
//! `Send + Sync`) by every worker thread, which hold [`VolumeQos`] handles, and by one
//! planner thread that calls `planner::Planner::plan` once per period.
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
//! device lives, because a reader may still be using one: a read on every request stays
//! one load, where tracking readers (`ArcSwap`) costs atomics per request. `ArcSwap` is
//! the rule where reads are rare (a volume's tree path and caps, read after a change).
//! Each configuration is a few hundred bytes, changes are operator-driven, and publishing
//! a configuration equal to an earlier one reuses it, so the history stays small. The
//! vrate bounds apply at once (the base vrate is clamped into them) and a new period
//! length from the next planner run on.
//!
//! Volumes can move between groups ([`QosDevice::set_parent`]): under the device lock the
//! volume leaves its old parent's sums (as if it went idle), its tree path is replaced
//! (the issue path reads the path only to recompute hweights after a generation change)
//! and it re-enters under the new parent with the same active/inuse weights.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use crate::cost_model::{CostModel, ModelConfig};
use crate::vtime::VTIME_PER_USEC;

use super::caps::{CapsConfig, OpCapsConfig};
use super::class::Class;
use super::clock::Clock;
use super::config::QosConfig;
use super::error::QosError;
use super::params::QosParams;
use super::reserve::ReserveConfig;
use super::reserve_shares;
use super::shared::{DeviceCfg, DeviceShared, DeviceState};
use super::stats::{DeviceStats, PeriodRecord};
use super::tree::{NodeId, Tree, ROOT};
use super::volume::{rate_to_ppm, VolumeQos};
use super::volume_core::VolumeCore;
use super::weights::NodeWeights;

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
    pub(super) shared: Arc<DeviceShared>,
}

pub(super) fn check_weight(name: &str, weight: u32) -> Result<(), QosError> {
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
            lone_queue_at_ns: 0,
            cfg_history: vec![Arc::new(DeviceCfg {
                params,
                model: Arc::from(model),
                qos: qos.clone(),
            })],
        };
        QosDevice {
            shared: Arc::new(DeviceShared::new(state, clock, now_ns)),
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
        let parent = st.parent_id(parent)?;
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
        let parent = st.parent_id(group)?;
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
        st.refresh_latency_group(id, now.now_ns);
        Ok(Arc::new(VolumeQos::new(Arc::clone(&self.shared), core)))
    }

    /// Remove a volume (design §4.6): it leaves the active list and the weight tree at
    /// once, as an idle one does, and its name is free again. The caller has ended its
    /// connection: nothing of it is in flight or waiting, and its handle admits nothing
    /// more.
    pub fn remove_volume(&self, name: &str) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = st.node_id(name)?;
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
        self.refresh_declared_target(&mut st);
        Ok(())
    }

    /// Move a group, with everything under it, under `parent` (None = the root; design
    /// §4.5): it leaves its old parent's sums as if it went idle, the paths of its
    /// volumes are rebuilt, and it re-enters the new parent with its volumes' state.
    pub fn move_group(&self, name: &str, parent: Option<&str>) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = st.node_id(name)?;
        if st.tree.nodes[id].volume.is_some() {
            return Err(QosError::NotAGroup(name.to_owned()));
        }
        let parent_id = st.parent_id(parent)?;
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
                st.refresh_caps_path(v);
                st.refresh_latency_group(v, now_ns);
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

    /// Remove a group that has no members (design §4.6).
    pub fn remove_group(&self, name: &str) -> Result<(), QosError> {
        let mut st = self.shared.lock();
        let id = st.node_id(name)?;
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
        st.refresh_group_reserves();
        self.shared.apply_reservations(&st);
        self.refresh_declared_target(&mut st);
        Ok(())
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
        let params = QosParams::derive(qos, model_lat, st.tree.declared_latency_target());
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
        let declared = st.tree.declared_latency_target();
        let params = QosParams::derive(&qos, model.default_latency_us(), declared);
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
            .max_by_key(|&v| reserve_shares::own_ppm(&st.tree.nodes[v], model));
        match largest {
            Some(id) => st.check_reservations(model, min_pct, id),
            None => Ok(()),
        }
    }

    /// Re-derive the parameters after a latency-class target was declared, changed or
    /// withdrawn ([`QosParams::derive`]); publishes only what changed (device lock held).
    pub(super) fn refresh_declared_target(&self, st: &mut DeviceState) {
        let cfg = self.shared.cfg();
        let declared = st.tree.declared_latency_target();
        let params = QosParams::derive(&cfg.qos, cfg.model.default_latency_us(), declared);
        if params != cfg.params {
            let (model, qos) = (Arc::clone(&cfg.model), cfg.qos.clone());
            self.publish(st, params, model, qos);
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

    pub(super) fn set_parent_locked(
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
        st.refresh_caps_path(id);
        st.refresh_latency_group(id, self.shared.clock.now_ns());
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
