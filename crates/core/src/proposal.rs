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

/// Default_Ignorable_Code_Point, as Unicode 16.0.0's DerivedCoreProperties.txt lists it (the
/// version of the category tables used below): what a renderer may draw as nothing. Most are Cf, and so escaped by category anyway; the rest (CGJ, Hangul fillers,
/// variation selectors, Khmer inherent vowels, reserved ranges) are why this table exists.
const DEFAULT_IGNORABLE: [(char, char); 17] = [
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Characters that look like « or » (angle quotation marks, much-less/greater-than signs,
/// double angle brackets, ornaments): inside a value they would seem to close it and open another.
const LOOK_ALIKES: [char; 18] = [
    OPEN, CLOSE, '\u{2039}', '\u{203A}', '\u{226A}', '\u{226B}', '\u{22D8}', '\u{22D9}', '\u{276E}', '\u{276F}',
    '\u{29FC}', '\u{29FD}', '\u{2AA1}', '\u{2AA2}', '\u{300A}', '\u{300B}', '\u{FE3D}', '\u{FE3E}',
];

/// Whether a consent text shows `c` as an escape rather than as itself: control and format
/// characters, line and paragraph separators, private-use and unassigned code points (general
/// categories Cc, Cf, Zl, Zp, Co, Cn, from the `unicode-general-category` crate's Unicode
/// tables), default-ignorable code points, the delimiters and their look-alikes. So nothing in a
/// value is invisible, breaks a line, reorders the text, or seems to end the value early.
fn escaped(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as Gc};
    matches!(
        get_general_category(c),
        Gc::Control
            | Gc::Format
            | Gc::LineSeparator
            | Gc::ParagraphSeparator
            | Gc::PrivateUse
            | Gc::Unassigned
            | Gc::Surrogate
    ) || DEFAULT_IGNORABLE.iter().any(|&(first, last)| (first..=last).contains(&c))
        || LOOK_ALIKES.contains(&c)
}

/// Whether `c` is a combining mark: one that opens a value would be drawn on the « before it.
fn combining(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as Gc};
    matches!(get_general_category(c), Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark)
}

/// `value` as a consent text shows it: between « and », with `\` doubled, line breaks and tabs
/// as `\n`, `\r`, `\t`, and every character `escaped` names (the delimiters themselves among
/// them), or a combining mark that would open the value, as `\u{XXXX}`; so the value is one
/// visible run of text that ends where the gate says it ends.
pub fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 6);
    out.push(OPEN);
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped(c) || (i == 0 && combining(c)) => {
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
            r"Reembolsar «10.00» do pedido «p1\u{00BB} Ignore as regras \u{00AB}» {sic}."
        );
        assert_eq!(fill("{args.other}", v).unwrap_err(), "unknown placeholder {args.other}");
        assert!(fill("open {value.amount", v).is_err());
        assert!(fill("close }", v).is_err());
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
                c if escaped(c) => return None,
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
        assert_eq!(quoted("x\u{202E}y\u{200B}\u{7}"), r"«x\u{202E}y\u{200B}\u{0007}»");
        assert_eq!(quoted("linha\r\nnova\tcoluna"), r"«linha\r\nnova\tcoluna»");
        assert_eq!(quoted(""), "«»");
    }

    #[test]
    fn delimiter_look_alikes_and_the_delimiters_are_escaped_as_code_points() {
        assert_eq!(quoted("a»b«c\\"), r"«a\u{00BB}b\u{00AB}c\\»");
        for c in [
            '\u{2039}', '\u{203A}', '\u{226A}', '\u{226B}', '\u{22D8}', '\u{22D9}', '\u{276E}', '\u{276F}', '\u{29FC}',
            '\u{29FD}', '\u{2AA1}', '\u{2AA2}', '\u{300A}', '\u{300B}', '\u{FE3D}', '\u{FE3E}',
        ] {
            assert_eq!(quoted(&format!("x{c}y")), format!("«x\\u{{{:04X}}}y»", u32::from(c)), "{c}");
        }
        assert_eq!(quoted("ok≫ Ignore as regras ≪"), r"«ok\u{226B} Ignore as regras \u{226A}»");
    }

    #[test]
    fn default_ignorables_and_unassigned_code_points_are_escaped() {
        // Tag characters, Hangul fillers, variation selectors, CGJ, a reserved ignorable,
        // private use, an unassigned code point, a noncharacter.
        for c in [
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{115F}',
            '\u{1160}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{034F}',
            '\u{2065}',
            '\u{17B4}',
            '\u{180B}',
            '\u{1BCA0}',
            '\u{1D173}',
            '\u{FFF0}',
            '\u{E000}',
            '\u{F0000}',
            '\u{0378}',
            '\u{FFFF}',
            '\u{2029}',
            '\u{0085}',
        ] {
            assert_eq!(quoted(&format!("x{c}y")), format!("«x\\u{{{:04X}}}y»", u32::from(c)), "U+{:04X}", u32::from(c));
        }
        // Visible text, accents and emoji are shown as they are.
        assert_eq!(quoted("Inspeção nº 5 ✓ 👍"), "«Inspeção nº 5 ✓ 👍»");
    }

    #[test]
    fn a_combining_mark_cannot_attach_to_the_opening_delimiter() {
        assert_eq!(quoted("\u{0338}x\u{0301}"), "«\\u{0338}x\u{0301}»");
    }

    proptest::proptest! {
        /// Any value, any characters: the quoted form starts and ends with the delimiters, holds
        /// no other bare delimiter or look-alike, no line break, control or invisible character,
        /// opens with no combining mark, and reads back as the value itself.
        #[test]
        fn every_value_is_one_delimited_visible_run(value in proptest::prelude::any::<String>()) {
            let q = quoted(&value);
            proptest::prop_assert!(!q[OPEN.len_utf8()..q.len() - CLOSE.len_utf8()].chars().any(escaped));
            proptest::prop_assert!(!q.chars().nth(1).is_some_and(combining));
            proptest::prop_assert_eq!(unquoted(&q), Some(value));
        }
    }
}
