//! A volume's recent share of the device's service against the share it is entitled to,
//! averaged over periods, and the test of whether it is served short ([`super::victims`]).
pub use crate::qos::tunables::{MIN_DEFICIT, OBVIOUS_DEFICIT, SMOOTHING};

/// A volume's recent share of the foreground's service, the share it was entitled to
/// over the same periods, and its completions per period. The entitled share is
/// averaged alike: when neighbours come and go it jumps at once while the service
/// share follows over many periods, and comparing the two then would find every
/// volume short whenever one neighbour paused.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Service {
    pub share: f64,
    pub entitled: f64,
    pub done: f64,
    /// Periods averaged, up to [`SMOOTHING`].
    pub periods: f64,
    /// The variance of the per-period share about `share`, averaged alike.
    pub share_var: f64,
}

impl Service {
    /// Adds a period: a plain mean until [`SMOOTHING`] periods are in, then an
    /// exponential average over about that many.
    pub(crate) fn blend(self, share: f64, entitled: f64, done: f64) -> Service {
        let periods = (self.periods + 1.0).min(SMOOTHING);
        let keep = (periods - 1.0) / periods;
        let off_mean = share - self.share;
        Service {
            share: self.share * keep + share / periods,
            entitled: self.entitled * keep + entitled / periods,
            done: self.done * keep + done / periods,
            periods,
            share_var: keep * (self.share_var + off_mean * off_mean / periods),
        }
    }

    /// How many independent periods the average is worth: all of them while it is a plain
    /// mean, and 2 × [`SMOOTHING`] − 1 once it is an exponential one.
    fn independent_periods(self) -> f64 {
        if self.periods < SMOOTHING {
            self.periods
        } else {
            2.0 * SMOOTHING - 1.0
        }
    }

    /// Served below its entitled share by more than `z` standard errors.
    pub(crate) fn short_of(self, z: f64) -> bool {
        let samples = self.done * self.periods;
        if samples < 1.0 {
            return false;
        }
        // The share's relative standard error: binomial, √((1 − p) / n), or as its
        // periods scatter where that is wider (a stall delays a whole queue at once).
        let binomial = ((1.0 - self.share.min(1.0)) / samples).sqrt();
        let scattered =
            (self.share_var / self.independent_periods()).sqrt() / self.share.max(f64::EPSILON);
        let se = binomial.max(scattered);
        // Served below half its share, a volume is underserved however few its samples:
        // a paced reader back from idle is protected from its first period.
        let deficit = MIN_DEFICIT.max((z * se).min(OBVIOUS_DEFICIT));
        self.share < self.entitled * (1.0 - deficit)
    }
}
