//! Unit tests of the issue path and the weight tree, on a manual clock.

use std::sync::Arc;

use super::test_util::{device, device_with, go, io_us, qos_10ms, wait};
use super::*;
use crate::duration::DurationUs;
use crate::vtime::WEIGHT_ONE;

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<QosDevice>();
    check::<VolumeQos>();
    check::<Arc<VolumeQos>>();
}

/// The kernel header's example (design §4.2): A0 gets 100/400 · 100/200 = 12.5 %.
#[test]
fn hierarchical_weights_of_the_kernel_example() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    let a0 = dev.add_volume("A0", Some("A"), 100).unwrap();
    let a1 = dev.add_volume("A1", Some("A"), 100).unwrap();
    let b = dev.add_volume("B", None, 300).unwrap();
    go(a0.admit(&io_us(1)));
    go(a1.admit(&io_us(1)));
    // Only A active so far: A0 and A1 split the device.
    assert_eq!(a0.stats().hweight_active_raw, WEIGHT_ONE / 2);
    go(b.admit(&io_us(1)));
    assert_eq!(a0.stats().hweight_active_raw, 8192);
    assert_eq!(a1.stats().hweight_active_raw, 8192);
    assert_eq!(b.stats().hweight_active_raw, 49152);
    assert_eq!(b.stats().hweight_active, 75.0);
}

#[test]
fn activation_grants_exactly_the_target_budget() {
    let (dev, clock) = device(&qos_10ms());
    let v = dev.add_volume("v", None, 100).unwrap();
    // A lone volume is not throttled: a neighbour of equal weight halves v's share, so
    // every request costs v twice its absolute cost.
    let neighbour = dev.add_volume("n", None, 100).unwrap();
    // Idle for a long time: no banked credit. Budget is half a period = 5000 µs.
    clock.advance(10_000_000_000);
    go(neighbour.admit(&io_us(1)));
    go(v.admit(&io_us(1_500)));
    go(v.admit(&io_us(1_000)));
    let until = wait(v.admit(&io_us(500)));
    let now = clock.now_ns();
    // Short by 1000 µs at 100 % vrate, plus 1 % of the period as timer slack.
    assert_eq!(until, now + 1_000_000 + 100_000);
    // Wait committed nothing: retrying at the same instant waits for the same time.
    assert_eq!(wait(v.admit(&io_us(500))), until);
    clock.set(until);
    go(v.admit(&io_us(500)));
    let s = v.stats();
    assert_eq!(s.throttled, 1);
    assert_eq!(s.wait_us, 1_100);
}

#[test]
fn a_share_of_a_quarter_pays_four_times() {
    let (dev, clock) = device(&qos_10ms());
    let a = dev.add_volume("a", None, 100).unwrap();
    let b = dev.add_volume("b", None, 300).unwrap();
    go(b.admit(&io_us(1)));
    let c = go(a.admit(&io_us(1_000)));
    assert_eq!(c.cost, 4 * c.abs_cost);
    // a's remaining budget: 5000 − 4000 = 1000 µs of local vtime → a 300 µs request
    // (1200 local) must wait 200 µs.
    let until = wait(a.admit(&io_us(300)));
    assert_eq!(until, clock.now_ns() + 200_000 + 100_000);
}

/// A volume alone is not throttled but is charged; when a neighbour arrives it owes the
/// device time of what it has in flight and no more (design §5.9): with a 300 µs request
/// in flight and no budget left, a 4,500 µs request (9,000 µs of its clock at half the
/// device) waits 9.3 ms, however far ahead of vnow its completed work ran while it was
/// alone (a second of device time in 10 ms here).
#[test]
fn a_lone_volume_owes_only_its_queue_when_a_neighbour_arrives() {
    let (dev, clock) = device(&qos_10ms());
    let a = dev.add_volume("a", None, 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    // Alone: a second of device time done in 10 ms of wall time, never throttled.
    for _ in 0..1_000 {
        let c = go(a.admit(&io_us(1_000)));
        let t = clock.now_ns();
        a.complete(&c, t, t, t);
        clock.advance(10_000);
    }
    go(a.admit(&io_us(300)));
    go(b.admit(&io_us(1)));
    let until = wait(a.admit(&io_us(4_500)));
    assert_eq!(until, clock.now_ns() + 9_300_000 + 100_000);
}

#[test]
fn control_plane_rejects_bad_input() {
    let (dev, _clock) = device(&qos_10ms());
    assert!(matches!(
        dev.add_group("g", None, 0),
        Err(QosError::InvalidWeight { .. })
    ));
    assert!(matches!(
        dev.add_group("g", None, 10_001),
        Err(QosError::InvalidWeight { .. })
    ));
    dev.add_group("g", None, 100).unwrap();
    assert_eq!(
        dev.add_group("g", None, 100),
        Err(QosError::DuplicateName("g".into()))
    );
    assert_eq!(dev.add_group("", None, 100), Err(QosError::EmptyName));
    assert!(matches!(
        dev.add_volume("v", Some("nope"), 100),
        Err(QosError::UnknownName(_))
    ));
    dev.add_volume("v", Some("g"), 100).unwrap();
    assert_eq!(
        dev.add_volume("w", Some("v"), 100).unwrap_err(),
        QosError::NotAGroup("v".into())
    );
    assert!(dev.set_weight("nope", 5).is_err());
    assert!(dev.set_weight("v", 0).is_err());
    dev.set_weight("v", 10_000).unwrap();
    dev.set_weight("g", 1).unwrap();
}

#[test]
fn weight_change_takes_effect_on_next_admission() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("g", None, 100).unwrap();
    let a = dev.add_volume("a", Some("g"), 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    go(a.admit(&io_us(1)));
    go(b.admit(&io_us(1)));
    assert_eq!(a.stats().hweight_active_raw, WEIGHT_ONE / 2);
    dev.set_weight("b", 300).unwrap();
    // The in-use weights follow at once (a volume lending nothing keeps lending
    // nothing), so both are charged at the new shares before either is throttled.
    let shares = |v: &VolumeQos| (v.stats().hweight_active_raw, v.stats().hweight_inuse_raw);
    assert_eq!(shares(&a), (WEIGHT_ONE / 4, WEIGHT_ONE / 4));
    assert_eq!(shares(&b), (WEIGHT_ONE * 3 / 4, WEIGHT_ONE * 3 / 4));
    dev.set_weight("g", 300).unwrap();
    assert_eq!(shares(&a), (WEIGHT_ONE / 2, WEIGHT_ONE / 2));
    assert_eq!(b.stats().weight, 300);
}

/// Moving an active volume between groups changes its share at the next admission and
/// leaves the sums of both parents consistent (moving it back restores the old split).
#[test]
fn set_parent_moves_an_active_volume() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    dev.add_group("B", None, 300).unwrap();
    let a0 = dev.add_volume("a0", Some("A"), 100).unwrap();
    let a1 = dev.add_volume("a1", Some("A"), 100).unwrap();
    let b0 = dev.add_volume("b0", Some("B"), 100).unwrap();
    for v in [&a0, &a1, &b0] {
        go(v.admit(&io_us(1)));
    }
    assert_eq!(a1.stats().hweight_active_raw, WEIGHT_ONE / 8);
    assert_eq!(b0.stats().hweight_active_raw, WEIGHT_ONE * 3 / 4);
    dev.set_parent("a1", Some("B")).unwrap();
    // A holds a0 alone (25 %); B splits 75 % between b0 and a1.
    assert_eq!(a0.stats().hweight_active_raw, WEIGHT_ONE / 4);
    assert_eq!(a1.stats().hweight_active_raw, WEIGHT_ONE * 3 / 8);
    assert_eq!(b0.stats().hweight_active_raw, WEIGHT_ONE * 3 / 8);
    go(a1.admit(&io_us(1)));
    let info = dev.volumes();
    assert_eq!(info[1].parent.as_deref(), Some("B"));
    // To the root: root's children are A(100), B(300), a1(100).
    dev.set_parent("a1", None).unwrap();
    assert_eq!(a1.stats().hweight_active_raw, WEIGHT_ONE / 5);
    assert_eq!(dev.volumes()[1].parent, None);
    dev.set_parent("a1", Some("A")).unwrap();
    assert_eq!(a1.stats().hweight_active_raw, WEIGHT_ONE / 8);
    assert_eq!(
        dev.set_parent("a1", Some("a0")),
        Err(QosError::NotAGroup("a0".into()))
    );
    assert_eq!(
        dev.set_parent("A", None),
        Err(QosError::NotAVolume("A".into()))
    );
    assert_eq!(
        dev.set_parent("zz", None),
        Err(QosError::UnknownName("zz".into()))
    );
}

/// An idle volume can move too; it enters the new group on its next activation.
#[test]
fn set_parent_of_an_idle_volume_applies_on_activation() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    let v = dev.add_volume("v", None, 100).unwrap();
    let w = dev.add_volume("w", None, 100).unwrap();
    dev.set_parent("v", Some("A")).unwrap();
    go(v.admit(&io_us(1)));
    go(w.admit(&io_us(1)));
    assert_eq!(v.stats().hweight_active_raw, WEIGHT_ONE / 2);
    assert_eq!(
        dev.groups(),
        vec![NodeInfo {
            name: "A".into(),
            weight: 100,
            parent: None,
            caps: None,
            op_caps: None,
            reserve: None,
            class: crate::qos::Class::Normal,
            latency_target: None,
            boost: 1.0,
        }]
    );
}

/// set_qos validates, swaps the parameters, clamps vrate into the new bounds at once and
/// changes the period; set_model swaps the prices seen by the next admission.
#[test]
fn set_qos_and_set_model_apply_at_once() {
    let (dev, _clock) = device(&qos_10ms());
    let v = dev.add_volume("v", None, 100).unwrap();
    assert_eq!(dev.period_ns(), 10_000_000);
    let bad = QosConfig {
        min: 50.0,
        max: 40.0,
        ..qos_10ms()
    };
    match dev.set_qos(&bad) {
        Err(QosError::InvalidConfig(m)) => assert!(m.starts_with("device.qos.min"), "{m}"),
        other => panic!("{other:?}"),
    }
    let q = QosConfig {
        rlat: Some(DurationUs(10_000)),
        wlat: Some(DurationUs(10_000)),
        min: 50.0,
        max: 50.0,
        ..QosConfig::default()
    };
    dev.set_qos(&q).unwrap();
    assert_eq!(dev.qos_config(), q);
    assert_eq!(dev.period_ns(), 20_000_000);
    assert_eq!(dev.vrate_ppm(), 500_000);
    let c = go(v.admit(&io_us(100)));
    assert_eq!(c.abs_cost, 100 * crate::vtime::VTIME_PER_USEC);
    let m = crate::cost_model::ModelConfig::default();
    dev.set_model(&m).unwrap();
    let c = go(v.admit(&io_us(100)));
    assert_ne!(c.abs_cost, 100 * crate::vtime::VTIME_PER_USEC);
    // Disabling admits everything unthrottled.
    dev.set_qos(&QosConfig { enable: false, ..q }).unwrap();
    assert!(!dev.enabled());
    for _ in 0..100 {
        go(v.admit(&io_us(1_000_000)));
    }
    let bad_model = crate::cost_model::ModelConfig {
        rbps: Some(5),
        ..Default::default()
    };
    assert!(matches!(
        dev.set_model(&bad_model),
        Err(QosError::InvalidConfig(_))
    ));
}

/// A background volume weighs a thousandth, and so does a group holding only background
/// volumes: a foreground volume in a sibling group of equal weight gets 99.9 % when both
/// are active, the whole device when the background one leaves, and the group's weight
/// again as soon as a foreground volume joins it. Changing the class of an active volume
/// re-enters it at once.
#[test]
fn background_weighs_a_thousandth_at_every_level() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    dev.add_group("B", None, 100).unwrap();
    let fg = dev.add_volume("fg", Some("A"), 100).unwrap();
    let bg = dev.add_volume("bg", Some("B"), 100).unwrap();
    dev.set_class("bg", Class::Background).unwrap();
    go(fg.admit(&io_us(1)));
    go(bg.admit(&io_us(1)));
    let pct = |v: &VolumeQos| v.stats().hweight_active;
    assert!(
        pct(&fg) > 99.8 && pct(&bg) < 0.2,
        "{} {}",
        pct(&fg),
        pct(&bg)
    );
    let fg2 = dev.add_volume("fg2", Some("B"), 100).unwrap();
    go(fg2.admit(&io_us(1)));
    // B has a foreground member now: 50/50 between the groups, bg ~nothing inside B.
    assert!((pct(&fg) - 50.0).abs() < 0.1, "{}", pct(&fg));
    assert!(
        (pct(&fg2) - 50.0).abs() < 0.1 && pct(&bg) < 0.1,
        "{} {}",
        pct(&fg2),
        pct(&bg)
    );
    dev.set_class("bg", Class::Normal).unwrap();
    assert!((pct(&bg) - 25.0).abs() < 0.1, "{}", pct(&bg));
    assert_eq!(dev.volumes()[1].class, Class::Normal);
    assert_eq!(dev.volumes()[1].weight, 100);
}

/// Reservations are checked at every change, and a refused one changes nothing.
#[test]
fn reservations_beyond_what_may_be_reserved_are_refused() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_volume("a", None, 100).unwrap();
    dev.add_volume("b", None, 100).unwrap();
    let pct = |p: f64| ReserveConfig {
        pct: p,
        ..ReserveConfig::default()
    };
    dev.set_reserve("a", Some(&pct(50.0))).unwrap();
    let err = dev.set_reserve("b", Some(&pct(30.0))).unwrap_err();
    assert!(
        matches!(err, QosError::Overcommitted { total_pct, reservable_pct, .. }
            if (total_pct - 80.0).abs() < 1e-9 && (reservable_pct - 72.0).abs() < 1e-9),
        "{err}"
    );
    assert_eq!(dev.reserve("b").unwrap(), None);
    // A background volume without a reservation of its own has a 1 % floor, which counts.
    dev.set_reserve("b", Some(&pct(21.5))).unwrap();
    dev.add_volume("c", None, 100).unwrap();
    let err = dev.set_class("c", Class::Background).unwrap_err();
    assert!(matches!(err, QosError::Overcommitted { .. }), "{err}");
    assert_eq!(dev.volumes()[2].class, Class::Normal);
    dev.set_reserve("b", Some(&pct(21.0))).unwrap();
    dev.set_class("c", Class::Background).unwrap();
    // A higher vrate floor allows more.
    dev.set_qos(&QosConfig {
        min: 95.0,
        ..qos_10ms()
    })
    .unwrap();
    dev.set_reserve("b", Some(&pct(34.0))).unwrap();
    assert!(dev.set_qos(&qos_10ms()).is_err());
}

/// Changes checked together pass where the same changes one by one would pass through an
/// over-committed state (the state file at start-up).
#[test]
fn service_changes_in_one_batch_are_checked_as_they_stand_at_the_end() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_volume("a", None, 100).unwrap();
    dev.add_volume("b", None, 100).unwrap();
    let pct = |p: f64| ServiceChange {
        reserve: Some(Some(ReserveConfig {
            pct: p,
            ..ReserveConfig::default()
        })),
        ..ServiceChange::default()
    };
    dev.set_service("a", &pct(10.0)).unwrap();
    dev.set_service("b", &pct(60.0)).unwrap();
    assert!(dev.set_service("a", &pct(60.0)).is_err());
    dev.set_services(&[("a", pct(60.0)), ("b", pct(10.0))])
        .unwrap();
    assert_eq!(dev.reserve("a").unwrap().unwrap().pct, 60.0);
    // A refused batch changes nothing.
    assert!(dev
        .set_services(&[("b", pct(5.0)), ("a", pct(80.0))])
        .is_err());
    assert_eq!(dev.reserve("b").unwrap().unwrap().pct, 10.0);
    assert_eq!(dev.reserve("a").unwrap().unwrap().pct, 60.0);
}

/// Caps per operation: a flush cap of 10/s lets two flushes go at once (the bucket holds
/// one, and one may overshoot), then one per 100 ms, while reads and writes go
/// untouched; the flush may be passed while it waits. Removing the caps lifts them.
#[test]
fn op_caps_hold_only_their_operation() {
    let (dev, clock) = device(&QosConfig {
        enable: false,
        ..qos_10ms()
    });
    let v = dev.add_volume("v", None, 100).unwrap();
    let op_caps: OpCapsConfig = toml::from_str("flush = { iops = 10 }").unwrap();
    dev.set_op_caps("v", Some(&op_caps)).unwrap();
    let flush = IoRequest {
        kind: IoKind::Flush,
        offset: 0,
        len: 0,
    };
    go(v.admit(&flush));
    go(v.admit(&flush));
    let until = wait(v.admit(&flush));
    assert_eq!(until, clock.now_ns() + 100_000_000);
    for _ in 0..100 {
        go(v.admit(&io_us(4096)));
    }
    assert!(v.may_pass(IoKind::Flush) && !v.may_pass(IoKind::Read));
    assert_eq!(dev.volumes()[0].op_caps, Some(op_caps));
    let bad: OpCapsConfig = toml::from_str("discard = { read_iops = 5 }").unwrap();
    let err = dev.set_op_caps("v", Some(&bad)).unwrap_err().to_string();
    assert!(err.starts_with("op_caps.discard"), "{err}");
    dev.set_op_caps("v", None).unwrap();
    go(v.admit(&flush));
    assert!(!v.may_pass(IoKind::Flush));
}

/// Removing an active volume gives its share to its siblings at once (design §4.6); its
/// name is free again; a group is removed only once empty.
#[test]
fn removed_nodes_leave_their_share_and_their_name() {
    let (dev, _clock) = device(&qos_10ms());
    dev.add_group("A", None, 100).unwrap();
    let a0 = dev.add_volume("A0", Some("A"), 100).unwrap();
    let a1 = dev.add_volume("A1", Some("A"), 100).unwrap();
    let b = dev.add_volume("B", None, 100).unwrap();
    for v in [&a0, &a1, &b] {
        go(v.admit(&io_us(1)));
    }
    assert_eq!(a0.stats().hweight_active_raw, WEIGHT_ONE / 4);
    dev.remove_volume("A1").unwrap();
    go(a0.admit(&io_us(1)));
    assert_eq!(a0.stats().hweight_active_raw, WEIGHT_ONE / 2);
    assert_eq!(dev.stats().volumes.len(), 2);
    assert!(matches!(
        dev.remove_group("A"),
        Err(QosError::NotEmpty { members, .. }) if members == "A0"
    ));
    dev.remove_volume("A0").unwrap();
    go(b.admit(&io_us(1)));
    assert_eq!(b.stats().hweight_active_raw, WEIGHT_ONE);
    assert!(matches!(dev.remove_group("B"), Err(QosError::NotAGroup(_))));
    assert!(matches!(
        dev.remove_volume("A"),
        Err(QosError::NotAVolume(_))
    ));
    dev.remove_group("A").unwrap();
    assert!(dev.groups().is_empty());
    let names: Vec<String> = dev.volumes().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["B"]);
    // The names can be used again, by either kind.
    dev.add_volume("A", None, 100).unwrap();
    dev.add_group("A1", None, 100).unwrap();
    assert!(matches!(
        dev.remove_volume("gone"),
        Err(QosError::UnknownName(_))
    ));
}

/// A group moves with its volumes (design §4.5): their hweights follow the new parent at
/// once, and a group cannot move inside itself.
#[test]
fn a_group_moves_with_its_volumes() {
    let (dev, _clock) = device(&qos_10ms());
    for g in ["A", "B", "C"] {
        dev.add_group(g, None, 100).unwrap();
    }
    let vols: Vec<_> = ["A0", "B0", "C0"]
        .iter()
        .zip(["A", "B", "C"])
        .map(|(v, g)| dev.add_volume(v, Some(g), 100).unwrap())
        .collect();
    // Every volume active, then each one's share as its next admission sees it.
    let shares = |vols: &[Arc<VolumeQos>]| -> Vec<u32> {
        for v in vols {
            go(v.admit(&io_us(1)));
        }
        vols.iter()
            .map(|v| {
                go(v.admit(&io_us(1)));
                v.stats().hweight_active_raw
            })
            .collect()
    };
    let third = WEIGHT_ONE / 3;
    assert!(shares(&vols).iter().all(|&s| s.abs_diff(third) <= 1));
    dev.move_group("A", Some("C")).unwrap();
    assert_eq!(
        shares(&vols),
        [WEIGHT_ONE / 4, WEIGHT_ONE / 2, WEIGHT_ONE / 4]
    );
    assert_eq!(dev.groups()[0].parent.as_deref(), Some("C"));
    assert!(matches!(
        dev.move_group("C", Some("A")),
        Err(QosError::Cycle { .. })
    ));
    assert!(matches!(
        dev.move_group("A0", None),
        Err(QosError::NotAGroup(_))
    ));
    dev.move_group("A", None).unwrap();
    assert!(shares(&vols).iter().all(|&s| s.abs_diff(third) <= 1));
}

/// Reads cost `len` µs of transfer time and writes twice that.
#[derive(Debug)]
struct TransferModel;

impl crate::cost_model::CostModel for TransferModel {
    fn abs_cost(&self, input: &crate::cost_model::CostInput) -> u64 {
        self.size_cost(input.kind, input.len).max(1)
    }
    fn size_cost(&self, kind: IoKind, len: u64) -> u64 {
        let per_byte = if kind == IoKind::Write { 2 } else { 1 };
        len * per_byte * crate::vtime::VTIME_PER_USEC
    }
}

fn completed_after(v: &VolumeQos, clock: &ManualClock, kind: IoKind, len: u64, device_us: u64) {
    let charge = go(v.admit(&IoRequest {
        kind,
        offset: 0,
        len,
    }));
    let admitted = clock.now_ns();
    v.complete(&charge, admitted, admitted, admitted + device_us * 1000);
}

/// Device latency is judged against the target after the request's own transfer time:
/// being large is not a miss. Flushes and discards are not judged, and neither is
/// anything with QoS disabled.
#[test]
fn a_completion_is_judged_against_the_target_after_its_transfer_time() {
    let (dev, clock) = device_with(Box::new(TransferModel), &qos_10ms());
    let v = dev.add_volume("v", None, 100).unwrap();
    // Targets of 5 ms: a 1,000 µs read may take about 6,000 µs, a 1,000 µs write 7,000
    // (vtime's ns are 0.3 % long, hence the margins).
    completed_after(&v, &clock, IoKind::Read, 1_000, 5_990);
    completed_after(&v, &clock, IoKind::Read, 1_000, 6_030);
    completed_after(&v, &clock, IoKind::Write, 1_000, 6_990);
    completed_after(&v, &clock, IoKind::Write, 1_000, 7_030);
    completed_after(&v, &clock, IoKind::Read, 10, 5_005);
    completed_after(&v, &clock, IoKind::Flush, 0, 60_000);
    completed_after(&v, &clock, IoKind::Discard, 1_000, 60_000);
    let s = v.stats();
    assert_eq!((s.lat_met, s.lat_missed), (3, 2));

    let off = QosConfig {
        enable: false,
        ..qos_10ms()
    };
    let (dev, clock) = device_with(Box::new(TransferModel), &off);
    let v = dev.add_volume("v", None, 100).unwrap();
    completed_after(&v, &clock, IoKind::Read, 1_000, 60_000);
    let s = v.stats();
    assert_eq!((s.lat_met, s.lat_missed), (0, 0));
}
