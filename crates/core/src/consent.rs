//! What counts as a person's consent (seed 004's confirmation gates).
//!
//! The channel signs what the person typed; this module judges it. Tiers 1 and 2 take a "yes"
//! from the closed list of the language the proposal was written in, compared whole (a "sim"
//! prefix is not a "sim", a "sí" is not a "sim"); tier 3 takes only the exact challenge word,
//! typed.

use crate::locale::Language;
use crate::token::{Confirmation, Decision, Via};

/// The verdict on a confirmation whose signature, tenant and freshness already passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consent {
    Approved,
    Declined,
    /// An approval whose words do not establish consent for this tier.
    Insufficient,
}

/// Judge a confirmation for a proposal of `tier`, written in `language`, whose challenge word is
/// `challenge`.
pub fn judge(confirmation: &Confirmation, tier: i32, language: Language, challenge: Option<&str>) -> Consent {
    if confirmation.decision == Decision::Decline {
        return Consent::Declined;
    }
    let ok = if tier >= 3 {
        confirmation.via == Via::Typed && Some(confirmation.text.trim()) == challenge
    } else {
        language.says_yes(&confirmation.text)
    };
    if ok {
        Consent::Approved
    } else {
        Consent::Insufficient
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str, via: Via) -> Confirmation {
        Confirmation { proposal: "p".into(), decision: Decision::Approve, text: text.into(), at: 0, exp: 1, via }
    }

    #[test]
    fn a_plain_yes_approves_tiers_one_and_two() {
        for t in ["sim", "Sim", " SIM. ", "yes!", "ok"] {
            assert_eq!(judge(&said(t, Via::Typed), 1, Language::Pt, None), Consent::Approved, "{t}");
            assert_eq!(judge(&said(t, Via::Voice), 2, Language::Pt, None), Consent::Approved, "{t}");
        }
    }

    #[test]
    fn a_yes_prefix_is_not_a_yes() {
        for t in ["sim, mas não feche", "simples", "", "não", "talvez"] {
            assert_eq!(judge(&said(t, Via::Typed), 1, Language::Pt, None), Consent::Insufficient, "{t}");
        }
    }

    #[test]
    fn tier_three_needs_the_typed_challenge_word() {
        assert_eq!(judge(&said("sim", Via::Typed), 3, Language::Pt, Some("FECHAR-7Q")), Consent::Insufficient);
        assert_eq!(judge(&said("FECHAR-7Q", Via::Voice), 3, Language::Pt, Some("FECHAR-7Q")), Consent::Insufficient);
        assert_eq!(judge(&said("fechar-7q", Via::Typed), 3, Language::Pt, Some("FECHAR-7Q")), Consent::Insufficient);
        assert_eq!(judge(&said("FECHAR-7Q", Via::Typed), 3, Language::Pt, Some("FECHAR-7Q")), Consent::Approved);
        assert_eq!(judge(&said("FECHAR-7Q", Via::Typed), 3, Language::Pt, None), Consent::Insufficient);
    }

    #[test]
    fn a_yes_counts_in_the_proposal_s_language_only() {
        assert_eq!(judge(&said("sí", Via::Typed), 2, Language::Es, None), Consent::Approved);
        assert_eq!(judge(&said("sí", Via::Typed), 2, Language::Pt, None), Consent::Insufficient);
        assert_eq!(judge(&said("sim", Via::Typed), 2, Language::En, None), Consent::Insufficient);
    }

    #[test]
    fn a_decline_is_a_decline_whatever_the_words() {
        let mut c = said("sim", Via::Typed);
        c.decision = Decision::Decline;
        assert_eq!(judge(&c, 1, Language::Pt, None), Consent::Declined);
    }
}
