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
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

/// A volume as the control plane sees it: its data-path counters and QoS handle.
pub type VolumeHandle = Arc<Volume<Arc<VolumeQos>>>;

/// Counter samples for rates.
#[derive(Debug, Default)]
pub(super) struct Rates {
    pub(super) last: Option<(Instant, HashMap<String, [u64; 5]>)>,
    /// Per volume `[reads/s, writes/s, read bytes/s, write bytes/s, QoS wait ns/s]`.
    pub(super) rates: HashMap<String, [f64; 5]>,
    pub(super) interval_s: f64,
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
    pub(super) rates: Mutex<Rates>,
    pub(super) started: Instant,
    /// The model measured at start-up, when the config gives none.
    pub(super) calibrated: Option<Calibration>,
    /// Each config-file volume's group (None: the root), before any runtime move: what a
    /// reset returns it to.
    file_groups: HashMap<String, Option<String>>,
}

/// The QoS core's parent for a group name as the API and the state file give it:
/// `root` is the top level (None).
pub(super) fn parent_of(group: &str) -> Option<&str> {
    Some(group).filter(|g| *g != ROOT_GROUP)
}

/// A QoS validation message, `caps.burst_iops: ...`, as a 400 naming that key (or
/// `whole` when the message names none).
pub(super) fn key_error(message: String, whole: &str) -> ApiError {
    match message.split_once(": ") {
        Some((field, rest)) => ApiError::field(field, rest),
        None => ApiError::field(whole, message),
    }
}

pub(super) fn check_reserve(reserve: &crate::qos::ReserveConfig) -> Result<(), ApiError> {
    reserve.validate().map_err(|e| key_error(e, "reserve"))
}

pub(super) fn check_caps(caps: &CapsConfig) -> Result<(), ApiError> {
    caps.validate().map_err(|e| key_error(e, "caps"))
}

pub(super) fn check_weight(weight: u32) -> Result<(), ApiError> {
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
            file_groups: HashMap::new(),
        }
    }

    /// The config file as read, before the state file's changes: the volumes' groups as
    /// configured.
    pub fn with_file_config(mut self, file: &Config) -> Self {
        self.file_groups = file
            .volumes
            .iter()
            .map(|v| (v.name.clone(), v.group.clone()))
            .collect();
        self
    }

    /// A volume's group as configured, before any runtime move (None: the root): the
    /// `POST` that added it, else the config file.
    pub(super) fn configured_group(&self, name: &str) -> Option<String> {
        let st = self.state.locked();
        match st.added_volumes.iter().find(|v| v.name == name) {
            Some(added) => added.group.clone(),
            None => self.file_groups.get(name).cloned().flatten(),
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

    /// Forgets the state file's overrides of groups and volumes that no longer exist, and
    /// group changes naming a group that no longer exists (each with a warning).
    fn drop_unknown(&self, st: &mut RuntimeState) {
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
            // A grown size is kept too: the running config was built with it.
            o.size.is_some()
                || o.weight.is_some()
                || o.group.is_some()
                || o.caps.is_some()
                || o.op_caps.is_some()
                || o.class.is_some()
                || o.latency_target.is_some()
                || o.reserve.is_some()
        });
    }

    /// Load the state file and apply it (at start-up). Overrides naming groups or
    /// volumes that no longer exist are dropped with a warning (and the file rewritten);
    /// an unreadable file is an error.
    pub fn restore(&self) -> Result<(), String> {
        let mut st = RuntimeState::load(&self.state_path)?;
        let before = st.clone();
        self.drop_unknown(&mut st);
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
            let group = o.group.as_deref().map(parent_of);
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
                    latency_target: o.latency_target.map(Some),
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
}
