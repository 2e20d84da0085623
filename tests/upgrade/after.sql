-- The upgrade test's calls after ALTER EXTENSION pg_toolgate UPDATE (scripts/upgrade-test.sh), in
-- the database tests/upgrade/fill.sql filled under 0.1.0, with new tokens signed by the keys the
-- fill registered: the tools go on working on the rows the update moved into schema
-- maintenance. Each step echoes "ok: …" once it held; the first that does not stops the run
-- (ON_ERROR_STOP) with the reply in the error. Run as the superuser with psql; TOOLGATE_MINT is
-- pg_test/mint (keys in TOOLGATE_KEYS).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;

-- expect(reply, outcome, what): the reply's proposal id (or '-'), or an error naming what and the
-- reply.
CREATE FUNCTION pg_temp.expect(reply jsonb, outcome text, what text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF reply->>'outcome' IS DISTINCT FROM outcome THEN
        RAISE EXCEPTION 'after the update: % returned %, not %', what, reply->>'outcome', outcome
            USING DETAIL = reply::text;
    END IF;
    RETURN coalesce(reply->'proposal'->>'id', '-');
END
$$;
-- holds(condition, what): an error naming what unless the condition is true.
CREATE FUNCTION pg_temp.holds(condition boolean, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF condition IS NOT TRUE THEN
        RAISE EXCEPTION 'after the update: % does not hold', what;
    END IF;
END
$$;
-- 0.1.0 has an entry point per shipped tool (toolgate.request_close, …); 0.2.0 may keep them or
-- leave toolgate.call and toolgate.read, which name the tool. A call takes the tool's own entry
-- point if there is one, the generic one otherwise.
CREATE FUNCTION pg_temp.write_call(identity text, conversation text, tool text, args jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    reply jsonb;
BEGIN
    IF pg_catalog.to_regprocedure(pg_catalog.format('toolgate.%I(text,text,jsonb)', tool)) IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT toolgate.%I($1, $2, $3)', tool) INTO reply USING identity, conversation, args;
    ELSE
        reply := toolgate.call(identity, conversation, tool, args);
    END IF;
    RETURN reply;
END
$$;
CREATE FUNCTION pg_temp.read_order(identity text, order_id text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    reply jsonb;
BEGIN
    IF pg_catalog.to_regprocedure('toolgate.read_order(text,text)') IS NOT NULL THEN
        EXECUTE 'SELECT toolgate.read_order($1, $2)' INTO reply USING identity, order_id;
    ELSE
        reply := toolgate.read(identity, 'read_order', pg_catalog.jsonb_build_object('order_id', order_id));
    END IF;
    RETURN reply;
END
$$;
SELECT string_agg(t || ' through ' || CASE WHEN pg_catalog.to_regprocedure(s) IS NOT NULL
                                           THEN pg_catalog.split_part(s, '(', 1) ELSE g END, ', ') AS entry_points
  FROM (VALUES ('read_order', 'toolgate.read_order(text,text)', 'toolgate.read'),
               ('request_close', 'toolgate.request_close(text,text,jsonb)', 'toolgate.call'),
               ('request_purchase_part', 'toolgate.request_purchase_part(text,text,jsonb)', 'toolgate.call')) e(t, s, g) \gset
\echo entry points: :entry_points
-- What the queries return goes nowhere: \echo says what held.
\o /dev/null

-- CC-A's spent before the purchase below: NULL where there is no maintenance.cost_centers, so
-- that every call runs even then (the checks of their effects at the end fail instead).
CREATE FUNCTION pg_temp.spent(tenant text, cost_center text) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    spent numeric;
BEGIN
    IF pg_catalog.to_regclass('maintenance.cost_centers') IS NOT NULL THEN
        EXECUTE 'SELECT c.spent FROM maintenance.cost_centers c WHERE c.tenant_id = $1 AND c.cost_center = $2'
            INTO spent USING tenant, cost_center;
    END IF;
    RETURN spent;
END
$$;
SELECT coalesce(pg_temp.spent('up-a', 'CC-A')::text, 'NULL') AS spent_before \gset
SELECT proposal_id AS live_pid FROM toolgate.proposals WHERE tenant_id = 'up-a' AND idempotency_key = 'up-close-902' \gset

SET ROLE toolgate_agent;
\set sup `"$TOOLGATE_MINT" id up-a user-1 supervisor`
\set supb `"$TOOLGATE_MINT" id up-b user-2 supervisor`
\set acme `"$TOOLGATE_MINT" id acme ana atendente`

SELECT pg_temp.expect(pg_temp.read_order(:'sup', '901'), 'SUCCEEDED', 'read_order 901');
\echo ok: read_order of order 901 (up-a) SUCCEEDED

-- A call settled under 0.1.0, retried with its key: the stored reply, no second effect.
SELECT pg_temp.write_call(:'sup', 'up-conv-901', 'request_close',
       '{"order_id": "901", "reason": "Inspeção validada", "idempotency_key": "up-close-901"}') AS reply \gset
SELECT pg_temp.expect(:'reply', 'SUCCEEDED', 'retry of up-close-901'),
       pg_temp.holds((:'reply'::jsonb->>'replayed')::boolean, 'the retry of up-close-901 replayed');
\echo ok: a call settled under 0.1.0, retried with its key, replayed its reply

-- A proposal made under 0.1.0, confirmed now.
\set yes `"$TOOLGATE_MINT" yes up-a :live_pid sim`
SELECT pg_temp.expect(toolgate.confirm(:'sup', :'yes'), 'SUCCEEDED', 'confirm of the proposal for 902 made before the update');
\echo ok: the proposal for order 902 made under 0.1.0 was confirmed: SUCCEEDED

-- up-a's policy for request_close is tier 1: a proposal, confirmed by a channel-signed "sim".
SELECT pg_temp.expect(pg_temp.write_call(:'sup', 'up-after-904', 'request_close',
       '{"order_id": "904", "reason": "Inspeção validada após a atualização", "idempotency_key": "up-after-close-904"}'),
       'NEEDS_CONFIRMATION', 'request_close 904 (tier 1)') AS pid \gset
\set yes `"$TOOLGATE_MINT" yes up-a :pid sim`
SELECT pg_temp.expect(toolgate.confirm(:'sup', :'yes'), 'SUCCEEDED', 'confirm request_close 904');
\echo ok: request_close of order 904 (up-a, tier 1) NEEDS_CONFIRMATION, confirmed: SUCCEEDED

-- up-b's is tier 0: applied at once.
SELECT pg_temp.expect(pg_temp.write_call(:'supb', 'up-after-912', 'request_close',
       '{"order_id": "912", "reason": "Obra concluída após a atualização", "idempotency_key": "up-after-close-912"}'),
       'SUCCEEDED', 'request_close 912 (tier 0)');
\echo ok: request_close of order 912 (up-b, tier 0) SUCCEEDED at once

-- 2 filters at R$ 12,50 (tier 1 below R$ 100), in a new conversation.
SELECT pg_temp.expect(pg_temp.write_call(:'sup', 'up-after-buy', 'request_purchase_part',
       '{"order_id": "905", "part_id": "F-200", "quantity": 2, "cost_center": "CC-A", "idempotency_key": "up-after-buy-905"}'),
       'NEEDS_CONFIRMATION', 'request_purchase_part 905') AS pid \gset
\set yes `"$TOOLGATE_MINT" yes up-a :pid sim`
SELECT pg_temp.expect(toolgate.confirm(:'sup', :'yes'), 'SUCCEEDED', 'confirm request_purchase_part 905');
\echo ok: request_purchase_part for order 905 (2 x F-200) NEEDS_CONFIRMATION, confirmed: SUCCEEDED

-- The DBA's own tool, defined under 0.1.0.
SELECT pg_temp.expect(toolgate.call(:'acme', 'up-after-refund', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "up-after-refund-1"}'), 'SUCCEEDED', 'emitir_reembolso');
\echo ok: emitir_reembolso (examples/refunds, defined under 0.1.0) SUCCEEDED
RESET ROLE;

-- Every tenant reads Portuguese and reais, as before the update; the proposals made after it say so.
SELECT pg_temp.holds(bool_and(language = 'pt' AND currency = 'BRL' AND minor_unit = 2 AND money_format = 'R$ 1.234,56')
                     AND count(*) > 0, 'every tenant is pt, BRL, R$ 1.234,56')
  FROM toolgate.tenants;
SELECT pg_temp.holds(bool_and(language = 'pt' AND text LIKE '%Para confirmar, responda sim.') AND count(*) > 0,
                     'the proposals made after the update are in Portuguese')
  FROM toolgate.proposals WHERE language IS NOT NULL AND tier < 3;
\echo ok: tenants and their new proposals in Portuguese and reais

-- The effects, in the ERP's tables where the update put them.
SELECT pg_temp.holds(pg_catalog.to_regclass('maintenance.' || t) IS NOT NULL, 'maintenance.' || t || ' exists')
  FROM unnest(ARRAY['close_requests', 'purchases', 'cost_centers']) t;
SELECT pg_temp.holds(count(*) = 1, 'one close request for order 902 with the proposal made before the update')
  FROM maintenance.close_requests
 WHERE tenant_id = 'up-a' AND order_id = '902' AND idempotency_key = 'up-close-902' AND proposal_id = :'live_pid';
SELECT pg_temp.holds(count(*) = 1, 'one close request for order 904')
  FROM maintenance.close_requests WHERE tenant_id = 'up-a' AND order_id = '904' AND idempotency_key = 'up-after-close-904';
SELECT pg_temp.holds(count(*) = 1, 'one close request for order 912')
  FROM maintenance.close_requests WHERE tenant_id = 'up-b' AND order_id = '912' AND idempotency_key = 'up-after-close-912';
SELECT pg_temp.holds(count(*) = 1, 'one close request for order 901 (its retry made none)')
  FROM maintenance.close_requests WHERE tenant_id = 'up-a' AND order_id = '901';
\echo ok: maintenance.close_requests holds the closes of 902, 904 and 912, and the one of 901 once
SELECT pg_temp.holds(count(*) = 1, 'one purchase of 2 x F-200 (R$ 25,00) for order 905')
  FROM maintenance.purchases
 WHERE tenant_id = 'up-a' AND order_id = '905' AND part_id = 'F-200' AND quantity = 2 AND total = 25.00
   AND cost_center = 'CC-A' AND idempotency_key = 'up-after-buy-905';
\echo ok: maintenance.purchases holds the purchase (2 x F-200, R$ 25,00)
SELECT pg_temp.holds(spent = :spent_before + 25.00,
                     pg_catalog.format('CC-A spent %s, that is %s + 25.00', spent, :spent_before))
  FROM maintenance.cost_centers WHERE tenant_id = 'up-a' AND cost_center = 'CC-A';
SELECT spent AS spent_after FROM maintenance.cost_centers WHERE tenant_id = 'up-a' AND cost_center = 'CC-A' \gset
\echo ok: cost centre CC-A spent :spent_before before the purchase, :spent_after after
