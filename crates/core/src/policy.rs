//! Policy arithmetic: the confirmation tier a value needs. Exact decimals only; a float never
//! touches money (how a person reads an amount is `locale`'s).

use rust_decimal::Decimal;

/// The confirmation tier a value needs: the row's base tier, raised to 2 above `tier2_above` and
/// to 3 above `tier3_above`.
pub fn tier(base: i32, value: Decimal, tier2_above: Option<Decimal>, tier3_above: Option<Decimal>) -> i32 {
    let mut tier = base;
    if tier2_above.is_some_and(|limit| value > limit) {
        tier = tier.max(2);
    }
    if tier3_above.is_some_and(|limit| value > limit) {
        tier = tier.max(3);
    }
    tier
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn thresholds_raise_the_tier_and_never_lower_it() {
        let (t2, t3) = (Some(d("100")), Some(d("400")));
        assert_eq!(tier(1, d("50"), t2, t3), 1);
        assert_eq!(tier(1, d("100"), t2, t3), 1);
        assert_eq!(tier(1, d("100.01"), t2, t3), 2);
        assert_eq!(tier(1, d("400"), t2, t3), 2);
        assert_eq!(tier(1, d("400.01"), t2, t3), 3);
        assert_eq!(tier(1, d("480"), t2, t3), 3);
        assert_eq!(tier(3, d("1"), t2, t3), 3);
        assert_eq!(tier(0, d("480"), None, None), 0);
    }
}
