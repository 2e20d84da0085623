-- Outbox tools (issue 24, first slice): a write tool whose effect goes to an ERP behind an HTTP
-- API. Steps 1-7 are any tool's; at step 8 the DBA's request function builds the HTTP request and
-- the gate writes the intent to toolgate.outbox in the call's transaction, answering PENDING
-- (no error). A retry with the same key replays PENDING and enqueues nothing; a tier-1 tool
-- enqueues at confirm, with the proposal's id; the kill switch blocks with nothing queued; a
-- request function that raises or answers out of shape is effect_failed with nothing written;
-- unsafe functions and bad endpoints are refused at definition; a function changed later fails
-- closed; the request function is part of what a person consented to. The endpoints keep no
-- secret; the outbox and the endpoints are read by administrators only.
\set VERBOSITY terse
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE remote_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
CREATE SCHEMA remote AUTHORIZATION remote_owner;
-- The DBA lets the owner of their request functions encode arguments into a path.
GRANT USAGE ON SCHEMA toolgate TO remote_owner;
GRANT EXECUTE ON FUNCTION toolgate.path_segment(text) TO remote_owner;
SET ROLE remote_owner;
CREATE TABLE remote.orders (tenant_id text, id text, state text, PRIMARY KEY (tenant_id, id));
CREATE TABLE remote.log (tenant_id text, id text, note text);
CREATE FUNCTION remote.target(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$
    SELECT jsonb_build_object('id', o.id, 'tenant', o.tenant_id, 'state', o.state)
      FROM remote.orders o WHERE o.tenant_id = ctx->>'tenant' AND o.id = args->>'order_id' FOR UPDATE
$$;
CREATE FUNCTION remote.value(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$
    SELECT jsonb_build_object('amount', 12.5 * (args->>'quantity')::int, 'account', 'cc-1', 'available', 1000)
$$;
CREATE FUNCTION remote.request(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$
BEGIN
    INSERT INTO remote.log VALUES (ctx->>'tenant', args->>'order_id', 'request ' || (args->>'mode'));
    CASE args->>'mode'
    WHEN 'raises' THEN RAISE EXCEPTION 'no request for %', args->>'order_id' USING ERRCODE = 'P0001';
    WHEN 'null' THEN RETURN NULL;
    WHEN 'array' THEN RETURN '[1]'::jsonb;
    WHEN 'method' THEN RETURN '{"method": "TRACE", "path": "/x"}'::jsonb;
    WHEN 'no_slash' THEN RETURN '{"method": "POST", "path": "x"}'::jsonb;
    WHEN 'other_host' THEN RETURN '{"method": "POST", "path": "//evil.example/x"}'::jsonb;
    WHEN 'space' THEN RETURN '{"method": "POST", "path": "/x y"}'::jsonb;
    WHEN 'fragment' THEN RETURN '{"method": "POST", "path": "/x#y"}'::jsonb;
    WHEN 'long' THEN RETURN jsonb_build_object('method', 'POST', 'path', '/' || repeat('x', 2048));
    WHEN 'longest' THEN RETURN jsonb_build_object('method', 'PUT', 'path', '/' || repeat('x', 2047));
    WHEN 'headers' THEN RETURN '{"method": "POST", "path": "/x", "headers": {"Authorization": "x"}}'::jsonb;
    WHEN 'no_body' THEN RETURN '{"method": "DELETE", "path": "/purchases/1"}'::jsonb;
    -- Out of the endpoint's base path (T5 of the third security review), raw or encoded, and an
    -- argument the helper refuses to make a segment of.
    WHEN 'dots' THEN RETURN '{"method": "GET", "path": "/orders/../../admin"}'::jsonb;
    WHEN 'encoded_dots' THEN RETURN '{"method": "GET", "path": "/orders/%2E%2e%2Fadmin"}'::jsonb;
    WHEN 'segment' THEN RETURN jsonb_build_object('method', 'GET', 'path', '/orders/' || toolgate.path_segment(args->>'part'));
    ELSE
        RETURN jsonb_build_object('method', 'POST', 'path', '/purchases',
                                  'body', jsonb_build_object('order', ctx->'target'->>'id', 'part', args->>'part',
                                                             'quantity', (args->>'quantity')::int,
                                                             'amount', ctx->'value'->'amount',
                                                             'proposal', ctx->>'proposal_id'));
    END CASE;
END $$;
CREATE FUNCTION remote.finish(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$
    UPDATE remote.orders SET state = 'parts_ordered' WHERE tenant_id = ctx->>'tenant' AND id = args->>'order_id'
    RETURNING jsonb_build_object('id', id, 'state', state)
$$;
-- Unsafe on purpose: SECURITY INVOKER, and one PUBLIC may execute.
CREATE FUNCTION remote.invoker(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = pg_catalog, remote, pg_temp AS $$ SELECT '{}'::jsonb $$;
CREATE FUNCTION remote.public_request(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$ SELECT '{}'::jsonb $$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA remote FROM PUBLIC;
GRANT EXECUTE ON FUNCTION remote.public_request(jsonb, jsonb) TO PUBLIC;
RESET ROLE;
INSERT INTO remote.orders VALUES ('shopping-a', '900', 'open'), ('shopping-a', '901', 'open'),
                                 ('shopping-a', '902', 'closed'), ('shopping-b', '900', 'open');
RESET client_min_messages;

-- Endpoints: an administrator's, no credentials in the URL, known auth kinds, positive limits.
SET ROLE toolgate_admin;
SELECT toolgate.add_erp_endpoint('fake_erp', 'http://127.0.0.1:8099/api', 'refresh_token', 5, 100);
SELECT toolgate.add_erp_endpoint('leaky', 'https://user:secret@erp.example/api', 'bearer');
SELECT toolgate.add_erp_endpoint('queried', 'https://erp.example/api?token=x', 'bearer');
SELECT toolgate.add_erp_endpoint('ftp', 'ftp://erp.example/', 'none');
SELECT toolgate.add_erp_endpoint('Bad Name', 'https://erp.example/', 'none');
SELECT toolgate.add_erp_endpoint('odd', 'https://erp.example/', 'basic');
SELECT toolgate.add_erp_endpoint('zero', 'https://erp.example/', 'none', 0);
SELECT toolgate.add_erp_endpoint('zero', 'https://erp.example/', 'none', NULL, -1);
-- Changed in place.
SELECT toolgate.add_erp_endpoint('fake_erp', 'http://127.0.0.1:8099/api', 'refresh_token', 10, 300);
SELECT name, base_url, auth_kind, per_second, per_minute FROM toolgate.erp_endpoints ORDER BY name;
RESET ROLE;
-- Only the roles toolgate.administrators lists change them: toolgate_admin, taken off the list
-- of this database, is refused.
SELECT toolgate.remove_administrator('toolgate_admin');
SET ROLE toolgate_admin;
SELECT toolgate.add_erp_endpoint('fake_erp', 'http://127.0.0.1:8099/api', 'none');
RESET ROLE;
SELECT toolgate.add_administrator('toolgate_admin');
-- The agent reads neither table and may call neither function.
SET ROLE toolgate_agent;
SELECT count(*) FROM toolgate.erp_endpoints;
SELECT count(*) FROM toolgate.outbox;
SELECT toolgate.add_erp_endpoint('mine', 'https://erp.example/', 'none');
RESET ROLE;
SELECT has_table_privilege('toolgate_auditor', 'toolgate.outbox', 'SELECT') AS auditor_reads_outbox,
       has_table_privilege('toolgate_admin', 'toolgate.outbox', 'SELECT') AS admin_reads_outbox,
       has_table_privilege('toolgate_admin', 'toolgate.outbox', 'INSERT') AS admin_writes_outbox;

-- Definition: the request and finish functions are checked as every bound function is.
\set schema '{"type": "object", "additionalProperties": false, "required": ["order_id", "part", "quantity", "mode", "idempotency_key"], "properties": {"order_id": {"type": "string"}, "part": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1, "maximum": 50}, "mode": {"type": "string"}, "idempotency_key": {"type": "string", "minLength": 8}}}'
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.invoker(jsonb, jsonb)', 'fake_erp');
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.public_request(jsonb, jsonb)', 'fake_erp');
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp',
                                   finish => 'remote.invoker(jsonb, jsonb)');
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'nowhere');
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', NULL, 'fake_erp');
SELECT toolgate.define_outbox_tool('read_order', 'Not a write tool.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp');
SELECT count(*) AS nothing_kept FROM toolgate.tools WHERE tool = 'remote_order';
-- The definer must be able to execute what it binds: here the target, not the request.
DO $$ BEGIN CREATE ROLE outsider NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT toolgate_admin TO outsider;
GRANT USAGE ON SCHEMA remote TO outsider;
GRANT EXECUTE ON FUNCTION remote.target(jsonb, jsonb) TO outsider;
SET ROLE outsider;
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp');
RESET ROLE;
REVOKE toolgate_admin FROM outsider;
REVOKE USAGE ON SCHEMA remote FROM outsider;
REVOKE EXECUTE ON FUNCTION remote.target(jsonb, jsonb) FROM outsider;
DROP ROLE outsider;
SET client_min_messages = warning;
SELECT toolgate.define_outbox_tool('remote_order', 'Order a part from the ERP.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp',
                                   finish => 'remote.finish(jsonb, jsonb)', target_states => ARRAY['open']);
SELECT toolgate.define_outbox_tool('remote_order_t1', 'Order a part from the ERP, confirmed.', :'schema', false,
                                   'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp',
                                   value => 'remote.value(jsonb, jsonb)', target_states => ARRAY['open']);
SELECT toolgate.set_policy('shopping-a', 'remote_order', allowed => true, roles => ARRAY['supervisor'], tier => 0);
SELECT toolgate.set_policy('shopping-a', 'remote_order_t1', allowed => true, roles => ARRAY['supervisor'], tier => 1);
RESET client_min_messages;
SELECT tool, kind, effect, request, finish, endpoint FROM toolgate.tool_bindings
 WHERE tool LIKE 'remote_order%' ORDER BY tool;
SELECT tool, version, new->>'request' AS request, new->>'endpoint' AS endpoint FROM toolgate.tool_history
 WHERE tool LIKE 'remote_order%' ORDER BY history_id;
-- define_tool does not turn an outbox tool into another kind.
SELECT toolgate.define_tool('remote_order', 'Order a part here.', :'schema', false,
                            'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)');
-- The table holds an outbox tool to one shape: a request and an endpoint, and no effect.
UPDATE toolgate.tool_bindings SET effect = request WHERE tool = 'remote_order';
UPDATE toolgate.tool_bindings SET endpoint = NULL WHERE tool = 'remote_order';
UPDATE toolgate.tool_bindings SET request = NULL, endpoint = NULL WHERE tool = 'remote_order';

-- Tier 0: PENDING at once, no error, the intent written once with the request the DBA's
-- function built.
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->>'replayed' AS replayed, r->'result' AS result,
       r->'content'->0->>'text' AS text
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-1"}') r;
-- The same key again: the ledger's reply, replayed, and nothing enqueued again.
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->>'replayed' AS replayed
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-1"}') r;
-- Other arguments under that key are refused, as for any tool.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 3, "mode": "ok", "idempotency_key": "remote-key-1"}') r;
-- Steps 1-7 are any tool's: another tenant's order, a closed order.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "902", "part": "filter", "quantity": 1, "mode": "ok", "idempotency_key": "remote-key-closed"}') r;
RESET ROLE;
SELECT tenant_id, tool, idempotency_key, args, target, value, proposal_id, request, endpoint, state, attempts
  FROM toolgate.outbox ORDER BY created_at;
SELECT state, reply->>'outcome' AS reply FROM toolgate.ledger WHERE idempotency_key = 'remote-key-1';
-- Nothing of the ERP changed: the finish is the dispatcher's, later.
SELECT id, state FROM remote.orders WHERE tenant_id = 'shopping-a' ORDER BY id;

-- Tier 1: a proposal, no intent yet; the person's yes enqueues it with the proposal's id.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'sup', 'remote-c2', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 4, "mode": "ok", "idempotency_key": "remote-key-2"}') r \gset
SELECT :'outcome' AS outcome;
SELECT count(*) AS queued_before_consent FROM toolgate.call(:'sup', 'remote-c2', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 4, "mode": "ok", "idempotency_key": "remote-key-2"}') r
 WHERE r->>'outcome' = 'NEEDS_CONFIRMATION';
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->>'replayed' AS replayed, r->'result'->>'state' AS state
  FROM toolgate.confirm(:'sup', :'yes') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.confirm(:'sup', :'yes') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed
  FROM toolgate.call(:'sup', 'remote-c2', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 4, "mode": "ok", "idempotency_key": "remote-key-2"}') r;
RESET ROLE;
SELECT idempotency_key, proposal_id = :'pid'::uuid AS the_proposal, value->'amount' AS amount,
       request->'body'->>'proposal' = :'pid' AS request_saw_proposal, request->'body'->'amount' AS request_amount
  FROM toolgate.outbox WHERE tool = 'remote_order_t1';
SELECT status FROM toolgate.proposals WHERE proposal_id = :'pid'::uuid;

-- The kill switch: blocked as any write, nothing queued; and a switch turned off between the
-- proposal and the yes stops the confirmation too.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'sup', 'remote-c3', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 1, "mode": "ok", "idempotency_key": "remote-key-3"}') r \gset
RESET ROLE;
SELECT toolgate.set_writes_enabled(false, 'remote_order');
SELECT toolgate.set_writes_enabled(false, 'remote_order_t1');
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'remote-c4', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 1, "mode": "ok", "idempotency_key": "remote-key-4"}') r;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT toolgate.set_writes_enabled(true, 'remote_order');
SELECT toolgate.set_writes_enabled(true, 'remote_order_t1');
SELECT count(*) AS queued_while_off FROM toolgate.outbox WHERE idempotency_key IN ('remote-key-3', 'remote-key-4');

-- A request function that raises, or answers out of shape: BLOCKED effect_failed (its SQLSTATE
-- audited, never its message), nothing written (not its own row, not an intent), the key free.
SET ROLE toolgate_agent;
SELECT mode, r->>'outcome' AS outcome, r->>'isError' AS is_error, coalesce(r->>'rule', '-') AS rule
  FROM unnest(ARRAY['raises', 'null', 'array', 'method', 'no_slash', 'other_host', 'space', 'fragment', 'long', 'headers',
                    'no_body', 'longest', 'dots', 'encoded_dots', 'segment'])
       WITH ORDINALITY AS m(mode, i),
       toolgate.call(:'sup', 'remote-f' || i, 'remote_order',
                     jsonb_build_object('order_id', '900', 'part', CASE mode WHEN 'segment' THEN '../admin' ELSE 'filter' END,
                                        'quantity', 1, 'mode', mode, 'idempotency_key', 'remote-bad-' || mode)) r
 ORDER BY i;
RESET ROLE;
SELECT conversation_id, outcome, rule, detail->'function' AS function, detail->'reason' AS reason,
       detail->'sqlstate' AS sqlstate
  FROM toolgate.audit WHERE conversation_id LIKE 'remote-f%' ORDER BY audit_id;
SELECT note FROM remote.log ORDER BY note;
SELECT idempotency_key, state FROM toolgate.ledger WHERE idempotency_key LIKE 'remote-bad-%' ORDER BY 1;
SELECT idempotency_key, request->>'method' AS method, length(request->>'path') AS path_length, request->'body' AS body
  FROM toolgate.outbox WHERE idempotency_key LIKE 'remote-bad-%' ORDER BY 1;

-- A request or finish function changed after its definition fails closed, at the next call.
ALTER FUNCTION remote.request(jsonb, jsonb) SECURITY INVOKER;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'remote-x1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 1, "mode": "ok", "idempotency_key": "remote-key-x1"}') r;
RESET ROLE;
ALTER FUNCTION remote.request(jsonb, jsonb) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION remote.finish(jsonb, jsonb) TO PUBLIC;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'remote-x2', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 1, "mode": "ok", "idempotency_key": "remote-key-x2"}') r;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION remote.finish(jsonb, jsonb) FROM PUBLIC;
SELECT conversation_id, detail->>'reason' AS reason FROM toolgate.audit
 WHERE conversation_id IN ('remote-x1', 'remote-x2') ORDER BY audit_id;

-- The request function is part of what the person consented to: changed between the proposal
-- and the yes, the confirmation is refused and nothing is queued.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'sup', 'remote-c5', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-5"}') r \gset
RESET ROLE;
SET ROLE remote_owner;
CREATE OR REPLACE FUNCTION remote.request(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $$
    SELECT '{"method": "POST", "path": "/purchases", "body": {"quantity": 500}}'::jsonb
$$;
RESET ROLE;
SET ROLE toolgate_agent;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT detail->>'reason' AS reason FROM toolgate.audit WHERE conversation_id = 'remote-c5' AND kind = 'confirm';
SELECT count(*) AS queued FROM toolgate.outbox WHERE idempotency_key = 'remote-key-5';

-- The audit says PENDING (replays marked); the panel counts the intents not yet delivered; an
-- intent is not an effect the gate made (the ERP has done nothing yet).
SELECT kind, conversation_id, outcome, replayed, rule FROM toolgate.audit
 WHERE tool LIKE 'remote_order%' AND outcome = 'PENDING'
 ORDER BY audit_id;
SET ROLE toolgate_auditor;
SELECT tenant_id, pending FROM toolgate.panel WHERE tenant_id = 'shopping-a';
SELECT count(*) AS remote_effects FROM toolgate.effects WHERE tool LIKE 'remote_order%';
RESET ROLE;
-- The audit takes the new words, and no other.
SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contypid = 'toolgate.outcome'::regtype;

-- Moving an endpoint (T1 of the third security review). add_erp_endpoint does not move one, a
-- link-local host (where cloud metadata services answer) is refused, and repoint_erp_endpoint is
-- the owner's until the DBA grants it to a role of their choosing.
SET ROLE toolgate_admin;
SELECT toolgate.add_erp_endpoint('fake_erp', 'http://erp.attacker.example/api', 'refresh_token', 10, 300);
SELECT toolgate.add_erp_endpoint('metadata', 'http://169.254.169.254/latest', 'none');
SELECT toolgate.add_erp_endpoint('metadata6', 'http://[fe80::a9fe:a9fe]/x', 'none');
SELECT toolgate.repoint_erp_endpoint('fake_erp', 'http://erp.attacker.example/api');
RESET ROLE;
SELECT r AS role, has_function_privilege(r, 'toolgate.repoint_erp_endpoint(text, text)', 'EXECUTE') AS repoints
  FROM unnest(ARRAY['toolgate_agent', 'toolgate_admin', 'toolgate_auditor', 'toolgate_operator', 'toolgate_dispatcher']) r;
-- A proposal made while the endpoint points at its host, and the credentials stored for it…
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'sup', 'remote-c6', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-6"}') r \gset
RESET ROLE;
INSERT INTO toolgate.erp_credentials (endpoint, origin, refresh_token, access_token)
VALUES ('fake_erp', 'http://127.0.0.1:8099', 'rt-1', 'at-1');
-- …then the endpoint moved by a role the DBA granted it to (an administrator): another origin
-- drops the credentials, and the "yes" given for the old host applies nothing.
GRANT EXECUTE ON FUNCTION toolgate.repoint_erp_endpoint(text, text) TO toolgate_admin;
SET ROLE toolgate_admin;
SELECT toolgate.repoint_erp_endpoint('fake_erp', 'http://erp-2.example:8099/api');
RESET ROLE;
SELECT count(*) AS credentials_left FROM toolgate.erp_credentials;
SET ROLE toolgate_agent;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT detail->>'reason' AS reason FROM toolgate.audit WHERE conversation_id = 'remote-c6' AND kind = 'confirm';
SELECT count(*) AS queued FROM toolgate.outbox WHERE idempotency_key = 'remote-key-6';
-- Back where it was; a path change at one origin keeps the credentials. The history says who
-- moved it, when, and whether the credentials went.
INSERT INTO toolgate.erp_credentials (endpoint, origin, refresh_token) VALUES ('fake_erp', 'http://erp-2.example:8099', 'rt-2');
SET ROLE toolgate_admin;
SELECT toolgate.repoint_erp_endpoint('fake_erp', 'http://erp-2.example:8099/v2');
SELECT toolgate.repoint_erp_endpoint('fake_erp', 'http://127.0.0.1:8099/api');
SELECT toolgate.repoint_erp_endpoint('nowhere', 'http://127.0.0.1:8099/api');
SELECT toolgate.repoint_erp_endpoint('fake_erp', 'http://169.254.169.254/');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION toolgate.repoint_erp_endpoint(text, text) FROM toolgate_admin;
SELECT count(*) AS credentials_left FROM toolgate.erp_credentials;
SELECT endpoint, changed_by, old->>'base_url' AS old_url, new->>'base_url' AS new_url, credentials_dropped
  FROM toolgate.erp_endpoint_history ORDER BY history_id;
SELECT has_table_privilege('toolgate_auditor', 'toolgate.erp_endpoint_history', 'SELECT') AS auditor_reads_history;
