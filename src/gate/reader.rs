//! A read tool's reader (`toolgate.read`): called as the write tools' functions are, in a scope
//! that is always rolled back, and its answer judged: the caller's tenant only, third-party text
//! marked.

use serde_json::{json, Value};
use toolgate_core::outcome::Rule;

use super::binding::{check_tool, misconfigured, reader_ctx, Reader};
use super::scope::{invoke, scoped};
use super::step::{Deny, Step};
use crate::context;

/// Run the reader: what it returns, with the strings at its untrusted pointers marked, and how
/// many were. NULL is `target_not_found`, and so is an answer that names another tenant than the
/// caller's in a `tenant` field. Nothing the reader writes is kept: its scope is rolled
/// back whatever happens, after its answer is read.
pub fn read(r: &Reader, args: &Value) -> Step<(Value, usize)> {
    check_tool(&r.tool)?;
    let ctx = reader_ctx(r);
    let mut value = scoped(false, || {
        invoke(r.reader, "reader", ctx, args, |out| match out {
            None | Some(Value::Null) => Err(Deny::new(Rule::TargetNotFound)),
            Some(v) if v.is_object() || v.is_array() => Ok(v),
            Some(_) => Err(misconfigured("reader", "must return an object or an array")),
        })
    })
    .map_err(|(deny, _)| deny)?;
    // Where the answer names its tenant (the object's, or each element's, "tenant"), it must be
    // the caller's: a reader that forgot its tenant filter answers as if nothing was found.
    // A `tenant` that is not text is the gate's tenant id in no form: the reader is misconfigured.
    let tenant = context::with(|c| c.tenant.clone());
    fn named(v: &Value) -> Option<Option<&str>> {
        v.get("tenant").map(Value::as_str)
    }
    let mut named_tenants = std::iter::once(&value).chain(value.as_array().into_iter().flatten()).filter_map(named);
    if let Some(found) = named_tenants.find(|t| *t != tenant.as_deref()) {
        return Err(match found {
            Some(_) => Deny::because(Rule::TargetNotFound, json!({"reason": "other_tenant"})),
            None => misconfigured("reader", "\"tenant\" must be the gate's tenant id, as text"),
        });
    }
    let marked = r.untrusted.iter().map(|p| toolgate_core::untrusted::mark_at(&mut value, p)).sum();
    Ok((value, marked))
}
