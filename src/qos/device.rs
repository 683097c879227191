//! One QoS domain: a host disk shared by many volumes.
//!
//! [`QosDevice`] owns the weight tree, the global virtual clock, the planner state and
//! the cost model. It is shared (`Arc`, `Send + Sync`) by every worker thread, which
//! hold [`VolumeQos`] handles, and by one planner thread that calls [`QosDevice::plan`]
//! once per period.
//!
//! Locking mirrors the kernel: one device mutex for the planner, activation, snapback
//! and tree changes; everything the issue path reads is atomic. Lock order: device lock
//! only (the per-volume latency-histogram mutex is never held together with it).

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cost_model::vtime::{VTIME_PER_USEC, WEIGHT_ONE};
use crate::cost_model::CostModel;

use super::clock::Clock;
use super::config::QosConfig;
use super::error::QosError;
use super::params::{Margins, QosParams};
use super::stats::{DeviceStats, PeriodRecord};
use super::tree::{NodeId, Tree, ROOT};
use super::vclock::{Now, VClock};
use super::volume::{rate_to_ppm, VolumeCore, VolumeQos};
use super::weights::{NodeWeights, WEIGHT_MAX, WEIGHT_MIN};

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
    /// Effective rate = base + loss compensation (spec G.11); vnow runs at it.
    pub vtime_rate: u64,
    /// Discarded vtime awaiting compensation (negative = lost).
    pub vtime_err: i64,
    pub busy_level: i32,
    pub margins: Margins,
    pub last: PeriodRecord,
    /// Planner scratch buffers, kept to avoid allocating every period.
    pub scratch: crate::planner::Scratch,
}

/// Everything shared between the device handle, the volume handles and the planner.
pub(crate) struct DeviceShared {
    pub params: QosParams,
    pub model: Box<dyn CostModel>,
    pub clock: Arc<dyn Clock>,
    pub vclock: VClock,
    /// Planner period counter; volumes record the period they last issued in.
    pub cur_period: AtomicU64,
    /// Bumped whenever any weight changes; invalidates cached hweights.
    pub hweight_gen: AtomicU32,
    /// Mirrors of `DeviceState` values the issue path reads without the lock.
    pub base_rate: AtomicU64,
    pub margin_low: AtomicI64,
    state: Mutex<DeviceState>,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared")
            .field("params", &self.params)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl DeviceShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, DeviceState> {
        // A panic elsewhere must not take QoS down with it: keep using the state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Consistent wall + virtual time snapshot (spec E.1).
    pub(crate) fn now(&self) -> Now {
        let now_ns = self.clock.now_ns();
        Now {
            now_ns,
            vnow: self.vclock.vnow_at(now_ns),
        }
    }

    /// Start a planning period at `now`.
    pub(crate) fn start_period(&self, st: &mut DeviceState, now: Now) {
        self.vclock.set(now.now_ns, now.vnow, st.vtime_rate);
    }

    /// Set the base vrate and everything derived from it.
    pub(crate) fn set_base_rate(&self, st: &mut DeviceState, rate: u64) {
        st.vtime_base_rate = rate;
        st.margins = self.params.margins(rate);
        self.base_rate.store(rate, Relaxed);
        self.margin_low.store(st.margins.low, Relaxed);
    }
}

/// The QoS controller of one host disk.
#[derive(Debug, Clone)]
pub struct QosDevice {
    shared: Arc<DeviceShared>,
}

fn check_weight(name: &str, weight: u32) -> Result<(), QosError> {
    if (WEIGHT_MIN..=WEIGHT_MAX).contains(&weight) {
        Ok(())
    } else {
        Err(QosError::InvalidWeight {
            name: name.to_owned(),
            weight,
        })
    }
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
            vtime_rate: rate,
            vtime_err: 0,
            busy_level: 0,
            margins,
            last: PeriodRecord::default(),
            scratch: crate::planner::Scratch::default(),
        };
        QosDevice {
            shared: Arc::new(DeviceShared {
                params,
                model,
                clock,
                vclock: VClock::new(now_ns, rate),
                cur_period: AtomicU64::new(0),
                hweight_gen: AtomicU32::new(0),
                base_rate: AtomicU64::new(rate),
                margin_low: AtomicI64::new(margins.low),
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
        st.tree.nodes[id].volume = Some(Arc::clone(&core));
        st.tree.volumes.push(id);
        Ok(Arc::new(VolumeQos {
            dev: Arc::clone(&self.shared),
            core,
        }))
    }

    /// Change the weight of a group or volume (spec E.6). Takes effect on the next
    /// admission of every affected volume.
    pub fn set_weight(&self, name: &str, weight: u32) -> Result<(), QosError> {
        check_weight(name, weight)?;
        let mut st = self.shared.lock();
        let id = *st
            .tree
            .by_name
            .get(name)
            .ok_or_else(|| QosError::UnknownName(name.to_owned()))?;
        let w = weight * WEIGHT_ONE;
        let cells = Arc::clone(&st.tree.nodes[id].weights);
        if w != cells.weight.load(Relaxed) {
            let active = cells.active.load(Relaxed);
            if active != 0 {
                let now = self.shared.now();
                // Parents read their own weight while propagating, so store it first
                // for groups; a volume's weight only enters through `active`.
                cells.weight.store(w, Relaxed);
                st.tree
                    .propagate(id, w, cells.inuse.load(Relaxed), Some(now.vnow));
                st.tree.commit_weights(&self.shared.hweight_gen);
            } else {
                cells.weight.store(w, Relaxed);
            }
        }
        Ok(())
    }

    /// Run the planner if the current period is over (spec G). Returns the time in ns
    /// until the next call is due: the caller sleeps that long and calls again. A call
    /// before the period is over does nothing but return the remaining time, so an
    /// early or unaligned wakeup is harmless.
    ///
    /// After a run the caller should offer every parked FIFO head again, because
    /// donation or a vrate change may have made it admissible earlier than its timer
    /// (the kernel kicks all waiters once per period).
    pub fn plan(&self) -> u64 {
        crate::planner::plan(&self.shared)
    }

    /// The planning period, ns.
    pub fn period_ns(&self) -> u64 {
        self.shared.params.period_ns()
    }

    /// The derived QoS parameters.
    pub fn params(&self) -> QosParams {
        self.shared.params
    }

    /// Throttling enabled (`enable = true`).
    pub fn enabled(&self) -> bool {
        self.shared.params.enable
    }

    /// The base vrate, ppm of 100 %.
    pub fn vrate_ppm(&self) -> u64 {
        rate_to_ppm(self.shared.base_rate.load(Relaxed))
    }

    /// Device and per-volume statistics.
    pub fn stats(&self) -> DeviceStats {
        let (running, busy_level, last, volumes) = {
            let st = self.shared.lock();
            let vols: Vec<Arc<VolumeCore>> = st
                .tree
                .volumes
                .iter()
                .filter_map(|&id| st.tree.nodes[id].volume.clone())
                .collect();
            (st.running, st.busy_level, st.last, vols)
        };
        let volumes = volumes
            .into_iter()
            .map(|core| {
                VolumeQos {
                    dev: Arc::clone(&self.shared),
                    core,
                }
                .stats()
            })
            .collect();
        DeviceStats {
            enabled: self.shared.params.enable,
            running,
            vrate_pct: self.vrate_ppm() as f64 / 10_000.0,
            busy_level,
            period_us: self.shared.params.period_us,
            missed_ppm: last.missed_ppm,
            rq_wait_pct: last.rq_wait_pct,
            last_period: last,
            volumes,
        }
    }

    /// The last planner record (cheap; no per-volume work).
    pub fn last_period(&self) -> PeriodRecord {
        self.shared.lock().last
    }
}
