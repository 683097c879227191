//! Where the weights slip: a ceiling on vrate rises below the point where the device
//! stopped honouring them (design §5.10).
//!
//! Budgets split the device by weight only while vrate is below the device's speed.
//! Above it every volume's queue waits in the device, which serves them by queue depth,
//! and the heavier of two weighted volumes falls short of its share: a victim, but a
//! near one (`super::victims::mark`), whose misses are its own queue's. Its misses take
//! vrate back down, after which vrate climbs again while the volumes are short of
//! budget. Without a memory of where the split slipped that is a cycle, each turn of it
//! costing the split and, in the descent's overshoot, a part of the device.
//!
//! So when a descent begins with near victims only, the vrate it began from, less
//! [`SLIP_BACKOFF_PCT`], becomes a ceiling for rises (never a fall). A descent that
//! begins after vrate rose again and near the ceiling (within the backoff) lowers it by
//! as much; others leave it, so one descent broken by a neutral window counts once. The
//! ceiling lapses [`SLIP_MEMORY_NS`] after it was last lowered (the device may have
//! become faster, or the model learned), and with a new configuration.

pub use crate::qos::tunables::{SLIP_BACKOFF_PCT, SLIP_FROM_PCT, SLIP_MEMORY_NS};

/// The ceiling found by the last slip.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlipCeiling {
    /// The ceiling and when it was last lowered (ns).
    limit: Option<(u64, u64)>,
    /// vrate rose since the last slip.
    rose: bool,
    /// The configuration the ceiling was found under (its address).
    cfg: usize,
}

impl SlipCeiling {
    /// Forgets the ceiling when the configuration `cfg` (its address) is not the one it
    /// was found under: a new model or new bounds change what a vrate means.
    pub fn config(&mut self, cfg: usize) {
        if cfg != self.cfg {
            *self = SlipCeiling {
                cfg,
                ..SlipCeiling::default()
            };
        }
    }

    /// vrate rose.
    pub fn rose(&mut self) {
        self.rose = true;
    }

    /// A descent of vrate began from `vrate_before` on the misses of near victims only.
    pub fn slipped(&mut self, vrate_before: u64, now_ns: u64) {
        let below = vrate_before * (100 - SLIP_BACKOFF_PCT) / 100;
        let limit = match self.current(now_ns) {
            None => below,
            Some(l) if self.rose && vrate_before >= l * (100 - SLIP_BACKOFF_PCT) / 100 => {
                if below >= l {
                    return;
                }
                below
            }
            Some(_) => return,
        };
        self.limit = Some((limit, now_ns));
        self.rose = false;
    }

    /// The highest vrate a rise may reach now, if any.
    pub fn current(&self, now_ns: u64) -> Option<u64> {
        self.limit
            .filter(|&(_, at)| now_ns.saturating_sub(at) <= SLIP_MEMORY_NS)
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
        // The same descent, broken by a neutral window: no rise since, no new slip.
        c.slipped(960, 6);
        assert_eq!(c.current(6), Some(970));
        // Back up to the ceiling, slipping there: lowered by as much again.
        c.rose();
        c.slipped(970, 7);
        assert_eq!(c.current(7), Some(940));
        // A descent from well below it, after a rise, leaves it (and its age).
        c.rose();
        c.slipped(800, 8);
        assert_eq!(c.current(8), Some(940));
        assert_eq!(c.current(7 + SLIP_MEMORY_NS), Some(940));
        assert_eq!(c.current(8 + SLIP_MEMORY_NS), None);
        // After it lapsed, the next slip starts afresh.
        c.slipped(1_000, 9 + SLIP_MEMORY_NS);
        assert_eq!(c.current(9 + SLIP_MEMORY_NS), Some(970));
        // A new configuration forgets it.
        c.config(1);
        assert_eq!(c.current(9 + SLIP_MEMORY_NS), None);
    }
}
