//! The median and spread of several runs, as the tables give them.

/// The median of `values` (the upper one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `median (min–max)`, or the value alone for one run.
pub fn spread(values: &[f64], decimals: usize) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.len() == 1 {
        return format!("{:.*}", decimals, values[0]);
    }
    format!(
        "{:.*} ({:.*}–{:.*})",
        decimals,
        median(values),
        decimals,
        min,
        decimals,
        max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_gives_the_median_and_the_extremes() {
        assert_eq!(spread(&[3.0, 1.0, 2.0], 0), "2 (1–3)");
        assert_eq!(spread(&[1.25], 1), "1.2");
        assert_eq!(median(&[4.0, 1.0]), 4.0);
    }
}
