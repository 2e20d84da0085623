//! How a tenant reads what the gate writes for a person: the language of its sentences (and of
//! the words that consent), the currency its amounts are in, and how an amount is written.
//!
//! A tenant row holds all three (`toolgate.set_tenant_locale`); a tenant that never set them
//! reads Portuguese and Brazilian reais, as every tenant did before they could be set.

use rust_decimal::{Decimal, RoundingStrategy};

/// The languages the gate writes its sentences in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    Pt,
    En,
    Es,
}

/// The sentences the gate adds to a consent text, in one language.
struct Sentences {
    /// The gate's own template when the DBA wrote none: the tool, its target, the tenant.
    run: &'static str,
    amount: &'static str,
    arguments: &'static str,
    /// At tier 2 and above: the account (quoted), what it has before and after.
    balance: fn(&str, &str, &str) -> String,
    answer_yes: &'static str,
    type_exactly: &'static str,
    /// A proposal that approvers decide (docs/approvals.md): who says yes, in place of `answer_yes`.
    approvers: &'static str,
    /// A proposal of a console-only tier that the requester decides: where, in place of `answer_yes`.
    console: &'static str,
    /// Where the person answers in a form (an MCP client's): what to tick at tiers 1 and 2, and
    /// where to type the word at tier 3, in place of `answer_yes` and after `type_exactly`.
    form_tick: &'static str,
    form_word: &'static str,
    /// The form's fields.
    confirm_label: &'static str,
    word_label: &'static str,
    /// The challenge word's stem (the gate adds a dash and six random characters).
    challenge: &'static str,
    /// Answers accepted as a plain "yes", compared whole after `normalized`. Closed on purpose:
    /// refusing a real yes costs one more message; accepting a false one costs an effect.
    yes: &'static [&'static str],
}

const PT: Sentences = Sentences {
    run: "Executar {tool} sobre {target.id} (tenant {tenant}).",
    amount: " Valor: {value.amount}.",
    arguments: " Argumentos:",
    balance: |account, before, after| format!(" Saldo de {account}: {before} antes, {after} depois."),
    answer_yes: " Para confirmar, responda sim.",
    type_exactly: " Para confirmar, digite exatamente:",
    approvers: " Aguarda a decisão de quem aprova.",
    console: " Aguarda a sua decisão no console de aprovações.",
    form_tick: " Para confirmar, marque «Confirmar» e aceite; para recusar, recuse.",
    form_word: " Digite-a no campo «Palavra»; para recusar, recuse.",
    confirm_label: "Confirmar",
    word_label: "Palavra",
    challenge: "CONFIRMAR",
    // "yes", "y" and "ok" are in everyday use in Brazil, and were accepted before languages were.
    yes: &["sim", "s", "yes", "y", "confirmo", "confirmar", "pode", "ok"],
};

const EN: Sentences = Sentences {
    run: "Run {tool} on {target.id} (tenant {tenant}).",
    amount: " Amount: {value.amount}.",
    arguments: " Arguments:",
    balance: |account, before, after| format!(" Balance of {account}: {before} before, {after} after."),
    answer_yes: " To confirm, answer yes.",
    type_exactly: " To confirm, type exactly:",
    approvers: " Waits for an approver's decision.",
    console: " Waits for your decision in the approvals console.",
    form_tick: " To confirm, tick «Confirm» and accept; to refuse, decline.",
    form_word: " Type it in the field «Word»; to refuse, decline.",
    confirm_label: "Confirm",
    word_label: "Word",
    challenge: "CONFIRM",
    yes: &["yes", "y", "confirm", "confirmed", "ok", "okay"],
};

const ES: Sentences = Sentences {
    run: "Ejecutar {tool} sobre {target.id} (tenant {tenant}).",
    amount: " Importe: {value.amount}.",
    arguments: " Argumentos:",
    balance: |account, before, after| format!(" Saldo de {account}: {before} antes, {after} después."),
    answer_yes: " Para confirmar, responda sí.",
    type_exactly: " Para confirmar, escriba exactamente:",
    approvers: " Espera la decisión de quien aprueba.",
    console: " Espera su decisión en la consola de aprobaciones.",
    form_tick: " Para confirmar, marque «Confirmar» y acepte; para rechazar, rechace.",
    form_word: " Escríbala en el campo «Palabra»; para rechazar, rechace.",
    confirm_label: "Confirmar",
    word_label: "Palabra",
    challenge: "CONFIRMAR",
    yes: &["sí", "si", "s", "confirmo", "confirmar", "vale", "ok"],
};

impl Language {
    /// Every language, by the tag a tenant row holds.
    pub const ALL: [(&'static str, Language); 3] = [("pt", Language::Pt), ("en", Language::En), ("es", Language::Es)];

    /// The language a tag names (`pt`, `en`, `es`).
    pub fn parse(tag: &str) -> Option<Language> {
        Language::ALL.iter().find(|(t, _)| *t == tag).map(|&(_, l)| l)
    }

    pub fn tag(self) -> &'static str {
        Language::ALL.iter().find(|(_, l)| *l == self).map(|&(t, _)| t).expect("every language has a tag")
    }

    fn sentences(self) -> &'static Sentences {
        match self {
            Language::Pt => &PT,
            Language::En => &EN,
            Language::Es => &ES,
        }
    }

    /// The gate's own consent template: what the tool does to which target, in which tenant.
    pub fn run_template(self) -> &'static str {
        self.sentences().run
    }

    /// Appended to the gate's own template when the tool has a value.
    pub fn amount_template(self) -> &'static str {
        self.sentences().amount
    }

    /// Introduces the list of arguments in the gate's own template.
    pub fn arguments(self) -> &'static str {
        self.sentences().arguments
    }

    /// The sentence that shows, at tier 2 and above, the account before and after the effect.
    pub fn balance(self, account: &str, before: &str, after: &str) -> String {
        (self.sentences().balance)(account, before, after)
    }

    /// What the person must do to consent at `tier`, appended to the text.
    pub fn consent_hint(self, tier: i32, challenge: Option<&str>) -> String {
        let s = self.sentences();
        match (tier, challenge) {
            (t, Some(word)) if t >= 3 => format!("{} {word}", s.type_exactly),
            _ => s.answer_yes.to_string(),
        }
    }

    /// What a proposal that approvers decide says of its consent: that they decide it, and at
    /// tier 3 the word each of them types.
    pub fn approval_hint(self, tier: i32, challenge: Option<&str>) -> String {
        let s = self.sentences();
        match (tier, challenge) {
            (t, Some(word)) if t >= 3 => format!("{}{} {word}", s.approvers, s.type_exactly),
            _ => s.approvers.to_string(),
        }
    }

    /// What a proposal of a console-only tier says of its consent: that the requester decides it
    /// in the approvals console, and at tier 3 the word they type there.
    pub fn console_hint(self, tier: i32, challenge: Option<&str>) -> String {
        let s = self.sentences();
        match (tier, challenge) {
            (t, Some(word)) if t >= 3 => format!("{}{} {word}", s.console, s.type_exactly),
            _ => s.console.to_string(),
        }
    }

    /// A consent text the gate wrote, put to the person in a form (an MCP client's) in its own
    /// language: at tiers 1 and 2 the typed yes it asks for becomes a box to tick; at tier 3 the
    /// field to type the word in is named. Also the form's label for that field. A text with none
    /// of the gate's hints (another writer's) is asked in English.
    pub fn for_a_form(text: &str, tier: i64) -> (String, &'static str) {
        let of = |l: Language| l.sentences();
        if tier >= 3 {
            let language = Language::ALL
                .iter()
                .map(|(_, l)| *l)
                .find(|l| text.contains(of(*l).type_exactly))
                .unwrap_or(Language::En);
            return (format!("{text}{}", of(language).form_word), of(language).word_label);
        }
        for (_, l) in Language::ALL {
            if let Some(stem) = text.strip_suffix(of(l).answer_yes) {
                return (format!("{stem}{}", of(l).form_tick), of(l).confirm_label);
            }
        }
        (format!("{text}{}", EN.form_tick), EN.confirm_label)
    }

    /// The stem of a tier-3 challenge word.
    pub fn challenge_stem(self) -> &'static str {
        self.sentences().challenge
    }

    /// Whether `text` is a plain "yes" in this language: one of its words, whole.
    pub fn says_yes(self, text: &str) -> bool {
        self.sentences().yes.contains(&normalized(text).as_str())
    }
}

fn normalized(text: &str) -> String {
    text.trim().trim_start_matches('¡').trim_end_matches(['.', '!']).trim().to_lowercase()
}

/// The currency amounts are in: its ISO 4217 code and minor unit (the digits after the decimal
/// separator: 2 for BRL, 0 for JPY, 3 for KWD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Currency {
    pub code: String,
    pub minor_unit: u32,
}

/// ISO 4217's minor units of the currencies whose unit is not 2, and of common ones whose unit is
/// 2 (a code not listed needs its minor unit given: the gate does not guess one).
const MINOR_UNITS: [(&str, u32); 72] = [
    ("BIF", 0),
    ("CLP", 0),
    ("DJF", 0),
    ("GNF", 0),
    ("ISK", 0),
    ("JPY", 0),
    ("KMF", 0),
    ("KRW", 0),
    ("PYG", 0),
    ("RWF", 0),
    ("UGX", 0),
    ("UYI", 0),
    ("VND", 0),
    ("VUV", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("XPF", 0),
    ("BHD", 3),
    ("IQD", 3),
    ("JOD", 3),
    ("KWD", 3),
    ("LYD", 3),
    ("OMR", 3),
    ("TND", 3),
    ("CLF", 4),
    ("UYW", 4),
    ("AED", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("BOB", 2),
    ("BRL", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("CNY", 2),
    ("COP", 2),
    ("CRC", 2),
    ("CZK", 2),
    ("DKK", 2),
    ("DOP", 2),
    ("EGP", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("GTQ", 2),
    ("HKD", 2),
    ("HNL", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("MAD", 2),
    ("MXN", 2),
    ("MYR", 2),
    ("NGN", 2),
    ("NIO", 2),
    ("NOK", 2),
    ("NZD", 2),
    ("PAB", 2),
    ("PEN", 2),
    ("PHP", 2),
    ("PLN", 2),
    ("RON", 2),
    ("SAR", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("THB", 2),
    ("TRY", 2),
    ("TWD", 2),
    ("USD", 2),
    ("UYU", 2),
    ("VES", 2),
    ("ZAR", 2),
    ("KES", 2),
];

impl Currency {
    /// The minor unit ISO 4217 gives `code`, for the codes listed here.
    pub fn iso_minor_unit(code: &str) -> Option<u32> {
        MINOR_UNITS.iter().find(|(c, _)| *c == code).map(|&(_, unit)| unit)
    }

    /// A tenant's currency: an ISO 4217 code (three capital letters) and its minor unit (0 to 4),
    /// the one given or else ISO 4217's for a listed code.
    pub fn new(code: &str, minor_unit: Option<i32>) -> Result<Currency, String> {
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("currency {code:?} is not an ISO 4217 code (three capital letters)"));
        }
        let unit = match (minor_unit, Currency::iso_minor_unit(code)) {
            (Some(given), _) => u32::try_from(given)
                .ok()
                .filter(|u| *u <= 4)
                .ok_or_else(|| format!("minor unit {given} of {code} is not 0 to 4"))?,
            (None, Some(iso)) => iso,
            (None, None) => {
                return Err(format!("currency {code}: give its minor unit (ISO 4217), it is not listed here"))
            }
        };
        Ok(Currency { code: code.to_string(), minor_unit: unit })
    }

    /// `d` rounded to the minor unit as PostgreSQL's `numeric` rounds (half away from zero), so
    /// an ERP column with that scale stores exactly this amount. The gate rounds once, here.
    pub fn round(&self, d: Decimal) -> Decimal {
        d.round_dp_with_strategy(self.minor_unit, RoundingStrategy::MidpointAwayFromZero)
    }
}

/// Group separators an amount's format may use, and decimal separators.
const GROUPS: [char; 7] = ['.', ',', ' ', '\u{A0}', '\u{202F}', '\'', '\u{2019}'];
const DECIMALS: [char; 2] = ['.', ','];

/// How a tenant writes an amount, learnt from how it writes 1234.56: `R$ 1.234,56`, `€1.234,56`,
/// `$1,234.56`, `1.234,56 €`, `CHF 1'234.56`, `¥1,234`. What comes before and after the digits
/// is kept as written (the symbol and its spacing); the separators are read from between them.
/// The number of decimals shown is the currency's minor unit, whatever the example had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoneyFormat {
    prefix: String,
    suffix: String,
    group: Option<char>,
    decimal: char,
}

impl MoneyFormat {
    /// Brazilian reais as every tenant read them before formats could be set.
    pub fn brl() -> MoneyFormat {
        MoneyFormat::parse("R$ 1.234,56").expect("a valid format")
    }

    /// Read a format from 1234.56 (or 1234, for a currency without decimals) as the tenant
    /// writes it. The SQL check on `toolgate.tenants.money_format` accepts the same texts.
    pub fn parse(example: &str) -> Result<MoneyFormat, String> {
        let bad = || {
            format!(
                "money format {example:?} must be 1234.56 as the tenant writes it: symbol and spacing around \
                 1, an optional group separator, 234, then a decimal separator and 56 (e.g. \"R$ 1.234,56\", \
                 \"$1,234.56\", \"1.234,56 €\")"
            )
        };
        let start = example.find(|c: char| c.is_ascii_digit()).ok_or_else(bad)?;
        let (prefix, rest) = example.split_at(start);
        let rest = rest.strip_prefix('1').ok_or_else(bad)?;
        let (group, rest) = match rest.chars().next() {
            Some(c) if GROUPS.contains(&c) => (Some(c), &rest[c.len_utf8()..]),
            _ => (None, rest),
        };
        let rest = rest.strip_prefix("234").ok_or_else(bad)?;
        let (decimal, suffix) = match rest.chars().next() {
            Some(c) if DECIMALS.contains(&c) && rest[1..].starts_with("56") => (Some(c), &rest[3..]),
            _ => (None, rest),
        };
        if prefix.chars().chain(suffix.chars()).any(|c| c.is_ascii_digit() || c.is_control()) {
            return Err(bad());
        }
        if decimal.is_some() && decimal == group {
            return Err(bad());
        }
        // Without an example of decimals, the separator a group does not use.
        let decimal = decimal.unwrap_or(if group == Some(',') { '.' } else { ',' });
        Ok(MoneyFormat { prefix: prefix.to_string(), suffix: suffix.to_string(), group, decimal })
    }

    /// `value` in `currency`, rounded to its minor unit, as the tenant writes it; a negative
    /// amount has its minus sign before the symbol (`-R$ 962,50`).
    pub fn show(&self, currency: &Currency, value: Decimal) -> String {
        let rounded = currency.round(value);
        let negative = rounded.is_sign_negative() && !rounded.is_zero();
        let text = format!("{:.*}", currency.minor_unit as usize, rounded.abs());
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        let mut out = String::with_capacity(text.len() + self.prefix.len() + self.suffix.len() + 4);
        if negative {
            out.push('-');
        }
        out.push_str(&self.prefix);
        for (i, c) in int.chars().enumerate() {
            if i > 0 && (int.len() - i) % 3 == 0 {
                if let Some(g) = self.group {
                    out.push(g);
                }
            }
            out.push(c);
        }
        if !frac.is_empty() {
            out.push(self.decimal);
            out.push_str(frac);
        }
        out.push_str(&self.suffix);
        out
    }
}

/// How one tenant reads the gate's sentences and amounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locale {
    pub language: Language,
    pub currency: Currency,
    pub format: MoneyFormat,
}

impl Locale {
    /// Portuguese and Brazilian reais: a tenant that never set its locale.
    pub fn brazil() -> Locale {
        Locale {
            language: Language::Pt,
            currency: Currency { code: "BRL".into(), minor_unit: 2 },
            format: MoneyFormat::brl(),
        }
    }

    /// An amount as the tenant reads it.
    pub fn money(&self, value: Decimal) -> String {
        self.format.show(&self.currency, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn cur(code: &str, minor_unit: u32) -> Currency {
        Currency { code: code.into(), minor_unit }
    }

    #[test]
    fn reais_read_as_before() {
        let brl = Locale::brazil();
        assert_eq!(brl.money(d("37.5")), "R$ 37,50");
        assert_eq!(brl.money(d("1234.5")), "R$ 1.234,50");
        assert_eq!(brl.money(d("1000000")), "R$ 1.000.000,00");
        assert_eq!(brl.money(d("0")), "R$ 0,00");
        assert_eq!(brl.money(d("-962.5")), "-R$ 962,50");
        // Rounded as numeric rounds, not to even.
        assert_eq!(brl.money(d("33.165")), "R$ 33,17");
        assert_eq!(brl.money(d("-33.165")), "-R$ 33,17");
    }

    #[test]
    fn formats_are_read_from_how_the_tenant_writes_1234_56() {
        let eur = cur("EUR", 2);
        let cases = [
            ("€1.234,56", "€1.234.567,89"),
            ("1.234,56 €", "1.234.567,89 €"),
            ("$1,234.56", "$1,234,567.89"),
            ("US$ 1,234.56", "US$ 1,234,567.89"),
            ("CHF 1'234.56", "CHF 1'234'567.89"),
            ("1\u{202F}234,56\u{A0}€", "1\u{202F}234\u{202F}567,89\u{A0}€"),
            ("1234.56 EUR", "1234567.89 EUR"),
        ];
        for (format, shown) in cases {
            assert_eq!(MoneyFormat::parse(format).unwrap().show(&eur, d("1234567.891")), shown, "{format}");
        }
    }

    #[test]
    fn the_minor_unit_decides_the_decimals_and_the_rounding() {
        let yen = MoneyFormat::parse("¥1,234").unwrap();
        assert_eq!(yen.show(&cur("JPY", 0), d("1234.5")), "¥1,235");
        assert_eq!(yen.show(&cur("JPY", 0), d("-0.4")), "¥0");
        let dinar = MoneyFormat::parse("1,234.56 KWD").unwrap();
        assert_eq!(dinar.show(&cur("KWD", 3), d("1.2345")), "1.235 KWD");
        assert_eq!(dinar.show(&cur("KWD", 3), d("1234")), "1,234.000 KWD");
        assert_eq!(cur("KWD", 3).round(d("0.0005")), d("0.001"));
        assert_eq!(cur("JPY", 0).round(d("2.5")), d("3"));
        assert_eq!(cur("BRL", 2).round(d("2.345")), d("2.35"));
        // A format without decimals, for a currency that has them: the separator groups don't use.
        assert_eq!(yen.show(&cur("USD", 2), d("1234.5")), "¥1,234.50");
    }

    #[test]
    fn a_currency_is_an_iso_code_with_its_minor_unit() {
        assert_eq!(Currency::new("JPY", None).unwrap(), cur("JPY", 0));
        assert_eq!(Currency::new("KWD", None).unwrap(), cur("KWD", 3));
        assert_eq!(Currency::new("EUR", None).unwrap(), cur("EUR", 2));
        assert_eq!(Currency::new("XYZ", Some(1)).unwrap(), cur("XYZ", 1));
        assert!(Currency::new("XYZ", None).is_err());
        assert!(Currency::new("eur", None).is_err());
        assert!(Currency::new("EURO", None).is_err());
        assert!(Currency::new("EUR", Some(5)).is_err());
        assert!(Currency::new("EUR", Some(-1)).is_err());
        let codes: std::collections::HashSet<_> = MINOR_UNITS.iter().map(|(c, _)| c).collect();
        assert_eq!(codes.len(), MINOR_UNITS.len(), "a code listed twice");
    }

    #[test]
    fn a_format_that_is_not_1234_56_is_refused() {
        for bad in ["", "R$", "R$ 1.234.56", "1,234,56", "12.34,56", "R$ 1.234,56 (2)", "€ 2.345,67", "1.234,5"] {
            assert!(MoneyFormat::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_language_has_its_own_yes() {
        for (lang, yes, not_yes) in [
            (Language::Pt, ["sim", " Sim. ", "SIM!", "yes", "ok"], ["sí", "si", "vale", "confirm", "simples"]),
            (Language::En, ["yes", "Yes.", "y", "confirm", "OK"], ["sim", "sí", "s", "confirmo", "yes please"]),
            (Language::Es, ["sí", "Sí.", "¡sí!", "si", "vale"], ["sim", "yes", "y", "pode", "sí, pero no"]),
        ] {
            for t in yes {
                assert!(lang.says_yes(t), "{lang:?} {t:?}");
            }
            for t in not_yes {
                assert!(!lang.says_yes(t), "{lang:?} {t:?}");
            }
        }
    }

    #[test]
    fn the_hint_and_the_challenge_word_speak_the_language() {
        assert_eq!(Language::Pt.consent_hint(1, None), " Para confirmar, responda sim.");
        assert_eq!(Language::Pt.consent_hint(2, Some("CONFIRMAR-ABC123")), " Para confirmar, responda sim.");
        assert_eq!(
            Language::Pt.consent_hint(3, Some("CONFIRMAR-ABC123")),
            " Para confirmar, digite exatamente: CONFIRMAR-ABC123"
        );
        assert_eq!(Language::En.consent_hint(2, None), " To confirm, answer yes.");
        assert_eq!(Language::En.consent_hint(3, Some("CONFIRM-7Q")), " To confirm, type exactly: CONFIRM-7Q");
        assert_eq!(Language::Es.consent_hint(1, None), " Para confirmar, responda sí.");
        assert_eq!(Language::Pt.approval_hint(1, None), " Aguarda a decisão de quem aprova.");
        assert_eq!(
            Language::En.approval_hint(3, Some("CONFIRM-7Q")),
            " Waits for an approver's decision. To confirm, type exactly: CONFIRM-7Q"
        );
        assert_eq!(Language::Es.console_hint(1, None), " Espera su decisión en la consola de aprobaciones.");
        assert_eq!(
            Language::Pt.console_hint(3, Some("CONFIRMAR-ABC123")),
            " Aguarda a sua decisão no console de aprovações. Para confirmar, digite exatamente: CONFIRMAR-ABC123"
        );
        // In a form, one wording per language: the box replaces the typed yes.
        let pt = format!("Fechar «742».{}", Language::Pt.consent_hint(1, None));
        let (asked, label) = Language::for_a_form(&pt, 1);
        assert_eq!(asked, "Fechar «742». Para confirmar, marque «Confirmar» e aceite; para recusar, recuse.");
        assert_eq!(label, "Confirmar");
        let es = format!("Comprar.{}", Language::Es.consent_hint(3, Some("CONFIRMAR-ABC123")));
        let (asked, label) = Language::for_a_form(&es, 3);
        assert!(
            asked.ends_with("CONFIRMAR-ABC123 Escríbala en el campo «Palabra»; para rechazar, rechace."),
            "{asked}"
        );
        assert_eq!(label, "Palabra");
        assert_eq!(Language::for_a_form("Someone else's text.", 2).1, "Confirm");
        assert_eq!(Language::En.challenge_stem(), "CONFIRM");
        assert_eq!(Language::Es.balance("«c»", "1", "0"), " Saldo de «c»: 1 antes, 0 después.");
        for (tag, lang) in Language::ALL {
            assert_eq!(Language::parse(tag), Some(lang));
            assert_eq!(lang.tag(), tag);
        }
        assert_eq!(Language::parse("de"), None);
    }
}
