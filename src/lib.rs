//! pg_toolgate: the guardrails of an LLM agent that writes to an ERP, inside the database.
//!
//! The SQL surface lives in `sql/` (tables, entry points, views, grants); the gate itself in
//! `gate/`, one module per step of docs/architecture.md §5; the pure decisions in the `toolgate-core` crate.

use pgrx::prelude::*;

::pgrx::pg_module_magic!(name, version);

/// `toolgate.max_token_lifetime`: the longest life, in seconds, an identity or confirmation token
/// may have (from now, and from its `iat`). Superuser-only: a client cannot lengthen it.
pub static MAX_TOKEN_LIFETIME: pgrx::GucSetting<i32> =
    pgrx::GucSetting::<i32>::new(toolgate_core::token::DEFAULT_MAX_LIFETIME_SECONDS as i32);

/// `toolgate.clock_skew`: how far, in seconds, a token's `iat` or `nbf` (a confirmation's `at`)
/// may lead the database's clock. Superuser-only.
pub static CLOCK_SKEW: pgrx::GucSetting<i32> = pgrx::GucSetting::<i32>::new(toolgate_core::token::SKEW_SECONDS as i32);

/// `toolgate.log_calls`: write the structured LOG line for every call and confirmation, not only
/// for denials. A caller that wraps a call in `BEGIN … ROLLBACK` removes its audit row; with this
/// on, a stolen token tested that way still leaves a line. Superuser-only.
pub static LOG_CALLS: pgrx::GucSetting<bool> = pgrx::GucSetting::<bool>::new(false);

/// `toolgate.outbox_notify`: an outbox call's transaction sends `NOTIFY toolgate_outbox` (no
/// payload) as it enqueues, so a dispatcher that listens wakes when it commits instead of at its
/// next poll. On by default. Superuser-only: a DBA who would rather not pay the notification
/// queue's lock at the commit of every outbox call turns it off (the dispatchers then poll).
pub static OUTBOX_NOTIFY: pgrx::GucSetting<bool> = pgrx::GucSetting::<bool>::new(true);

/// `toolgate.min_retention`: the shortest time, in seconds, the audit may be kept (a legal
/// minimum): `toolgate.set_retention` refuses a shorter one and `toolgate.purge` never removes a
/// younger row, whatever a retention row says. 0 (the default): no minimum. Superuser-only.
pub static MIN_RETENTION: pgrx::GucSetting<i32> = pgrx::GucSetting::<i32>::new(0);

/// `toolgate.audience`: the audience every identity token this session presents must name in its
/// `aud` (an MCP server over HTTP sets its resource URL here, RFC 8707: a token issued for another
/// resource, or for none, is then refused). Empty (the default): no audience is required beyond
/// what a registered issuer's own audiences ask. Any session may set it: it only refuses more.
pub static AUDIENCE: pgrx::GucSetting<Option<std::ffi::CString>> =
    pgrx::GucSetting::<Option<std::ffi::CString>>::new(None);

/// `toolgate.trace_id`: the W3C trace id (32 lowercase hex digits) of the request a session's
/// next calls serve; each audit row written meanwhile names it in `detail.trace_id`, so an
/// operator goes from a host's trace to the database's audit. An MCP server sets it from the
/// request's `traceparent`. Anything else (empty, the wrong shape, all zeros) is not written.
pub static TRACE_ID: pgrx::GucSetting<Option<std::ffi::CString>> =
    pgrx::GucSetting::<Option<std::ffi::CString>>::new(None);

/// The session's trace id, if it is one (W3C Trace Context: 32 lowercase hex digits, not all zero).
pub fn trace_id() -> Option<String> {
    let id = TRACE_ID.get()?;
    let id = id.to_str().ok()?;
    let valid = id.len() == 32
        && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && id.bytes().any(|b| b != b'0');
    valid.then(|| id.to_string())
}

thread_local! {
    /// Whether the server preloads Citus (`shared_preload_libraries`, fixed until a restart).
    static CITUS: std::cell::OnceCell<bool> = const { std::cell::OnceCell::new() };
}

/// Whether the server preloads Citus: asked once a backend. Without it a call asks nothing about
/// where it runs.
pub fn citus_preloaded() -> bool {
    CITUS.with(|c| {
        *c.get_or_init(|| {
            spi::one("SELECT pg_catalog.current_setting('shared_preload_libraries')", &[], |r| spi::col::<String>(r, 1))
                .is_some_and(|libraries| libraries.split(',').any(|l| l.trim().trim_matches('"') == "citus"))
        })
    })
}

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pgrx::GucRegistry::define_string_guc(
        c"toolgate.trace_id",
        c"The W3C trace id the audit rows of this session's next calls name (detail.trace_id).",
        c"Set by an MCP server from each request's traceparent: 32 lowercase hex digits; anything else is not written.",
        &TRACE_ID,
        pgrx::GucContext::Userset,
        pgrx::GucFlags::default(),
    );
    pgrx::GucRegistry::define_string_guc(
        c"toolgate.audience",
        c"The audience every identity token of this session must name in its aud claim.",
        c"Set by an MCP server to its resource URL (RFC 8707): a token issued for another resource, or for none, is refused (identity_invalid, reason audience). Empty: none required.",
        &AUDIENCE,
        pgrx::GucContext::Userset,
        pgrx::GucFlags::default(),
    );
    pgrx::GucRegistry::define_int_guc(
        c"toolgate.clock_skew",
        c"How far a token's iat or nbf may lead the database's clock.",
        c"A token issued or valid only further in the future is refused (identity_invalid, confirmation_invalid).",
        &CLOCK_SKEW,
        0,
        3600,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::UNIT_S,
    );
    pgrx::GucRegistry::define_int_guc(
        c"toolgate.max_token_lifetime",
        c"Longest life of an identity or confirmation token pg_toolgate accepts.",
        c"A token whose exp lies further ahead, or further after its iat, is refused (identity_invalid, confirmation_invalid).",
        &MAX_TOKEN_LIFETIME,
        60,
        i32::MAX,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::UNIT_S,
    );
    pgrx::GucRegistry::define_int_guc(
        c"toolgate.min_retention",
        c"The shortest time the audit may be kept: set_retention refuses less, purge removes nothing younger.",
        c"A legal minimum (say 1825d); 0: none.",
        &MIN_RETENTION,
        0,
        i32::MAX,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::UNIT_S,
    );
    pgrx::GucRegistry::define_bool_guc(
        c"toolgate.outbox_notify",
        c"An outbox call notifies toolgate_outbox as it enqueues, waking the dispatchers that listen.",
        c"Off: no notification; the dispatchers find new intents at their next poll.",
        &OUTBOX_NOTIFY,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::default(),
    );
    pgrx::GucRegistry::define_bool_guc(
        c"toolgate.log_calls",
        c"Write pg_toolgate's LOG line for every call, not only for denials.",
        c"Off: only denials leave a line in the server log (a rolled-back call leaves no audit row).",
        &LOG_CALLS,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::default(),
    );
}

mod audit;
mod config;
mod context;
mod entry;
mod erasure;
mod error;
mod gate;
mod jsonb;
mod seal;
mod spi;
mod subxact;
mod xactlock;

extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!(
    "../sql/api.sql",
    name = "api",
    requires = [
        "bootstrap",
        gate_explain,
        parse_public_key,
        check_jwks,
        check_tool_schema,
        check_locale,
        caller,
        signal_config_change
    ]
);
extension_sql_file!(
    "../sql/registry.sql",
    name = "registry",
    requires = ["api", check_consent_template, check_tool_name, current_tenant, current_actor, current_conversation]
);
extension_sql_file!("../sql/outbox.sql", name = "outbox", requires = ["registry"]);
extension_sql_file!("../sql/limits.sql", name = "limits", requires = ["outbox"]);
extension_sql_file!("../sql/approvals.sql", name = "approvals", requires = ["limits"]);
extension_sql_file!(
    "../sql/seal.sql",
    name = "seal",
    requires = [
        "approvals",
        seal_new_seed,
        seal_public_key,
        seal_signature,
        seal_signature_valid,
        seal_lock,
        wait_for_writers
    ]
);
extension_sql_file!("../sql/erasure.sql", name = "erasure", requires = ["seal", pseudonym, audited_target]);
extension_sql_file!("../sql/views.sql", name = "views", requires = ["erasure"]);
extension_sql_file!("../sql/hardening.sql", name = "hardening", requires = ["views"]);
extension_sql_file!("../sql/report.sql", name = "report", requires = ["hardening"]);
extension_sql_file!("../sql/citus.sql", name = "citus", requires = ["report", node_audit_id]);
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use toolgate_core::token::Signer;

    /// A tenant with an identity key, a tool `mark_done` bound to a table of a role of its own, and
    /// a tier-0 policy for it; returns a supervisor's token.
    fn tenant_with_tier0_policy() -> String {
        let idp = Signer::from_seed("idp-pgtest", [5; 32]);
        Spi::run(
            "CREATE ROLE pgtest_owner NOLOGIN; CREATE SCHEMA pgtest_erp AUTHORIZATION pgtest_owner; \
             CREATE TABLE pgtest_erp.items (tenant_id text, id text, state text, PRIMARY KEY (tenant_id, id)); \
             ALTER TABLE pgtest_erp.items OWNER TO pgtest_owner; \
             INSERT INTO pgtest_erp.items VALUES ('pgtest', '1', 'open'); \
             CREATE FUNCTION pgtest_erp.item(ctx jsonb, args jsonb) RETURNS jsonb LANGUAGE sql SECURITY DEFINER \
               SET search_path = pg_catalog, pg_temp AS $$ SELECT jsonb_build_object('id', id, 'tenant', tenant_id, \
               'state', state) FROM pgtest_erp.items WHERE tenant_id = ctx->>'tenant' AND id = args->>'id' \
               FOR UPDATE $$; \
             CREATE FUNCTION pgtest_erp.done(ctx jsonb, args jsonb) RETURNS jsonb LANGUAGE sql SECURITY DEFINER \
               SET search_path = pg_catalog, pg_temp AS $$ UPDATE pgtest_erp.items SET state = 'done' \
               WHERE tenant_id = ctx->>'tenant' AND id = args->>'id' AND state = 'open' \
               RETURNING jsonb_build_object('id', id, 'state', state) $$; \
             ALTER FUNCTION pgtest_erp.item(jsonb, jsonb) OWNER TO pgtest_owner; \
             ALTER FUNCTION pgtest_erp.done(jsonb, jsonb) OWNER TO pgtest_owner; \
             REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgtest_erp FROM PUBLIC",
        )
        .unwrap();
        Spi::run(
            r#"SELECT toolgate.define_tool('mark_done', 'Mark an item done.', '{
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "additionalProperties": false, "required": ["id", "reason", "idempotency_key"],
                "properties": {"id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
                               "reason": {"type": "string", "minLength": 8, "maxLength": 120},
                               "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}}}',
                false, 'pgtest_erp.item(jsonb, jsonb)', 'pgtest_erp.done(jsonb, jsonb)',
                target_states => ARRAY['open'])"#,
        )
        .unwrap();
        Spi::run("SELECT toolgate.add_tenant('pgtest', 'pg_test tenant')").unwrap();
        Spi::run_with_args(
            "SELECT toolgate.add_key('pgtest', 'idp-pgtest', 'identity', $1)",
            &[idp.public_key().into()],
        )
        .unwrap();
        Spi::run("SELECT toolgate.set_policy('pgtest', 'mark_done', true, ARRAY['supervisor'], 0)").unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        idp.sign(&json!({"sub": "u1", "tenant": "pgtest", "role": "supervisor", "exp": now + 600}))
    }

    fn call(token: &str, args: &str) -> serde_json::Value {
        Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT toolgate.call($1, 'conv', 'mark_done', $2::jsonb)",
            &[token.into(), args.into()],
        )
        .unwrap()
        .unwrap()
        .0
    }

    /// A reply's times (a proposal's `expires_at`) are written by the gate (`spi::iso_utc`), to
    /// the byte what `toolgate.iso_utc` writes, whatever the session's time zone: 801 times 37
    /// days and some microseconds apart around 2000, and the edges (a leap day, the last
    /// microsecond of a millisecond, the epoch, a year before Christ, the last year).
    #[pg_test]
    fn a_reply_writes_a_time_as_iso_utc_does() {
        Spi::run("SET LOCAL timezone = 'America/Sao_Paulo'").unwrap();
        let pairs = crate::spi::query(
            "SELECT t, toolgate.iso_utc(t) FROM (SELECT timestamptz '2000-01-01 00:00:00+00' \
               + n * interval '37 days 03:07:11.123457' AS t FROM generate_series(-400, 400) n \
             UNION ALL VALUES (timestamptz '2024-02-29 23:59:59.999999+00'), ('1970-01-01 00:00:00+00'), \
               ('2000-01-01 00:00:00.000999+00'), ('1999-12-31 23:59:59.999999-03'), \
               ('0044-03-15 12:00:00.5+00 BC'), ('9999-12-31 23:59:59.999+00')) s",
            &[],
            |r| Ok((crate::spi::iso_utc(r, 1)?, crate::spi::col::<String>(r, 2)?)),
        );
        assert_eq!(pairs.len(), 807);
        for (ours, sql) in pairs {
            assert_eq!(ours, sql);
        }
    }

    #[pg_test]
    fn extension_installs_its_roles() {
        let n = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_roles WHERE rolname IN \
             ('toolgate_admin', 'toolgate_operator', 'toolgate_agent', 'toolgate_auditor', 'toolgate_dispatcher', \
             'toolgate_approver')",
        );
        assert_eq!(n, Ok(Some(6)));
    }

    #[pg_test(error = "invalid public key: public key must be base64url (JWK x) or PEM")]
    fn add_key_refuses_what_is_not_a_public_key() {
        Spi::run("SELECT toolgate.parse_public_key('not a key!')").unwrap();
    }

    #[pg_test(
        error = "invalid tool schema: schema does not compile: Resource 'https://example.com/s.json' is not present in a registry and retrieving it failed: `resolve-http` feature or a custom resolver is required to resolve external schemas via HTTP"
    )]
    fn tool_schemas_never_fetch_remote_refs() {
        Spi::run(r#"SELECT toolgate.check_tool_schema('{"$ref": "https://example.com/s.json"}')"#).unwrap();
    }

    #[pg_test]
    fn a_tier0_call_writes_effect_ledger_and_audit_in_its_transaction() {
        let token = tenant_with_tier0_policy();
        let reply = call(&token, r#"{"id": "1", "reason": "Inspeção validada", "idempotency_key": "pgtest-1-a"}"#);
        assert_eq!(reply["outcome"], "SUCCEEDED", "{reply}");
        assert_eq!(
            Spi::get_one::<String>("SELECT state FROM pgtest_erp.items WHERE tenant_id = 'pgtest'"),
            Ok(Some("done".into()))
        );
        assert_eq!(
            Spi::get_one::<String>("SELECT state FROM toolgate.ledger WHERE tenant_id = 'pgtest'"),
            Ok(Some("settled".into()))
        );
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM toolgate.audit WHERE tenant_id = 'pgtest'"), Ok(Some(1)));
    }

    #[pg_test]
    fn a_new_schema_version_is_enforced_and_audited() {
        let token = tenant_with_tier0_policy();
        let version = Spi::get_one::<i32>(
            r#"SELECT toolgate.set_tool_schema('mark_done', '{
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "additionalProperties": false, "required": ["id", "reason", "idempotency_key"],
                "properties": {"id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
                               "reason": {"type": "string", "minLength": 30, "maxLength": 120},
                               "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}}}')"#,
        );
        assert_eq!(version, Ok(Some(2)));
        let reply = call(&token, r#"{"id": "1", "reason": "Inspeção validada", "idempotency_key": "pgtest-1-b"}"#);
        assert_eq!(reply["rule"], "schema_invalid");
        assert_eq!(reply["errors"][0]["instancePath"], "/reason");
        assert_eq!(
            Spi::get_one::<i32>("SELECT schema_version FROM toolgate.audit WHERE tenant_id = 'pgtest'"),
            Ok(Some(2))
        );
    }

    /// The bytes of a jsonb datum, detoasted.
    fn jsonb_bytes(datum: pg_sys::Datum) -> Vec<u8> {
        unsafe {
            let flat = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<u8>();
            std::slice::from_raw_parts(flat, pgrx::varlena::varsize(flat.cast())).to_vec()
        }
    }

    /// `v` made by `jsonb::datum` is byte for byte the jsonb `jsonb_in` makes of its text, and
    /// `jsonb::value` reads it back to an equal value.
    fn assert_made_as_jsonb_in_makes(v: &serde_json::Value) {
        let made = crate::jsonb::datum(v);
        let text = std::ffi::CString::new(v.to_string()).unwrap();
        let parsed =
            unsafe { pgrx::direct_function_call_as_datum(pg_sys::jsonb_in, &[text.as_c_str().into_datum()]).unwrap() };
        assert_eq!(jsonb_bytes(made), jsonb_bytes(parsed), "{v}");
        let back = unsafe { crate::jsonb::value(made) };
        assert_eq!(jsonb_bytes(crate::jsonb::datum(&back)), jsonb_bytes(parsed), "{v} read back as {back}");
    }

    /// Tricky values: numbers jsonb keeps exactly, escapes, every kind of container, scalars at the
    /// top, more than 32 children (every 32nd entry holds an offset), strings long and short.
    #[pg_test]
    fn jsonb_made_without_text_is_the_one_jsonb_in_makes() {
        let number = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
        let many: serde_json::Map<String, serde_json::Value> =
            (0..70i64).map(|i| ("k".repeat((i % 7) as usize) + &i.to_string(), json!(i * 1000 - 7))).collect();
        let values = [
            json!({}),
            json!([]),
            json!(null),
            json!(true),
            json!("plain"),
            json!("ã \"quoted\" \\ \u{1F600} \n"),
            json!(0),
            json!(-12.5),
            number("1e400"),
            number("-0.000000000000000000000000000001"),
            number("12345678901234567890.123456789012345678901234567890"),
            json!([
                0,
                -0,
                1,
                -1,
                9999,
                10000,
                10001,
                15300,
                2_000_000_000,
                -1_999_984_700,
                i64::MAX,
                i64::MIN,
                u64::MAX
            ]),
            number("[-0, 100000000, 1e3, 1.0, 120.00]"),
            json!({"b": 1, "a": [1, "x", {"cc": null, "c": false}], "longer key": {}, "": ""}),
            json!([[], {}, [[1]], "s", {"k": [true, null]}]),
            serde_json::Value::Object(many.clone()),
            json!([many, (0..40).collect::<Vec<i32>>(), "x".repeat(5000), ["a", 1, "bc", 2.5, "def", {"g": 3}]]),
        ];
        for v in &values {
            assert_made_as_jsonb_in_makes(v);
        }
    }

    /// 2000 values from a seeded generator: nested arrays and objects of strings of every length
    /// modulo 4, numbers, booleans and nulls, each byte for byte what `jsonb_in` makes.
    #[pg_test]
    fn jsonb_made_without_text_matches_jsonb_in_on_generated_values() {
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        fn gen(next: &mut dyn FnMut(u64) -> u64, depth: u32) -> serde_json::Value {
            let pick = if depth >= 4 { next(5) } else { next(7) };
            match pick {
                0 => serde_json::Value::Null,
                1 => json!(next(2) == 1),
                2 => json!(next(100_000) as i64 - 50_000),
                3 => serde_json::from_str(&format!("{}.{}e{}", next(1000), next(100), next(20) as i64 - 10)).unwrap(),
                4 => json!("é".repeat(next(3) as usize) + &"ab".repeat(next(9) as usize)),
                5 => serde_json::Value::Array((0..next(40)).map(|_| gen(next, depth + 1)).collect()),
                _ => serde_json::Value::Object(
                    (0..next(40))
                        .map(|i| (format!("{}{i}", "k".repeat(next(5) as usize)), gen(next, depth + 1)))
                        .collect(),
                ),
            }
        }
        for _ in 0..2000 {
            assert_made_as_jsonb_in_makes(&gen(&mut next, 0));
        }
    }

    /// A string no jsonb can hold goes through `jsonb_in`, which refuses it as it always did.
    #[pg_test(error = "unsupported Unicode escape sequence")]
    fn jsonb_of_a_nul_is_refused_by_jsonb_in() {
        crate::jsonb::datum(&json!({"k": "a\u{0}b"}));
    }

    #[pg_test]
    fn caller_inside_security_definer_is_the_role_set_role_left() {
        Spi::run(
            "CREATE FUNCTION public.who() RETURNS text LANGUAGE sql SECURITY DEFINER \
             AS 'SELECT toolgate.caller()'; GRANT EXECUTE ON FUNCTION public.who() TO toolgate_operator",
        )
        .unwrap();
        Spi::run("SET LOCAL ROLE toolgate_operator").unwrap();
        assert_eq!(Spi::get_one::<String>("SELECT public.who()"), Ok(Some("toolgate_operator".into())));
        assert_eq!(Spi::get_one::<String>("SELECT current_user::text"), Ok(Some("toolgate_operator".into())));
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
