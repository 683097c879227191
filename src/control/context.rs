//! What the control plane operates on, and every operation the API offers, independent
//! of HTTP (the handlers in [`super::handlers`] are thin wrappers).
//!
//! A change is validated completely, then recorded in the state file, then applied to
//! the QoS core in one step (one device-lock acquisition), so a request either changes
//! everything it asks for or nothing. The QoS core applies weights and group moves on
//! the next admission of each affected volume and QoS/model changes at once (see
//! [`QosDevice::set_qos`]); the planner is woken so that a new period length takes
//! effect without waiting out the old period.

use super::api::*;
use super::error::ApiError;
use super::filter::VolumeFilter;
use super::state::RuntimeState;
use crate::backend::volume::Volume;
use crate::calibration::Calibration;
use crate::config::{Config, ROOT_GROUP};
use crate::cost_model::ModelConfig;
use crate::lock::{Locked, RwLocked};
use crate::qos::{CapsConfig, QosConfig, QosDevice, ServiceChange, VolumeQos};
use crate::volume_set::VolumeSet;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// A volume as the control plane sees it: its data-path counters and QoS handle.
pub type VolumeHandle = Arc<Volume<Arc<VolumeQos>>>;

/// Counter samples for rates.
#[derive(Debug, Default)]
struct Rates {
    last: Option<(Instant, HashMap<String, [u64; 4]>)>,
    /// Per volume `[reads/s, writes/s, read bytes/s, write bytes/s]`.
    rates: HashMap<String, [f64; 4]>,
    interval_s: f64,
}

/// The shared state of the control plane.
pub struct Control {
    pub qos: Arc<QosDevice>,
    /// The volumes served; the control plane adds and removes them.
    pub volume_set: Arc<VolumeSet>,
    /// The config as the daemon runs it (the `config` source of every value): the file,
    /// with the volumes and groups added, moved and removed at run time (the state
    /// file's). Read by cloning the `Arc` (the lock is never held while a view is built).
    config: RwLock<Arc<Config>>,
    /// One change of the running config at a time: taken before `state`, never while
    /// holding it (readers take `state` and then, for an instant, `config`).
    changing: Mutex<()>,
    pub state_path: PathBuf,
    pub(super) state: Mutex<RuntimeState>,
    /// Woken after QoS/model changes.
    pub planner: Option<std::thread::Thread>,
    rates: Mutex<Rates>,
    started: Instant,
    /// The model measured at start-up, when the config gives none.
    pub(super) calibrated: Option<Calibration>,
}

/// A QoS validation message, `caps.burst_iops: ...`, as a 400 naming that key (or
/// `whole` when the message names none).
fn key_error(message: String, whole: &str) -> ApiError {
    match message.split_once(": ") {
        Some((field, rest)) => ApiError::field(field, rest),
        None => ApiError::field(whole, message),
    }
}

fn check_reserve(reserve: &crate::qos::ReserveConfig) -> Result<(), ApiError> {
    reserve.validate().map_err(|e| key_error(e, "reserve"))
}

fn check_caps(caps: &CapsConfig) -> Result<(), ApiError> {
    caps.validate().map_err(|e| key_error(e, "caps"))
}

fn check_weight(weight: u32) -> Result<(), ApiError> {
    crate::qos::check_weight(weight).map_err(|e| ApiError::field("weight", e.to_string()))
}

impl Control {
    pub fn new(
        qos: Arc<QosDevice>,
        volume_set: Arc<VolumeSet>,
        config: Config,
        state_path: PathBuf,
        planner: Option<std::thread::Thread>,
    ) -> Self {
        Control {
            qos,
            volume_set,
            config: RwLock::new(Arc::new(config)),
            changing: Mutex::new(()),
            state_path,
            state: Mutex::new(RuntimeState::default()),
            planner,
            rates: Mutex::new(Rates::default()),
            started: Instant::now(),
            calibrated: None,
        }
    }

    /// The config as the daemon runs it.
    pub fn config(&self) -> Arc<Config> {
        self.config.read_locked().clone()
    }

    /// Starts a change of the running config (adding, moving or removing a volume or
    /// group): the changes are serialised, and the config read now stays current until
    /// [`Self::set_config`].
    pub(super) fn begin_config_change(&self) -> MutexGuard<'_, ()> {
        self.changing.locked()
    }

    /// The running config after a change (under [`Self::begin_config_change`]).
    pub(super) fn set_config(&self, config: Config) {
        *self.config.write_locked() = Arc::new(config);
    }

    /// Every volume, in creation order.
    pub fn handles(&self) -> Vec<VolumeHandle> {
        self.volume_set
            .list()
            .iter()
            .map(|s| s.volume.clone())
            .collect()
    }

    /// The daemon runs with this calibrated model (see [`super::calibrated`]).
    pub fn with_calibration(mut self, calibrated: Option<Calibration>) -> Self {
        self.calibrated = calibrated;
        self
    }

    /// A QoS configuration as it runs: with the calibrated default targets filled in.
    fn qos_in_effect(&self, qos: &QosConfig) -> QosConfig {
        match &self.calibrated {
            Some(c) => c.qos_defaults(qos),
            None => qos.clone(),
        }
    }

    /// The model in effect and where it comes from.
    pub fn model(&self) -> ModelView {
        let st = self.state.locked();
        self.model_view(&st)
    }

    fn model_view(&self, st: &RuntimeState) -> ModelView {
        let Sourced { value, source } = self.model_sourced(st);
        let now_ns = self.qos.now_ns();
        ModelView {
            value,
            source,
            calibration: self
                .calibrated
                .clone()
                .filter(|_| source == Source::Calibrated),
            learned: self
                .qos
                .learned()
                .map(|m| super::api::LearnedView::of(&m, now_ns)),
        }
    }

    /// The learned model once it moved (or was resumed), else a runtime model, else the
    /// calibrated one, else the config's.
    fn model_sourced(&self, st: &RuntimeState) -> Sourced<ModelConfig> {
        if let Some(m) = self.qos.learned() {
            if m.status.moves > 0 || st.learned.is_some() {
                return Sourced {
                    value: m.model,
                    source: Source::Learned,
                };
            }
        }
        match (&st.model, &self.calibrated) {
            (None, Some(c)) => Sourced {
                value: c.model.clone(),
                source: Source::Calibrated,
            },
            _ => Sourced::pick(self.config().device.model.clone(), st.model.clone()),
        }
    }

    /// Load the state file and apply it (at start-up). Overrides naming groups or
    /// volumes that no longer exist are dropped with a warning (and the file rewritten);
    /// an unreadable file is an error.
    pub fn restore(&self) -> Result<(), String> {
        let mut st = RuntimeState::load(&self.state_path)?;
        let before = st.clone();
        let group_known =
            |g: &str| g == ROOT_GROUP || self.config().groups.iter().any(|c| c.name == g);
        st.groups.retain(|name, _| {
            let keep = self.config().groups.iter().any(|g| &g.name == name);
            if !keep {
                tracing::warn!(group = %name, "state file: no such group any more; dropped");
            }
            keep
        });
        st.volumes.retain(|name, o| {
            if !self.handles().iter().any(|v| &v.name == name) {
                tracing::warn!(volume = %name, "state file: no such volume any more; dropped");
                return false;
            }
            if let Some(g) = &o.group {
                if !group_known(g) {
                    tracing::warn!(volume = %name, group = %g, "state file: no such group any more; group change dropped");
                    o.group = None;
                }
            }
            o.weight.is_some()
                || o.group.is_some()
                || o.caps.is_some()
                || o.op_caps.is_some()
                || o.class.is_some()
                || o.latency_target.is_some()
                || o.reserve.is_some()
        });
        if let Some(m) = &st.model {
            self.qos
                .set_model(m)
                .map_err(|e| format!("state file {}: model: {e}", self.state_path.display()))?;
        }
        if let Some(q) = &st.qos {
            self.qos
                .set_qos(&self.qos_in_effect(q))
                .map_err(|e| format!("state file {}: qos: {e}", self.state_path.display()))?;
        }
        let in_state_file =
            |e: crate::qos::QosError| format!("state file {}: {e}", self.state_path.display());
        for (name, o) in &st.groups {
            if let Some(w) = o.weight {
                self.qos.set_weight(name, w).map_err(in_state_file)?;
            }
            if let Some(caps) = &o.caps {
                self.qos.set_caps(name, Some(caps)).map_err(in_state_file)?;
            }
        }
        for (name, o) in &st.volumes {
            let group = o
                .group
                .as_deref()
                .map(|g| Some(g).filter(|g| *g != ROOT_GROUP));
            self.qos
                .update_volume(name, o.weight, group)
                .map_err(in_state_file)?;
            if let Some(caps) = &o.caps {
                self.qos.set_caps(name, Some(caps)).map_err(in_state_file)?;
            }
            if let Some(op_caps) = &o.op_caps {
                self.qos
                    .set_op_caps(name, Some(op_caps))
                    .map_err(in_state_file)?;
            }
        }
        // Classes and reservations together: checked once, as they stand at the end.
        let services: Vec<(&str, ServiceChange)> = st
            .volumes
            .iter()
            .map(|(name, o)| {
                let change = ServiceChange {
                    class: o.class,
                    latency_target: o.latency_target,
                    reserve: o.reserve.map(Some),
                };
                (name.as_str(), change)
            })
            .filter(|(_, change)| *change != ServiceChange::default())
            .collect();
        self.qos.set_services(&services).map_err(in_state_file)?;
        for (name, o) in &st.groups {
            if let Some(r) = &o.reserve {
                self.qos.set_reserve(name, Some(r)).map_err(in_state_file)?;
            }
            if o.class.is_some() || o.latency_target.is_some() {
                self.qos
                    .set_group_class(name, o.class, o.latency_target)
                    .map_err(in_state_file)?;
            }
        }
        self.start_learning(&mut st)?;
        if st != before {
            st.save(&self.state_path)
                .map_err(|e| format!("state file {}: {e}", self.state_path.display()))?;
        }
        if !st.is_empty() {
            tracing::info!(path = %self.state_path.display(), "applied runtime changes from the state file");
        }
        *self.state.locked() = st;
        Ok(())
    }

    /// Record `change` in the state file, then apply it with `apply`; on failure
    /// neither happens.
    pub(super) fn commit(
        &self,
        change: impl FnOnce(&mut RuntimeState),
        apply: impl FnOnce() -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let mut st = self.state.locked();
        let mut next = st.clone();
        change(&mut next);
        next.save(&self.state_path).map_err(|e| {
            ApiError::internal(format!(
                "cannot write the state file {}: {e} (nothing changed)",
                self.state_path.display()
            ))
        })?;
        if let Err(e) = apply() {
            // Validation should have caught it; keep the file in line with what runs.
            let _ = st.save(&self.state_path);
            return Err(e);
        }
        *st = next;
        Ok(())
    }

    /// Wakes the planner, so that a new period takes effect without waiting out the old.
    fn kick_planner(&self) {
        if let Some(t) = &self.planner {
            t.unpark();
        }
    }

    // ----- device -----

    pub fn device(&self) -> DeviceView {
        let st = self.state.locked();
        let p = self.qos.params();
        let stats = self.qos.stats();
        DeviceView {
            model: self.model_sourced(&st),
            qos: Sourced::pick(self.config().device.qos.clone(), st.qos.clone()),
            effective: EffectiveQos {
                enable: p.enable,
                rpct: f64::from(p.rppm) / 10_000.0,
                rlat_us: p.rlat_us,
                wpct: f64::from(p.wppm) / 10_000.0,
                wlat_us: p.wlat_us,
                min_pct: p.min_ppm as f64 / 10_000.0,
                max_pct: p.max_ppm as f64 / 10_000.0,
                protect: p.protect,
            },
            vrate_pct: stats.vrate_pct,
            busy_level: stats.busy_level,
            period_us: stats.period_us,
            running: stats.running,
        }
    }

    pub fn put_qos(&self, qos: QosConfig) -> Result<DeviceView, ApiError> {
        qos.validate().map_err(|e| ApiError::from_validation(&e))?;
        self.commit(
            |s| s.qos = Some(qos.clone()),
            || {
                self.qos
                    .set_qos(&self.qos_in_effect(&qos))
                    .map_err(ApiError::from_qos)
            },
        )?;
        self.kick_planner();
        tracing::info!(?qos, "control: device qos changed");
        Ok(self.device())
    }

    pub fn put_model(&self, model: ModelConfig) -> Result<DeviceView, ApiError> {
        model
            .validate()
            .map_err(|e| ApiError::from_validation(&e))?;
        self.commit(
            |s| {
                s.model = Some(model.clone());
                s.learned = None;
            },
            || self.qos.set_model(&model).map_err(ApiError::from_qos),
        )?;
        self.start_learning(&mut self.state.locked())
            .map_err(ApiError::internal)?;
        self.kick_planner();
        tracing::info!(?model, "control: device model changed");
        Ok(self.device())
    }

    // ----- groups -----

    fn group_view(&self, st: &RuntimeState, info: &crate::qos::NodeInfo) -> GroupView {
        let cfg_weight = self
            .config()
            .groups
            .iter()
            .find(|g| g.name == info.name)
            .map(|g| g.weight)
            .unwrap_or(info.weight);
        let o = st.groups.get(&info.name);
        GroupView {
            name: info.name.clone(),
            weight: Sourced {
                value: info.weight,
                source: Sourced::pick(cfg_weight, o.and_then(|o| o.weight)).source,
            },
            caps: Sourced::new(
                info.caps.unwrap_or_default(),
                o.is_some_and(|o| o.caps.is_some()),
            ),
            reserve: Sourced::new(
                info.reserve.unwrap_or_default(),
                o.is_some_and(|o| o.reserve.is_some()),
            ),
            class: Sourced::new(info.class, o.is_some_and(|o| o.class.is_some())),
            latency_target: Sourced::new(
                info.latency_target,
                o.is_some_and(|o| o.latency_target.is_some()),
            ),
            boost: info.boost,
            parent: info.parent.clone().unwrap_or_else(|| ROOT_GROUP.into()),
            volumes: self
                .qos
                .volumes()
                .into_iter()
                .filter(|v| v.parent.as_deref() == Some(info.name.as_str()))
                .map(|v| v.name)
                .collect(),
        }
    }

    pub fn groups(&self) -> GroupList {
        let st = self.state.locked();
        GroupList {
            groups: self
                .qos
                .groups()
                .iter()
                .map(|g| self.group_view(&st, g))
                .collect(),
        }
    }

    pub fn group(&self, name: &str) -> Result<GroupView, ApiError> {
        let st = self.state.locked();
        self.qos
            .groups()
            .iter()
            .find(|g| g.name == name)
            .map(|g| self.group_view(&st, g))
            .ok_or_else(|| ApiError::not_found(format!("no group named {name:?}")))
    }

    pub fn patch_group(&self, name: &str, patch: GroupPatch) -> Result<GroupView, ApiError> {
        let current = self.group(name)?;
        if let Some(w) = patch.weight {
            check_weight(w)?;
        }
        if let Some(caps) = &patch.caps {
            check_caps(caps)?;
        }
        if let Some(r) = &patch.reserve {
            check_reserve(r)?;
        }
        // Refused before anything changes: the other settings of the patch are applied
        // one by one.
        if patch.class == Some(crate::qos::Class::Latency)
            && patch.latency_target.is_none()
            && current.latency_target.value.is_none()
        {
            return Err(ApiError::field(
                "latency_target",
                format!("class \"latency\" of {name:?} needs a target, e.g. \"p99 2ms\""),
            ));
        }
        if patch.weight.is_none()
            && patch.caps.is_none()
            && patch.reserve.is_none()
            && patch.class.is_none()
            && patch.latency_target.is_none()
            && patch.parent.is_none()
        {
            return self.group(name);
        }
        // A move is checked as the config would be (unknown parent, a cycle).
        let _changing = self.begin_config_change();
        let mut next = (*self.config()).clone();
        if let Some(parent) = &patch.parent {
            if let Some(g) = next.groups.iter_mut().find(|g| g.name == name) {
                g.parent = Some(parent.clone()).filter(|p| p != ROOT_GROUP);
            }
            next.validate().map_err(|e| match e {
                crate::config::ConfigError::Invalid { message, .. } => {
                    ApiError::field("parent", message)
                }
                other => ApiError::field("parent", other),
            })?;
        }
        self.commit(
            |s| {
                let o = s.groups.entry(name.to_owned()).or_default();
                o.parent = patch.parent.clone().or(o.parent.take());
                o.weight = patch.weight.or(o.weight);
                o.caps = patch.caps.or(o.caps);
                o.reserve = patch.reserve.or(o.reserve);
                o.class = patch.class.or(o.class);
                o.latency_target = patch.latency_target.or(o.latency_target);
            },
            || {
                if let Some(r) = &patch.reserve {
                    // First: the one refusal left after validation (409).
                    self.qos
                        .set_reserve(name, Some(r))
                        .map_err(ApiError::from_qos)?;
                }
                if let Some(caps) = &patch.caps {
                    self.qos
                        .set_caps(name, Some(caps))
                        .map_err(|e| ApiError::body(e.to_string()))?;
                }
                if let Some(w) = patch.weight {
                    self.qos
                        .set_weight(name, w)
                        .map_err(|e| ApiError::field("weight", e))?;
                }
                if patch.class.is_some() || patch.latency_target.is_some() {
                    self.qos
                        .set_group_class(name, patch.class, patch.latency_target)
                        .map_err(ApiError::from_qos)?;
                }
                if let Some(parent) = &patch.parent {
                    let parent = Some(parent.as_str()).filter(|p| *p != ROOT_GROUP);
                    self.qos
                        .move_group(name, parent)
                        .map_err(|e| ApiError::field("parent", e))?;
                }
                Ok(())
            },
        )?;
        self.set_config(next);
        tracing::info!(group = %name, ?patch, "control: group changed");
        self.group(name)
    }

    // ----- volumes -----

    fn volume_view(&self, st: &RuntimeState, v: &VolumeHandle) -> VolumeView {
        let info = self.qos.volumes().into_iter().find(|i| i.name == v.name);
        let config = self.config();
        let cfg = config.volumes.iter().find(|c| c.name == v.name);
        let cfg_weight = cfg.map(|c| c.weight).unwrap_or_default();
        let cfg_group = cfg
            .and_then(|c| c.group.clone())
            .unwrap_or_else(|| ROOT_GROUP.into());
        let o = st.volumes.get(&v.name);
        let weight = info.as_ref().map(|i| i.weight).unwrap_or(cfg_weight);
        let group = info
            .as_ref()
            .and_then(|i| i.parent.clone())
            .unwrap_or_else(|| ROOT_GROUP.into());
        VolumeView {
            name: v.name.clone(),
            weight: Sourced {
                value: weight,
                source: Sourced::pick(0, o.and_then(|o| o.weight)).source,
            },
            group: Sourced {
                value: group,
                source: Sourced::pick(cfg_group, o.and_then(|o| o.group.clone())).source,
            },
            caps: Sourced::new(
                info.as_ref().and_then(|i| i.caps).unwrap_or_default(),
                o.is_some_and(|o| o.caps.is_some()),
            ),
            op_caps: Sourced::new(
                info.as_ref().and_then(|i| i.op_caps).unwrap_or_default(),
                o.is_some_and(|o| o.op_caps.is_some()),
            ),
            class: Sourced::new(
                info.as_ref().map(|i| i.class).unwrap_or_default(),
                o.is_some_and(|o| o.class.is_some()),
            ),
            latency_target: Sourced::new(
                info.as_ref().and_then(|i| i.latency_target),
                o.is_some_and(|o| o.latency_target.is_some()),
            ),
            reserve: Sourced::new(
                info.as_ref().and_then(|i| i.reserve).unwrap_or_default(),
                o.is_some_and(|o| o.reserve.is_some()),
            ),
            socket: v.socket.display().to_string(),
            handover_socket: crate::socket_path::handover(&v.socket)
                .display()
                .to_string(),
            size: v.capacity(),
            path: cfg
                .and_then(|c| c.path.as_ref())
                .map(|p| p.display().to_string()),
            offset: v.host_offset,
            read_only: v.limits.read_only,
            num_queues: v.num_queues,
            workers: v.workers,
            cpu_affinity: v.cpu_affinity.clone(),
            connections: v.counters.connections.load(Relaxed),
            connected: v.counters.connected(),
            frontends: v.counters.frontends.load(Relaxed),
        }
    }

    fn find_volume(&self, name: &str) -> Result<VolumeHandle, ApiError> {
        self.volume_set
            .get(name)
            .map(|s| s.volume.clone())
            .ok_or_else(|| ApiError::not_found(format!("no volume named {name:?}")))
    }

    pub fn volumes(&self) -> VolumeList {
        let st = self.state.locked();
        VolumeList {
            volumes: self
                .handles()
                .iter()
                .map(|v| self.volume_view(&st, v))
                .collect(),
        }
    }

    pub fn volume(&self, name: &str) -> Result<VolumeView, ApiError> {
        let v = self.find_volume(name)?;
        Ok(self.volume_view(&self.state.locked(), &v))
    }

    pub fn patch_volume(&self, name: &str, patch: VolumePatch) -> Result<VolumeView, ApiError> {
        self.find_volume(name)?;
        if let Some(w) = patch.weight {
            check_weight(w)?;
        }
        if let Some(g) = &patch.group {
            if g != ROOT_GROUP && !self.qos.groups().iter().any(|i| &i.name == g) {
                return Err(ApiError::field(
                    "group",
                    format!("no group named {g:?} (use \"root\" for the top level)"),
                ));
            }
        }
        if let Some(caps) = &patch.caps {
            check_caps(caps)?;
        }
        if let Some(op_caps) = &patch.op_caps {
            op_caps.validate().map_err(|e| key_error(e, "op_caps"))?;
        }
        if let Some(r) = &patch.reserve {
            check_reserve(r)?;
        }
        let service = ServiceChange {
            class: patch.class,
            latency_target: patch.latency_target,
            reserve: patch.reserve.map(Some),
        };
        let moves = patch.weight.is_some() || patch.group.is_some();
        let capping = patch.caps.is_some() || patch.op_caps.is_some();
        if service == ServiceChange::default() && !capping && !moves {
            return self.volume(name);
        }
        // A group change is a change of the running config too (a group in use is not
        // removable).
        let _changing = self.begin_config_change();
        // One record and one application: the state file is written once, before
        // anything changes, and the one refusal left after validation (409) comes first.
        self.commit(
            |s| {
                let o = s.volumes.entry(name.to_owned()).or_default();
                o.class = patch.class.or(o.class);
                o.latency_target = patch.latency_target.or(o.latency_target);
                o.reserve = patch.reserve.or(o.reserve);
                o.caps = patch.caps.or(o.caps);
                o.op_caps = patch.op_caps.or(o.op_caps);
                o.weight = patch.weight.or(o.weight);
                o.group = patch.group.clone().or(o.group.take());
            },
            || {
                if service != ServiceChange::default() {
                    self.qos
                        .set_service(name, &service)
                        .map_err(ApiError::from_qos)?;
                }
                if let Some(caps) = &patch.caps {
                    self.qos
                        .set_caps(name, Some(caps))
                        .map_err(|e| ApiError::body(e.to_string()))?;
                }
                if let Some(op_caps) = &patch.op_caps {
                    self.qos
                        .set_op_caps(name, Some(op_caps))
                        .map_err(|e| ApiError::body(e.to_string()))?;
                }
                if moves {
                    let group = patch
                        .group
                        .as_deref()
                        .map(|g| Some(g).filter(|g| *g != ROOT_GROUP));
                    self.qos
                        .update_volume(name, patch.weight, group)
                        .map_err(|e| ApiError::body(e.to_string()))?;
                }
                Ok(())
            },
        )?;
        if let Some(group) = &patch.group {
            let mut next = (*self.config()).clone();
            if let Some(v) = next.volumes.iter_mut().find(|v| v.name == name) {
                v.group = Some(group.clone()).filter(|g| g != ROOT_GROUP);
            }
            self.set_config(next);
        }
        tracing::info!(volume = %name, ?patch, "control: volume changed");
        self.volume(name)
    }

    // ----- statistics -----

    fn counters(v: &VolumeHandle) -> [u64; 4] {
        let c = &v.counters;
        [
            c.reads.load(Relaxed),
            c.writes.load(Relaxed),
            c.read_bytes.load(Relaxed),
            c.write_bytes.load(Relaxed),
        ]
    }

    /// Take a counter sample; rates are computed between consecutive samples (the
    /// server samples once per second).
    pub fn sample(&self) {
        let now = Instant::now();
        let cur: HashMap<String, [u64; 4]> = self
            .handles()
            .iter()
            .map(|v| (v.name.clone(), Self::counters(v)))
            .collect();
        let mut r = self.rates.locked();
        if let Some((at, prev)) = &r.last {
            let dt = now.duration_since(*at).as_secs_f64().max(1e-3);
            // A volume added since the last sample has no rate yet.
            let rates = cur
                .iter()
                .filter_map(|(name, c)| {
                    let p = prev.get(name)?;
                    let rate = std::array::from_fn(|i| c[i].saturating_sub(p[i]) as f64 / dt);
                    Some((name.clone(), rate))
                })
                .collect();
            r.rates = rates;
            r.interval_s = dt;
        }
        r.last = Some((now, cur));
    }

    /// Statistics of the volumes `filter` selects, and of the device.
    pub fn stats(&self, filter: &VolumeFilter) -> StatsView {
        let d = self.qos.stats();
        let tree = self.qos.volumes();
        let qos_stats: HashMap<&str, _> = d.volumes.iter().map(|s| (s.name.as_str(), s)).collect();
        let infos: HashMap<&str, _> = tree.iter().map(|t| (t.name.as_str(), t)).collect();
        let (rates, interval_s) = {
            let r = self.rates.locked();
            (r.rates.clone(), r.interval_s)
        };
        let selected: Vec<VolumeStatsView> = self
            .handles()
            .iter()
            .filter_map(|v| {
                let q = qos_stats.get(v.name.as_str()).copied();
                let info = infos.get(v.name.as_str()).copied();
                let group = info
                    .and_then(|t| t.parent.clone())
                    .unwrap_or_else(|| ROOT_GROUP.into());
                let active = q.is_some_and(|q| q.active);
                if !filter.matches(&v.name, &group, active) {
                    return None;
                }
                let rate = rates.get(&v.name).copied().unwrap_or_default();
                let c = &v.counters;
                Some(VolumeStatsView {
                    name: v.name.clone(),
                    group,
                    weight: info.map(|t| t.weight).unwrap_or_default(),
                    connections: c.connections.load(Relaxed),
                    iops: rate[0] + rate[1],
                    read_iops: rate[0],
                    write_iops: rate[1],
                    read_bytes_per_s: rate[2],
                    write_bytes_per_s: rate[3],
                    reads: c.reads.load(Relaxed),
                    writes: c.writes.load(Relaxed),
                    read_bytes: c.read_bytes.load(Relaxed),
                    write_bytes: c.write_bytes.load(Relaxed),
                    flushes: c.flushes.load(Relaxed),
                    discards: c.discards.load(Relaxed),
                    write_zeroes: c.write_zeroes.load(Relaxed),
                    errors: c.errors.load(Relaxed),
                    active,
                    usage_pct: q.map_or(0.0, |q| q.usage_pct),
                    hweight_active_pct: q.map_or(0.0, |q| q.hweight_active),
                    hweight_inuse_pct: q.map_or(0.0, |q| q.hweight_inuse),
                    donated_pct: q.map_or(0.0, |q| q.donated),
                    wait_us: q.map_or(0, |q| q.wait_us),
                    throttled: q.map_or(0, |q| q.throttled),
                    capped: q.map_or(0, |q| q.capped),
                    background_held: q.map_or(0, |q| q.background_held),
                    reserved: q.map_or(0, |q| q.reserved),
                    boost: q.map_or(1.0, |q| q.boost),
                    lat_p50_us_period: q.and_then(|q| q.lat_p50_us_period),
                    lat_p99_us_period: q.and_then(|q| q.lat_p99_us_period),
                    lat_p50_us: q.and_then(|q| q.lat_p50_us),
                    lat_p99_us: q.and_then(|q| q.lat_p99_us),
                })
            })
            .collect();
        let (volumes, volumes_total) = filter.page(selected);
        StatsView {
            uptime_s: self.started.elapsed().as_secs_f64(),
            interval_s,
            device: DeviceStatsView {
                enabled: d.enabled,
                running: d.running,
                vrate_pct: d.vrate_pct,
                busy_level: d.busy_level,
                period_us: d.period_us,
                missed_ppm: d.missed_ppm,
                rq_wait_pct: d.rq_wait_pct,
                contended_periods: d.contended_periods,
                contended_periods_missed: d.contended_periods_missed,
            },
            volumes,
            volumes_total,
        }
    }
}
