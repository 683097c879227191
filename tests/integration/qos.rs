//! QoS on the real data path: weights decide the split when the (modelled) device is the
//! bottleneck.

use crate::daemon::{config, volume, DaemonProcess, SLOW_MODEL};
use std::time::Duration;
use vhost_iocost::loadgen::{self, Pattern, TenantSpec};

fn tenant(d: &DaemonProcess, name: &str) -> TenantSpec {
    TenantSpec {
        name: name.into(),
        socket: d.socket(name),
        rw: Pattern::RandRead,
        bs: 4096,
        iodepth: 16,
        runtime: Duration::from_secs(4),
        ramp: Duration::from_secs(1),
        ..TenantSpec::default()
    }
}

#[test]
fn weights_100_300_split_iops_one_to_three() {
    let d = DaemonProcess::start(&config(
        SLOW_MODEL,
        &(volume("light", 0, 16, "weight = 100") + &volume("heavy", 16, 16, "weight = 300")),
    ));
    let results = loadgen::run(&[tenant(&d, "light"), tenant(&d, "heavy")]).unwrap();
    let (light, heavy) = (&results[0], &results[1]);
    assert_split(light, heavy, 3.0 * 0.85..=3.0 * 1.15);
    // Together they use the modelled capacity, not more.
    let total = light.iops + heavy.iops;
    assert!((2800.0..=4400.0).contains(&total), "total {total:.0} IOPS");
}

/// Asserts that `heavy` got `range` times `light`'s IOPS, both without errors.
pub fn assert_split(
    light: &loadgen::TenantResult,
    heavy: &loadgen::TenantResult,
    range: std::ops::RangeInclusive<f64>,
) {
    assert_eq!(light.errors + heavy.errors, 0);
    let ratio = heavy.iops / light.iops;
    eprintln!(
        "light {:.0} IOPS, heavy {:.0} IOPS, ratio {ratio:.3}",
        light.iops, heavy.iops
    );
    assert!(
        range.contains(&ratio),
        "heavy/light = {ratio:.3} (light {:.0}, heavy {:.0} IOPS)",
        light.iops,
        heavy.iops
    );
}
