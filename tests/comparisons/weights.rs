//! A weight change among backlogged tenants on the emulated slow device: the split
//! follows, and the device stays busy.

use crate::daemon::reads_over;
use crate::devices::{light_and_heavy_reading, patch_weight};
use crate::emulated::measure;

const BOTH: [&str; 2] = ["light", "heavy"];

/// Two backlogged QD16 readers at equal weights; the heavier raised from 100 to 300
/// while they read. At 1:1 they get the device's speed together (vrate may stand a
/// little above it: nobody is short of its share). After the change the heavy one is
/// short until vrate comes down; from 2 s of the device's speed after it, the split is
/// 1:3 ± 10 % and the two keep at least 0.9 × the reads per second they had at 1:1:
/// their own misses of the derived target do not hold vrate low after that descent,
/// and where the weights slipped is remembered rather than probed every second (design
/// §5.10).
#[test]
fn a_weight_change_keeps_the_split_and_the_device_busy() {
    measure("weight change", || {
        // 120,000 reads at the device's 20,000 a second, with time to spare.
        let (d, load) = light_and_heavy_reading("", 12);
        let (_, at_equal) = reads_over(&d, BOTH, 20_000);
        patch_weight(&d, "heavy", 300);
        reads_over(&d, BOTH, 40_000);
        let ([light, heavy], after) = reads_over(&d, BOTH, 60_000);
        for r in load.join().unwrap().unwrap() {
            assert_eq!(r.errors, 0);
        }
        let split = heavy as f64 / light.max(1) as f64;
        let busy = after / at_equal;
        eprintln!(
            "reads/s at 1:1 {at_equal:.0}; after the change to 1:3 {after:.0} ({busy:.3} ×), \
             split {split:.3}"
        );
        if !(2.7..=3.3).contains(&split) {
            return Err(format!("heavy/light after the change = {split:.3}"));
        }
        (busy >= 0.9)
            .then_some(())
            .ok_or(format!("{busy:.3} × the reads per second at 1:1"))
    });
}
