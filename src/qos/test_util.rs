//! Helpers for unit tests: a trivially predictable cost model and a device on a
//! manual clock.

use std::sync::Arc;

use crate::cost_model::{CostInput, CostModel, IoKind};
use crate::vtime::VTIME_PER_USEC;

use super::{Charge, Decision, IoRequest, ManualClock, QosConfig, QosDevice};
use crate::duration::DurationUs;

/// Every request costs `len` µs of device time (so `len` doubles as the cost).
#[derive(Debug)]
pub(crate) struct MicrosModel;

impl CostModel for MicrosModel {
    fn abs_cost(&self, input: &CostInput) -> u64 {
        input.len.saturating_mul(VTIME_PER_USEC)
    }
    fn size_cost(&self, _kind: IoKind, _len: u64) -> u64 {
        0
    }
}

/// QoS with a 10 ms period (p95, 5 ms targets) and vrate bounds wide open.
pub(crate) fn qos_10ms() -> QosConfig {
    QosConfig {
        rlat: Some(DurationUs(5_000)),
        wlat: Some(DurationUs(5_000)),
        min: 1.0,
        max: 10_000.0,
        ..QosConfig::default()
    }
}

pub(crate) fn device(qos: &QosConfig) -> (QosDevice, Arc<ManualClock>) {
    device_with(Box::new(MicrosModel), qos)
}

/// A device pricing by `model`, on a manual clock.
pub(crate) fn device_with(
    model: Box<dyn CostModel>,
    qos: &QosConfig,
) -> (QosDevice, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let dev = QosDevice::new(model, qos, clock.clone());
    (dev, clock)
}

/// A read costing `us` µs.
pub(crate) fn io_us(us: u64) -> IoRequest {
    IoRequest {
        kind: IoKind::Read,
        offset: 0,
        len: us,
    }
}

/// The charge of an admission that must have gone.
pub(crate) fn go(a: Decision) -> Charge {
    match a {
        Decision::Go(c) => c,
        Decision::Wait { until_ns } => panic!("expected Go, got Wait until {until_ns}"),
    }
}

/// The retry time of an admission that must have waited.
pub(crate) fn wait(a: Decision) -> u64 {
    match a {
        Decision::Wait { until_ns } => until_ns,
        Decision::Go(c) => panic!("expected Wait, got Go {c:?}"),
    }
}
