-- Limits over time (docs/limits.md), in a tenant of their own: refused definitions, a rolling
-- window per actor, a calendar day per role in the tenant's time zone, a value limit a proposal
-- checks and its confirmation consumes, the refusal's retry_after, what nothing consumes, the
-- usage view, the history, and a dropped limit.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('lim', 'Limits');
SELECT toolgate.set_policy('lim', 'request_close', allowed => true, roles => ARRAY['supervisor', 'technician'],
                           tier => 0) AS v;
SELECT toolgate.set_policy('lim', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 1, max_value => 500, max_calls_per_conversation => 10) AS v;
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-lim`
SELECT toolgate.add_key('lim', 'idp-lim', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-lim`
SELECT toolgate.add_key('lim', 'chan-lim', 'channel', :'pk') IS NULL AS added;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note)
SELECT 'lim', n::text, 'open', n <> 909, '' FROM generate_series(900, 912) n;
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES ('lim', 'CC-L', 'Limites', 1000.00);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES ('lim', 'P-10', 'Peça', 10.00, 20);

-- Bad definitions, each refused naming what is wrong.
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'x', max => 0, rolling => '1 hour');
SELECT toolgate.set_limit('lim', 'x', max => 1.5, rolling => '1 hour');
SELECT toolgate.set_limit('lim', 'x', max => 1);
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 hour', calendar => 'day');
SELECT toolgate.set_limit('lim', 'x', max => 1, calendar => 'year');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 month');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '0.5 seconds');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '-1 hour');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 hour', measure => 'euros');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 hour', measure => 'value', tool => 'request_close');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 hour', tool => 'read_order');
SELECT toolgate.set_limit('lim', 'x', max => 1, rolling => '1 hour', tool => 'no_such_tool');
SELECT toolgate.set_limit('nobody', 'x', max => 1, rolling => '1 hour');
SELECT toolgate.set_limit('lim', 'X Y', max => 1, rolling => '1 hour');
SELECT toolgate.set_tenant_time_zone('lim', 'Mars/Olympus');
SELECT count(*) AS limits_defined FROM toolgate.limits WHERE tenant_id = 'lim';

-- Two closes per actor per rolling hour; one close a day for technicians together, in São Paulo.
SELECT toolgate.set_tenant_time_zone('lim', 'America/Sao_Paulo');
SELECT toolgate.set_limit('lim', 'closes-per-hour', max => 2, rolling => '1 hour', tool => 'request_close',
                          per_actor => true) AS version;
SELECT toolgate.set_limit('lim', 'technicians-per-day', max => 1, calendar => 'day', role => 'technician') AS version;
SET ROLE toolgate_agent;
\set ana `${TOOLGATE_MINT:?} id lim ana supervisor`
\set bia `${TOOLGATE_MINT:?} id lim bia supervisor`
\set caio `${TOOLGATE_MINT:?} id lim caio technician`
\set duda `${TOOLGATE_MINT:?} id lim duda technician`
-- A refusal before step 6 (an order not inspected) consumes nothing.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'ana', 'c1',
       '{"order_id": "909", "reason": "Inspeção validada", "idempotency_key": "limits-909"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'ana', 'c1',
       '{"order_id": "900", "reason": "Inspeção validada", "idempotency_key": "limits-900"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'ana', 'c2',
       '{"order_id": "901", "reason": "Inspeção validada", "idempotency_key": "limits-901"}') r;
-- A replay is free.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'ana', 'c2',
       '{"order_id": "901", "reason": "Inspeção validada", "idempotency_key": "limits-901"}') r;
-- The third in the hour, in a new conversation: refused, and told when the window frees.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'isError' AS is_error,
       r->'result'->>'limit' AS limit, r->'result'->>'window' AS window, r->'result'->>'max' AS max,
       r->'result'->>'used' AS used, (r->'result'->>'retry_after')::int BETWEEN 3540 AND 3660 AS retry_in_the_hour,
       r->'content'->0->>'text' LIKE '%limit closes-per-hour has no room now, it frees up in %' AS says_when
  FROM toolgate.request_close(:'ana', 'c3', '{"order_id": "902", "reason": "Inspeção validada", "idempotency_key": "limits-902"}') r;
-- explain_call shows the limit deciding, with the same fields, and consumes nothing.
SET ROLE toolgate_admin;
SELECT r->>'rule' AS rule, r->>'decided_by' AS decided_by, r->'steps'->-1->'detail'->>'limit' AS limit,
       r->'steps'->-1->'detail'->>'used' AS used
  FROM toolgate.explain_call(:'ana', 'request_close', 'c3',
       '{"order_id": "902", "reason": "Inspeção validada", "idempotency_key": "limits-902-x"}') r;
SET ROLE toolgate_agent;
-- Another actor has a counter of their own.
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'bia', 'c1',
       '{"order_id": "902", "reason": "Inspeção validada", "idempotency_key": "limits-902-b"}') r;
-- Technicians share one close a day; the second is told the next midnight in São Paulo.
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'caio', 'c1',
       '{"order_id": "903", "reason": "Inspeção validada", "idempotency_key": "limits-903"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'result'->>'window' AS window,
       abs((r->'result'->>'retry_after')::int - extract(epoch FROM
           (date_trunc('day', now(), 'America/Sao_Paulo') AT TIME ZONE 'America/Sao_Paulo' + interval '1 day')
            AT TIME ZONE 'America/Sao_Paulo' - now())) < 5 AS until_midnight_there
  FROM toolgate.request_close(:'duda', 'c1', '{"order_id": "904", "reason": "Inspeção validada", "idempotency_key": "limits-904"}') r;
RESET ROLE;
SELECT order_id, status FROM maintenance.work_orders WHERE tenant_id = 'lim' AND order_id <= '904' ORDER BY 1;
SELECT name, subject, used FROM toolgate.limits_usage('lim') ORDER BY name, subject;
SELECT rule, count(*) FROM toolgate.audit WHERE tenant_id = 'lim' AND kind = 'call' GROUP BY rule ORDER BY rule;
SELECT detail->'limits' AS noted FROM toolgate.audit_log WHERE tenant_id = 'lim' AND actor = 'ana' AND rule IS NULL
 ORDER BY audit_id LIMIT 1;

-- A value limit: R$ 30,00 of purchases a day. A proposal is only checked; its confirmation
-- consumes, and one that no longer fits is refused then, nothing charged, the proposal still live.
-- (Two conversations: a new proposal in one supersedes the one before it.)
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'spend-per-day', max => 30, measure => 'value', calendar => 'day',
                          tool => 'request_purchase_part') AS version;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS p1 FROM toolgate.request_purchase_part(:'ana', 'buy',
       '{"order_id": "905", "part_id": "P-10", "quantity": 2, "cost_center": "CC-L", "idempotency_key": "limits-buy-1"}') r \gset
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS p2 FROM toolgate.request_purchase_part(:'ana', 'buy-2',
       '{"order_id": "910", "part_id": "P-10", "quantity": 2, "cost_center": "CC-L", "idempotency_key": "limits-buy-2"}') r \gset
RESET ROLE;
SELECT used FROM toolgate.limits_usage('lim') WHERE name = 'spend-per-day';
SET ROLE toolgate_agent;
\set yes1 `${TOOLGATE_MINT:?} yes lim :p1 sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'ana', :'yes1') r;
\set yes2 `${TOOLGATE_MINT:?} yes lim :p2 sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'result'->>'used' AS used, r->'result'->>'max' AS max
  FROM toolgate.confirm(:'ana', :'yes2') r;
-- Its second yes, once the limit has room again, applies it.
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'spend-per-day', max => 40, measure => 'value', calendar => 'day',
                          tool => 'request_purchase_part') AS version;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome FROM toolgate.confirm(:'ana', :'yes2') r;
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'spend-per-day', max => 50, measure => 'value', calendar => 'day',
                          tool => 'request_purchase_part') AS version;
SET ROLE toolgate_agent;
-- A new proposal over what is left is refused at once; one that fits is proposed.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_purchase_part(:'ana', 'buy',
       '{"order_id": "905", "part_id": "P-10", "quantity": 2, "cost_center": "CC-L", "idempotency_key": "limits-buy-3"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_purchase_part(:'ana', 'buy',
       '{"order_id": "905", "part_id": "P-10", "quantity": 1, "cost_center": "CC-L", "idempotency_key": "limits-buy-4"}') r;
-- Sixty reais in one call can never fit: no retry_after.
SELECT r->>'rule' AS rule, r->'result'->'retry_after' AS retry_after FROM toolgate.request_purchase_part(:'ana', 'buy',
       '{"order_id": "905", "part_id": "P-10", "quantity": 6, "cost_center": "CC-L", "idempotency_key": "limits-buy-5"}') r;
RESET ROLE;
SELECT (SELECT count(*) FROM maintenance.purchases WHERE tenant_id = 'lim') AS purchases,
       (SELECT status FROM toolgate.proposals WHERE proposal_id = :'p2') AS second_proposal;
SELECT name, measure, "window", max, used FROM toolgate.limits_usage('lim') WHERE name = 'spend-per-day';

-- A bucket counts until its end leaves the window: a close 3,630 s ago, in a bucket of 60 s that
-- ends 3,570 s ago, still fills an hour's limit of one, for about 30 s more.
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'edge', max => 1, rolling => '1 hour', tool => 'request_close', role => 'technician')
    AS version;
RESET ROLE;
INSERT INTO toolgate.limit_usage (tenant_id, name, subject, bucket, used)
VALUES ('lim', 'edge', '', statement_timestamp() - interval '3630 seconds', 1);
SET ROLE toolgate_agent;
\set edu `${TOOLGATE_MINT:?} id lim edu technician`
SELECT r->>'rule' AS rule, r->'result'->>'limit' AS limit,
       (r->'result'->>'retry_after')::int BETWEEN 1 AND 31 AS retry_within_the_bucket
  FROM toolgate.request_close(:'edu', 'c1', '{"order_id": "908", "reason": "Inspeção validada", "idempotency_key": "limits-908"}') r;
SET ROLE toolgate_admin;
SELECT toolgate.drop_limit('lim', 'edge') AS dropped;

-- Changed, the next call sees it; dropped, the calls pass again. Every version is kept.
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('lim', 'closes-per-hour', max => 3, rolling => '1 hour', tool => 'request_close',
                          per_actor => true) AS version;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'ana', 'c4',
       '{"order_id": "906", "reason": "Inspeção validada", "idempotency_key": "limits-906"}') r;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'ana', 'c4',
       '{"order_id": "907", "reason": "Inspeção validada", "idempotency_key": "limits-907"}') r;
SET ROLE toolgate_admin;
SELECT toolgate.drop_limit('lim', 'closes-per-hour') AS dropped, toolgate.drop_limit('lim', 'closes-per-hour') AS again;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'ana', 'c4',
       '{"order_id": "907", "reason": "Inspeção validada", "idempotency_key": "limits-907-b"}') r;
RESET ROLE;
SELECT name, version, old IS NULL AS created, new IS NULL AS dropped, changed_by FROM toolgate.limit_history
 WHERE tenant_id = 'lim' ORDER BY history_id;
SELECT count(*) AS usage_rows_of_dropped FROM toolgate.limit_usage WHERE tenant_id = 'lim' AND name = 'closes-per-hour';

-- An outbox call keeps what it took while the ERP is asked (it may do it); the ERP's refusal
-- gives it back. (remote_order is outbox_tools' tool, on an order of its own ERP.)
INSERT INTO remote.orders VALUES ('shopping-a', '990', 'open');
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('shopping-a', 'remote-per-day', max => 5, calendar => 'day', tool => 'remote_order')
    AS version;
SET ROLE toolgate_agent;
\set supa `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome FROM toolgate.call(:'supa', 'limits-remote', 'remote_order',
       '{"order_id": "990", "part": "filter", "quantity": 1, "mode": "ok", "idempotency_key": "limits-remote-1"}') r;
RESET ROLE;
SELECT used FROM toolgate.limits_usage('shopping-a') WHERE name = 'remote-per-day';
SELECT jsonb_array_length(limits) AS kept FROM toolgate.outbox WHERE idempotency_key = 'limits-remote-1';
SET ROLE toolgate_dispatcher;
SELECT count(*) > 0 AS claimed FROM toolgate.tenant_claim_outbox('shopping-a', 50);
RESET ROLE;
SELECT claim AS rclaim FROM toolgate.outbox WHERE idempotency_key = 'limits-remote-1' \gset
SET ROLE toolgate_dispatcher;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.settle_outbox('shopping-a', 'remote_order', 'limits-remote-1', :'rclaim', 'REJECTED',
                              '{"error": "out_of_stock"}') r;
RESET ROLE;
SELECT used FROM toolgate.limits_usage('shopping-a') WHERE name = 'remote-per-day';
SET ROLE toolgate_admin;
SELECT toolgate.drop_limit('shopping-a', 'remote-per-day') AS dropped;
RESET ROLE;
