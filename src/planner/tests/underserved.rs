//! Planner tests of `protect = "underserved"` (design §5.10): whose misses lower vrate,
//! when everyone's hold it, and vrate while one volume is active (design §5.9).

use super::*;

/// A neighbour that takes its whole budget at once, its requests served at once: it is
/// short of budget, and a volume beside it that uses little is underserved.
fn aggress(neighbour: &VolumeQos, clock: &ManualClock) {
    for _ in 0..10_000 {
        let Decision::Go(c) = neighbour.admit(&io_us(25)) else {
            return;
        };
        let t = clock.now_ns();
        neighbour.complete(&c, t, t, t);
    }
    panic!("the neighbour was never throttled");
}

fn underserved_only() -> QosConfig {
    QosConfig {
        protect: Some(crate::qos::Protect::Underserved),
        ..qos_10ms()
    }
}

/// One period of two equal volumes taking turns until both are throttled, every request
/// completing `lat_ns` after it went; then the planner runs.
fn both_busy_for_a_period(dev: &Planned, clock: &ManualClock, vols: [&VolumeQos; 2], lat_ns: u64) {
    for _ in 0..10 {
        // In turns, so that neither is ever alone; until both are throttled.
        let mut going = [true, true];
        for _ in 0..10_000 {
            for (i, v) in vols.into_iter().enumerate() {
                going[i] = match v.admit(&io_us(25)) {
                    Decision::Go(c) => {
                        let t = clock.now_ns();
                        v.complete(&c, t, t, t + lat_ns);
                        true
                    }
                    Decision::Wait { .. } => false,
                };
            }
            if going == [false, false] {
                break;
            }
        }
        clock.advance(dev.period_ns() / 10);
    }
    dev.plan();
    let rec = dev.last_period();
    assert!(rec.nr_shortages == 2, "{rec:?}");
}

/// `protect = "underserved"` (design §5.10): two equal volumes, both short of budget and
/// both missing their target, are served alike, so neither is underserved and lowering
/// vrate would only take from them what it gives them: vrate does not fall. With `"all"`,
/// the same periods lower it as in Linux.
#[test]
fn equal_volumes_missing_together_do_not_lower_vrate_when_only_the_underserved_count() {
    for (qos, falls) in [(underserved_only(), false), (qos_10ms(), true)] {
        let (dev, clock) = device(&qos);
        let a = dev.add_volume("a", None, 100).unwrap();
        let b = dev.add_volume("b", None, 100).unwrap();
        let start = dev.vrate_ppm();
        for _ in 0..20 {
            both_busy_for_a_period(&dev, &clock, [&a, &b], 6_000_000);
        }
        let end = dev.vrate_ppm();
        assert_eq!(
            end < start,
            falls,
            "{:?}: vrate {start} -> {end}",
            qos.protect
        );
    }
}

/// `protect = "underserved"`: everyone's misses keep vrate from rising while the target
/// was met lately; once nobody met it for `ATTAINED_MEMORY_NS`, lowering vrate evidently
/// did not bring their latency back, and vrate rises to where the budgets bind.
#[test]
fn everyones_misses_hold_vrate_only_while_the_target_is_attainable() {
    let (dev, clock) = device(&underserved_only());
    let a = dev.add_volume("a", None, 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    for _ in 0..20 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 100_000);
    }
    let met = dev.vrate_ppm();
    let memory_periods = crate::planner::attainable::ATTAINED_MEMORY_NS / dev.period_ns();
    for _ in 0..memory_periods - 5 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 6_000_000);
    }
    assert_eq!(dev.vrate_ppm(), met, "held while the target was met lately");
    for _ in 0..50 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 6_000_000);
    }
    assert!(
        dev.vrate_ppm() > met,
        "unattainable: {} <= {met}",
        dev.vrate_ppm()
    );
}

/// Below the model's own speed (100 %), misses of volumes that are no victims do not
/// hold vrate even while the target is attainable: a hold there keeps it wherever a
/// victim's descent left it, with the device partly idle for nobody's sake.
#[test]
fn everyones_misses_hold_vrate_only_above_the_models_speed() {
    let qos = underserved_only();
    let (dev, clock) = device(&qos);
    let a = dev.add_volume("a", None, 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    // Left at 70 % as after a descent: the bounds clamp it there and then let it go.
    dev.set_qos(&QosConfig {
        max: 70.0,
        ..qos.clone()
    })
    .unwrap();
    dev.set_qos(&qos).unwrap();
    for _ in 0..20 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 100_000);
    }
    let met = dev.vrate_ppm();
    assert!(met < 1_000_000, "{met}");
    for _ in 0..20 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 6_000_000);
    }
    let after = dev.vrate_ppm();
    assert!(
        after > met,
        "held below the model's speed: {after} <= {met}"
    );
}

/// While only one volume is active, for the second before it counts as alone, vrate
/// holds: raised for a lone writer, it would greet readers coming back with a full
/// device queue.
#[test]
fn vrate_holds_while_one_volume_is_active() {
    let (dev, clock) = device(&underserved_only());
    let a = dev.add_volume("a", None, 100).unwrap();
    let b = dev.add_volume("b", None, 100).unwrap();
    for _ in 0..20 {
        both_busy_for_a_period(&dev, &clock, [&a, &b], 100_000);
    }
    // b stops: nothing waiting, nothing in flight, deactivated after a period.
    b.cancel_wait();
    let before = dev.vrate_ppm();
    for _ in 0..50 {
        for _ in 0..10 {
            while let Decision::Go(c) = a.admit(&io_us(25)) {
                let t = clock.now_ns();
                a.complete(&c, t, t, t + 100_000);
            }
            clock.advance(dev.period_ns() / 10);
        }
        dev.plan();
    }
    let rec = dev.last_period();
    assert_eq!((rec.nr_active, rec.nr_shortages), (1, 1), "{rec:?}");
    assert_eq!(dev.vrate_ppm(), before);
}

/// `protect = "underserved"`: a light reader whose reads miss beside a neighbour that
/// takes its whole share is underserved, and its misses lower vrate at once.
#[test]
fn an_underserved_volume_missing_its_target_lowers_vrate() {
    let (dev, clock) = device(&underserved_only());
    let v = dev.add_volume("v", None, 100).unwrap();
    let n = dev.add_volume("neighbour", None, 100).unwrap();
    let read = IoRequest {
        kind: IoKind::Read,
        offset: 0,
        len: 10,
    };
    let mut vrates = vec![dev.vrate_ppm()];
    for _ in 0..6 {
        for _ in 0..100 {
            if let Decision::Go(c) = v.admit(&read) {
                let t = clock.now_ns();
                v.complete(&c, t, t, t + 6_000_000);
            }
        }
        // After v: a volume alone on the device is never throttled.
        aggress(&n, &clock);
        clock.advance(dev.period_ns());
        dev.plan();
        let rec = dev.last_period();
        assert!(
            rec.missed_ppm[0] > 500_000 && rec.nr_shortages >= 1,
            "{rec:?}"
        );
        vrates.push(dev.vrate_ppm());
    }
    for w in vrates.windows(2) {
        assert!(w[1] < w[0], "{vrates:?}");
    }
}

/// `protect = "underserved"`: an underserved volume whose reads miss as much at `min` as
/// well above it (its latency is its own, or the host's) takes vrate to `min` and, after
/// `UNREACHED_LOW_PERIODS` below twice `min`, no longer holds it: vrate rises while its neighbour
/// is short. One whose latency falls with vrate but still misses at `min` (a neighbour's
/// queue, only partly drained) keeps it there, as in Linux.
#[test]
fn an_underserved_volume_that_min_does_not_help_stops_holding_vrate_there() {
    let min_ppm = 250_000;
    // vrate's floor is `min` in vtime units, a few ppm above 25 %.
    let at_min = |vrate_ppm: u64| vrate_ppm < min_ppm + 1_000;
    let constant = |_vrate_ppm: u64| 6_000_000u64;
    let falls_with_vrate = |vrate_ppm: u64| 5_500_000 + vrate_ppm.saturating_sub(min_ppm) * 27;
    for (latency_ns, rises) in [
        (&constant as &dyn Fn(u64) -> u64, true),
        (&falls_with_vrate, false),
    ] {
        let (dev, clock) = device(&QosConfig {
            min: 25.0,
            max: 200.0,
            ..underserved_only()
        });
        let v = dev.add_volume("v", None, 100).unwrap();
        let n = dev.add_volume("neighbour", None, 100).unwrap();
        let mut reached_min_at = None;
        for period in 0..400 {
            let lat = latency_ns(dev.vrate_ppm());
            for _ in 0..100 {
                if let Decision::Go(c) = v.admit(&io_us(10)) {
                    let t = clock.now_ns();
                    v.complete(&c, t, t, t + lat);
                }
            }
            aggress(&n, &clock);
            clock.advance(dev.period_ns());
            dev.plan();
            if at_min(dev.vrate_ppm()) && reached_min_at.is_none() {
                reached_min_at = Some(period);
            }
        }
        let at = reached_min_at.expect("its misses take vrate to min");
        let rec = dev.last_period();
        assert_eq!(rec.unreached, rises, "reached min at period {at}: {rec:?}");
        assert_eq!(!at_min(dev.vrate_ppm()), rises, "{rec:?}");
    }
}

/// `volume` alone on the device for 2 s, keeping it busy, its requests completing at once.
fn alone_for_two_seconds(dev: &Planned, clock: &ManualClock, volume: &VolumeQos) {
    let periods = 2 * crate::qos::tunables::FRESH_AFTER_IDLE_NS / dev.period_ns();
    for _ in 0..periods {
        for _ in 0..dev.period_ns() / 250_000 {
            if let Decision::Go(c) = volume.admit(&io_us(250)) {
                let t = clock.now_ns();
                volume.complete(&c, t, t, t);
            }
        }
        clock.advance(dev.period_ns());
        dev.plan();
    }
}

/// Four periods in which `volume` issues 100 small reads (`all_it_can`: as many as its
/// budget allows), each completing 6 ms late, and then `neighbour_turn` runs; returns
/// vrate before and after.
fn slow_reads_for_four_periods(
    dev: &Planned,
    clock: &ManualClock,
    volume: &VolumeQos,
    all_it_can: bool,
    neighbour_turn: &dyn Fn(),
) -> (u64, u64) {
    let before = dev.vrate_ppm();
    for _ in 0..4 {
        let mut issued = 0;
        while issued < 100 || all_it_can {
            let Decision::Go(c) = volume.admit(&io_us(10)) else {
                break;
            };
            let t = clock.now_ns();
            volume.complete(&c, t, t, t + 6_000_000);
            issued += 1;
        }
        neighbour_turn();
        clock.advance(dev.period_ns());
        dev.plan();
    }
    (before, dev.vrate_ppm())
}

/// `protect = "underserved"`: a reader back from a long pause beside a neighbour that
/// had the device alone is protected from its first period. The neighbour works off the
/// queue it built alone and admits nothing meanwhile, so the reader's share of what was
/// admitted looks like all of it; its reads wait behind that queue all the same, and
/// their misses lower vrate at once, for the grace's 100 ms and no longer.
#[test]
fn a_volume_back_from_a_long_pause_is_protected_while_its_neighbour_drains() {
    let (dev, clock) = device(&underserved_only());
    let v = dev.add_volume("v", None, 100).unwrap();
    let n = dev.add_volume("neighbour", None, 100).unwrap();
    // Both busy for a while, v's reads served at once; then v pauses.
    for _ in 0..20 {
        for _ in 0..10 {
            if let Decision::Go(c) = v.admit(&io_us(10)) {
                let t = clock.now_ns();
                v.complete(&c, t, t, t);
            }
        }
        aggress(&n, &clock);
        clock.advance(dev.period_ns());
        dev.plan();
    }
    alone_for_two_seconds(&dev, &clock, &n);
    // Alone it is never throttled: the queue it leaves in flight is as deep as it likes.
    let queued: Vec<_> = (0..2000).map(|_| go(n.admit(&io_us(250)))).collect();
    clock.advance(dev.period_ns());
    dev.plan();
    let owes = || {
        let next = n.admit(&io_us(250));
        assert!(matches!(next, Decision::Wait { .. }), "it owes its queue");
    };
    let (before, after) = slow_reads_for_four_periods(&dev, &clock, &v, false, &owes);
    let rec = dev.last_period();
    assert!(rec.nr_shortages >= 1, "{rec:?}");
    assert!(after < before, "vrate {before} -> {after}: {rec:?}");
    // After the grace it is judged by its share again, which still looks large.
    let grace_periods = crate::qos::tunables::BACK_GRACE_NS / dev.period_ns();
    for _ in 0..grace_periods.div_ceil(4) {
        slow_reads_for_four_periods(&dev, &clock, &v, false, &owes);
    }
    let (before, after) = slow_reads_for_four_periods(&dev, &clock, &v, false, &owes);
    assert!(
        after >= before,
        "after the grace: vrate {before} -> {after}"
    );
    let t = clock.now_ns();
    for c in &queued {
        n.complete(c, t, t, t);
    }
}

/// The grace above is for a queue the lone volume left in the device: a heavy volume
/// arriving beside a lone one with nothing in flight is judged by its share at once, and
/// its misses (its own queue's) do not lower vrate.
#[test]
fn a_volume_arriving_beside_a_lone_one_with_nothing_in_flight_gets_no_grace() {
    let (dev, clock) = device(&underserved_only());
    let heavy = dev.add_volume("heavy", None, 100).unwrap();
    let lone = dev.add_volume("lone", None, 100).unwrap();
    // Everything the lone one issued is completed; it goes on with a few small reads.
    alone_for_two_seconds(&dev, &clock, &lone);
    let light = || {
        for _ in 0..5 {
            if let Decision::Go(c) = lone.admit(&io_us(10)) {
                let t = clock.now_ns();
                lone.complete(&c, t, t, t);
            }
        }
    };
    let (before, after) = slow_reads_for_four_periods(&dev, &clock, &heavy, true, &light);
    let rec = dev.last_period();
    assert!(rec.nr_shortages >= 1 && rec.nr_active == 2, "{rec:?}");
    assert!(after >= before, "vrate {before} -> {after}: {rec:?}");
}
