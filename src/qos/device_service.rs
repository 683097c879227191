//! A volume's or group's service settings at run time: weight, caps, reservation and
//! class (design §4.5, §13, §14, §15). Each change is checked whole under the device
//! lock and refused without a trace when any part is invalid.

use crate::lock::Locked;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use super::cap_meter::NodeCaps;
use super::caps::{CapsConfig, OpCapsConfig};
use super::class::{Class, LatencyTarget};
use super::device::{check_weight, QosDevice};
use super::error::QosError;
use super::histogram::TargetWindow;
use super::policy::{GroupPolicy, ServiceChange, VolumePolicy};
use super::reserve::ReserveConfig;
use super::reserve_shares;
use super::shared::DeviceState;
use super::tree::NodeId;
use super::volume_core::VolumeCore;

impl QosDevice {
    /// Change the weight of a group or volume (design §4.5). Takes effect on the next
    /// admission of every affected volume.
    pub fn set_weight(&self, name: &str, weight: u32) -> Result<(), QosError> {
        check_weight(name, weight)?;
        let mut st = self.shared.lock();
        let id = st.node_id(name)?;
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
        let id = st.node_id(name)?;
        let Some(core) = st.tree.nodes[id].volume.clone() else {
            return Err(QosError::NotAVolume(name.to_owned()));
        };
        let parent = group.map(|g| st.parent_id(g)).transpose()?;
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
        let id = st.node_id(name)?;
        let now_ns = self.shared.clock.now_ns();
        st.tree.nodes[id].caps = caps.map(|c| Arc::new(NodeCaps::new(*c, now_ns)));
        let volumes: Vec<NodeId> = st.tree.volumes_under(id).collect();
        for v in volumes {
            st.refresh_caps_path(v);
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
        let id = st.node_id(name)?;
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
        st.refresh_caps_path(id);
        Ok(())
    }

    /// Give a new volume its settings beyond the weight (start-up: config, simulator).
    pub fn set_volume_policy(&self, name: &str, p: &VolumePolicy) -> Result<(), QosError> {
        self.set_caps(name, p.caps.as_ref())?;
        self.set_op_caps(name, p.op_caps.as_ref())?;
        let service = ServiceChange {
            class: Some(p.class),
            latency_target: p.latency_target.map(Some),
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
        let id = st.node_id(name)?;
        Ok(st.tree.nodes[id].caps.as_ref().map(|c| c.config))
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
            let id = st.node_id(name)?;
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
        let id = st.node_id(name)?;
        let old = std::mem::replace(&mut st.tree.nodes[id].reserve, reserve);
        let cfg = self.shared.cfg();
        if let Err(e) = st.check_reservations(&*cfg.model, cfg.qos.min, id) {
            st.tree.nodes[id].reserve = old;
            return Err(e);
        }
        st.refresh_group_reserves();
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
        let id = st.node_id(name)?;
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
                st.refresh_latency_group(v, now_ns);
            }
        }
        self.refresh_declared_target(&mut st);
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
            let id = st.node_id(name)?;
            let Some(core) = st.tree.nodes[id].volume.clone() else {
                return Err(QosError::NotAVolume((*name).to_owned()));
            };
            let node = &st.tree.nodes[id];
            let class = change.class.unwrap_or(node.class());
            let target = change.latency_target.unwrap_or(node.latency_target);
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
            .max_by_key(|&id| reserve_shares::own_ppm(&st.tree.nodes[id], &*cfg.model));
        if let Some(named) = named {
            if let Err(e) = st.check_reservations(&*cfg.model, cfg.qos.min, named) {
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
                core.hist.locked().target.reset(now_ns);
                self.shared.refresh_weight(&mut st, id);
            }
            if class.is_background() != was_background {
                self.change_class_locked(&mut st, id, &core, class.is_background());
            }
        }
        self.refresh_declared_target(&mut st);
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

    /// A volume's reservation as configured.
    pub fn reserve(&self, name: &str) -> Result<Option<ReserveConfig>, QosError> {
        let st = self.shared.lock();
        let id = st.node_id(name)?;
        Ok(st.tree.nodes[id].reserve)
    }
}
