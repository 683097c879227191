//! A volume's or group's settings beyond its weight, as the config, the control API and
//! the simulator hand them to the controller in one piece.

use super::caps::{CapsConfig, OpCapsConfig};
use super::class::{Class, LatencyTarget};
use super::reserve::ReserveConfig;

/// A change of a volume's class, latency target and/or reservation, checked and applied
/// together (`QosDevice::set_service`). `None` keeps a setting; a latency target or a
/// reservation of `Some(None)` removes it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceChange {
    pub class: Option<Class>,
    pub latency_target: Option<Option<LatencyTarget>>,
    pub reserve: Option<Option<ReserveConfig>>,
}

/// A volume's settings beyond its weight, as the config and the simulator give them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VolumePolicy {
    pub caps: Option<CapsConfig>,
    pub op_caps: Option<OpCapsConfig>,
    pub class: Class,
    pub latency_target: Option<LatencyTarget>,
    pub reserve: Option<ReserveConfig>,
}

/// A group's settings beyond its weight, as the config and the simulator give them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupPolicy {
    pub caps: Option<CapsConfig>,
    pub reserve: Option<ReserveConfig>,
    pub class: Class,
    pub latency_target: Option<LatencyTarget>,
}
