//! A deterministic simulator for the QoS core.
//!
//! It drives the very same [`crate::qos`] code the daemon uses, in virtual time: a
//! discrete-event loop ([`engine`]) plays the data path (per-volume FIFOs, wait timers,
//! planner ticks, completions) against a simulated disk ([`disk`]: parallel channels, a
//! bounded queue, service times from a "truth" cost model, so latency grows with queue
//! depth) and load generators ([`workload`]). No threads and no sleeping: a run is a
//! pure function of its scenario file ([`scenario`]) and seed, which makes QoS
//! properties testable with exact assertions ([`report`] measures shares, utilisation,
//! latencies and the vrate trace over any window).
//!
//! Entry point for the command line: [`run_file`].

pub(crate) mod disk;
pub(crate) mod engine;
pub(crate) mod error;
pub(crate) mod report;
pub(crate) mod scenario;
pub(crate) mod workload;

#[cfg(test)]
mod class_tests;
#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod underserved_tests;

use std::path::Path;

pub use engine::run;
pub use error::Error;
pub use report::{Completion, SimResult, TracePoint};
pub use scenario::Scenario;

/// Parse and run a scenario from TOML text.
pub fn run_str(text: &str) -> Result<SimResult, Error> {
    let sc = Scenario::from_toml(text).map_err(|message| Error::Parse {
        path: "<scenario>".into(),
        message,
    })?;
    run(&sc)
}

/// Run a scenario file and return the printed per-volume report.
pub fn run_file(path: &Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    let sc = Scenario::from_toml(&text).map_err(|message| Error::Parse {
        path: path.display().to_string(),
        message,
    })?;
    Ok(run(&sc)?.report())
}
