//! Step 2: the tool is known and its arguments fit the tool's schema (draft 2020-12), compiled
//! once per (tool, schema version) per backend.

use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use toolgate_core::contract::{self, Contract, Violation};
use toolgate_core::digest;

use super::{Deny, Step};
use crate::audit::{self, Audit};
use crate::config::{cached, Cache};
use crate::spi;

thread_local! {
    /// Compiled schemas by (schema OID, tool, version): a version's text never changes while the
    /// extension exists, and the schema OID changes when it is created again.
    static CONTRACTS: RefCell<HashMap<(pgrx::pg_sys::Oid, String, i32), Rc<Contract>>> = RefCell::new(HashMap::new());
    static TOOLS: RefCell<Cache<String, Option<(i32, bool)>>> = RefCell::new(Cache::new());
}

/// Arguments that passed the contract.
pub struct Checked {
    pub value: Value,
    pub schema_version: i32,
    pub sensitive: bool,
    pub digest: String,
}

impl Checked {
    pub fn str(&self, name: &str) -> &str {
        self.value.get(name).and_then(Value::as_str).unwrap_or_default()
    }
}

/// The caller's conversation id.
pub fn conversation(id: Option<&str>) -> Step<&str> {
    contract::check_conversation_id(id).map_err(|v| Deny::schema(vec![v]))
}

/// The tool's current schema version and whether it is sensitive (a configuration row).
pub fn tool(tool: &str) -> Option<(i32, bool)> {
    cached(&TOOLS, tool.to_string(), || load_tool(tool))
}

fn load_tool(tool: &str) -> Option<(i32, bool)> {
    spi::one(
        "SELECT s.version, t.sensitive FROM toolgate.tools t, LATERAL (SELECT max(version) AS version \
         FROM toolgate.tool_schemas WHERE tool = t.tool) s WHERE t.tool = $1 AND s.version IS NOT NULL",
        &[tool.into()],
        |r| Ok((spi::col(r, 1)?, spi::col(r, 2)?)),
    )
}

fn compiled(tool: &str, version: i32) -> Rc<Contract> {
    let key = (spi::schema_oid(), tool.to_string(), version);
    if let Some(c) = CONTRACTS.with_borrow(|m| m.get(&key).cloned()) {
        return c;
    }
    let text = spi::one(
        "SELECT schema::text FROM toolgate.tool_schemas WHERE tool = $1 AND version = $2",
        &[tool.into(), version.into()],
        |r| spi::col::<String>(r, 1),
    )
    .expect("the version was just read");
    let schema: Value = serde_json::from_str(&text).expect("jsonb text is JSON");
    // set_tool_schema refuses schemas that do not compile, so this only fails on a hand edit.
    let contract = Rc::new(Contract::compile(&schema).unwrap_or_else(|e| panic!("{tool} v{version}: {e}")));
    CONTRACTS.with_borrow_mut(|m| m.insert(key, contract.clone()));
    contract
}

/// Check `args` against the tool's contract; the audit learns the args' HMAC and the schema
/// version whatever the verdict.
pub fn check(tool_name: &str, args: Option<&str>, audit: &mut Audit) -> Step<Checked> {
    let Some((version, sensitive)) = tool(tool_name) else {
        return Err(Deny::schema(vec![Violation::new("", "tool", "unknown tool")]));
    };
    let value = match contract::parse_args(args) {
        Ok(v) => v,
        Err(errors) => {
            audit.args(None, Some(version));
            return Err(Deny::schema(errors));
        }
    };
    let (digest, hmac) = digest::args_digest_and_hmac(&audit::hmac_key(), &value);
    audit.args(Some(hmac), Some(version));
    let errors = compiled(tool_name, version).check(&value);
    if !errors.is_empty() {
        return Err(Deny::schema(errors));
    }
    Ok(Checked { value, schema_version: version, sensitive, digest })
}
