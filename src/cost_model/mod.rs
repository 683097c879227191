//! Device cost models: how much device time a request occupies.
//!
//! IOCost does not count IOPS or bytes. Every request is charged its *absolute cost*:
//! the time it is expected to occupy the device when the device runs at 100 % of its
//! modelled speed, in vtime units (2^37 per second, see [`crate::vtime`]). A 4 KiB random read
//! on an SSD may cost 117 µs, a 1 MiB sequential read 2.2 ms; both are then shared out by
//! weight on the same scale, which is what makes the proportions meaningful across very
//! different workloads.
//!
//! The model does not have to be exact. The planner's vrate loop (see [`crate::planner`])
//! scales the whole model up or down from observed latencies and queueing, so the model
//! only has to get the *relative* costs of different requests right.
//!
//! Contents:
//! * [`model`]: the [`CostModel`] trait and the request description it prices;
//! * [`linear`]: the kernel's six-parameter linear model, plus prices for FLUSH, DISCARD
//!   and WRITE_ZEROES (free in the kernel, charged here);
//! * [`presets`]: the kernel's built-in device classes;
//! * [`config`]: the `[device.model]` configuration section.

pub(crate) mod config;
pub mod learn;
pub(crate) mod linear;
pub(crate) mod model;
pub(crate) mod presets;

pub use config::ModelConfig;
pub use linear::{LinearCoefs, LinearModel, LinearParams, NonDataFactors};
pub use model::{CostInput, CostModel, IoKind};
pub use presets::Preset;
