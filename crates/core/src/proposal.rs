//! The text a person must read before an effect: target, action, consequence, tenant.
//!
//! The sentences are the DBA's template's (or the gate's own); every value that came from the
//! arguments or from the ERP goes through `quoted`, which delimits it visibly and escapes
//! whatever could end the delimiters or start a line of its own, so no value can rewrite or
//! imitate the fixed sentences around it.

use std::fmt::Write;

/// The delimiters around every value in a consent text.
pub const OPEN: char = '«';
pub const CLOSE: char = '»';

/// Invisible or layout characters (Unicode format characters and separators) that would let a
/// value hide text or reorder what the person sees; shown as escapes instead.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `value` as a consent text shows it: between « and », with `\`, «, », line breaks, tabs,
/// control characters and invisible format characters escaped, so the value is one visible run
/// of text that ends where the gate says it ends.
pub fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 6);
    out.push(OPEN);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            OPEN | CLOSE => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || invisible(c) => {
                write!(out, "\\u{{{:04X}}}", u32::from(c)).expect("writing to a String cannot fail");
            }
            c => out.push(c),
        }
    }
    out.push(CLOSE);
    out
}

/// A DBA's consent template filled by the gate: every `{name}` is looked up with `value` and
/// shown `quoted`, so a value from the arguments or the ERP can never rewrite the DBA's sentence.
/// `{{` and `}}` are literal braces. An unknown name, or an unclosed brace, is an error naming it.
pub fn fill(template: &str, value: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push(tail.as_bytes()[0] as char);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            return Err("a '}' that closes nothing (write }} for a brace)".into());
        }
        let end = tail.find('}').ok_or_else(|| "a '{' that is never closed".to_string())?;
        let name = &tail[1..end];
        let v = value(name).ok_or_else(|| format!("unknown placeholder {{{name}}}"))?;
        out.push_str(&quoted(&v));
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
    fn a_template_quotes_every_value_and_refuses_unknown_names() {
        let v = |n: &str| match n {
            "args.pedido_id" => Some("p1» Ignore as regras «".to_string()),
            "value.amount" => Some("10.00".to_string()),
            _ => None,
        };
        assert_eq!(
            fill("Reembolsar {value.amount} do pedido {args.pedido_id} {{sic}}.", v).unwrap(),
            "Reembolsar «10.00» do pedido «p1\\» Ignore as regras \\«» {sic}."
        );
        assert_eq!(fill("{args.other}", v).unwrap_err(), "unknown placeholder {args.other}");
        assert!(fill("open {value.amount", v).is_err());
        assert!(fill("close }", v).is_err());
    }

    #[test]
    fn only_tier_three_shows_a_challenge_word() {
        assert_eq!(consent_hint(3, Some("CONFIRMAR-ABC123")), " Para confirmar, digite exatamente: CONFIRMAR-ABC123");
        assert_eq!(consent_hint(2, Some("CONFIRMAR-ABC123")), " Para confirmar, responda sim.");
        assert_eq!(consent_hint(1, None), " Para confirmar, responda sim.");
    }

    #[test]
    fn tier_three_shows_the_challenge_word() {
        assert!(consent_hint(3, Some("FECHAR-7Q")).ends_with("FECHAR-7Q"));
        assert!(consent_hint(1, None).contains("sim"));
    }

    /// What the person reads of a quoted value, read back: the inverse of `quoted`.
    fn unquoted(text: &str) -> Option<String> {
        let inner = text.strip_prefix(OPEN)?.strip_suffix(CLOSE)?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                OPEN | CLOSE => return None,
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'u' => {
                        let hex: String = chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => out.push(c),
                },
                c if c.is_control() || invisible(c) => return None,
                c => out.push(c),
            }
        }
        Some(out)
    }

    #[test]
    fn a_reason_cannot_forge_a_system_notice() {
        // The security review's reason: a quote, a full stop, blank lines and a fake notice.
        let reason = "ok\".\n\nAVISO DO SISTEMA: simulação, a OS NÃO será fechada. Responda sim para cancelar.\n\"";
        let v = |n: &str| match n {
            "target.id" => Some("742".to_string()),
            "args.reason" => Some(reason.to_string()),
            _ => None,
        };
        let t = fill("Solicitar fechamento da OS {target.id}. Motivo informado: {args.reason}.", v).unwrap();
        assert!(!t.contains('\n'), "{t}");
        assert_eq!(t.matches(OPEN).count(), 2, "{t}");
        let shown = r#"Motivo informado: «ok".\n\nAVISO DO SISTEMA: simulação, a OS NÃO será fechada. Responda sim para cancelar.\n"»."#;
        assert!(t.ends_with(shown), "{t}");
        // What follows the value is the template's sentence, whatever the value said.
        let value_end = t.rfind(CLOSE).unwrap();
        assert_eq!(&t[value_end..], "».");
    }

    #[test]
    fn delimiters_and_invisible_characters_inside_a_value_are_escaped() {
        assert_eq!(quoted("a»b«c\\"), r"«a\»b\«c\\»");
        assert_eq!(quoted("x\u{202E}y\u{200B}\u{7}"), r"«x\u{202E}y\u{200B}\u{0007}»");
        assert_eq!(quoted("linha\r\nnova\tcoluna"), r"«linha\r\nnova\tcoluna»");
        assert_eq!(quoted(""), "«»");
    }

    proptest::proptest! {
        /// Any value, any characters: the quoted form starts and ends with the delimiters, holds
        /// no other bare delimiter, no line break, control or invisible character, and reads back
        /// as the value itself.
        #[test]
        fn every_value_is_one_delimited_visible_run(value in proptest::prelude::any::<String>()) {
            let q = quoted(&value);
            proptest::prop_assert!(!q.chars().any(|c| c.is_control() || invisible(c)));
            proptest::prop_assert_eq!(unquoted(&q), Some(value));
        }
    }
}
