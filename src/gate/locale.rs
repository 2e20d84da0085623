//! How the caller's tenant reads what the gate writes for a person (`toolgate.tenants`:
//! language, currency, minor unit, money format): a configuration row, cached like the others.

use std::cell::RefCell;
use toolgate_core::locale::{Currency, Language, Locale, MoneyFormat};

use crate::config::{cached, Cache};
use crate::spi;

thread_local! {
    static LOCALES: RefCell<Cache<String, Locale>> = RefCell::new(Cache::new());
}

/// `tenant`'s locale; Portuguese and reais for a row the table's checks would not have let in.
pub fn of(tenant: &str) -> Locale {
    cached(&LOCALES, tenant.to_string(), || {
        spi::latest(
            "SELECT language, currency, minor_unit::integer, money_format FROM toolgate.tenants WHERE tenant_id = $1",
            &[tenant.into()],
            |r| {
                Ok((
                    spi::col::<String>(r, 1)?,
                    spi::col::<String>(r, 2)?,
                    spi::col::<i32>(r, 3)?,
                    spi::col::<String>(r, 4)?,
                ))
            },
        )
        .and_then(|(language, code, unit, format)| {
            Some(Locale {
                language: Language::parse(&language)?,
                currency: Currency::new(&code, Some(unit)).ok()?,
                format: MoneyFormat::parse(&format).ok()?,
            })
        })
        .unwrap_or_else(Locale::brazil)
    })
}

/// A language tag a proposal kept; Portuguese for one made before proposals kept theirs.
pub fn language(tag: Option<&str>) -> Language {
    tag.and_then(Language::parse).unwrap_or(Language::Pt)
}
