//! The linear cost model of Linux `io.cost.model` (design §2.2, §2.3).
//!
//! A device is described by six measured numbers: maximum sequential bandwidth and
//! maximum 4 KiB sequential and random IOPS, for reads and for writes. They become three
//! coefficients per direction:
//!
//! * `page`: device time of one 4 KiB page at full bandwidth, `1 s / (bps / 4096)`;
//! * `seqio` / `randio`: the per-request base cost, `1 s / IOPS` minus the one page the
//!   4 KiB IOPS measurement already transferred.
//!
//! A read or write then costs `base + pages · page`, where `base` is `seqio` if the
//! request starts within 16 MiB (4096 pages, either direction) of where the volume's
//! previous request ended, `randio` otherwise, and `pages = max(len / 4 KiB, 1)`.
//!
//! Deviation from the kernel: FLUSH, DISCARD and WRITE_ZEROES are *not* free. The kernel
//! lets them through uncounted because its callers are trusted; a guest is not, and a
//! flush or discard storm would otherwise take the device away from everyone else. They
//! are priced from the write coefficients (see [`NonDataFactors`]) and throttled like
//! any other request.

use super::model::{CostInput, CostModel, IoKind};
use crate::vtime::{cdiv, MAX_ABS_COST, VTIME_PER_SEC};

/// Size of a cost-model page (4 KiB).
pub const PAGE_SHIFT: u32 = 12;
/// Seek distance (in pages) above which a request counts as random (16 MiB).
pub const RANDIO_PAGES: u64 = 4096;

/// The six measured device numbers (all u64, as in `io.cost.model`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinearParams {
    /// Maximum sequential read bandwidth, bytes/s.
    pub rbps: u64,
    /// Maximum 4 KiB sequential read IOPS.
    pub rseqiops: u64,
    /// Maximum 4 KiB random read IOPS.
    pub rrandiops: u64,
    /// Maximum sequential write bandwidth, bytes/s.
    pub wbps: u64,
    /// Maximum 4 KiB sequential write IOPS.
    pub wseqiops: u64,
    /// Maximum 4 KiB random write IOPS.
    pub wrandiops: u64,
}

/// The derived coefficients in vtime units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinearCoefs {
    /// Read cost per 4 KiB page.
    pub rpage: u64,
    /// Base cost of a sequential read.
    pub rseqio: u64,
    /// Base cost of a random read.
    pub rrandio: u64,
    /// Write cost per 4 KiB page.
    pub wpage: u64,
    /// Base cost of a sequential write.
    pub wseqio: u64,
    /// Base cost of a random write.
    pub wrandio: u64,
}

/// `calc_lcoefs` of the kernel for one direction: returns `(page, seqio, randio)`.
pub fn calc_lcoefs(bps: u64, seqiops: u64, randiops: u64) -> (u64, u64, u64) {
    let mut page = 0;
    let mut seqio = 0;
    let mut randio = 0;
    if bps != 0 {
        let bps_pages = cdiv(bps, 1 << PAGE_SHIFT);
        // A huge bps would make the page cost 0 and IO free: the kernel's guard is 1.
        page = if bps_pages != 0 {
            cdiv(VTIME_PER_SEC, bps_pages)
        } else {
            1
        };
    }
    if seqiops != 0 {
        let v = cdiv(VTIME_PER_SEC, seqiops);
        if v > page {
            seqio = v - page;
        }
    }
    if randiops != 0 {
        let v = cdiv(VTIME_PER_SEC, randiops);
        if v > page {
            randio = v - page;
        }
    }
    (page, seqio, randio)
}

impl LinearParams {
    /// Derive the coefficients (design §2.2).
    pub fn coefs(&self) -> LinearCoefs {
        let (rpage, rseqio, rrandio) = calc_lcoefs(self.rbps, self.rseqiops, self.rrandiops);
        let (wpage, wseqio, wrandio) = calc_lcoefs(self.wbps, self.wseqiops, self.wrandiops);
        LinearCoefs {
            rpage,
            rseqio,
            rrandio,
            wpage,
            wseqio,
            wrandio,
        }
    }
}

/// Default flush price: two 4 KiB random writes. A flush forces the device to destage
/// its volatile write cache, which is at least as expensive as a random write; two is a
/// deliberately conservative guess that makes flush storms pay their way.
pub const DEFAULT_FLUSH_FACTOR: f64 = 2.0;
/// Default discard price per page: 1/64 of a written page. Discard is a metadata
/// operation (FTL unmap) but not free; a 1 GiB discard then costs about as much as
/// writing 16 MiB.
pub const DEFAULT_DISCARD_PAGE_FACTOR: f64 = 1.0 / 64.0;
/// Default write-zeroes price per page: 1/8 of a written page. Devices with
/// deterministic zeroing unmap, others really write zeroes; 1/8 sits in between.
pub const DEFAULT_WRITE_ZEROES_PAGE_FACTOR: f64 = 1.0 / 8.0;

/// How FLUSH, DISCARD and WRITE_ZEROES are priced, relative to the write coefficients:
///
/// * flush = `flush_factor · (wrandio + wpage)` (a 4 KiB random write times the factor);
/// * discard = `wrandio + pages · wpage · discard_page_factor`;
/// * write-zeroes = `wrandio + pages · wpage · write_zeroes_page_factor`.
///
/// A factor of 0 makes that part free.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonDataFactors {
    /// Flush cost in units of a 4 KiB random write.
    pub flush_factor: f64,
    /// Discard cost per page in units of a written page.
    pub discard_page_factor: f64,
    /// Write-zeroes cost per page in units of a written page.
    pub write_zeroes_page_factor: f64,
}

impl Default for NonDataFactors {
    fn default() -> Self {
        NonDataFactors {
            flush_factor: DEFAULT_FLUSH_FACTOR,
            discard_page_factor: DEFAULT_DISCARD_PAGE_FACTOR,
            write_zeroes_page_factor: DEFAULT_WRITE_ZEROES_PAGE_FACTOR,
        }
    }
}

/// Fixed-point scale for the page factors (1.0 = 2^16), so pricing stays integer.
const FACTOR_ONE: u64 = 1 << 16;

fn to_fixed(factor: f64) -> u64 {
    // `as` saturates and maps NaN to 0; validation rejects such values earlier anyway.
    (factor.max(0.0) * FACTOR_ONE as f64).round() as u64
}

/// Whether a request at `offset` is sequential: within [`RANDIO_PAGES`] of where the
/// volume's previous request ended (`prev_end`). The first request of a volume counts as
/// sequential (kernel: cursor 0).
pub fn is_sequential(offset: u64, prev_end: Option<u64>) -> bool {
    match prev_end {
        None => true,
        Some(prev) => (offset.abs_diff(prev) >> PAGE_SHIFT) <= RANDIO_PAGES,
    }
}

/// The linear model.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearModel {
    params: LinearParams,
    coefs: LinearCoefs,
    flush_cost: u64,
    discard_page_fixed: u64,
    write_zeroes_page_fixed: u64,
    latency_us: u32,
}

impl LinearModel {
    /// A model with the default non-data prices and a 25 ms latency hint.
    pub fn new(params: LinearParams) -> Self {
        Self::with_factors(params, NonDataFactors::default(), 25_000)
    }

    /// A model with explicit non-data prices and default latency target (µs).
    pub fn with_factors(params: LinearParams, factors: NonDataFactors, latency_us: u32) -> Self {
        let coefs = params.coefs();
        let rand_write_4k = coefs.wrandio.saturating_add(coefs.wpage);
        let flush = (rand_write_4k as f64 * factors.flush_factor.max(0.0)).ceil();
        let flush_cost = if flush.is_finite() {
            (flush as u64).min(MAX_ABS_COST)
        } else {
            MAX_ABS_COST
        };
        LinearModel {
            params,
            coefs,
            flush_cost,
            discard_page_fixed: to_fixed(factors.discard_page_factor),
            write_zeroes_page_fixed: to_fixed(factors.write_zeroes_page_factor),
            latency_us,
        }
    }

    /// The six input numbers.
    pub fn params(&self) -> LinearParams {
        self.params
    }

    /// The derived coefficients.
    pub fn coefs(&self) -> LinearCoefs {
        self.coefs
    }

    /// The price of one flush.
    pub fn flush_cost(&self) -> u64 {
        self.flush_cost
    }

    fn scaled_pages(pages: u64, page: u64, fixed: u64) -> u64 {
        let v = u128::from(pages) * u128::from(page) * u128::from(fixed) / u128::from(FACTOR_ONE);
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

impl CostModel for LinearModel {
    fn abs_cost(&self, input: &CostInput) -> u64 {
        let c = &self.coefs;
        let pages = (input.len >> PAGE_SHIFT).max(1);
        let cost = match input.kind {
            IoKind::Read | IoKind::Write => {
                if input.len == 0 {
                    return 0;
                }
                let (seqio, randio, page) = if input.kind == IoKind::Read {
                    (c.rseqio, c.rrandio, c.rpage)
                } else {
                    (c.wseqio, c.wrandio, c.wpage)
                };
                let base = if is_sequential(input.offset, input.prev_end) {
                    seqio
                } else {
                    randio
                };
                base.saturating_add(pages.saturating_mul(page))
            }
            IoKind::Flush => self.flush_cost,
            IoKind::Discard => c.wrandio.saturating_add(Self::scaled_pages(
                pages,
                c.wpage,
                self.discard_page_fixed,
            )),
            IoKind::WriteZeroes => c.wrandio.saturating_add(Self::scaled_pages(
                pages,
                c.wpage,
                self.write_zeroes_page_fixed,
            )),
        };
        cost.min(MAX_ABS_COST)
    }

    fn size_cost(&self, kind: IoKind, len: u64) -> u64 {
        let page = match kind {
            IoKind::Read => self.coefs.rpage,
            IoKind::Write => self.coefs.wpage,
            _ => return 0,
        };
        // No minimum of one page here (kernel `calc_size_vtime_cost`).
        (len >> PAGE_SHIFT).saturating_mul(page).min(MAX_ABS_COST)
    }

    fn default_latency_us(&self) -> u32 {
        self.latency_us
    }
}

#[cfg(test)]
mod tests {
    use super::super::presets::Preset;
    use super::*;
    use crate::vtime::VTIME_PER_USEC;

    fn coefs(p: Preset) -> [u64; 6] {
        let c = p.params().coefs();
        [c.rpage, c.rseqio, c.rrandio, c.wpage, c.wseqio, c.wrandio]
    }

    /// The coefficient table of design §2.2.
    #[test]
    fn preset_coefficients_match_spec_vectors() {
        assert_eq!(
            coefs(Preset::Hdd),
            [
                3_234_924,
                60_342,
                368_221_708,
                3_161_261,
                57_074,
                360_433_855
            ]
        );
        assert_eq!(
            coefs(Preset::SsdQd1),
            [2_289_734, 0, 17_497_044, 3_982_238, 94_134, 1_146_847]
        );
        assert_eq!(
            coefs(Preset::Ssd),
            [1_152_074, 14_235_181, 14_983_047, 1_315_634, 3_464_021, 4_948_676]
        );
        assert_eq!(coefs(Preset::FastSsd), [181_449, 8_171, 0, 323_018, 0, 0]);
    }

    fn read(offset: u64, len: u64, prev_end: Option<u64>) -> CostInput {
        CostInput {
            kind: IoKind::Read,
            offset,
            len,
            prev_end,
        }
    }

    /// The worked examples of design §2.2.
    #[test]
    fn request_costs_match_spec_examples() {
        let ssd = LinearModel::new(Preset::Ssd.params());
        let far = 1 << 30;
        // 4 KiB random read on SSD_DFL.
        assert_eq!(ssd.abs_cost(&read(far, 4096, Some(0))), 16_135_121);
        assert_eq!(16_135_121 / VTIME_PER_USEC, 117); // ≈117.4 µs
                                                      // 1 MiB sequential read.
        let seq = ssd.abs_cost(&read(4096, 1 << 20, Some(4096)));
        assert_eq!(seq, 256 * 1_152_074 + 14_235_181);
        assert_eq!(seq / VTIME_PER_USEC, 2249);
        // 4 KiB random read on HDD ≈ 2702.7 µs.
        let hdd = LinearModel::new(Preset::Hdd.params());
        let c = hdd.abs_cost(&read(far, 4096, Some(0)));
        assert_eq!(c, 3_234_924 + 368_221_708);
        assert_eq!(c / VTIME_PER_USEC, 2702);
    }

    #[test]
    fn sequential_detection_uses_16_mib_window() {
        let m = LinearModel::new(Preset::Ssd.params());
        let c = m.coefs();
        let seq = c.rseqio + c.rpage;
        let rand = c.rrandio + c.rpage;
        assert_eq!(
            m.abs_cost(&read(0, 4096, None)),
            seq,
            "first IO is sequential"
        );
        assert_eq!(
            m.abs_cost(&read(16 << 20, 4096, Some(0))),
            seq,
            "exactly 4096 pages"
        );
        assert_eq!(m.abs_cost(&read((16 << 20) + 4096, 4096, Some(0))), rand);
        assert_eq!(m.abs_cost(&read(0, 4096, Some(16 << 20))), seq, "backwards");
        assert_eq!(
            m.abs_cost(&read(100, 100, Some(100))),
            seq,
            "sub-page = 1 page"
        );
        assert_eq!(m.abs_cost(&read(100, 0, Some(100))), 0, "empty IO is free");
    }

    #[test]
    fn non_data_requests_are_priced() {
        let m = LinearModel::new(Preset::Ssd.params());
        let c = m.coefs();
        let flush = m.abs_cost(&CostInput {
            kind: IoKind::Flush,
            offset: 0,
            len: 0,
            prev_end: None,
        });
        assert_eq!(flush, 2 * (c.wrandio + c.wpage));
        let discard = |len| {
            m.abs_cost(&CostInput {
                kind: IoKind::Discard,
                offset: 0,
                len,
                prev_end: None,
            })
        };
        assert_eq!(discard(0), c.wrandio + c.wpage / 64);
        assert_eq!(discard(1 << 30), c.wrandio + (262_144 * c.wpage) / 64);
        let wz = m.abs_cost(&CostInput {
            kind: IoKind::WriteZeroes,
            offset: 0,
            len: 1 << 20,
            prev_end: None,
        });
        assert_eq!(wz, c.wrandio + 256 * c.wpage / 8);
        // Hostile sizes saturate instead of panicking.
        assert_eq!(discard(u64::MAX), MAX_ABS_COST);
        assert_eq!(m.abs_cost(&read(u64::MAX, u64::MAX, Some(0))), MAX_ABS_COST);
    }

    #[test]
    fn size_cost_has_no_minimum_page() {
        let m = LinearModel::new(Preset::Ssd.params());
        assert_eq!(m.size_cost(IoKind::Read, 2048), 0);
        assert_eq!(m.size_cost(IoKind::Write, 8192), 2 * 1_315_634);
        assert_eq!(m.size_cost(IoKind::Flush, 8192), 0);
    }

    #[test]
    fn huge_bandwidth_keeps_page_cost_nonzero() {
        assert_eq!(calc_lcoefs(u64::MAX, 0, 0).0, 1);
        assert_eq!(calc_lcoefs(0, 0, 0), (0, 0, 0));
    }
}
