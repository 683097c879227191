//! The controller's tunables, in one place (as blk-iocost keeps its own in one table):
//! each with what it bounds and why it has its value. The modules that use them re-export
//! them; design §3, §5, §7, §13, §15 explain the rules they belong to.

// ---- the issue path (design §3): `qos::volume`, `qos::shared`, `qos::cap_meter` ----

/// Snapback step: raise inuse by 25 % of active per step (design §3.5).
pub const INUSE_ADJ_STEP_PCT: u64 = 25;

/// How long after the last moment of contention a volume active alone stops being
/// throttled.
pub const ALONE_AFTER_NS: u64 = 1_000_000_000;

/// How long after its retry time a waiting member keeps others waiting for it, ns.
pub const TURN_GRACE_NS: u64 = 2_000_000;

// ---- the background class (design §13): `qos::tree`, `qos::class` ----

/// How much less a background node weighs than its configured weight: a background
/// volume of weight 100 beside a foreground one of weight 100 has a share of about 0.1 %.
pub const BACKGROUND_DIVISOR: u32 = 1000;

/// While a foreground volume is active, a background volume's device time in flight is
/// held to this share of a planning period (and one request may always be in flight).
pub const BACKGROUND_INFLIGHT_PCT: u64 = 10;

/// The reservation a background volume has when it is given none, ppm of the device's
/// time: so it is never starved, however busy the foreground.
pub const BACKGROUND_FLOOR_PPM: u64 = 10_000;

// ---- busy_level (design §5.6): `busy` ----

/// rq-wait above this percentage of the period means saturated.
pub const RQ_WAIT_BUSY_PCT: u32 = 5;

/// busy_level bound.
pub const BUSY_LEVEL_MAX: i32 = 1000;

/// The controller aims at this share of the misses a target allows.
pub const AIM_PCT: u64 = 40;

// ---- the latency window and its signals (design §5.4): `lat_stat` ----

/// A direction's mean latency at least this many times its target is a gross miss.
pub const GROSS_MISS_FACTOR: u64 = 4;

/// "Clearly not busy" = below this percentage of every threshold.
pub const UNBUSY_THR_PCT: u32 = 75;

/// Completions to judge a percentile by: enough that two of them may miss at the share
/// the controller aims at (50 for a p90 target, 100 for p95; [`super::busy::aim`]), so
/// one unlucky request is not taken for the percentile.
pub const WINDOW_MISSES: u64 = 2;

/// A window is judged after at most this many periods, however few completions it holds.
pub const MAX_WINDOW_PERIODS: u32 = 16;

// ---- the latency floor (design §7): `latency_floor` ----

/// Above this percentage of the floor (and the noise margin), latency is rising.
pub const QUEUE_RISING_PCT: u64 = 115;

/// The noise margin, in standard errors of the period's mean.
pub const NOISE_MARGIN_SE: u64 = 3;

/// The floor follows the median of this many recent periods, not single periods.
pub const MEDIAN_PERIODS: usize = 5;

/// A floor not lowered for this long is replaced by the current median.
pub const FLOOR_WINDOW_NS: u64 = 10_000_000_000;

// ---- vrate steps (design §5.7): `vrate` ----

/// Largest step, percent per period: taken at once after [`GROSS_STREAK`] gross misses.
pub const VRATE_MAX_ADJ_PCT: u64 = 16;

/// Smallest step down for a busy window, percent.
pub const VRATE_MISS_ADJ_PCT: u64 = 4;

/// Consecutive periods of gross misses that take the largest step down.
pub const GROSS_STREAK: u32 = 2;

/// Step when vrate is outside its bounds, percent per period.
pub const VRATE_CLAMP_ADJ_PCT: u64 = 4;

// ---- attainable targets (design §5.10): `attainable` ----

/// How long one window that met the aim keeps the target attainable.
pub const ATTAINED_MEMORY_NS: u64 = 5_000_000_000;

/// vrate at least this many times `min` is "well above" it, and below that "low".
pub const WELL_ABOVE_MIN_FACTOR: u64 = 2;

/// Judged periods with vrate low in which the underserved volumes missed the aim, since
/// they last met it, after which lowering vrate is taken not to help them...
pub const UNREACHED_LOW_PERIODS: u32 = 50;

/// ...unless it brought their mean latency below this share of what it was with vrate
/// well above `min`, percent.
pub const RESPONSIVE_PCT: u64 = 67;

// ---- victims (design §5.10): `victims` ----

/// A volume back from a pause longer than this starts its average afresh; one that
/// paused for less (its client did not get the CPU for a few periods) keeps it.
pub const FRESH_AFTER_IDLE_NS: u64 = 1_000_000_000;

/// A volume back from such a pause beside a neighbour that had the device alone (and
/// still works off the queue it built) counts as a victim for this long, and for at
/// least [`BACK_GRACE_PERIODS`] periods, whatever its share.
pub const BACK_GRACE_NS: u64 = 100_000_000;

/// See [`BACK_GRACE_NS`].
pub const BACK_GRACE_PERIODS: u64 = 2;

/// Beside one other volume, a deficit must exceed this many relative standard errors of
/// the share (binomial: √((1 − share) / n) for n completions).
pub const DEFICIT_SE: f64 = 2.0;

/// ... and this many more per doubling of the foreground volumes beyond two. Every
/// volume is tested every period, so with many of them some drift past any fixed bound
/// by chance (a Bonferroni-style correction): with two standard errors, 32 equal QD4
/// readers on this machine's disk always had a "victim" and got 0.66 × QoS off; with
/// three, 1.09 ×.
pub const DEFICIT_SE_PER_DOUBLING: f64 = 0.25;

/// Near victims lowering vrate from at least this share of the model's speed, percent,
/// are the weights slipping (`planner::slip`): calibration and learning keep the model
/// within a few per cent of the device. Well below it the budgets bind, and near
/// victims are paced readers beside a writer.
pub const SLIP_FROM_PCT: u64 = 90;

/// Where the weights slipped caps rises this far below it, percent.
pub const SLIP_BACKOFF_PCT: u64 = 3;

/// ... for this long after the ceiling was last lowered.
pub const SLIP_MEMORY_NS: u64 = 10_000_000_000;

// ---- the service share victims are judged by: `service_share` ----

/// The service share and completion count are averaged over about this many periods.
pub const SMOOTHING: f64 = 64.0;

/// A deficit smaller than this fraction of the entitled share is no victim's.
pub const MIN_DEFICIT: f64 = 0.01;

/// A deficit this large needs no more samples.
pub const OBVIOUS_DEFICIT: f64 = 0.5;

// ---- the latency class (design §15): `latency_class` ----

/// A window closes after this long even with fewer completions than the percentile needs.
pub const WINDOW_MAX_NS: u64 = 1_000_000_000;

/// The largest boost.
pub const BOOST_MAX: f64 = 100.0;

/// The largest step of the boost in one window.
pub const STEP_MAX: f64 = 4.0;

/// Met with margin: at most this share of the target, percent.
pub const MARGIN_PCT: u64 = 75;

/// Windows met with margin before the boost falls.
pub const MET_WINDOWS: u32 = 3;

/// A device miss sets the ceiling this far below the window's highest vrate, percent.
pub const CEILING_BACKOFF_PCT: u64 = 3;

/// The step of the ceiling after its hold while below the vrate that last missed, per
/// mille; above it the step doubles with every window met with margin, up to
/// [`CEILING_STEP_MAX_PERMILLE`].
pub const CEILING_STEP_PERMILLE: u64 = 5;

/// The largest step of the ceiling, per mille.
pub const CEILING_STEP_MAX_PERMILLE: u64 = 80;

/// Windows met with margin before the ceiling rises after the first miss; each further
/// miss doubles it, up to [`CEILING_HOLD_MAX`].
pub const CEILING_HOLD: u32 = 4;

/// The longest hold, windows.
pub const CEILING_HOLD_MAX: u32 = 64;

/// How far back a missed window's highest vrate is looked for: the longest window and a
/// period's slack.
pub const PEAK_SPAN_NS: u64 = WINDOW_MAX_NS + WINDOW_MAX_NS / 5;
