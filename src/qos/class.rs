//! Service classes of a volume (design §13).
//!
//! * `normal`: a share by weight, as IOCost gives it.
//! * `background` (DiscNice's aim, IOCost's means): served from what the others leave
//!   idle. Its weight counts a thousandth (`tree::background_weight`), so while a
//!   foreground volume is active it gets almost nothing, and alone or beside idle
//!   neighbours it gets the whole device through donation. While any foreground volume
//!   is active, its device time in flight is held to a tenth of a period, so a deep queue
//!   it built while alone drains before it can delay the foreground's requests much.
//!   It is never starved: unless given a `reserve` of its own, it has a reservation of
//!   1 % of the device. Its completions do not count in the latency signal (its latency
//!   is nobody's target), and it banks no budget while it waits.

use serde::{Deserialize, Serialize};

/// The class of a volume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    #[default]
    Normal,
    Background,
}

impl Class {
    pub fn is_background(self) -> bool {
        self == Class::Background
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Class::Normal => "normal",
            Class::Background => "background",
        })
    }
}

/// While a foreground volume is active, a background volume's device time in flight is
/// held to this share of a planning period (and one request may always be in flight).
pub(crate) const BACKGROUND_INFLIGHT_PCT: u64 = 10;

/// The reservation a background volume has when it is given none, ppm of the device's
/// time: so it is never starved, however busy the foreground.
pub(crate) const BACKGROUND_FLOOR_PPM: u64 = 10_000;
