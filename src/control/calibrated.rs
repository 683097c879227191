//! The calibrated model's place in the state file: measured once per device at start-up
//! when the config gives no `[device.model]`, reused at later starts of the same device
//! (see [`crate::calibration`] for what is measured and why).

use super::state::{state_path, RuntimeState};
use crate::backend::io::disk::HostDisk;
use crate::calibration::{self, Calibration};
use crate::config::{Config, DeviceConfig};
use std::path::Path;

/// The calibration the daemon runs with, if the config leaves the model to it: the one
/// kept in the state file beside `config_path` if it is of this device, else a new
/// measurement (kept there). None, with a warning saying why, when it cannot measure.
pub fn resolve(config: &Config, config_path: &Path) -> Option<Calibration> {
    let device = &config.device;
    if !calibration::wanted(device) {
        return None;
    }
    let not_calibrated = |why: &dyn std::fmt::Display| {
        tracing::warn!(
            "device.model: not given and not calibrated ({why}); using the {:?} preset. \
             Give [device.model] (`vhost-iocost profile` measures it)",
            device.model.preset
        );
        None
    };
    let path = device.path.as_deref().unwrap_or(Path::new(""));
    if device.emulated.is_none() && !path.exists() {
        return not_calibrated(&format_args!(
            "{} does not exist yet and will be created sparse",
            path.display()
        ));
    }
    let size = match HostDisk::probe(device) {
        // A layout that does not fit is refused when the daemon opens the device; it is
        // not worth measuring first.
        Ok((size, block)) if config.validate_layout(size, block).is_ok() => size,
        Ok(_) => return None,
        Err(e) => return not_calibrated(&e),
    };
    let state_file = state_path(config_path);
    let mut state = match RuntimeState::load(&state_file) {
        Ok(s) => s,
        Err(e) => return not_calibrated(&e),
    };
    if let Some(c) = kept(&state, device, size) {
        tracing::info!(device = %c.device, rlat = %c.rlat, "device.model: using the calibration in the state file");
        return Some(c);
    }
    tracing::info!(device = %path.display(), "device.model: not given; calibrating (read-only, about 2 s)");
    let c = match calibration::measure(device, size) {
        Ok(c) => c,
        Err(e) => return not_calibrated(&e),
    };
    let m = c.model.linear_params();
    tracing::info!(
        rbps = m.rbps, rseqiops = m.rseqiops, rrandiops = m.rrandiops,
        wbps = m.wbps, wseqiops = m.wseqiops, wrandiops = m.wrandiops,
        writes = %c.writes, rpct = c.rpct, rlat = %c.rlat,
        "device.model: calibrated"
    );
    state.calibrated = Some(c.clone());
    if let Err(e) = state.save(&state_file) {
        tracing::warn!(path = %state_file.display(), "cannot keep the calibration in the state file: {e}");
    }
    Some(c)
}

/// The state file's calibration of `device` (of `size` bytes), with the read target the
/// rule in force derives from it.
fn kept(state: &RuntimeState, device: &DeviceConfig, size: u64) -> Option<Calibration> {
    state
        .calibrated
        .as_ref()
        .filter(|c| c.matches(device, size))
        .map(|c| c.clone().with_current_target())
}

/// The calibration `run` would use, found without writing anything: the one kept in the
/// state file beside `config_path` if it is of this device (of `size` bytes); for an
/// emulated device not measured yet, its model measured in virtual time, as `run` does.
/// None when the config gives a model, or when a real device has not been measured yet
/// (`run` measures it at start-up; `check` judges with the preset meanwhile).
pub fn for_check(
    config: &Config,
    config_path: &Path,
    size: u64,
) -> Result<Option<Calibration>, String> {
    let device = &config.device;
    if !calibration::wanted(device) {
        return Ok(None);
    }
    let state = RuntimeState::load(&state_path(config_path)).map_err(|e| e.to_string())?;
    if let Some(c) = kept(&state, device, size) {
        return Ok(Some(c));
    }
    if device.emulated.is_some() {
        return calibration::measure(device, size).map(Some);
    }
    Ok(None)
}

/// The configuration the daemon runs: with a calibration, its model and default targets.
pub fn apply(config: &Config, calibration: Option<&Calibration>) -> Config {
    let mut effective = config.clone();
    if let Some(c) = calibration {
        effective.device.model = c.model.clone();
        effective.device.qos = c.qos_defaults(&config.device.qos);
    }
    effective
}
