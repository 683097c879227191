//! The estimate: a robust, anchored least-squares fit of the six coefficients to the
//! saturated windows.
//!
//! A window in which the device was busy throughout says `x · c = t`: the requests it
//! completed (`x`: pages and requests per direction and access kind) times their true
//! device costs (`c`, ns) fill its duration. The fit solves for multipliers `θ` of the
//! current coefficients (`c = c_now ⊙ θ`), so every unknown is of order 1:
//!
//! ```text
//! minimise  Σ_j w_j ((z_j · θ − t_j) / t_j)²  +  ρ Σ_k D_k (θ_k − 1)²      z_jk = x_jk c_now,k
//! ```
//!
//! * Residuals are relative, so a long window does not outweigh a short one.
//! * The anchor `ρ D_k (θ_k − 1)²` (Marquardt's scaling: `D_k` is the coefficient's own
//!   curvature) keeps directions the windows barely determine where they are, instead of
//!   letting noise move them.
//! * A coefficient that explains less than [`MIN_SHARE`] of the windows' time is not
//!   estimated at all: traffic without random writes says nothing about their price.
//! * Outliers (a window cut by a stall, a burst of garbage collection) are down-weighted
//!   by Huber weights over eight reweighted rounds.
//!
//! The result carries each multiplier's standard error, from the residual variance and
//! the inverse of the normal matrix: the fit's confidence in that coefficient.

/// Weight of the anchor towards the current coefficients.
pub const ANCHOR: f64 = 0.02;
/// Least share of the windows' device time a coefficient must explain to be estimated
/// (below it the normal matrix is near singular; the standard error judges the rest).
pub const MIN_SHARE: f64 = 1e-4;
/// Huber's threshold, in robust standard deviations of the relative residuals.
const HUBER_K: f64 = 1.5;
/// The residuals' robust spread is taken as at least this (relative): an exact fit must
/// not make every small deviation an outlier.
const MIN_SPREAD: f64 = 0.01;
/// Rounds of reweighting.
const ROUNDS: usize = 8;

/// One saturated window: what completed in it and how long it lasted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Pages and requests: `[read pages, sequential reads, random reads, write pages,
    /// sequential writes, random writes]`.
    pub x: [f64; 6],
    /// Device time the window's data requests filled, ns.
    pub t_ns: f64,
}

/// The fit's answer, per coefficient.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// Multiplier of the current coefficient (1 for one not estimated).
    pub theta: [f64; 6],
    /// Standard error of the multiplier; infinite for one not estimated.
    pub se: [f64; 6],
    /// Share of the windows' time the coefficient explains at the current prices.
    pub share: [f64; 6],
}

/// Fits multipliers of `coefs_ns` to `samples`; None without any sample.
pub fn fit(samples: &[Sample], coefs_ns: &[f64; 6]) -> Option<Fit> {
    let n = samples.len();
    if n == 0 {
        return None;
    }
    // Rows in relative units: a_jk = z_jk / t_j, target 1.
    let rows: Vec<[f64; 6]> = samples
        .iter()
        .map(|s| std::array::from_fn(|k| s.x[k] * coefs_ns[k] / s.t_ns.max(1.0)))
        .collect();
    let total: f64 = rows.iter().flatten().sum::<f64>().max(f64::MIN_POSITIVE);
    let share: [f64; 6] = std::array::from_fn(|k| rows.iter().map(|r| r[k]).sum::<f64>() / total);
    let free: Vec<usize> = (0..6).filter(|&k| share[k] >= MIN_SHARE).collect();
    let mut theta = [1.0; 6];
    let mut se = [f64::INFINITY; 6];
    if free.is_empty() {
        return Some(Fit { theta, se, share });
    }
    let mut weights = vec![1.0; n];
    let mut inverse = Vec::new();
    for _ in 0..ROUNDS {
        let (solved, inv) = solve_weighted(&rows, &weights, &free)?;
        for (i, &k) in free.iter().enumerate() {
            theta[k] = solved[i];
        }
        inverse = inv;
        let residuals: Vec<f64> = rows.iter().map(|r| predict(r, &theta) - 1.0).collect();
        let spread = (1.4826 * median_abs(&residuals)).max(MIN_SPREAD);
        for (w, r) in weights.iter_mut().zip(&residuals) {
            *w = if r.abs() <= HUBER_K * spread {
                1.0
            } else {
                HUBER_K * spread / r.abs()
            };
        }
    }
    let dof = n.saturating_sub(free.len()).max(1) as f64;
    let rss: f64 = rows
        .iter()
        .zip(&weights)
        .map(|(r, w)| w * (predict(r, &theta) - 1.0).powi(2))
        .sum();
    let variance = rss / dof;
    for (i, &k) in free.iter().enumerate() {
        se[k] = (variance * inverse[i * free.len() + i]).max(0.0).sqrt();
    }
    Some(Fit { theta, se, share })
}

fn predict(row: &[f64; 6], theta: &[f64; 6]) -> f64 {
    row.iter().zip(theta).map(|(a, t)| a * t).sum()
}

/// Solves the anchored weighted normal equations over the `free` coefficients; returns
/// the multipliers and the inverse of the normal matrix (row-major), or None if singular.
fn solve_weighted(
    rows: &[[f64; 6]],
    weights: &[f64],
    free: &[usize],
) -> Option<(Vec<f64>, Vec<f64>)> {
    let m = free.len();
    let mut a = vec![0.0; m * m];
    let mut b = vec![0.0; m];
    for (r, w) in rows.iter().zip(weights) {
        // Fixed coefficients (multiplier 1) move to the right-hand side.
        let fixed: f64 = (0..6).filter(|k| !free.contains(k)).map(|k| r[k]).sum();
        for (i, &ki) in free.iter().enumerate() {
            b[i] += w * r[ki] * (1.0 - fixed);
            for (j, &kj) in free.iter().enumerate() {
                a[i * m + j] += w * r[ki] * r[kj];
            }
        }
    }
    for i in 0..m {
        let anchor = ANCHOR * a[i * m + i];
        a[i * m + i] += anchor;
        b[i] += anchor;
    }
    let inv = invert(&a, m)?;
    let x = (0..m)
        .map(|i| (0..m).map(|j| inv[i * m + j] * b[j]).sum())
        .collect();
    Some((x, inv))
}

/// Gauss-Jordan inversion with partial pivoting of an `m`×`m` row-major matrix.
fn invert(a: &[f64], m: usize) -> Option<Vec<f64>> {
    let mut work = a.to_vec();
    let mut inv: Vec<f64> = (0..m * m)
        .map(|i| f64::from(u8::from(i / m == i % m)))
        .collect();
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&p, &q| work[p * m + col].abs().total_cmp(&work[q * m + col].abs()))?;
        let p = work[pivot * m + col];
        if !p.is_finite() || p.abs() < 1e-12 {
            return None;
        }
        for k in 0..m {
            work.swap(col * m + k, pivot * m + k);
            inv.swap(col * m + k, pivot * m + k);
        }
        for k in 0..m {
            work[col * m + k] /= p;
            inv[col * m + k] /= p;
        }
        for row in (0..m).filter(|&r| r != col) {
            let f = work[row * m + col];
            for k in 0..m {
                work[row * m + k] -= f * work[col * m + k];
                inv[row * m + k] -= f * inv[col * m + k];
            }
        }
    }
    Some(inv)
}

fn median_abs(values: &[f64]) -> f64 {
    let mut abs: Vec<f64> = values.iter().map(|v| v.abs()).collect();
    abs.sort_by(f64::total_cmp);
    abs.get(abs.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUTH: [f64; 6] = [10_000.0, 15_000.0, 40_000.0, 20_000.0, 30_000.0, 80_000.0];

    /// A saturated window of `mix` (requests per kind: reads seq/rand of `rpages` pages,
    /// writes seq/rand of `wpages`) under the truth, its time off by `noise`.
    fn window(mix: [f64; 4], rpages: f64, wpages: f64, noise: f64) -> Sample {
        let x = [
            (mix[0] + mix[1]) * rpages,
            mix[0],
            mix[1],
            (mix[2] + mix[3]) * wpages,
            mix[2],
            mix[3],
        ];
        let t: f64 = x.iter().zip(TRUTH).map(|(x, c)| x * c).sum();
        Sample {
            x,
            t_ns: t * (1.0 + noise),
        }
    }

    fn varied_windows() -> Vec<Sample> {
        let mut out = Vec::new();
        for i in 0..24 {
            let f = |k: usize| ((i * (k + 3)) % 7) as f64 + 1.0;
            let rpages = [1.0, 8.0, 32.0][i % 3];
            let wpages = [1.0, 4.0, 16.0, 64.0][i % 4];
            out.push(window(
                [f(0) * 10.0, f(1) * 10.0, f(2) * 5.0, f(3) * 5.0],
                rpages,
                wpages,
                0.0,
            ));
        }
        out
    }

    #[test]
    fn finds_every_coefficient_from_varied_saturated_windows() {
        // Repeated fits, as the learner makes them, from writes priced 5× off both ways:
        // the anchor holds back what one fit determines weakly, so it takes a few.
        let mut coefs = [
            TRUTH[0],
            TRUTH[1],
            TRUTH[2],
            TRUTH[3] * 5.0,
            TRUTH[4] / 5.0,
            TRUTH[5] * 5.0,
        ];
        let windows = varied_windows();
        for _ in 0..10 {
            let f = fit(&windows, &coefs).unwrap();
            coefs = std::array::from_fn(|k| coefs[k] * f.theta[k].max(0.1));
        }
        let f = fit(&windows, &coefs).unwrap();
        for k in 0..6 {
            assert!(
                (coefs[k] / TRUTH[k] - 1.0).abs() < 0.01,
                "coef {k}: {coefs:?}"
            );
            assert!(f.se[k] < 0.01, "coef {k}: se {}", f.se[k]);
        }
    }

    #[test]
    fn leaves_a_coefficient_the_traffic_does_not_exercise() {
        // No random writes at all: their base cost explains nothing and stays put.
        let samples: Vec<Sample> = (0..12)
            .map(|i| {
                window(
                    [10.0 + i as f64, 20.0, 5.0 + (i % 3) as f64, 0.0],
                    1.0 + (i % 4) as f64,
                    8.0,
                    0.0,
                )
            })
            .collect();
        let f = fit(&samples, &TRUTH).unwrap();
        assert_eq!((f.theta[5], f.se[5]), (1.0, f64::INFINITY));
        assert!(f.share[5] < MIN_SHARE);
    }

    #[test]
    fn an_outlier_window_barely_moves_the_fit() {
        let mut samples = varied_windows();
        samples[3].t_ns *= 3.0; // a stall: the window lasted three times its work
        let f = fit(&samples, &TRUTH).unwrap();
        for k in 0..6 {
            assert!((f.theta[k] - 1.0).abs() < 0.05, "coef {k}: {:?}", f.theta);
        }
    }

    #[test]
    fn no_samples_no_fit() {
        assert!(fit(&[], &TRUTH).is_none());
    }
}
