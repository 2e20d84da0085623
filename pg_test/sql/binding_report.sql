-- toolgate.binding_report(tool): what is wrong or risky in a binding, before an agent finds it.
-- A deliberately careless binding, owned by careless_owner:
--   careless.orders  owned by careless_owner, row-level security enabled, not forced;
--   careless.prices  owned by careless_data, no row-level security;
--   careless.ledger  owned by careless_data, row-level security forced, a policy for careless_data only;
-- a target that answers a numeric tenant (called once through the gate, so the audit has it), a
-- value function computing in float, an effect whose comments and messages only mention floats,
-- a read tool with a SQL-standard body; then the effect made SECURITY INVOKER, the value's
-- search_path unpinned, the target's EXECUTE revoked from the role that defined the tool and the
-- reader dropped. Each finding shows; the clean maintenance (and refunds) tools give none; the
-- agent may not run it.
\set VERBOSITY terse
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE careless_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE careless_data NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT USAGE ON SCHEMA toolgate TO careless_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO careless_owner;
CREATE SCHEMA careless AUTHORIZATION careless_owner;
GRANT USAGE ON SCHEMA careless TO toolgate_admin, careless_data;
SET ROLE careless_owner;
CREATE TABLE careless.orders (tenant_id text NOT NULL, order_id text NOT NULL, status text NOT NULL,
                              PRIMARY KEY (tenant_id, order_id));
ALTER TABLE careless.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON careless.orders USING (tenant_id = toolgate.current_tenant());
INSERT INTO careless.orders VALUES ('shopping-a', '1', 'open');
RESET ROLE;
CREATE TABLE careless.prices (item text PRIMARY KEY, price numeric NOT NULL);
INSERT INTO careless.prices VALUES ('bolt', 11.05);
CREATE TABLE careless.ledger (tenant_id text NOT NULL, order_id text NOT NULL, amount numeric NOT NULL);
ALTER TABLE careless.ledger ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE careless.prices OWNER TO careless_data;
ALTER TABLE careless.ledger OWNER TO careless_data;
CREATE POLICY tenant ON careless.ledger TO careless_data USING (tenant_id = toolgate.current_tenant());
GRANT SELECT ON careless.prices TO careless_owner;
GRANT SELECT, INSERT ON careless.ledger TO careless_owner;
SET ROLE careless_owner;
-- The tenant as a number: the gate refuses the answer (tool_misconfigured).
CREATE FUNCTION careless.target(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, careless, pg_temp AS $$
    SELECT jsonb_build_object('id', o.order_id, 'tenant', 42, 'state', o.status)
      FROM orders o WHERE o.tenant_id = ctx->>'tenant' AND o.order_id = args->>'order_id' FOR UPDATE
$$;
CREATE FUNCTION careless.value(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, careless, pg_temp AS $$
    SELECT jsonb_build_object('amount', p.price::double precision * (args->>'quantity')::float8, 'account', 'A-1')
      FROM careless.prices p WHERE p.item = args->>'item'
$$;
CREATE FUNCTION careless.effect(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, careless, pg_temp AS $$
DECLARE
    result jsonb;
BEGIN
    -- The real amount, never a float: the one the person read.
    INSERT INTO ledger (tenant_id, order_id, amount)
    VALUES (ctx->>'tenant', args->>'order_id', (ctx->'value'->>'amount')::numeric)
    RETURNING jsonb_build_object('summary', 'Charged (no float, no real).') INTO result;
    RETURN result;
END
$$;
CREATE FUNCTION careless.reader(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, careless, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object('item', p.item, 'price', p.price) FROM careless.prices p WHERE p.item = args->>'item';
END;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA careless FROM PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA careless TO toolgate_admin;
RESET ROLE;
RESET client_min_messages;

-- Defined as toolgate_admin: define_tool passes it (it warns about careless.orders).
SET ROLE toolgate_admin;
SELECT toolgate.define_tool('careless_buy', 'Buy carelessly.',
    '{"type": "object", "additionalProperties": false, "required": ["order_id", "item", "quantity", "idempotency_key"],
      "properties": {"order_id": {"type": "string"}, "item": {"type": "string"}, "quantity": {"type": "integer"},
                     "idempotency_key": {"type": "string", "minLength": 8}}}',
    false, 'careless.target(jsonb, jsonb)', 'careless.effect(jsonb, jsonb)', value => 'careless.value(jsonb, jsonb)') AS version;
SELECT toolgate.define_read_tool('careless_price', 'Read a price.',
    '{"type": "object", "additionalProperties": false, "required": ["item"], "properties": {"item": {"type": "string"}}}',
    'careless.reader(jsonb, jsonb)') AS version;
SELECT toolgate.set_policy('shopping-a', 'careless_buy', allowed => true, roles => ARRAY['supervisor'], tier => 0);
RESET ROLE;

-- The agent calls it once: the target's numeric tenant is refused, and audited.
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'sup', 'careless-1', 'careless_buy',
                     '{"order_id": "1", "item": "bolt", "quantity": 2, "idempotency_key": "careless-key-1"}') r;
-- The agent may not read the report.
SELECT * FROM toolgate.binding_report('careless_buy');
RESET ROLE;

SET ROLE toolgate_admin;
-- Every warning: the table without row-level security (the value's, the reader's through
-- pg_depend), the owner's own table not forced, the forced table without a policy for the owner,
-- the numeric tenant in the audit, the float in the value (not the effect's comment or message).
SELECT * FROM toolgate.binding_report('careless_buy');
SELECT * FROM toolgate.binding_report('careless_price');
RESET ROLE;

-- Changed after the definition: the gate refuses the calls now; the report says why, first.
ALTER FUNCTION careless.effect(jsonb, jsonb) SECURITY INVOKER;
ALTER FUNCTION careless.value(jsonb, jsonb) RESET search_path;
-- And the role that defined the tool may no longer execute its target: define_tool would refuse it.
REVOKE EXECUTE ON FUNCTION careless.target(jsonb, jsonb) FROM toolgate_admin;
SET ROLE toolgate_admin;
SELECT severity, function, finding FROM toolgate.binding_report('careless_buy') WHERE severity = 'error';
SELECT advice FROM toolgate.binding_report('careless_buy') WHERE severity = 'error';
-- A function dropped.
RESET ROLE;
DROP FUNCTION careless.reader(jsonb, jsonb);
SET ROLE toolgate_admin;
SELECT * FROM toolgate.binding_report('careless_price');
-- An unknown tool is an error.
SELECT * FROM toolgate.binding_report('no_such_tool');

RESET ROLE;

-- The clean bindings give nothing: examples/maintenance's tools and examples/refunds's (loaded
-- here unless refunds_seed001 did it already).
\set ECHO none
SELECT pg_catalog.to_regnamespace('refunds') IS NULL AS load_refunds \gset
\if :load_refunds
\getenv root TOOLGATE_ROOT
SET client_min_messages = warning;
\o /dev/null
\i :root/examples/refunds/refunds.sql
\o
RESET client_min_messages;
\endif
\set ECHO all
SET ROLE toolgate_admin;
SELECT b.tool, count(r.severity) AS findings
  FROM toolgate.tool_bindings b LEFT JOIN LATERAL toolgate.binding_report(b.tool) r ON true
 WHERE b.tool IN ('request_close', 'request_purchase_part', 'read_order',
                  'emitir_reembolso', 'cancelar_assinatura', 'consultar_pedido')
 GROUP BY b.tool ORDER BY b.tool;
RESET ROLE;
