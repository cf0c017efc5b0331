//! How a window's limit is divided among regions: proportional to recent demand, above a floor every region keeps.
//!
//! Proportional with a floor, not max-min fairness: max-min needs each
//! region's demand to be a true ceiling, and a region only knows what it
//! was asked in the last round, which under a denial is already capped by
//! its allocation. Proportional division needs only the ratios, keeps the
//! maths a line long, and moves a shift at once: a region that carries all
//! the demand gets everything above the others' floors in its next round.

/// The floor: what every live region holds of a window's limit `limit`
/// among `regions` whatever its demand, so a key's first checks in a region
/// are decided at once, before the region has reported. One twentieth of an
/// even split: with three regions, a region carrying all the demand still
/// gets `limit - 2 * limit/60`, about 96.7% of it.
pub fn floor(limit: u64, regions: usize) -> u64 {
    limit / (20 * regions.max(1) as u64)
}

/// The share of region `me` among `demands` (every region's demand over its
/// last round, in one order) of a window's `limit`: its floor, plus the
/// rest split in proportion to demand, evenly when nobody has any. The
/// shares never sum to more than `limit`. A region that has fallen back is
/// given demand 0 here: what it holds, its static share, the allocator
/// keeps out of everyone's reach (`allocator::Allocator::report`).
pub fn share(limit: u64, demands: &[u64], me: usize) -> u64 {
    let n = demands.len().max(1);
    let f = floor(limit, n);
    let pool = u128::from(limit.saturating_sub(f * n as u64));
    let total: u128 = demands.iter().map(|&d| u128::from(d)).sum();
    // Rounded down, so the parts never sum above the pool.
    let part = (pool * u128::from(demands[me]))
        .checked_div(total)
        .unwrap_or(pool / n as u128);
    f + part as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn all_the_demand_in_one_region_gets_all_but_the_floors() {
        let claims = [0, 900, 0];
        assert_eq!(floor(600, 3), 10);
        assert_eq!(share(600, &claims, 1), 580);
        assert_eq!(share(600, &claims, 0), 10);
        assert!(share(600, &claims, 1) as f64 >= 0.9 * 600.0);
    }

    #[test]
    fn no_demand_splits_evenly_and_demand_weighs_the_rest() {
        assert_eq!(share(600, &[0, 0, 0], 2), 200);
        assert_eq!(share(600, &[5, 0, 15], 0), 10 + 142);
        assert_eq!(share(600, &[5, 0, 15], 1), 10);
    }

    proptest! {
        #[test]
        fn shares_never_sum_above_the_limit(
            limit in 0u64..100_000,
            claims in proptest::collection::vec(0u64..1_000_000, 1..6),
        ) {
            let sum: u64 = (0..claims.len()).map(|i| share(limit, &claims, i)).sum();
            prop_assert!(sum <= limit, "{sum} > {limit}");
        }
    }
}
