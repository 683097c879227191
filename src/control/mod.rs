//! The control plane: a REST API on a unix socket, Prometheus metrics, runtime changes
//! that survive restarts, and the `vhost-iocost ctl` client.
//!
//! * [`server`]: the HTTP/1.1 server (axum on a private tokio runtime, own thread) and
//!   the socket handling;
//! * [`handlers`]: the routes; [`api`]: the JSON documents; [`error`]: error responses;
//! * [`context`]: the operations behind the routes ([`Control`]); [`nodes`]: adding and
//!   removing volumes and groups;
//! * [`state`]: the state file that makes runtime changes persistent;
//! * [`calibrated`]: the calibrated model, measured at start-up and kept in the state file;
//! * [`learned`]: the learned model: what it learns from, where it resumes;
//! * [`metrics`]: `GET /metrics`;
//! * [`client`] and [`ctl`]: the command-line client.
//!
//! The routes, the JSON shapes and the persistence format are documented in
//! `docs/openapi.json` and `docs/control-plane.md`.

pub mod api;
pub mod calibrated;
pub mod client;
pub(crate) mod context;
pub mod ctl;
pub mod ctl_args;
pub(crate) mod ctl_commands;
pub mod ctl_format;
pub mod error;
pub mod filter;
pub(crate) mod groups;
pub(crate) mod handlers;
pub mod learned;
pub(crate) mod metrics;
pub(crate) mod nodes;
pub mod server;
pub mod state;
pub(crate) mod volumes;

pub use context::Control;
pub use server::ControlServer;

use crate::config::Config;
use crate::daemon::Daemon;
use crate::lock::Locked;
use std::path::Path;
use std::sync::Arc;

/// Apply the runtime changes recorded beside `config_path` to the running `daemon` (whose
/// `config` is `file_config` with the state file's volumes and groups added, moved and
/// removed), and
/// start the REST server if `[control] socket` is set and the metrics listener if
/// `[metrics] listen` is (None when neither). Errors name the socket or the state file.
pub fn start(
    config: &Config,
    file_config: &Config,
    config_path: &Path,
    daemon: &Daemon,
    calibration: Option<crate::calibration::Calibration>,
) -> Result<Option<ControlServer>, String> {
    let ctl = Arc::new(
        Control::new(
            daemon.qos.clone(),
            daemon.volumes.clone(),
            config.clone(),
            state::state_path(config_path),
            Some(daemon.planner.clone()),
        )
        .with_calibration(calibration)
        .with_file_config(file_config),
    );
    ctl.restore()?;
    let keeper = Arc::clone(&ctl);
    *daemon.learned_sink.locked() = Some(Box::new(move |m| keeper.keep_learned(m)));
    let metrics = match config.metrics.addr() {
        Ok(Some(addr)) => Some(server::MetricsListener::bind(&addr).map_err(|e| e.to_string())?),
        Ok(None) => None,
        Err(e) => return Err(format!("metrics.listen: {e}")),
    };
    let control = match &config.control.socket {
        Some(socket) => Some((
            server::bind(socket).map_err(|e| e.to_string())?,
            socket.clone(),
        )),
        None => None,
    };
    if control.is_none() && metrics.is_none() {
        return Ok(None);
    }
    ControlServer::start(ctl, control, metrics)
        .map(Some)
        .map_err(|e| format!("control server: {e}"))
}
