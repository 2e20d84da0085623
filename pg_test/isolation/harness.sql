-- The isolation specs' database, made by scripts/isolation.sh as the superuser before
-- pg_isolation_regress runs: the extension, seed 000's fixture, what the races need beyond it,
-- keys generated now (private halves in the run's key directory), tokens minted now, and the
-- proposals the confirmation races answer, made through the gate itself.
--
-- Specs cannot run commands, so this file leaves them a harness schema `isolation` (never part of
-- the extension): `isolation.token(name)` hands a session a token minted here, and
-- `isolation.reset()` puts every gate and ERP table back to the state below before each
-- permutation. The audit is append-only, so permutations count their audit rows from a mark.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE EXTENSION pg_toolgate;
\getenv root TOOLGATE_ROOT
\i :root/examples/maintenance/maintenance.sql
\i :root/examples/maintenance/seed000.sql

-- shopping-c: closes and purchases apply at once (tier 0), two calls per conversation.
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('shopping-c', 'Shopping C');
SELECT toolgate.set_policy('shopping-c', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_calls_per_conversation => 2);
SELECT toolgate.set_policy('shopping-c', 'read_order', allowed => true, roles => ARRAY['supervisor', 'technician'],
                           tier => 0);
SELECT toolgate.set_policy('shopping-c', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_value => 500, max_calls_per_conversation => 2);
RESET ROLE;

INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES
    ('shopping-a', '901', 'open', true), ('shopping-a', '902', 'open', true),
    ('shopping-a', '903', 'open', true), ('shopping-a', '904', 'open', true),
    ('shopping-a', '905', 'open', true), ('shopping-a', '906', 'open', true),
    ('shopping-a', '907', 'open', true),
    ('shopping-c', '801', 'open', true), ('shopping-c', '802', 'open', true);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES
    ('shopping-c', 'F-200', 'Filtro de ar', 12.50, 20);
-- Budgets that fit one purchase of the race and not two.
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES
    ('shopping-a', 'CC-ISO', 'Isolamento A', 60.00),
    ('shopping-c', 'CC-C', 'Isolamento C', 30.00),
    ('shopping-c', 'CC-C-BIG', 'Isolamento C (folga)', 1000.00);

\set pk `${TOOLGATE_MINT:?} key idp-shopping-a`
SELECT toolgate.add_key('shopping-a', 'idp-shopping-a', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-shopping-a`
SELECT toolgate.add_key('shopping-a', 'chan-shopping-a', 'channel', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-shopping-c`
SELECT toolgate.add_key('shopping-c', 'idp-shopping-c', 'identity', :'pk');

CREATE SCHEMA isolation;
CREATE TABLE isolation.tokens (name text PRIMARY KEY, token text NOT NULL);
CREATE TABLE isolation.mark (audit_id bigint NOT NULL);

-- The sessions run as toolgate_agent, which reads no table: this hands them a token by name.
CREATE FUNCTION isolation.token(name text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t text;
BEGIN
    SELECT k.token INTO t FROM isolation.tokens k WHERE k.name = token.name;
    IF t IS NULL THEN
        RAISE EXCEPTION 'isolation harness: no token %', name;
    END IF;
    RETURN t;
END
$$;
REVOKE ALL ON FUNCTION isolation.token(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA isolation TO toolgate_agent;
GRANT EXECUTE ON FUNCTION isolation.token(text) TO toolgate_agent;

\set sup_a `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
INSERT INTO isolation.tokens VALUES ('sup-a', :'sup_a');
\set tok `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
INSERT INTO isolation.tokens VALUES ('sup-c', :'tok');

-- The proposals the confirmation races answer, made through the gate as the application would,
-- each with a channel-signed answer. A call that did not propose leaves :pid unset (or not a
-- uuid), and the script stops at the cast.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup_a', 'iso-dc',
       '{"order_id": "901", "reason": "Inspeção validada", "idempotency_key": "iso-dc-901"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
INSERT INTO isolation.tokens VALUES ('dc:yes', :'tok');
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid não 0 typed decline`
INSERT INTO isolation.tokens VALUES ('dc:no', :'tok');

SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup_a', 'iso-sup',
       '{"order_id": "902", "reason": "Inspeção validada", "idempotency_key": "iso-sup-902"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
INSERT INTO isolation.tokens VALUES ('sup:yes', :'tok');

SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup_a', 'iso-wo',
       '{"order_id": "904", "reason": "Inspeção validada", "idempotency_key": "iso-wo-904"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
INSERT INTO isolation.tokens VALUES ('wo:yes', :'tok');

-- Two purchases of R$ 50,00 (tier 1) against CC-ISO's R$ 60,00, for different orders.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_purchase_part(:'sup_a', 'iso-b1',
       '{"order_id": "905", "part_id": "F-200", "quantity": 4, "cost_center": "CC-ISO", "idempotency_key": "iso-b1-905"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
INSERT INTO isolation.tokens VALUES ('b1:yes', :'tok');
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_purchase_part(:'sup_a', 'iso-b2',
       '{"order_id": "907", "part_id": "F-200", "quantity": 4, "cost_center": "CC-ISO", "idempotency_key": "iso-b2-907"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
INSERT INTO isolation.tokens VALUES ('b2:yes', :'tok');

-- A DBA's own ERP (examples/refunds), its refund tool asking a person (tier 1) for acme, and a
-- proposal to refund order p1, made through toolgate.call, with the person's answer.
\i :root/examples/refunds/refunds.sql
SELECT toolgate.set_policy('acme', 'emitir_reembolso', allowed => true, roles => ARRAY['atendente'], tier => 1,
                           max_value => 200.00, max_calls_per_conversation => 5, target_states => ARRAY['pago']);
\set pk `${TOOLGATE_MINT:?} key idp-acme`
SELECT toolgate.add_key('acme', 'idp-acme', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-acme`
SELECT toolgate.add_key('acme', 'chan-acme', 'channel', :'pk');
\set rf `${TOOLGATE_MINT:?} id acme ana atendente`
INSERT INTO isolation.tokens VALUES ('rf-a', :'rf');
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.call(:'rf', 'iso-rf', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "iso-rf-p1"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes acme :pid sim`
INSERT INTO isolation.tokens VALUES ('rf:yes', :'tok');

-- iso-lim: limits over time (limit_race). Closes apply at once, one per rolling hour for the
-- whole tenant; purchases ask a person (tier 1), R$ 60,00 a day; two proposals of R$ 50,00 wait,
-- on cost centres of their own (so only the limit makes them wait for each other).
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('iso-lim', 'Isolation limits');
SELECT toolgate.set_policy('iso-lim', 'request_close', allowed => true, roles => ARRAY['supervisor'], tier => 0);
SELECT toolgate.set_policy('iso-lim', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'], tier => 1,
                           max_value => 500, max_calls_per_conversation => 5);
SELECT toolgate.set_limit('iso-lim', 'closes-per-hour', max => 1, rolling => '1 hour', tool => 'request_close');
SELECT toolgate.set_limit('iso-lim', 'spend-per-day', max => 60, measure => 'value', calendar => 'day',
                          tool => 'request_purchase_part');
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-iso-lim`
SELECT toolgate.add_key('iso-lim', 'idp-iso-lim', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-iso-lim`
SELECT toolgate.add_key('iso-lim', 'chan-iso-lim', 'channel', :'pk');
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES
    ('iso-lim', '951', 'open', true), ('iso-lim', '952', 'open', true),
    ('iso-lim', '953', 'open', true), ('iso-lim', '954', 'open', true);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES
    ('iso-lim', 'P-50', 'Peça de 50', 50.00, 5);
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES
    ('iso-lim', 'CC-LIM', 'Limites (folga)', 1000.00), ('iso-lim', 'CC-LIM2', 'Limites 2 (folga)', 1000.00);
\set lim_a `${TOOLGATE_MINT:?} id iso-lim ana supervisor`
INSERT INTO isolation.tokens VALUES ('lim-a', :'lim_a');
\set tok `${TOOLGATE_MINT:?} id iso-lim bia supervisor`
INSERT INTO isolation.tokens VALUES ('lim-b', :'tok');
-- Someone the audit has never named: their first calls make their pseudonym's key.
\set tok `${TOOLGATE_MINT:?} id shopping-c cid supervisor`
INSERT INTO isolation.tokens VALUES ('new-c', :'tok');
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_purchase_part(:'lim_a', 'iso-lim-1',
       '{"order_id": "953", "part_id": "P-50", "quantity": 1, "cost_center": "CC-LIM", "idempotency_key": "iso-lim-953"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes iso-lim :pid sim`
INSERT INTO isolation.tokens VALUES ('lim1:yes', :'tok');
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_purchase_part(:'lim_a', 'iso-lim-2',
       '{"order_id": "954", "part_id": "P-50", "quantity": 1, "cost_center": "CC-LIM2", "idempotency_key": "iso-lim-954"}') r \gset
RESET ROLE;
SELECT :'pid'::uuid AS proposal;
\set tok `${TOOLGATE_MINT:?} yes iso-lim :pid sim`
INSERT INTO isolation.tokens VALUES ('lim2:yes', :'tok');

-- iso-appr: maker-checker (approval_race). A purchase needs two buyers' approvals; a
-- technician's proposal waits for them. The approvers' sessions run as toolgate_approver.
RESET ROLE;
SELECT toolgate.add_tenant('iso-appr', 'Isolation approvals');
SELECT toolgate.set_policy('iso-appr', 'request_purchase_part', allowed => true, roles => ARRAY['technician'],
                           tier => 1, max_value => 1000, max_calls_per_conversation => 10,
                           approver_roles => ARRAY['buyer'], quorum => 2);
\set pk `${TOOLGATE_MINT:?} key idp-iso-appr`
SELECT toolgate.add_key('iso-appr', 'idp-iso-appr', 'identity', :'pk');
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES ('iso-appr', '961', 'open', true);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES
    ('iso-appr', 'P-60', 'Peça de 60', 60.00, 5);
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES
    ('iso-appr', 'CC-APPR', 'Aprovações (folga)', 1000.00);
\set tok `${TOOLGATE_MINT:?} id iso-appr bob buyer`
INSERT INTO isolation.tokens VALUES ('appr-bob', :'tok');
\set tok `${TOOLGATE_MINT:?} id iso-appr ben buyer`
INSERT INTO isolation.tokens VALUES ('appr-ben', :'tok');
\set tok `${TOOLGATE_MINT:?} id iso-appr cid buyer`
INSERT INTO isolation.tokens VALUES ('appr-cid', :'tok');
\set tech `${TOOLGATE_MINT:?} id iso-appr tim technician`
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_purchase_part(:'tech', 'iso-appr-1',
       '{"order_id": "961", "part_id": "P-60", "quantity": 1, "cost_center": "CC-APPR", "idempotency_key": "iso-appr-961"}') r \gset
RESET ROLE;
INSERT INTO isolation.tokens VALUES ('appr:proposal', :'pid');
GRANT USAGE ON SCHEMA isolation TO toolgate_approver;
GRANT EXECUTE ON FUNCTION isolation.token(text) TO toolgate_approver;

-- The state every permutation starts from: copies of every table a call can change.
CREATE TABLE isolation.base_ledger AS TABLE toolgate.ledger;
CREATE TABLE isolation.base_proposals AS TABLE toolgate.proposals;
CREATE TABLE isolation.base_quota_usage AS TABLE toolgate.quota_usage;
CREATE TABLE isolation.base_limit_usage AS TABLE toolgate.limit_usage;
CREATE TABLE isolation.base_person_keys AS TABLE toolgate.person_keys;
CREATE TABLE isolation.base_work_orders AS TABLE maintenance.work_orders;
CREATE TABLE isolation.base_cost_centers AS TABLE maintenance.cost_centers;
-- Configuration a permutation may change (config_snapshot): policies, key states, schemas.
CREATE TABLE isolation.base_policies AS TABLE toolgate.policies;
CREATE TABLE isolation.base_keys AS TABLE toolgate.keys;
CREATE TABLE isolation.base_tool_schemas AS TABLE toolgate.tool_schemas;
-- Proposals made no ERP change: the copies of close_requests and purchases are empty.
SELECT (SELECT count(*) FROM maintenance.close_requests) + (SELECT count(*) FROM maintenance.purchases) = 0
    AS baseline_has_no_effects \gset
\if :baseline_has_no_effects
\else
    \echo 'isolation harness: the baseline made an ERP change'
    SELECT 1 / 0;
\endif

CREATE FUNCTION isolation.reset() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE maintenance.close_requests, maintenance.purchases, toolgate.ledger, toolgate.proposals,
             toolgate.quota_usage, toolgate.limit_usage, toolgate.write_switches, toolgate.approvals;
    INSERT INTO toolgate.ledger SELECT * FROM isolation.base_ledger;
    -- Live proposals wait their full time again, whenever the permutation runs.
    INSERT INTO toolgate.proposals SELECT * FROM isolation.base_proposals;
    UPDATE toolgate.proposals SET expires_at = now() + interval '5 minutes' WHERE status = 'live';
    INSERT INTO toolgate.quota_usage SELECT * FROM isolation.base_quota_usage;
    INSERT INTO toolgate.limit_usage SELECT * FROM isolation.base_limit_usage;
    DELETE FROM toolgate.person_keys k WHERE (k.tenant_id, k.person) NOT IN
           (SELECT b.tenant_id, b.person FROM isolation.base_person_keys b);
    UPDATE maintenance.work_orders w SET status = b.status, inspected = b.inspected
      FROM isolation.base_work_orders b WHERE (w.tenant_id, w.order_id) = (b.tenant_id, b.order_id);
    UPDATE maintenance.cost_centers c SET spent = b.spent
      FROM isolation.base_cost_centers b WHERE (c.tenant_id, c.cost_center) = (b.tenant_id, b.cost_center);
    IF EXISTS (SELECT FROM toolgate.tool_schemas s WHERE (s.tool, s.version) NOT IN
               (SELECT b.tool, b.version FROM isolation.base_tool_schemas b)) THEN
        DELETE FROM toolgate.tool_schemas s WHERE (s.tool, s.version) NOT IN
               (SELECT b.tool, b.version FROM isolation.base_tool_schemas b);
    END IF;
    IF EXISTS (SELECT FROM toolgate.keys k JOIN isolation.base_keys b USING (kid) WHERE k.active <> b.active) THEN
        UPDATE toolgate.keys k SET active = b.active, revoked_at = b.revoked_at
          FROM isolation.base_keys b WHERE k.kid = b.kid AND k.active <> b.active;
    END IF;
    IF EXISTS (SELECT FROM toolgate.policies p JOIN isolation.base_policies b USING (tenant_id, tool)
               WHERE p.version <> b.version) THEN
        DELETE FROM toolgate.policies;
        INSERT INTO toolgate.policies SELECT * FROM isolation.base_policies;
    END IF;
    DELETE FROM isolation.mark;
    INSERT INTO isolation.mark SELECT coalesce(max(audit_id), 0) FROM toolgate.audit;
END
$$;

-- Audit rows written since the permutation started.
CREATE FUNCTION isolation.audit_rows() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN (SELECT count(*) FROM toolgate.audit a WHERE a.audit_id > (SELECT m.audit_id FROM isolation.mark m));
