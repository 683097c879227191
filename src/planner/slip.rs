//! Where the weights slip: a ceiling on vrate rises below the point where the device
//! stopped honouring them (design §5.10).
//!
//! Budgets split the device by weight only while vrate is below the device's speed.
//! Above it every volume's queue waits in the device, which serves them by queue depth,
//! and the heavier of two weighted volumes falls short of its share: a victim, but one
//! short by less than half ([`super::victims::mark`] says "not far"), whose misses are
//! its own queue's. Its misses take vrate back down, after which vrate climbs again while
//! the volumes are short of budget. Without a memory of where the split slipped, that is
//! a cycle: two backlogged readers at weights 1:3 on the emulated slow device slid from
//! 3.0 to 2.6-2.7 every second or so, and each descent left the device 15-30 % idle.
//!
//! So when a descent begins with near victims only, the vrate it began from, less
//! [`CEILING_BACKOFF_PCT`], becomes a ceiling for rises (never a fall). A descent that
//! begins near the ceiling lowers it again by as much (one from well below it is the
//! victim's averaged share remembering the last slip); the ceiling lapses after
//! [`FLOOR_WINDOW_NS`] (the device may have become faster, or the model learned), and
//! the next slip finds it again.

pub use crate::qos::tunables::{CEILING_BACKOFF_PCT, FLOOR_WINDOW_NS, SLIP_FROM_PCT};

/// The ceiling found by the last slip, and when it was set (ns).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlipCeiling {
    limit: Option<(u64, u64)>,
}

impl SlipCeiling {
    /// A descent of vrate began from `vrate_before` on the misses of near victims only.
    pub fn slipped(&mut self, vrate_before: u64, now_ns: u64) {
        let below = vrate_before * (100 - CEILING_BACKOFF_PCT) / 100;
        let limit = match self.current(now_ns) {
            // A descent from well below the ceiling is no new slip: the victim's share,
            // an average over many periods, still remembers the last one.
            Some(l) if vrate_before < l * (100 - CEILING_BACKOFF_PCT) / 100 => return,
            Some(l) => l.min(below),
            None => below,
        };
        self.limit = Some((limit, now_ns));
    }

    /// The highest vrate a rise may reach now, if any.
    pub fn current(&self, now_ns: u64) -> Option<u64> {
        self.limit
            .filter(|&(_, at)| now_ns.saturating_sub(at) <= FLOOR_WINDOW_NS)
            .map(|(limit, _)| limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slip_sets_a_ceiling_below_where_it_began_until_it_lapses() {
        let mut c = SlipCeiling::default();
        assert_eq!(c.current(0), None);
        c.slipped(1_000, 5);
        assert_eq!(c.current(5), Some(970));
        // The next descent from the ceiling lowers it; one from higher does not raise it.
        c.slipped(970, 6);
        assert_eq!(c.current(6), Some(940));
        c.slipped(1_000, 7);
        assert_eq!(c.current(7), Some(940));
        // One from well below it leaves it as it is.
        c.slipped(900, 7);
        assert_eq!(c.current(7), Some(940));
        assert_eq!(c.current(7 + FLOOR_WINDOW_NS), Some(940));
        assert_eq!(c.current(8 + FLOOR_WINDOW_NS), None);
        // After it lapsed, the next slip starts afresh.
        c.slipped(1_000, 9 + FLOOR_WINDOW_NS);
        assert_eq!(c.current(9 + FLOOR_WINDOW_NS), Some(970));
    }
}
