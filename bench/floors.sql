-- The benchmark's floors that do the same work as the gate, loaded by scripts/bench.sh after
-- bench/setup.sql (scripts/bench-compare.sh loads this tree's into both trees' databases, so the
-- same floor is measured beside both). It uses only the example ERP and the extension's tables.

-- The floor that does the same work: what any gate that checks the ERP's state before it writes
-- must pay. The same SQL the binding runs, run the way the gate runs it — the target's locked
-- read and the effect as SECURITY DEFINER functions with a pinned search_path, as a role that is
-- not a superuser, under the ERP's row-level security (the example's functions, owned by bench_erp:
-- outside a call toolgate.current_tenant() is NULL, so bench_erp's policy takes the tenant from a
-- setting the floor makes) — plus the gate's own writes, each row written once: the ledger's final
-- row, the quota, the audit (and for a proposal, the conversation, the supersede and the proposal).
-- bench.floor_close above, the plain writes alone, stays as the history's row.
-- A role is the cluster's: the dispatcher stage loads a second database into the same cluster.
DO $$ BEGIN CREATE ROLE bench_erp NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT USAGE ON SCHEMA toolgate TO bench_erp;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO bench_erp;
GRANT USAGE, CREATE ON SCHEMA bench TO bench_erp;
SET ROLE maintenance_owner;
GRANT USAGE ON SCHEMA maintenance TO bench_erp;
GRANT SELECT, UPDATE ON maintenance.work_orders TO bench_erp;
GRANT SELECT, INSERT ON maintenance.close_requests TO bench_erp;
CREATE POLICY bench_floor ON maintenance.work_orders TO bench_erp
    USING (tenant_id = current_setting('toolgate_bench.tenant'));
CREATE POLICY bench_floor ON maintenance.close_requests TO bench_erp
    USING (tenant_id = current_setting('toolgate_bench.tenant'));
-- The binding's own target and effect functions, copied from the catalogue (their bodies, their
-- settings), made again in schema bench by bench_erp: the same SQL, whatever the example says.
SET ROLE bench_erp;
DO $$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['order_to_close', 'close_order'] LOOP
        EXECUTE replace(pg_get_functiondef(format('maintenance.%I(jsonb, jsonb)', fn)::regprocedure),
                        format('FUNCTION maintenance.%s(', fn), format('FUNCTION bench.%s(', fn));
    END LOOP;
END
$$;
RESET ROLE;

CREATE FUNCTION bench.floor_bound_close(p_order text, p_key text, p_conversation text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ctx jsonb := jsonb_build_object('tenant', 'bench', 'actor', 'bench-user', 'role', 'supervisor',
                                    'conversation', p_conversation, 'idempotency_key', p_key);
    args jsonb := jsonb_build_object('order_id', p_order, 'reason', 'benchmark close', 'idempotency_key', p_key);
    target jsonb;
    done jsonb;
BEGIN
    PERFORM set_config('toolgate_bench.tenant', 'bench', true);
    target := bench.order_to_close(ctx, args);
    INSERT INTO toolgate.quota_usage AS q (tenant_id, actor, conversation_id, tool, used)
    VALUES ('bench', 'bench-user', p_conversation, 'request_close', 1)
    ON CONFLICT (tenant_id, actor, conversation_id, tool) DO UPDATE SET used = q.used + 1;
    done := bench.close_order(ctx, args);
    IF target IS NULL OR done IS NULL THEN  -- the work it stands for was not done: stop the run
        RAISE EXCEPTION 'floor_bound_close: order % not read or not closed', p_order;
    END IF;
    INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply, settled_at)
    VALUES ('bench', 'request_close', p_key, '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', 'bench-user', 'settled',
            jsonb_build_object('result', done, 'outcome', 'SUCCEEDED', 'replayed', false, 'isError', false,
                               'content', jsonb_build_array(jsonb_build_object('type', 'text', 'text', done->>'summary'))),
            now());
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, outcome,
                                effects, detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('call', 'bench', p_conversation, 'bench-user', 'supervisor', 'request_close', p_order,
            'SUCCEEDED', 1, '{"quota": {"left": 1999984700, "used": 15300, "limit": 2000000000}}',
            '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
END
$$;

-- The same for a confirmed close, as two transactions: the proposal (the target read under its
-- lock, the ledger's pending row, the quota, the conversation, the supersede, the proposal, the
-- audit), then the confirmation (the proposal applied, the target read again under its lock, the
-- effect, the ledger settled, the audit).
CREATE FUNCTION bench.floor_bound_propose(p_order text, p_key text, p_conversation text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    ctx jsonb := jsonb_build_object('tenant', 'bench1', 'actor', 'bench-user', 'role', 'supervisor',
                                    'conversation', p_conversation, 'idempotency_key', p_key);
    args jsonb := jsonb_build_object('order_id', p_order, 'reason', 'benchmark close', 'idempotency_key', p_key);
    target jsonb;
    made uuid := gen_random_uuid();
BEGIN
    PERFORM set_config('toolgate_bench.tenant', 'bench1', true);
    target := bench.order_to_close(ctx, args);
    IF target IS NULL THEN
        RAISE EXCEPTION 'floor_bound_propose: order % not read', p_order;
    END IF;
    INSERT INTO toolgate.quota_usage AS q (tenant_id, actor, conversation_id, tool, used)
    VALUES ('bench1', 'bench-user', p_conversation, 'request_close', 1)
    ON CONFLICT (tenant_id, actor, conversation_id, tool) DO UPDATE SET used = q.used + 1;
    INSERT INTO toolgate.conversations AS c (tenant_id, actor, conversation_id, last_proposal_at)
    VALUES ('bench1', 'bench-user', p_conversation, clock_timestamp())
    ON CONFLICT (tenant_id, actor, conversation_id) DO UPDATE SET last_proposal_at = excluded.last_proposal_at;
    UPDATE toolgate.proposals SET status = 'superseded', decided_at = now()
     WHERE tenant_id = 'bench1' AND actor = 'bench-user' AND conversation_id = p_conversation AND status = 'live';
    INSERT INTO toolgate.proposals (proposal_id, tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                    idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
    VALUES (made, 'bench1', p_conversation, 'bench-user', 'request_close', target->>'id', args, '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', p_key,
            'Solicitar fechamento da OS ' || p_order || ' (tenant bench1): a OS passa a close_requested. Para confirmar, responda sim.', 1, 1, 1, 'live', now() + interval '1 day');
    INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, proposal_id)
    VALUES ('bench1', 'request_close', p_key, '5a189daf9e638b104cab84b57f85699769e3a3c3da245c299731279e0c9a5aec', 'bench-user', 'pending', made);
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id,
                                outcome, detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('call', 'bench1', p_conversation, 'bench-user', 'supervisor', 'request_close', p_order, made,
            'NEEDS_CONFIRMATION', '{"quota": {"left": 1999984700, "used": 15300, "limit": 2000000000}}',
            '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
    RETURN made;
END
$$;

CREATE FUNCTION bench.floor_bound_apply(p_proposal uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    p toolgate.proposals;
    ctx jsonb;
    target jsonb;
    done jsonb;
BEGIN
    PERFORM set_config('toolgate_bench.tenant', 'bench1', true);
    UPDATE toolgate.proposals SET status = 'applied', decided_at = now()
     WHERE tenant_id = 'bench1' AND proposal_id = p_proposal
    RETURNING * INTO p;
    ctx := jsonb_build_object('tenant', p.tenant_id, 'actor', p.actor, 'role', 'supervisor',
                              'conversation', p.conversation_id, 'idempotency_key', p.idempotency_key,
                              'proposal_id', p.proposal_id);
    target := bench.order_to_close(ctx, p.args);
    done := bench.close_order(ctx, p.args);
    IF target IS NULL OR done IS NULL THEN
        RAISE EXCEPTION 'floor_bound_apply: proposal % not applied', p_proposal;
    END IF;
    UPDATE toolgate.ledger SET state = 'settled', settled_at = now(),
           reply = jsonb_build_object('result', done, 'outcome', 'SUCCEEDED', 'replayed', false, 'isError', false,
                                      'content', jsonb_build_array(jsonb_build_object('type', 'text', 'text', done->>'summary')))
     WHERE tenant_id = p.tenant_id AND tool = p.tool AND idempotency_key = p.idempotency_key;
    INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id,
                                outcome, effects, detail, args_hmac, schema_version, policy_version, duration_us)
    VALUES ('confirm', p.tenant_id, p.conversation_id, 'bench-user', 'supervisor', p.tool, p.target,
            p.proposal_id, 'SUCCEEDED', 1, '{}', '45fcfb6ff200cde295f215271ea0f956e9e2f1da65043d188abf4b47d9541a95', 1, 1, 0);
END
$$;
