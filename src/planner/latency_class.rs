//! The latency class (PINE; design §15): each latency-class volume's own latency
//! percentile against its target, once per window, and each latency-class group's over
//! its volumes together (their completions gathered every period; its boost is on the
//! group's weight).
//!
//! A window lasts until it holds enough completions to tell the percentile (5 beyond it:
//! 500 for p99) or a second has passed, whichever is first, and at least one period (the
//! planner judges once per period). It ends early, as missed, once more of its
//! completions are over the target than a full window may have. Latency is measured in the daemon, from arrival to
//! completion, and split into the wait to be admitted and the time on the device:
//!
//! * **Missed, mostly waiting**: the volume's share is too small for its load; its boost,
//!   a factor on its weight, grows by the miss ratio, at least 1.25× and at most 4× per
//!   window, up to 100×. Its neighbours' shares shrink accordingly.
//! * **Missed, mostly on the device**: a bigger share cannot help; the device is too busy
//!   for the target, and the window counts as missed for vrate (busy_level rises), which
//!   lowers everyone's load: PINE's concurrency knob, applied to the whole device.
//! * **Met with margin** (at most 75 % of the target) three windows in a row: the boost
//!   falls by a fifth, and again every judged window while that lasts, down to none.
//!   PINE never gives its boost back; IOCost's margin keeps this from oscillating.
//! * vrate may not rise until every active latency-class volume and group has met its
//!   target with margin three windows in a row (one good window right after vrate fell
//!   is the fall's effect, not room to rise).
//! * **A ceiling on vrate** ([`Ceiling`]): a miss on the device sets it a step below the
//!   highest vrate of the window that missed, and every window met with margin raises it
//!   a little. Without it vrate climbed straight back to where the target was missed,
//!   and a reader beside an equal-weight aggressor at a latency cliff met its target
//!   only in every other second. PINE searches its concurrency limit the same way.
//!
//! After the boost falls one window is skipped: it may still show the old boost's effect
//! (PINE's 10 s cycle exists for the same reason). A raise is judged in the next window:
//! the wait it cures is the daemon's own and ends at once.

use crate::lock::Locked;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::qos::class::LatencyTarget;
use crate::qos::histogram::TargetWindow;
use crate::qos::shared::{DeviceShared, DeviceState};
use crate::qos::tree::NodeId;

use super::books::NodeBook;
pub use crate::qos::tunables::{
    BOOST_MAX, CEILING_BACKOFF_PCT, CEILING_HOLD, CEILING_HOLD_MAX, CEILING_STEP_MAX_PERMILLE,
    CEILING_STEP_PERMILLE, MARGIN_PCT, MET_WINDOWS, PEAK_SPAN_NS, STEP_MAX, WINDOW_MAX_NS,
};

/// What the latency class found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// A latency-class volume missed its target while on the device (in a window judged
    /// since the device's latency was last judged).
    pub device_miss: bool,
    /// An active latency-class volume was above its margin at its last judgment: vrate
    /// must not rise.
    pub unmet: bool,
    /// A latency-class volume is active.
    pub active: bool,
    /// A window was judged in this period.
    pub judged: bool,
}

/// The highest vrate the latency class lets the planner raise vrate to (design §15).
#[derive(Clone, Debug, Default)]
pub(crate) struct Ceiling {
    /// None until a latency-class volume misses on the device, and again once none is
    /// active.
    limit: Option<u64>,
    /// Base vrate per period over the last [`PEAK_SPAN_NS`]: a window that missed ran
    /// within it, and its highest vrate is where the device missed.
    recent: VecDeque<(u64, u64)>,
    /// The highest vrate before the last miss.
    missed_at: u64,
    /// When the last miss was judged: misses less than a window apart are one episode
    /// (several volumes, or a group and its members, see the same one).
    missed_ns: Option<u64>,
    /// Windows met with margin still to pass before the ceiling rises.
    hold: u32,
    /// The hold after the next miss.
    next_hold: u32,
    /// The next rise, per mille.
    step: u64,
    /// The configuration the limit was found under (its address): a new model or new
    /// bounds change what a vrate means.
    cfg: usize,
}

impl Ceiling {
    /// After [`steer`] in each period, with the base vrate of the period that ended and
    /// the identity of the configuration in force.
    pub fn update(&mut self, verdict: Verdict, vrate: u64, now_ns: u64, cfg: usize) {
        if !verdict.active || cfg != self.cfg {
            // Keep the buffer's allocation.
            let mut recent = std::mem::take(&mut self.recent);
            recent.clear();
            *self = Ceiling {
                recent,
                cfg,
                ..Ceiling::default()
            };
            if !verdict.active {
                return;
            }
        }
        while self
            .recent
            .front()
            .is_some_and(|&(at, _)| at + PEAK_SPAN_NS < now_ns)
        {
            self.recent.pop_front();
        }
        self.recent.push_back((now_ns, vrate));
        if verdict.device_miss {
            let peak = self.recent.iter().map(|&(_, v)| v).max().unwrap_or(vrate);
            let below = peak * (100 - CEILING_BACKOFF_PCT) / 100;
            self.limit = Some(self.limit.map_or(below, |l| l.min(below)));
            self.missed_at = peak;
            // Each episode of misses makes the next probe wait twice as long: the edge
            // is found once, then rarely tried again.
            let new_episode = self
                .missed_ns
                .map_or(true, |at| now_ns.saturating_sub(at) >= WINDOW_MAX_NS);
            if new_episode {
                self.hold = self.next_hold.max(CEILING_HOLD);
                self.next_hold = (self.hold * 2).min(CEILING_HOLD_MAX);
            }
            self.missed_ns = Some(now_ns);
            self.step = CEILING_STEP_PERMILLE;
        } else if verdict.judged && !verdict.unmet {
            if self.hold > 0 {
                self.hold -= 1;
            } else if let Some(l) = self.limit {
                // Slowly up to where it missed, faster beyond: the device or the load
                // changed.
                self.limit = Some(l + (l * self.step).div_ceil(1000));
                if l >= self.missed_at {
                    self.step = (self.step * 2).min(CEILING_STEP_MAX_PERMILLE);
                }
            }
        }
    }

    /// The highest base vrate a rise may reach; None: no limit.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }
}

/// Judge every active latency-class volume and group whose window is complete; change
/// boosts.
pub(crate) fn steer(
    dev: &DeviceShared,
    st: &mut DeviceState,
    books: &mut [NodeBook],
    groups: &mut Vec<NodeId>,
    now_ns: u64,
) -> Verdict {
    let mut verdict = Verdict::default();
    groups.clear();
    for i in 0..st.active.len() {
        let (id, v) = (st.active[i].0, Arc::clone(&st.active[i].1));
        if v.in_latency_group.load(Relaxed) {
            // This period's completions join every latency-class group above it.
            let mut h = v.hist.locked();
            let level = st.tree.nodes[id].level;
            for l in 1..level {
                let g = st.tree.nodes[id].ancestors[l];
                let group = &mut st.tree.nodes[g];
                if let Some(w) = group.group_window.as_deref_mut() {
                    w.merge(&h.group);
                    if !groups.contains(&g) {
                        groups.push(g);
                    }
                }
            }
            h.group.reset(now_ns);
        }
        let node = &st.tree.nodes[id];
        let Some(target) = node.latency_target.filter(|_| node.latency) else {
            continue;
        };
        let seen = {
            let mut h = v.hist.locked();
            close(&mut h.target, target, now_ns)
        };
        if let Some(s) = &seen {
            v.io.target_windows.fetch_add(1, Relaxed);
            if s.pct_us > target.us {
                v.io.target_windows_missed.fetch_add(1, Relaxed);
            }
        }
        if let Some(boost) = judge(seen, target, &mut books[id], node.boost, &mut verdict) {
            v.boost_ppm.store((boost * 1e6) as u64, Relaxed);
            st.tree.nodes[id].boost = boost;
            dev.refresh_weight(st, id);
        }
    }
    for &g in groups.iter() {
        let group = &mut st.tree.nodes[g];
        let (Some(target), Some(w)) = (group.latency_target, group.group_window.as_deref_mut())
        else {
            continue;
        };
        let seen = close(w, target, now_ns);
        if let Some(boost) = judge(seen, target, &mut books[g], group.boost, &mut verdict) {
            st.tree.nodes[g].boost = boost;
            dev.refresh_weight(st, g);
        }
    }
    verdict
}

/// What a closed window saw: the percentile, and the time spent waiting to be admitted
/// and on the device, µs.
#[derive(Clone, Copy, Debug)]
struct Seen {
    pct_us: u64,
    wait_us: u64,
    device_us: u64,
}

/// Close the window if it is complete, or certainly missed; None: it goes on (or was
/// empty).
fn close(w: &mut TargetWindow, target: LatencyTarget, now_ns: u64) -> Option<Seen> {
    let need = (5.0 / (1.0 - target.pct / 100.0)).ceil() as u64;
    let allowed = ((1.0 - target.pct / 100.0) * need as f64).floor() as u64;
    let age = now_ns.saturating_sub(w.since_ns);
    // A window with more completions over the target than a full one may have has
    // missed already: judge it now, not after the rest of the window.
    let missed_already = || w.total.count_above(target.us) > allowed;
    if w.count() < need && age < WINDOW_MAX_NS && !missed_already() {
        return None;
    }
    let seen = w.total.percentile(target.pct).map(|pct_us| Seen {
        pct_us,
        wait_us: w.wait_us,
        device_us: w.device_us,
    });
    w.reset(now_ns);
    seen
}

/// Judge one volume's or group's window (None: not closed this period); returns its new
/// boost if it changes.
fn judge(
    seen: Option<Seen>,
    target: LatencyTarget,
    book: &mut NodeBook,
    boost: f64,
    verdict: &mut Verdict,
) -> Option<f64> {
    verdict.active = true;
    let Some(seen) = seen else {
        // Not judged this period: its last judgment stands.
        verdict.unmet |= book.latency_unmet;
        return None;
    };
    verdict.judged = true;
    if std::mem::take(&mut book.latency_skip) {
        verdict.unmet |= book.latency_unmet;
        return None;
    }
    let mut new_boost = boost;
    if seen.pct_us > target.us {
        book.latency_met_streak = 0;
        if seen.wait_us >= seen.device_us {
            let step = (seen.pct_us as f64 / target.us as f64).clamp(1.25, STEP_MAX);
            new_boost = (boost * step).clamp(1.0, BOOST_MAX);
        } else {
            verdict.device_miss = true;
        }
    } else if seen.pct_us * 100 <= target.us * MARGIN_PCT {
        book.latency_met_streak += 1;
        if book.latency_met_streak >= MET_WINDOWS && boost > 1.0 {
            new_boost = (boost * 0.8).max(1.0);
        }
    } else {
        book.latency_met_streak = 0;
    }
    // vrate may rise again only after MET_WINDOWS windows with margin: one good window
    // right after vrate fell is the fall's effect, not room to rise.
    book.latency_unmet = book.latency_met_streak < MET_WINDOWS;
    verdict.unmet |= book.latency_unmet;
    // A raised weight shows in the very next window (the wait is the daemon's own); a
    // lowered one is given a window to show before the next judgment.
    book.latency_skip = new_boost < boost;
    (new_boost != boost).then_some(new_boost)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MISS: Verdict = Verdict {
        device_miss: true,
        unmet: true,
        active: true,
        judged: true,
    };
    const MET: Verdict = Verdict {
        device_miss: false,
        unmet: false,
        active: true,
        judged: true,
    };

    #[test]
    fn the_ceiling_sits_below_a_miss_and_probes_ever_more_rarely() {
        let mut c = Ceiling::default();
        // One judged window every half second.
        let mut now_ns = 0;
        let mut update = |c: &mut Ceiling, v: Verdict, vrate: u64| {
            now_ns += WINDOW_MAX_NS / 2;
            c.update(v, vrate, now_ns, 0);
        };
        update(&mut c, MET, 1000);
        assert_eq!(c.limit(), None, "no ceiling before a miss");
        update(&mut c, MISS, 1000);
        assert_eq!(c.limit(), Some(970));
        // The hold: CEILING_HOLD windows met before it moves.
        for _ in 0..CEILING_HOLD {
            update(&mut c, MET, 960);
            assert_eq!(c.limit(), Some(970));
        }
        // Slowly while below where it missed, then doubling steps.
        let mut limits = Vec::new();
        for _ in 0..9 {
            update(&mut c, MET, 960);
            limits.push(c.limit().unwrap());
        }
        assert_eq!(
            limits,
            [975, 980, 985, 990, 995, 1000, 1005, 1016, 1037],
            "0.5 % steps up to 1000, then 0.5, 1, 2 % ..."
        );
        // A second miss: below the highest vrate of the last window, and the hold
        // doubles.
        update(&mut c, MISS, 1040);
        assert_eq!(c.limit(), Some(1008));
        // Another volume's window of the same episode, after vrate fell: no lower, and
        // the hold does not double again.
        update(&mut c, MISS, 990);
        assert_eq!(c.limit(), Some(1008));
        for _ in 0..2 * CEILING_HOLD {
            update(&mut c, MET, 1000);
        }
        assert_eq!(c.limit(), Some(1008));
        update(&mut c, MET, 1000);
        assert_eq!(c.limit(), Some(1014));
        // No latency-class volume active: no ceiling.
        update(&mut c, Verdict::default(), 1000);
        assert_eq!(c.limit(), None);
        // Nor after a change of the model or the bounds.
        c.update(MISS, 1000, 100 * WINDOW_MAX_NS, 0);
        assert_eq!(c.limit(), Some(970));
        c.update(MET, 1000, 101 * WINDOW_MAX_NS, 1);
        assert_eq!(c.limit(), None);
    }
}
