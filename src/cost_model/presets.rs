//! Built-in device presets: the kernel's "autop" table (design §2.4).
//!
//! Each preset is the six measured numbers of the linear model plus the latency target
//! the kernel uses for that device class. The kernel picks a preset automatically from
//! the block device's properties and steps between SSD_DFL and SSD_FAST from the observed
//! vrate; this crate picks it from configuration and never switches at run time (a file
//! or a pool behind the daemon has no "rotational" flag worth trusting).

use serde::{Deserialize, Serialize};

use super::linear::LinearParams;

/// A named device class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Rotational disk (kernel `HDD`).
    Hdd,
    /// SSD behind a queue depth of 1, e.g. SATA with broken NCQ (kernel `SSD_QD1`).
    SsdQd1,
    /// Ordinary SSD (kernel `SSD_DFL`). The default.
    #[default]
    Ssd,
    /// Fast NVMe SSD (kernel `SSD_FAST`).
    FastSsd,
}

impl Preset {
    /// The six linear-model parameters of the preset.
    pub fn params(self) -> LinearParams {
        match self {
            Preset::Hdd => LinearParams {
                rbps: 174_019_176,
                rseqiops: 41_708,
                rrandiops: 370,
                wbps: 178_075_866,
                wseqiops: 42_705,
                wrandiops: 378,
            },
            Preset::SsdQd1 => LinearParams {
                rbps: 245_855_193,
                rseqiops: 61_575,
                rrandiops: 6_946,
                wbps: 141_365_009,
                wseqiops: 33_716,
                wrandiops: 26_796,
            },
            Preset::Ssd => LinearParams {
                rbps: 488_636_629,
                rseqiops: 8_932,
                rrandiops: 8_518,
                wbps: 427_891_549,
                wseqiops: 28_755,
                wrandiops: 21_940,
            },
            Preset::FastSsd => LinearParams {
                rbps: 3_102_524_156,
                rseqiops: 724_816,
                rrandiops: 778_122,
                wbps: 1_742_780_862,
                wseqiops: 425_702,
                wrandiops: 443_193,
            },
        }
    }

    /// The preset's completion-latency target in µs (same for reads and writes).
    pub fn latency_us(self) -> u32 {
        match self {
            Preset::Hdd => 250_000,
            Preset::SsdQd1 | Preset::Ssd => 25_000,
            Preset::FastSsd => 5_000,
        }
    }
}
