//! The text a person must read before an effect: target, action, consequence, tenant.

use rust_decimal::Decimal;

use crate::policy::brl;

/// A request to close a work order.
pub fn close_text(order_id: &str, tenant: &str, reason: &str) -> String {
    format!(
        "Solicitar fechamento da OS {order_id} (tenant {tenant}). Consequência: a OS passa a \
         close_requested e sai da fila de trabalho. Motivo informado: \"{reason}\"."
    )
}

/// What a purchase proposal says.
pub struct Purchase<'a> {
    pub order_id: &'a str,
    pub part_id: &'a str,
    pub part_name: &'a str,
    pub quantity: i64,
    pub unit_price: Decimal,
    pub total: Decimal,
    pub cost_center: &'a str,
    /// The cost centre's budget left before this purchase.
    pub budget_left: Decimal,
}

/// A purchase: part, quantity, unit price, total, cost centre, order and tenant; from tier 2 on,
/// the cost centre's budget before and after.
pub fn purchase_text(p: &Purchase, tenant: &str, tier: i32) -> String {
    let mut text = format!(
        "Comprar {} × {} (peça {}) a {} cada, total {}, no centro de custo {}, para a OS {} (tenant {}).",
        p.quantity,
        p.part_name,
        p.part_id,
        brl(p.unit_price),
        brl(p.total),
        p.cost_center,
        p.order_id,
        tenant
    );
    if tier >= 2 {
        text.push_str(&format!(
            " Orçamento do centro de custo {}: {} antes, {} depois.",
            p.cost_center,
            brl(p.budget_left),
            brl(p.budget_left - p.total)
        ));
    }
    text
}

/// What the person must do to consent at `tier`, appended to the text.
pub fn consent_hint(tier: i32, challenge: Option<&str>) -> String {
    match (tier, challenge) {
        (t, Some(word)) if t >= 3 => format!(" Para confirmar, digite exatamente: {word}"),
        _ => " Para confirmar, responda sim.".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tier_three_shows_a_challenge_word() {
        assert_eq!(consent_hint(3, Some("CONFIRMAR-ABC123")), " Para confirmar, digite exatamente: CONFIRMAR-ABC123");
        assert_eq!(consent_hint(2, Some("CONFIRMAR-ABC123")), " Para confirmar, responda sim.");
        assert_eq!(consent_hint(1, None), " Para confirmar, responda sim.");
    }

    #[test]
    fn close_text_names_target_action_consequence_and_tenant() {
        let t = close_text("742", "shopping-a", "Inspeção validada pelo supervisor");
        assert!(t.starts_with("Solicitar fechamento da OS 742 (tenant shopping-a)"));
        assert!(t.contains("close_requested"));
        assert!(t.contains("Inspeção validada pelo supervisor"));
    }

    fn purchase() -> Purchase<'static> {
        Purchase {
            order_id: "742",
            part_id: "F-200",
            part_name: "Filtro de ar",
            quantity: 4,
            unit_price: Decimal::new(1250, 2),
            total: Decimal::new(5000, 2),
            cost_center: "CC-MANUT",
            budget_left: Decimal::new(200000, 2),
        }
    }

    #[test]
    fn purchase_text_names_everything_the_person_decides_on() {
        let t = purchase_text(&purchase(), "shopping-a", 1);
        for needle in ["4 × Filtro de ar", "F-200", "R$ 12,50", "R$ 50,00", "CC-MANUT", "OS 742", "shopping-a"] {
            assert!(t.contains(needle), "{needle} missing from {t}");
        }
        assert!(!t.contains("antes"), "tier 1 shows no budget: {t}");
    }

    #[test]
    fn tier_two_shows_the_budget_before_and_after() {
        let t = purchase_text(&purchase(), "shopping-a", 2);
        assert!(t.contains("R$ 2.000,00 antes, R$ 1.950,00 depois"), "{t}");
    }

    #[test]
    fn tier_three_shows_the_challenge_word() {
        assert!(consent_hint(3, Some("FECHAR-7Q")).ends_with("FECHAR-7Q"));
        assert!(consent_hint(1, None).contains("sim"));
    }
}
