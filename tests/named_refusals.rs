//! Refusals a bound function can name: a target, value or effect function may answer
//! `{"refused": RULE}` for the ERP's own verdicts (`target_not_found`, `state_not_allowed`,
//! `value_over_limit`, `budget_exceeded`) instead of NULL, which could only ever say
//! `target_not_found` (a target) or `state_not_allowed` (an effect). The call's outcome is that
//! rule, and nothing the function wrote stays. Any other word, or a refusal with more beside it,
//! is a misconfiguration: a function cannot speak for the gate's other steps.

mod common;

use common::*;
use serde_json::{json, Value};
use toolgate_cli::fixture::APP;

const TOOL: &str = "careful_write";

/// A tool whose functions refuse as the arguments say: `at` names the function, `rule` the word.
/// The effect writes its row before it refuses, to show the row does not stay.
async fn setup(name: &str) -> (toolgate_cli::fixture::Lab, tokio_postgres::Client, tokio_postgres::Client) {
    let lab = lab(name).await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE it_careful_owner NOLOGIN; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
         CREATE SCHEMA careful AUTHORIZATION it_careful_owner;
         SET ROLE it_careful_owner;
         CREATE TABLE careful.writes (tenant_id text, id text, key text);
         CREATE FUNCTION careful.refusing(fn text, args jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $f$
             SELECT CASE WHEN args->>'at' = fn THEN
                 CASE WHEN args ? 'extra' THEN jsonb_build_object('refused', args->>'rule', 'why', 'more')
                      ELSE jsonb_build_object('refused', args->>'rule') END END
         $f$;
         CREATE FUNCTION careful.target(ctx jsonb, args jsonb) RETURNS jsonb
         LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, careful, pg_temp AS $f$
             SELECT coalesce(careful.refusing('target', args),
                             jsonb_build_object('id', args->>'id', 'tenant', ctx->>'tenant', 'state', 'open'))
         $f$;
         CREATE FUNCTION careful.value(ctx jsonb, args jsonb) RETURNS jsonb
         LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, careful, pg_temp AS $f$
             SELECT coalesce(careful.refusing('value', args), '{{\"amount\": 10}}'::jsonb)
         $f$;
         CREATE FUNCTION careful.effect(ctx jsonb, args jsonb) RETURNS jsonb
         LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, careful, pg_temp AS $f$
         BEGIN
             INSERT INTO careful.writes VALUES (ctx->>'tenant', args->>'id', ctx->>'idempotency_key');
             RETURN coalesce(careful.refusing('effect', args), '{{\"done\": true}}'::jsonb);
         END
         $f$;
         REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA careful FROM PUBLIC;
         RESET ROLE;
         SET client_min_messages = warning;
         SELECT toolgate.define_tool('{TOOL}', 'A write whose functions refuse on demand.',
             '{{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"id\", \"idempotency_key\"],
               \"properties\": {{\"id\": {{\"type\": \"string\"}}, \"at\": {{\"type\": \"string\"}},
                                \"rule\": {{\"type\": \"string\"}}, \"extra\": {{\"type\": \"boolean\"}},
                                \"idempotency_key\": {{\"type\": \"string\", \"minLength\": 8}}}}}}',
             false, 'careful.target(jsonb, jsonb)', 'careful.effect(jsonb, jsonb)',
             value => 'careful.value(jsonb, jsonb)');
         SELECT toolgate.set_policy('shopping-a', '{TOOL}', allowed => true, roles => ARRAY['supervisor'], tier => 0,
                                    max_value => 100);"
    ))
    .await
    .unwrap();
    let app = lab.connect(APP).await.unwrap();
    (lab, root, app)
}

async fn call(lab: &toolgate_cli::fixture::Lab, app: &tokio_postgres::Client, args: Value) -> Value {
    toolgate_cli::db::json(
        app,
        "SELECT toolgate.call($1, 'conv-careful', $2, $3)",
        &[&lab.supervisor_a(), &TOOL, &args],
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn each_function_names_the_erps_own_refusals_and_keeps_nothing() {
    let (lab, root, app) = setup("named_refusals").await;
    let cases = [
        ("target", "state_not_allowed"),
        ("target", "target_not_found"),
        ("value", "budget_exceeded"),
        ("value", "value_over_limit"),
        ("effect", "budget_exceeded"),
        ("effect", "state_not_allowed"),
        ("effect", "target_not_found"),
    ];
    for (i, (at, rule)) in cases.iter().enumerate() {
        let args =
            json!({"id": format!("r{i}"), "at": at, "rule": rule, "idempotency_key": format!("refused-key-{i}")});
        let reply = call(&lab, &app, args).await;
        assert_eq!(outcome(&reply), ("BLOCKED", *rule), "{at}: {reply}");
        let detail: Value = root
            .query_one("SELECT detail FROM toolgate.audit ORDER BY audit_id DESC LIMIT 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(detail["function"], *at, "{detail}");
        assert_eq!(detail["reason"], "refused_by_function", "{detail}");
    }
    assert_eq!(count(&root, "SELECT count(*) FROM careful.writes").await, 0, "nothing an effect wrote stays");
    // Without a refusal the same tool applies.
    let reply = call(&lab, &app, json!({"id": "ok", "idempotency_key": "refused-key-ok"})).await;
    assert_eq!(outcome(&reply), ("SUCCEEDED", "-"), "{reply}");
    assert_eq!(count(&root, "SELECT count(*) FROM careful.writes").await, 1);
}

#[tokio::test]
async fn a_function_cannot_speak_for_the_gates_other_steps() {
    let (lab, root, app) = setup("named_refusals_closed").await;
    let cases = [
        ("target", "identity_invalid", false, "tool_misconfigured"),
        ("value", "rate_over_limit", false, "tool_misconfigured"),
        ("effect", "human_declined", false, "effect_failed"),
        ("effect", "tool_not_allowed", false, "effect_failed"),
        ("effect", "budget_exceeded", true, "effect_failed"),
        ("target", "state_not_allowed", true, "tool_misconfigured"),
    ];
    for (i, (at, rule, extra, expected)) in cases.iter().enumerate() {
        let mut args =
            json!({"id": format!("c{i}"), "at": at, "rule": rule, "idempotency_key": format!("closed-key-{i}")});
        if *extra {
            args["extra"] = json!(true);
        }
        let reply = call(&lab, &app, args).await;
        assert_eq!(outcome(&reply), ("BLOCKED", *expected), "{at} {rule} extra={extra}: {reply}");
    }
    assert_eq!(count(&root, "SELECT count(*) FROM careful.writes").await, 0);
}
