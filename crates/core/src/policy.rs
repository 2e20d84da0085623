//! Policy arithmetic: the confirmation tier a value needs, and money as a person reads it. Exact
//! decimals only; a float never touches money.

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

/// Money as a person reads it in the proposal: `R$ 1.234,50`.
pub fn brl(value: Decimal) -> String {
    // Half away from zero, as PostgreSQL's numeric rounds: R$ 33,165 is shown as the 33,17 an
    // ERP's numeric(…, 2) column stores, never as 33,16.
    let cents = value.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
    let negative = cents.is_sign_negative() && !cents.is_zero();
    let text = format!("{:.2}", cents.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, "00"));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push('.');
        }
        grouped.push(c);
    }
    format!("{}R$ {grouped},{frac}", if negative { "-" } else { "" })
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

    #[test]
    fn money_reads_like_money() {
        assert_eq!(brl(d("37.5")), "R$ 37,50");
        assert_eq!(brl(d("1234.5")), "R$ 1.234,50");
        assert_eq!(brl(d("1000000")), "R$ 1.000.000,00");
        assert_eq!(brl(d("0")), "R$ 0,00");
        assert_eq!(brl(d("-962.5")), "-R$ 962,50");
        // Rounded as numeric rounds, not to even.
        assert_eq!(brl(d("33.165")), "R$ 33,17");
        assert_eq!(brl(d("-33.165")), "-R$ 33,17");
    }
}
