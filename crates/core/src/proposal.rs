//! The text a person must read before an effect: target, action, consequence, tenant.

/// A request to close a work order.
pub fn close_text(order_id: &str, tenant: &str, reason: &str) -> String {
    format!(
        "Solicitar fechamento da OS {order_id} (tenant {tenant}). Consequência: a OS passa a \
         close_requested e sai da fila de trabalho. Motivo informado: \"{reason}\"."
    )
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
    fn close_text_names_target_action_consequence_and_tenant() {
        let t = close_text("742", "shopping-a", "Inspeção validada pelo supervisor");
        assert!(t.starts_with("Solicitar fechamento da OS 742 (tenant shopping-a)"));
        assert!(t.contains("close_requested"));
        assert!(t.contains("Inspeção validada pelo supervisor"));
    }

    #[test]
    fn tier_three_shows_the_challenge_word() {
        assert!(consent_hint(3, Some("FECHAR-7Q")).ends_with("FECHAR-7Q"));
        assert!(consent_hint(1, None).contains("sim"));
    }
}
