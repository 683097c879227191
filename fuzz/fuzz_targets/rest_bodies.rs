//! The REST bodies: arbitrary bytes through the body parser of each PUT/PATCH route, and
//! every body the API accepts applied to a live QoS core, which must take it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;
use vhost_iocost::control::api::{GroupPatch, VolumePatch};
use vhost_iocost::control::error::parse_body;
use vhost_iocost::cost_model::ModelConfig;
use vhost_iocost::qos::{ManualClock, QosConfig, QosDevice};

fn device() -> QosDevice {
    let model = ModelConfig::default().build_boxed().unwrap();
    QosDevice::new(model, &QosConfig::default(), Arc::new(ManualClock::default()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    match route % 4 {
        0 => {
            if let Ok(qos) = parse_body::<QosConfig>(body) {
                if qos.validate().is_ok() {
                    device().set_qos(&qos).expect("validated qos is accepted");
                }
            }
        }
        1 => {
            if let Ok(model) = parse_body::<ModelConfig>(body) {
                if model.validate().is_ok() {
                    device().set_model(&model).expect("validated model is accepted");
                }
            }
        }
        2 => {
            let _ = parse_body::<GroupPatch>(body);
        }
        _ => {
            let _ = parse_body::<VolumePatch>(body);
        }
    }
});
