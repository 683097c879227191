//! The QoS core's classes: a background group yields with its members, a latency group
//! gathers its volumes' completions, and declared latency targets set the device's read
//! target while the operator gave none.

use super::test_util::{device, go, io_us, qos_10ms};
use super::*;
use crate::duration::DurationUs;

/// A background group yields as a whole, whatever its members' classes: its normal
/// volume gets ~0.1 % beside a sibling group's volume, and 50 % again once the group is
/// normal. The latency class needs a target; a volume is not a group.
#[test]
fn a_background_group_yields_with_its_normal_members() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    dev.add_group("B", None, 100).unwrap();
    let a = dev.add_volume("a", Some("A"), 100).unwrap();
    let b = dev.add_volume("b", Some("B"), 100).unwrap();
    go(a.admit(&io_us(1)));
    go(b.admit(&io_us(1)));
    let pct = |v: &VolumeQos| v.stats().hweight_active;
    assert!((pct(&b) - 50.0).abs() < 0.1, "{}", pct(&b));
    dev.set_group_class("B", Some(Class::Background), None)
        .unwrap();
    assert!(pct(&a) > 99.8 && pct(&b) < 0.2, "{} {}", pct(&a), pct(&b));
    assert_eq!(dev.groups()[1].class, Class::Background);
    dev.set_group_class("B", Some(Class::Normal), None).unwrap();
    assert!((pct(&b) - 50.0).abs() < 0.1, "{}", pct(&b));
    let err = dev
        .set_group_class("B", Some(Class::Latency), None)
        .unwrap_err();
    assert!(err.to_string().starts_with("latency_target"), "{err}");
    assert!(dev
        .set_group_class("a", Some(Class::Background), None)
        .is_err());
}

/// A latency-class group's volumes feed its window, and only while it is one: a volume
/// added under it, or moved under it, too; one moved out stops.
#[test]
fn a_latency_groups_volumes_feed_its_window() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("L", None, 100).unwrap();
    let a = dev.add_volume("a", Some("L"), 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    let feeds = |v: &VolumeQos| {
        v.core
            .in_latency_group
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(!feeds(&a));
    let target = LatencyTarget::parse("p99 2ms").unwrap();
    dev.set_group_class("L", Some(Class::Latency), Some(target))
        .unwrap();
    assert!(feeds(&a) && !feeds(&b));
    assert_eq!(dev.groups()[0].class, Class::Latency);
    assert_eq!(dev.groups()[0].latency_target, Some(target));
    let c = dev.add_volume("c", Some("L"), 100).unwrap();
    assert!(feeds(&c));
    dev.set_parent("b", Some("L")).unwrap();
    dev.set_parent("a", None).unwrap();
    assert!(feeds(&b) && !feeds(&a));
    // The target stays when only the class changes.
    dev.set_group_class("L", Some(Class::Normal), None).unwrap();
    assert!(!feeds(&b) && !feeds(&c));
    dev.set_group_class("L", Some(Class::Latency), None)
        .unwrap();
    assert!(feeds(&b) && feeds(&c));
}

/// A latency-class target replaces a read target calibration filled in, the tightest
/// of them while several are declared, and the calibrated one comes back when the last
/// is withdrawn; an operator's own read target, or reads without a signal, stay.
#[test]
fn declared_latency_targets_replace_a_calibrated_read_target() {
    let calibrated = QosConfig {
        rpct: 90.0,
        rlat: Some(DurationUs(375)),
        rlat_derived: true,
        ..qos_10ms()
    };
    let (dev, _clock) = device(&calibrated);
    dev.set_qos(&calibrated).unwrap();
    let read_target = |dev: &QosDevice| (dev.params().rppm, dev.params().rlat_us);
    assert_eq!(read_target(&dev), (900_000, 375));
    dev.add_group("L", None, 100).unwrap();
    dev.add_volume("a", None, 100).unwrap();
    dev.add_volume("b", Some("L"), 100).unwrap();
    let latency = |t: &str| ServiceChange {
        class: Some(Class::Latency),
        latency_target: Some(LatencyTarget::parse(t).ok()),
        reserve: None,
    };
    dev.set_service("a", &latency("p99 2ms")).unwrap();
    assert_eq!(read_target(&dev), (990_000, 2_000));
    dev.set_group_class(
        "L",
        Some(Class::Latency),
        LatencyTarget::parse("p95 1ms").ok(),
    )
    .unwrap();
    assert_eq!(read_target(&dev), (950_000, 1_000), "the tightest");
    dev.set_group_class("L", Some(Class::Normal), None).unwrap();
    assert_eq!(read_target(&dev), (990_000, 2_000));
    dev.remove_volume("a").unwrap();
    assert_eq!(read_target(&dev), (900_000, 375), "calibrated again");
    // The operator's own target, and reads without a signal, are not replaced.
    for own in [
        QosConfig {
            rlat_derived: false,
            ..calibrated.clone()
        },
        QosConfig {
            rlat_derived: true,
            rpct: 0.0,
            ..calibrated.clone()
        },
    ] {
        dev.set_qos(&own).unwrap();
        let before = read_target(&dev);
        dev.set_service("b", &latency("p99 2ms")).unwrap();
        assert_eq!(read_target(&dev), before, "{own:?}");
        dev.set_service(
            "b",
            &ServiceChange {
                class: Some(Class::Normal),
                ..ServiceChange::default()
            },
        )
        .unwrap();
    }
}
