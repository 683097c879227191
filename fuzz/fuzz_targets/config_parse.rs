//! The TOML configuration: parsing and validation of arbitrary text (`Config::parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vhost_iocost::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::parse(text) {
        // A valid config builds its QoS parameters and cost model without failing.
        config.device.model.build().expect("validated model builds");
    }
});
