//! Volumes as the control plane shows and changes them: `GET /v1/volumes[/{name}]`,
//! `PATCH /v1/volumes/{name}`, and the statistics and per-second rates of
//! `GET /v1/stats`.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::api::*;
use super::context::{
    check_caps, check_reserve, check_weight, key_error, parent_of, Control, VolumeHandle,
};
use super::error::ApiError;
use super::filter::VolumeFilter;
use super::state::{RuntimeState, VolumeOverride};
use crate::config::ROOT_GROUP;
use crate::lock::Locked;
use crate::qos::ServiceChange;

/// A path as the API shows it: absolute, a relative one taken from the daemon's working
/// directory (as the daemon opened it), so that a client elsewhere can find the file.
fn absolute(path: &std::path::Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_owned())
        .display()
        .to_string()
}

impl Control {
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
            socket: absolute(&v.socket),
            allowed_uids: v.peers.uids.clone(),
            allowed_gids: v.peers.gids.clone(),
            handover_socket: absolute(&crate::socket_path::handover(&v.socket)),
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
            latency_target: patch.latency_target.map(Some),
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
                    let group = patch.group.as_deref().map(parent_of);
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

    /// `POST /v1/volumes/{name}/reset`: the volume's weight, group, caps, class,
    /// latency target and reservation as configured (in the config file, or by the `POST`
    /// that added it), its runtime changes of them forgotten, in the state file too. A
    /// size grown at run time stays: the guest has been told.
    pub fn reset_volume(&self, name: &str) -> Result<VolumeView, ApiError> {
        self.find_volume(name)?;
        let _changing = self.begin_config_change();
        let config = self.config();
        let Some(cfg) = config.volumes.iter().find(|c| c.name == name) else {
            return Err(ApiError::not_found(format!("no volume named {name:?}")));
        };
        let group = self.configured_group(name);
        let service = ServiceChange {
            class: Some(cfg.class),
            latency_target: Some(cfg.latency_target),
            reserve: Some(cfg.reserve),
        };
        self.commit(
            |s| {
                let size = s.volumes.get(name).and_then(|o| o.size);
                match size {
                    Some(size) => {
                        s.volumes.insert(
                            name.to_owned(),
                            VolumeOverride {
                                size: Some(size),
                                ..VolumeOverride::default()
                            },
                        );
                    }
                    None => {
                        s.volumes.remove(name);
                    }
                }
            },
            || {
                let body = |e: crate::qos::QosError| ApiError::body(e.to_string());
                self.qos
                    .update_volume(name, Some(cfg.weight), Some(group.as_deref()))
                    .map_err(body)?;
                self.qos.set_caps(name, cfg.caps.as_ref()).map_err(body)?;
                self.qos
                    .set_op_caps(name, cfg.op_caps.as_ref())
                    .map_err(body)?;
                self.qos
                    .set_service(name, &service)
                    .map_err(ApiError::from_qos)
            },
        )?;
        let mut next = (*config).clone();
        if let Some(v) = next.volumes.iter_mut().find(|v| v.name == name) {
            v.group = group;
        }
        self.set_config(next);
        tracing::info!(volume = %name, "control: volume reset to its configured settings");
        self.volume(name)
    }

    // ----- statistics -----

    fn counters(v: &VolumeHandle) -> [u64; 5] {
        let c = &v.counters;
        [
            c.reads.load(Relaxed),
            c.writes.load(Relaxed),
            c.read_bytes.load(Relaxed),
            c.write_bytes.load(Relaxed),
            v.admission.qos_wait_ns(),
        ]
    }

    /// Take a counter sample; rates are computed between consecutive samples (the
    /// server samples once per second).
    pub fn sample(&self) {
        let now = Instant::now();
        let cur: HashMap<String, [u64; 5]> = self
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
        let params = self.qos.params();
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
                    pressure_pct: (rate[4] / 1e7).min(100.0),
                    cap_wait_us: q.map_or(0, |q| q.cap_wait_us),
                    class_wait_us: q.map_or(0, |q| q.class_wait_us),
                    slot_wait_us: q.map_or(0, |q| q.slot_wait_us),
                    cost_us: q.map_or(0, |q| q.cost_us),
                    budget_us: q.map_or(0, |q| q.budget_us),
                    latency_target_windows: q.map_or(0, |q| q.target_windows),
                    latency_target_windows_missed: q.map_or(0, |q| q.target_windows_missed),
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
                read_target: latency_target(params.rppm, params.rlat_us),
                write_target: latency_target(params.wppm, params.wlat_us),
            },
            volumes,
            volumes_total,
        }
    }
}

/// A device-wide latency target as `"p90 375us"`; None when the percentile is 0 (that
/// direction is not judged).
fn latency_target(ppm: u32, lat_us: u32) -> Option<String> {
    (ppm > 0).then(|| {
        format!(
            "p{} {}",
            f64::from(ppm) / 1e4,
            crate::duration::DurationUs(u64::from(lat_us))
        )
    })
}
