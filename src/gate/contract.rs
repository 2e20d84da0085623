//! Step 2: the tool is known and its arguments fit the tool's schema (draft 2020-12), compiled
//! once per schema text per backend.

use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use toolgate_core::contract::{self, Contract, Violation};
use toolgate_core::personal;

use super::step::{Deny, Step};
use crate::audit::{self, Audit};
use crate::config::{cached, Cache};
use crate::spi;

/// Compiled schemas a backend keeps; past this it starts over.
const COMPILED_LIMIT: usize = 256;

thread_local! {
    /// Compiled schemas by their text: a version number may come back with other content (a
    /// version made in a transaction that rolled back, then made again), a text never does.
    static CONTRACTS: RefCell<HashMap<String, Rc<Contract>>> = RefCell::new(HashMap::new());
    static TOOLS: RefCell<Cache<String, Option<Tool>>> = RefCell::new(Cache::new());
}

/// A tool as the newest committed configuration has it.
#[derive(Clone)]
pub struct Tool {
    pub schema_version: i32,
    pub sensitive: bool,
    /// A read tool (`toolgate.read`), not a write tool.
    pub read: bool,
    /// The names the schema declares under `properties` (sorted by name): the DBA's words, never
    /// the model's.
    pub properties: Rc<[String]>,
    /// Where the schema marks a value personal (`"x-personal": true`): the audit holds their
    /// pseudonyms (docs/audit.md#erasure-of-a-person). Empty for most tools.
    pub personal: Rc<[Vec<personal::Step>]>,
    contract: Rc<Contract>,
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

/// The tool's newest schema, compiled, and whether it is sensitive (a configuration row).
pub fn tool(tool: &str) -> Option<Tool> {
    cached(&TOOLS, tool.to_string(), || load_tool(tool))
}

fn load_tool(tool: &str) -> Option<Tool> {
    let (version, sensitive, text, read) = spi::latest(
        "SELECT s.version, t.sensitive, s.schema::text, t.kind = 'read' FROM toolgate.tools t, LATERAL (SELECT \
         version, schema FROM toolgate.tool_schemas WHERE tool = t.tool ORDER BY version DESC LIMIT 1) s \
         WHERE t.tool = $1",
        &[tool.into()],
        |r| Ok((spi::col::<i32>(r, 1)?, spi::col::<bool>(r, 2)?, spi::col::<String>(r, 3)?, spi::col::<bool>(r, 4)?)),
    )?;
    let contract = compiled(tool, version, &text);
    let schema: Value = serde_json::from_str(&text).expect("jsonb text is JSON");
    let properties = schema.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect());
    let personal = personal::paths(&schema).into();
    Some(Tool {
        schema_version: version,
        sensitive,
        read,
        properties: properties.unwrap_or_default(),
        personal,
        contract,
    })
}

fn compiled(tool: &str, version: i32, text: &str) -> Rc<Contract> {
    if let Some(c) = CONTRACTS.with_borrow(|m| m.get(text).cloned()) {
        return c;
    }
    let schema: Value = serde_json::from_str(text).expect("jsonb text is JSON");
    // set_tool_schema refuses schemas that do not compile, so this only fails on a hand edit.
    let contract = Rc::new(Contract::compile(&schema).unwrap_or_else(|e| panic!("{tool} v{version}: {e}")));
    CONTRACTS.with_borrow_mut(|m| {
        if m.len() >= COMPILED_LIMIT {
            m.clear();
        }
        m.insert(text.to_string(), contract.clone())
    });
    contract
}

/// A call's arguments as they reach the gate.
pub enum Args<'a> {
    /// The `jsonb` the caller sent, read as PostgreSQL stores it (`None`: SQL NULL).
    Jsonb(Option<Value>),
    /// A `jsonb` larger than `MAX_ARGS_BYTES`: refused by its size alone, never read.
    Oversize,
    /// Text (`explain_call`'s), parsed here.
    Text(Option<&'a str>),
}

/// Check `args` against the tool's contract; the audit learns the args' HMAC and the schema
/// version whatever the verdict.
#[cfg_attr(feature = "steps", inline(never))]
pub fn check(tool_name: &str, args: Args, audit: &mut Audit) -> Step<Checked> {
    check_kind(tool_name, false, args, audit)
}

/// The same for a read tool (`toolgate.read`).
pub fn check_read(tool_name: &str, args: Args, audit: &mut Audit) -> Step<Checked> {
    check_kind(tool_name, true, args, audit)
}

fn check_kind(tool_name: &str, read: bool, args: Args, audit: &mut Audit) -> Step<Checked> {
    let Some(Tool { schema_version: version, sensitive, read: is_read, contract, personal, .. }) = tool(tool_name)
    else {
        return Err(Deny::schema(vec![Violation::new("", "tool", "unknown tool")]));
    };
    if is_read != read {
        let message = if read { "not a read tool" } else { "a read tool: call it with toolgate.read" };
        return Err(Deny::schema(vec![Violation::new("", "tool", message)]));
    }
    let parsed = match args {
        Args::Jsonb(value) => contract::bounded(value),
        Args::Oversize => Err(contract::oversize()),
        Args::Text(text) => contract::parse_args(text),
    };
    let value = match parsed {
        Ok(v) => v,
        Err(errors) => {
            audit.args(None, Some(version));
            return Err(Deny::schema(errors));
        }
    };
    let errors = contract.check(&value);
    let digest = if personal.is_empty() {
        let (digest, hmac) = audit::hmac_key().digest_and_hmac(&value);
        audit.args(Some(hmac), Some(version));
        digest
    } else {
        let hmac = audit_hmac(&value, &personal, errors.is_empty(), audit);
        audit.args(Some(hmac), Some(version));
        toolgate_core::digest::args_digest(&value)
    };
    if !errors.is_empty() {
        return Err(Deny::schema(errors));
    }
    Ok(Checked { value, schema_version: version, sensitive, digest })
}

/// The audit's HMAC of arguments with personal values (`paths`), each replaced by its pseudonym
/// when the arguments fit the schema (the audit then names them that way: `Audit::personal`),
/// or by a mark when they do not (a refused call's made-up values make no key).
pub fn audit_hmac(value: &Value, paths: &[Vec<personal::Step>], valid: bool, audit: &mut Audit) -> String {
    let (masked, seen) = if valid {
        personal::masked(value, paths, |text| audit.pseudonym(text))
    } else {
        personal::masked(value, paths, |_| "(personal)".to_string())
    };
    if valid {
        audit.personal(seen);
    }
    audit::hmac_key().hmac(&masked)
}
