-- The benchmark database, loaded by scripts/bench.sh as the superuser after CREATE EXTENSION and
-- the maintenance ERP (examples/maintenance/maintenance.sql), whose tools the gated runs call.
-- Tenant `bench` closes at once (tier 0); tenant `bench1` needs a confirmation (tier 1). Both
-- have a quota so high it never binds (the gated path still upserts it, like the floor does).
-- Keys are registered by the script; tokens are made before the run.

SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('bench', 'Benchmark, tier 0');
SELECT toolgate.add_tenant('bench1', 'Benchmark, tier 1');
SELECT toolgate.set_policy('bench', 'request_close', true, ARRAY['supervisor', 'limited'], 0,
                           max_calls_per_conversation => 2000000000);
-- The callers of role `limited` (workload limited_close) have three limits over time that never
-- bind: per actor per rolling minute, for them all per day, per tool per month.
SELECT toolgate.set_limit('bench', 'actor-per-minute', max => 1000000000, rolling => '1 minute', per_actor => true,
                          role => 'limited');
SELECT toolgate.set_limit('bench', 'tenant-per-day', max => 1000000000, calendar => 'day', role => 'limited');
SELECT toolgate.set_limit('bench', 'tool-per-month', max => 1000000000, calendar => 'month', tool => 'request_close',
                          role => 'limited');
SELECT toolgate.set_policy('bench1', 'request_close', true, ARRAY['supervisor'], 1,
                           max_calls_per_conversation => 2000000000, confirm_ttl => interval '1 day');
SELECT toolgate.set_policy('bench', 'request_purchase_part', true, ARRAY['supervisor'], 0,
                           max_value => 1000000, max_calls_per_conversation => 2000000000);
SELECT toolgate.set_policy('bench', 'read_order', true, ARRAY['supervisor'], 0);
RESET ROLE;

-- Orders to close, one per call (closing twice is refused), numbered from 1; from 900000001 the
-- replays' (one per client), from 900000101 the purchases' (a purchase leaves its order open),
-- from 900000165 the outbox calls' (an outbox call leaves it open too: its effect is the ERP's).
-- A catalogue part and 100 cost centres.
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT t, g::text, 'open', true FROM unnest(ARRAY['bench', 'bench1']) t, generate_series(1, :orders) g;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT 'bench', (900000000 + g)::text, 'open', true FROM generate_series(1, 228) g;
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity)
VALUES ('bench', 'P-1', 'Filtro', 12.50, 100);
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget)
SELECT 'bench', 'CC-' || g, 'Centro ' || g, 1000000000 FROM generate_series(0, 99) g;

CREATE SCHEMA bench;
CREATE SEQUENCE bench.orders;        -- fresh order (and key) per close of tenant bench
CREATE SEQUENCE bench.orders1;       -- fresh order per proposal of tenant bench1
CREATE SEQUENCE bench.keys;          -- fresh keys for purchases
CREATE SEQUENCE bench.outbox_keys;   -- fresh keys for outbox calls
CREATE SEQUENCE bench.confirmations_used;
-- Channel-signed "sim" for proposals made before the gated run (pgbench cannot sign): each
-- iteration proposes a close and confirms one made earlier, the same work as proposing and
-- confirming the same one. Each proposal (here and in the floor) has a conversation of its own:
-- proposed and confirmed in turn, a conversation holds no live proposal for the next to supersede.
CREATE TABLE bench.confirmations (n bigint PRIMARY KEY, proposal_id uuid NOT NULL, token text NOT NULL);
-- Identity tokens of a registered issuer (RS256, ES256, EdDSA; PyJWT signs them before the run),
-- each used once: every call of identity_first verifies a token the backend has not seen.
CREATE TABLE bench.identity_tokens (alg text, n bigint, token text NOT NULL, PRIMARY KEY (alg, n));
CREATE SEQUENCE bench.identity_used_eddsa;
CREATE SEQUENCE bench.identity_used_rs256;
CREATE SEQUENCE bench.identity_used_es256;
-- The least any transaction that writes pays: one small row, no index, committed and flushed. A
-- replay writes its audit row, so it cannot cost less than this.
CREATE TABLE bench.one_write (client_id int NOT NULL, at timestamptz NOT NULL DEFAULT now());

-- The floor: the same row writes as a gated tier-0 close (ledger reserved then settled, quota,
-- order, ERP record, audit), as a plain PL/pgSQL function with no checks at all, so it plans once
-- per session like the gate's statements. Its constants are the size of what the gate writes (a
-- digest and an HMAC of 64 characters, the 243-byte reply, the quota in the audit detail).
CREATE FUNCTION bench.floor_close(p_order text, p_key text, p_conversation text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state)
    VALUES ('bench', 'request_close', p_key, '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', 'bench-user', 'reserved');
    INSERT INTO toolgate.quota_usage AS q (tenant_id, actor, conversation_id, tool, used)
    VALUES ('bench', 'bench-user', p_conversation, 'request_close', 1)
    ON CONFLICT (tenant_id, actor, conversation_id, tool) DO UPDATE SET used = q.used + 1;
    UPDATE maintenance.work_orders SET status = 'close_requested', updated_at = now()
     WHERE tenant_id = 'bench' AND order_id = p_order;
    INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key)
    VALUES ('bench', p_order, 'benchmark close', 'bench-user', p_key);
    UPDATE toolgate.ledger SET state = 'settled', reply = '{"result": {"status": "close_requested", "order_id": "15300", "request_id": "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"}, "content": [{"text": "Close of work order 15300 requested (ERP request 6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f).", "type": "text"}], "isError": false, "outcome": "SUCCEEDED", "replayed": false}', settled_at = now()
     WHERE tenant_id = 'bench' AND tool = 'request_close' AND idempotency_key = p_key;
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, outcome,
                                detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('call', 'bench', p_conversation, 'bench-user', 'supervisor', 'request_close', p_order,
            'SUCCEEDED', '{"quota": {"left": 1999984700, "used": 15300, "limit": 2000000000}}',
            '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
END
$$;

-- The floor of a confirmed close, as two plain transactions: the proposal's rows, then the
-- effect's rows.
CREATE FUNCTION bench.floor_propose(p_order text, p_key text, p_conversation text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    made uuid;
BEGIN
    INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state)
    VALUES ('bench1', 'request_close', p_key, '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', 'bench-user', 'reserved');
    INSERT INTO toolgate.quota_usage AS q (tenant_id, actor, conversation_id, tool, used)
    VALUES ('bench1', 'bench-user', p_conversation, 'request_close', 1)
    ON CONFLICT (tenant_id, actor, conversation_id, tool) DO UPDATE SET used = q.used + 1;
    INSERT INTO toolgate.conversations AS c (tenant_id, actor, conversation_id, last_proposal_at)
    VALUES ('bench1', 'bench-user', p_conversation, clock_timestamp())
    ON CONFLICT (tenant_id, actor, conversation_id) DO UPDATE SET last_proposal_at = excluded.last_proposal_at;
    UPDATE toolgate.proposals SET status = 'superseded', decided_at = now()
     WHERE tenant_id = 'bench1' AND actor = 'bench-user' AND conversation_id = p_conversation AND status = 'live';
    INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                    idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
    VALUES ('bench1', p_conversation, 'bench-user', 'request_close', p_order, '{"order_id": "1", "reason": "benchmark close", "idempotency_key": "pair-key-1"}', '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', p_key,
            'Solicitar fechamento da OS 15300 (tenant bench1): a OS passa a close_requested. Para confirmar, responda sim.', 1, 1, 1, 'live', now() + interval '1 day')
    RETURNING proposal_id INTO made;
    UPDATE toolgate.ledger SET state = 'pending', proposal_id = made
     WHERE tenant_id = 'bench1' AND tool = 'request_close' AND idempotency_key = p_key;
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id,
                                outcome, detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('call', 'bench1', p_conversation, 'bench-user', 'supervisor', 'request_close', p_order, made,
            'NEEDS_CONFIRMATION', '{"quota": {"left": 1999984700, "used": 15300, "limit": 2000000000}}',
            '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
    RETURN made;
END
$$;

CREATE FUNCTION bench.floor_apply(p_proposal uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    p toolgate.proposals;
BEGIN
    UPDATE toolgate.proposals SET status = 'applied', decided_at = now()
     WHERE tenant_id = 'bench1' AND proposal_id = p_proposal
    RETURNING * INTO p;
    UPDATE maintenance.work_orders SET status = 'close_requested', updated_at = now()
     WHERE tenant_id = p.tenant_id AND order_id = p.target;
    INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key, proposal_id)
    VALUES (p.tenant_id, p.target, 'benchmark close', 'bench-user', p.idempotency_key, p.proposal_id);
    UPDATE toolgate.ledger SET state = 'settled', reply = '{"result": {"status": "close_requested", "order_id": "15300", "request_id": "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"}, "content": [{"text": "Close of work order 15300 requested (ERP request 6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f).", "type": "text"}], "isError": false, "outcome": "SUCCEEDED", "replayed": false}', settled_at = now()
     WHERE tenant_id = p.tenant_id AND tool = p.tool AND idempotency_key = p.idempotency_key;
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id,
                                outcome, detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('confirm', p.tenant_id, p.conversation_id, 'bench-user', 'supervisor', p.tool, p.target,
            p.proposal_id, 'SUCCEEDED', '{}', '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
END
$$;

-- An outbox tool (issue 24), bound like the example's tools: erp_purchase_part asks an ERP outside
-- the database for a purchase. Tier 0 for tenant bench: the call answers PENDING and writes the
-- intent to toolgate.outbox with the ledger's settlement and the audit row, in its own
-- transaction; nothing is sent then. Its target is the order with the catalogue part it names (the
-- order locked, as request_purchase_part's target locks it), its request the purchase the ERP is
-- asked for. The endpoint points at the discard port: scripts/bench.sh's dispatch stage (`toolgate
-- bench-dispatch`, in a database of its own) points it at a fake ERP.
SET ROLE maintenance_owner;
CREATE FUNCTION maintenance.order_for_erp_purchase(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('id', w.order_id, 'tenant', w.tenant_id, 'state', w.status,
                              'part', p.part_id, 'unit_price', p.unit_price)
      FROM maintenance.work_orders w
      JOIN maintenance.parts p ON p.tenant_id = w.tenant_id AND p.part_id = args->>'part_id'
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id'
       FOR UPDATE OF w
    INTO result;
    RETURN result;
END
$$;
CREATE FUNCTION maintenance.erp_purchase_request(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object('method', 'POST', 'path', '/purchases',
        'body', jsonb_build_object('tenant', ctx->>'tenant', 'order_id', ctx->'target'->>'id',
                                   'part', ctx->'target'->>'part', 'quantity', (args->>'quantity')::int,
                                   'value', ((args->>'quantity')::numeric
                                             * (ctx->'target'->>'unit_price')::numeric)::text));
END
$$;
REVOKE EXECUTE ON FUNCTION maintenance.order_for_erp_purchase(jsonb, jsonb),
                           maintenance.erp_purchase_request(jsonb, jsonb) FROM PUBLIC;
RESET ROLE;

SET ROLE toolgate_admin;
SELECT toolgate.add_erp_endpoint('bench_erp', 'http://127.0.0.1:9/', 'refresh_token');
RESET ROLE;
SELECT toolgate.define_outbox_tool(
    tool => 'erp_purchase_part',
    description => 'Ask the ERP to buy parts from the catalogue for a work order.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "part_id", "quantity", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "part_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$,
    sensitive => false,
    target => 'maintenance.order_for_erp_purchase(jsonb, jsonb)',
    request => 'maintenance.erp_purchase_request(jsonb, jsonb)',
    endpoint => 'bench_erp',
    target_states => ARRAY['open']);
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('bench', 'erp_purchase_part', true, ARRAY['supervisor'], 0,
                           max_calls_per_conversation => 2000000000);
RESET ROLE;

-- The audit's monthly partitions, as `toolgate audit seal` makes them in production: each call's
-- row is routed to this month's.
SELECT count(*) FROM toolgate.audit_partitions();
