//! `ctl top`: the device line shows only the latency directions that have a target, and
//! each volume's pressure (the share of the last second it was held back by QoS).

use crate::daemon::{config, ctl, volume, DaemonProcess};
use crate::devices::{reader, DEFAULTS, SLOW_DEVICE};
use vhost_iocost::loadgen;

#[test]
fn top_shows_the_targets_in_effect_and_each_volumes_pressure() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_DEVICE}{DEFAULTS}"),
        &(volume("capped", 0, 16, "caps = { iops = 500 }") + &volume("idle", 16, 16, "")),
    ));
    // Backlogged behind its cap for 4 s; frames are taken while it runs, until one shows
    // a full second of it (the sampler's rate needs two samples a second apart).
    let load = std::thread::spawn({
        let t = reader(&d, "capped", 8, 4);
        move || loadgen::run(&[t]).unwrap()
    });
    let mut frame;
    loop {
        frame = ctl(&d, &["top", "--once"]);
        if pressure(&frame, "capped") >= 80.0 || load.is_finished() {
            break;
        }
    }
    let results = load.join().unwrap();
    assert_eq!(results[0].errors, 0);
    let header = frame.lines().next().unwrap();
    // The calibrated defaults judge reads only: no write line that means nothing.
    assert!(header.contains("reads over p90 "), "{frame}");
    assert!(
        !header.contains("writes over") && !header.contains("1000000"),
        "{frame}"
    );
    assert!(pressure(&frame, "capped") >= 80.0, "{frame}");
    assert_eq!(pressure(&frame, "idle"), 0.0, "{frame}");
}

/// A volume's PRESS% in a `top` frame.
fn pressure(frame: &str, name: &str) -> f64 {
    let columns: Vec<&str> = frame.lines().nth(1).unwrap().split_whitespace().collect();
    let at = columns
        .iter()
        .position(|c| *c == "PRESS%")
        .unwrap_or_else(|| panic!("no PRESS% column\n{frame}"));
    let row = frame
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row {name}\n{frame}"));
    // Counted from the right: the ACT column is blank for an inactive volume.
    let from_right = columns.len() - 1 - at;
    row.split_whitespace()
        .rev()
        .nth(from_right)
        .unwrap()
        .parse()
        .unwrap()
}
