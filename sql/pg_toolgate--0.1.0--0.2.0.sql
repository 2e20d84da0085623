-- pg_toolgate 0.1.0 → 0.2.0: the extension ships no ERP and no tool of its own any more; every
-- tool is bound to the DBA's functions (toolgate.define_tool). A 0.1.0 database keeps all of its
-- configuration and history, and its built-in ERP becomes the DBA's: the tables work_orders,
-- parts, cost_centers, purchases and close_requests, with their rows, move to the schema
-- `maintenance` owned by the role `maintenance_owner`, exactly as examples/maintenance builds
-- them (row-level security included), and the tools request_close, request_purchase_part and the
-- read tool read_order are bound to them with that example's functions. Calls go on working:
-- live proposals can be confirmed, settled keys replay. Two things a DBA may want to look at
-- afterwards (both in the README's "Upgrades"):
--   * reads now need a policy row like writes: every tenant with a policy row gets one for
--     read_order, for the roles its rows already name;
--   * toolgate.effects lists the audit rows of the changes the gate made (one per successful
--     call or confirmation), without the idempotency key: the ERP's rows are the DBA's.
\echo Use "ALTER EXTENSION pg_toolgate UPDATE TO '0.2.0'" to load this file. \quit

------------------------------------------------------------------------------------------------
-- 1. The registry: tool-level target states, no shipped tools, the entry points named after
--    their tools as SQL functions over toolgate.call / toolgate.read.
------------------------------------------------------------------------------------------------

ALTER TABLE toolgate.tool_bindings
    ADD COLUMN target_states text[] CHECK (array_position(target_states, NULL) IS NULL);
ALTER TABLE toolgate.tool_bindings DROP CONSTRAINT tool_bindings_check;
ALTER TABLE toolgate.tool_bindings ADD CONSTRAINT tool_bindings_check
    CHECK (CASE kind WHEN 'write' THEN target IS NOT NULL AND effect IS NOT NULL AND reader IS NULL
                     ELSE reader IS NOT NULL AND target IS NULL AND value IS NULL AND effect IS NULL
                          AND consent IS NULL AND target_states IS NULL END);

-- Every row of these is the DBA's now.
SELECT pg_catalog.pg_extension_config_dump('toolgate.tools', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_schemas', '');

-- A binding keeps its functions' signatures as text, found again by name at every use: a
-- regprocedure column (an OID) is one pg_upgrade refuses.
ALTER TABLE toolgate.tool_bindings ALTER COLUMN target TYPE text USING target::text,
                                   ALTER COLUMN value TYPE text USING value::text,
                                   ALTER COLUMN effect TYPE text USING effect::text,
                                   ALTER COLUMN reader TYPE text USING reader::text;
DROP FUNCTION toolgate.binding_fault(regprocedure, text);
-- Why the function named `fn` (a signature, as tool_bindings keeps it) may not be bound (NULL: it
-- may; no name: nothing to check). Checked by define_tool and again by the gate at every use, so
-- a function changed after its definition fails closed (BLOCKED tool_misconfigured): it must
-- exist with the binding signature, be SECURITY DEFINER with a pinned search_path, be
-- owned by a role that is not a superuser and that no agent login can act as, and be executable
-- by neither PUBLIC nor any member of toolgate_agent (the application must never reach an
-- effect around the gate).
CREATE FUNCTION toolgate.binding_fault(fn text, what text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN fn IS NULL THEN NULL
        WHEN p.oid IS NULL THEN pg_catalog.format('%s function %s does not exist', what, fn)
        WHEN p.prokind <> 'f' OR p.proretset OR p.prorettype <> 'jsonb'::regtype
             OR p.pronargs <> 2 OR p.proargtypes[0] <> 'jsonb'::regtype OR p.proargtypes[1] <> 'jsonb'::regtype
            THEN pg_catalog.format('%s function %s must take (ctx jsonb, args jsonb) and return jsonb', what, fn)
        WHEN NOT p.prosecdef THEN pg_catalog.format('%s function %s must be SECURITY DEFINER', what, fn)
        WHEN o.rolsuper THEN pg_catalog.format('%s function %s must not be owned by a superuser', what, fn)
        WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) c WHERE c LIKE 'search_path=%')
            THEN pg_catalog.format('%s function %s must pin its search_path (SET search_path = …)', what, fn)
        WHEN EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
                      WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
            THEN pg_catalog.format('%s function %s must not be executable by PUBLIC', what, fn)
        WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                      WHERE NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, 'toolgate_agent', 'MEMBER')
                        AND (pg_catalog.has_function_privilege(r.oid, p.oid, 'EXECUTE')
                             OR pg_catalog.pg_has_role(r.oid, p.proowner, 'MEMBER')))
            THEN pg_catalog.format('%s function %s must not be executable or owned by toolgate_agent or its members', what, fn)
    END
    FROM (SELECT pg_catalog.to_regprocedure(fn) AS oid) f
    LEFT JOIN pg_catalog.pg_proc p ON p.oid = f.oid
    LEFT JOIN pg_catalog.pg_roles o ON o.oid = p.proowner
$$;
REVOKE ALL ON FUNCTION toolgate.binding_fault(text, text) FROM PUBLIC;

DROP FUNCTION toolgate.invoke_binding(regprocedure, jsonb, jsonb);
DROP FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure, text);

CREATE FUNCTION toolgate.define_tool(
    tool text,
    description text,
    schema jsonb,
    sensitive boolean,
    target regprocedure,
    effect regprocedure,
    value regprocedure DEFAULT NULL,
    consent text DEFAULT NULL,
    target_states text[] DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    fault text;
    before toolgate.tool_bindings;
    after toolgate.tool_bindings;
BEGIN
    PERFORM toolgate.check_tool_name(tool);
    IF description IS NULL OR pg_catalog.btrim(description) = '' OR schema IS NULL OR sensitive IS NULL
       OR target IS NULL OR effect IS NULL THEN
        RAISE EXCEPTION 'define_tool needs a description, a schema, sensitive, a target and an effect function'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF array_position(target_states, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'target_states holds state names, not NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = define_tool.tool AND t.kind <> 'write') THEN
        RAISE EXCEPTION 'tool % is a read tool', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sensitive AND value IS NULL THEN
        RAISE EXCEPTION 'a sensitive tool needs a value function (the money at stake)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fault := coalesce(toolgate.binding_fault(target::text, 'target'), toolgate.binding_fault(effect::text, 'effect'),
                      toolgate.binding_fault(value::text, 'value'));
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'invalid_function_definition';
    END IF;
    PERFORM toolgate.check_tool_schema(schema);
    IF NOT coalesce(schema->'required' ? 'idempotency_key', false)
       OR schema->'properties'->'idempotency_key'->>'type' IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'the schema must require a string idempotency_key (the retry key)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF consent IS NOT NULL THEN
        PERFORM toolgate.check_consent_template(consent, schema, value IS NOT NULL);
    END IF;

    PERFORM toolgate.record_tool(tool, 'write', description, sensitive, schema, who);
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = define_tool.tool;
    INSERT INTO toolgate.tool_bindings AS b (tool, kind, target, value, effect, consent, target_states, version,
                                             defined_by)
    VALUES (tool, 'write', target::text, value::text, effect::text, consent, target_states, 1, who)
    ON CONFLICT ON CONSTRAINT tool_bindings_pkey DO UPDATE SET
        target = excluded.target, value = excluded.value, effect = excluded.effect, consent = excluded.consent,
        target_states = excluded.target_states,
        version = b.version + 1, defined_at = pg_catalog.now(), defined_by = excluded.defined_by
    RETURNING * INTO after;
    INSERT INTO toolgate.tool_history (tool, version, changed_at, changed_by, old, new)
    VALUES (after.tool, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after) || pg_catalog.jsonb_build_object('description', description,
                                                                         'sensitive', sensitive));
    RETURN after.version;
END
$$;

CREATE OR REPLACE FUNCTION toolgate.define_read_tool(
    tool text,
    description text,
    schema jsonb,
    reader regprocedure,
    untrusted text[] DEFAULT '{}'
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    fault text;
    before toolgate.tool_bindings;
    after toolgate.tool_bindings;
BEGIN
    PERFORM toolgate.check_tool_name(tool);
    IF description IS NULL OR pg_catalog.btrim(description) = '' OR schema IS NULL OR reader IS NULL
       OR untrusted IS NULL THEN
        RAISE EXCEPTION 'define_read_tool needs a description, a schema, a reader function and untrusted'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = define_read_tool.tool
                 AND t.kind <> 'read') THEN
        RAISE EXCEPTION 'tool % is already a write tool', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(untrusted) p WHERE p IS NULL OR (p <> '' AND p !~ '^/.{0,199}$')) THEN
        RAISE EXCEPTION 'untrusted holds JSON Pointers: empty or starting with /'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fault := toolgate.binding_fault(reader::text, 'reader');
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'invalid_function_definition';
    END IF;
    PERFORM toolgate.check_tool_schema(schema);

    PERFORM toolgate.record_tool(tool, 'read', description, false, schema, who);
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = define_read_tool.tool;
    INSERT INTO toolgate.tool_bindings AS b (tool, kind, reader, untrusted, version, defined_by)
    VALUES (tool, 'read', reader::text, untrusted, 1, who)
    ON CONFLICT ON CONSTRAINT tool_bindings_pkey DO UPDATE SET
        reader = excluded.reader, untrusted = excluded.untrusted,
        version = b.version + 1, defined_at = pg_catalog.now(), defined_by = excluded.defined_by
    RETURNING * INTO after;
    INSERT INTO toolgate.tool_history (tool, version, changed_at, changed_by, old, new)
    VALUES (after.tool, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after) || pg_catalog.jsonb_build_object('description', description));
    RETURN after.version;
END
$$;

-- The contract's three entry points keep their names, signatures and grants; they are the gate's
-- generic entry points called with their tool's name (the C functions they were are replaced).
CREATE OR REPLACE FUNCTION toolgate.request_close(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_close', args);

CREATE OR REPLACE FUNCTION toolgate.request_purchase_part(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_purchase_part', args);

CREATE OR REPLACE FUNCTION toolgate.read_order(identity text, order_id text) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.read(identity, 'read_order', pg_catalog.jsonb_build_object('order_id', order_id));

COMMENT ON FUNCTION toolgate.request_close(text, text, jsonb) IS
    'The tool request_close through the whole gate (toolgate.call); tier >= 1 returns a proposal to confirm.';
COMMENT ON FUNCTION toolgate.request_purchase_part(text, text, jsonb) IS
    'The tool request_purchase_part through the whole gate (toolgate.call).';
COMMENT ON FUNCTION toolgate.read_order(text, text) IS
    'The read tool read_order (toolgate.read): third-party text comes back marked untrusted.';
COMMENT ON FUNCTION toolgate.call(text, text, text, jsonb) IS
    'Call any write tool defined with define_tool: the whole gate runs.';
COMMENT ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure, text,
                                         text[]) IS
    'Define or redefine a write tool bound to the DBA''s own functions; versioned in tool_history.';
REVOKE ALL ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure,
                                            text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure,
                                               text, text[]) TO toolgate_admin;

-- The effects the gate made are its audit rows: the ERP's tables are the DBA's.
DROP VIEW toolgate.panel;
DROP VIEW toolgate.effects;
CREATE VIEW toolgate.effects AS
SELECT a.tenant_id, a.tool, a.target, a.actor, a.proposal_id, (a.detail->'value'->>'amount')::numeric AS value, a.at
  FROM toolgate.audit a
 WHERE a.outcome = 'SUCCEEDED' AND NOT a.replayed AND a.kind IN ('call', 'confirm');

-- Seed 000's counters per tenant, plus the effects the gate made. Calls whose identity
-- failed have no verified tenant and are counted under tenant_id NULL.
CREATE VIEW toolgate.panel AS
WITH calls AS (
    SELECT a.tenant_id,
           count(*) FILTER (WHERE a.kind = 'call'
                              AND a.rule IS DISTINCT FROM 'schema_invalid'
                              AND a.rule IS DISTINCT FROM 'identity_invalid') AS schema_valid,
           count(*) FILTER (WHERE a.rule = 'schema_invalid') AS schema_rejected,
           count(*) FILTER (WHERE a.outcome = 'BLOCKED') AS blocked_actions,
           count(*) FILTER (WHERE a.replayed) AS duplicates_suppressed,
           count(*) FILTER (WHERE a.rule = 'human_declined' AND NOT a.replayed) AS confirmation_denied,
           count(*) FILTER (WHERE a.outcome = 'PARTIAL') AS partial_results
      FROM toolgate.audit a
     GROUP BY a.tenant_id
), made AS (
    SELECT e.tenant_id, count(*) AS effects FROM toolgate.effects e GROUP BY e.tenant_id
)
SELECT coalesce(c.tenant_id, m.tenant_id) AS tenant_id,
       coalesce(c.schema_valid, 0) AS schema_valid,
       coalesce(c.schema_rejected, 0) AS schema_rejected,
       coalesce(c.blocked_actions, 0) AS blocked_actions,
       coalesce(c.duplicates_suppressed, 0) AS duplicates_suppressed,
       coalesce(c.confirmation_denied, 0) AS confirmation_denied,
       coalesce(c.partial_results, 0) AS partial_results,
       coalesce(m.effects, 0) AS effects
  FROM calls c FULL JOIN made m ON m.tenant_id = c.tenant_id;

REVOKE ALL ON toolgate.effects, toolgate.panel FROM PUBLIC;
GRANT SELECT ON toolgate.panel, toolgate.effects TO toolgate_auditor, toolgate_admin, toolgate_operator;

------------------------------------------------------------------------------------------------
-- 2. The built-in ERP becomes the DBA's: examples/maintenance's schema, owner and row-level
--    security, with the rows it had.
------------------------------------------------------------------------------------------------

DO $$
BEGIN
    CREATE ROLE maintenance_owner NOLOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;
GRANT USAGE ON SCHEMA toolgate TO maintenance_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO maintenance_owner;

CREATE SCHEMA maintenance AUTHORIZATION maintenance_owner;
ALTER EXTENSION pg_toolgate DROP SCHEMA maintenance;

-- Out of the extension (and out of pg_extension_config_dump: pg_dump dumps them as the DBA's own
-- tables from now on), into the schema, to the owner; the tenant is theirs to check, not a
-- reference into the extension's tables.
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.work_orders;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.parts;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.cost_centers;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.purchases;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.close_requests;
ALTER TABLE toolgate.work_orders DROP CONSTRAINT work_orders_tenant_id_fkey;
ALTER TABLE toolgate.parts DROP CONSTRAINT parts_tenant_id_fkey;
ALTER TABLE toolgate.cost_centers DROP CONSTRAINT cost_centers_tenant_id_fkey;
ALTER TABLE toolgate.work_orders SET SCHEMA maintenance;
ALTER TABLE toolgate.parts SET SCHEMA maintenance;
ALTER TABLE toolgate.cost_centers SET SCHEMA maintenance;
ALTER TABLE toolgate.purchases SET SCHEMA maintenance;
ALTER TABLE toolgate.close_requests SET SCHEMA maintenance;
ALTER TABLE maintenance.work_orders OWNER TO maintenance_owner;
ALTER TABLE maintenance.parts OWNER TO maintenance_owner;
ALTER TABLE maintenance.cost_centers OWNER TO maintenance_owner;
ALTER TABLE maintenance.purchases OWNER TO maintenance_owner;
ALTER TABLE maintenance.close_requests OWNER TO maintenance_owner;

-- The tenant a second time: even the owner's own functions see only the rows of the tenant the
-- gate verified for the call in progress (and none outside a call).
ALTER TABLE maintenance.work_orders ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.parts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.cost_centers ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.purchases ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.close_requests ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON maintenance.work_orders USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.parts USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.cost_centers USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.purchases USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.close_requests USING (tenant_id = toolgate.current_tenant());

-- examples/maintenance's binding functions, as that example defines them, owned by the ERP's
-- owner and executable by nobody else.
-- request_close's target: the order, locked until the call ends (no row: NULL). Its state in
-- this ERP's words: an open order that nobody inspected yet is 'uninspected', not 'open'.
CREATE FUNCTION maintenance.order_to_close(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('id', order_id, 'tenant', tenant_id,
                              'state', CASE WHEN status = 'open' AND NOT inspected THEN 'uninspected'
                                            ELSE status END)
      INTO result
      FROM maintenance.work_orders
     WHERE tenant_id = ctx->>'tenant' AND order_id = args->>'order_id'
       FOR UPDATE;
    RETURN result;
END
$$;

-- request_close's effect, in one statement: the order's new status, only if it is still open and
-- inspected, and the close request for the order it closed (none if it moved: NULL, and the gate
-- answers state_not_allowed). An error leaves nothing of it: the gate runs its bound functions in
-- a subtransaction.
CREATE FUNCTION maintenance.close_order(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    WITH closed AS (
        UPDATE maintenance.work_orders SET status = 'close_requested', updated_at = now()
         WHERE tenant_id = ctx->>'tenant' AND order_id = args->>'order_id' AND status = 'open' AND inspected
        RETURNING tenant_id, order_id)
    INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key, proposal_id)
    SELECT tenant_id, order_id, args->>'reason', ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid
      FROM closed
    RETURNING jsonb_build_object('order_id', order_id, 'status', 'close_requested', 'request_id', request_id,
                                 'summary', 'Close of work order ' || order_id || ' requested (ERP request '
                                            || request_id || ').')
    INTO result;
    RETURN result;
END
$$;

-- request_purchase_part's target: the order, with the part and the cost centre it names, all in
-- the caller's tenant (one of them missing: NULL, target_not_found). It locks the order and the
-- cost centre, every row the effect writes, before the gate goes on, and gives what the value is
-- made of: the part's price and limit, what the cost centre's budget has left.
CREATE FUNCTION maintenance.order_to_buy_for(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('id', w.order_id, 'tenant', w.tenant_id, 'state', w.status,
                              'part', p.name, 'unit_price', p.unit_price, 'max_quantity', p.max_quantity,
                              'cost_center', c.cost_center, 'available', c.budget - c.spent)
      FROM maintenance.work_orders w
      JOIN maintenance.parts p ON p.tenant_id = w.tenant_id AND p.part_id = args->>'part_id'
      JOIN maintenance.cost_centers c ON c.tenant_id = w.tenant_id AND c.cost_center = args->>'cost_center'
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id'
       FOR UPDATE OF w, c
    INTO result;
    RETURN result;
END
$$;

-- Its value, from what the target read under its locks (no row is read twice): quantity × the
-- catalogue's unit price, drawn on the cost centre, against what its budget has left; the part's
-- own per-purchase limit is the most this purchase may be worth. The unit price is also given as
-- a person reads it, for the consent text.
CREATE FUNCTION maintenance.purchase_value(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    price numeric := (ctx->'target'->>'unit_price')::numeric;
BEGIN
    RETURN jsonb_build_object('amount', (args->>'quantity')::numeric * price,
                              'account', ctx->'target'->>'cost_center',
                              'available', ctx->'target'->'available',
                              'limit', (ctx->'target'->>'max_quantity')::numeric * price,
                              'unit_price', 'R$ ' || translate(to_char(price, 'FM999,999,990.00'), ',.', '.,'));
END
$$;

-- Its effect, in one statement: charge the total the person consented to, taking the amount only
-- if the budget still has it (parallel purchases never overspend, and `spent <= budget` holds in
-- the table too; NULL when it no longer does), and record the purchase it paid for.
CREATE FUNCTION maintenance.buy_part(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    WITH charged AS (
        UPDATE maintenance.cost_centers c SET spent = c.spent + (ctx->'value'->>'amount')::numeric
         WHERE c.tenant_id = ctx->>'tenant' AND c.cost_center = args->>'cost_center'
           AND c.spent + (ctx->'value'->>'amount')::numeric <= c.budget
        RETURNING c.tenant_id, c.cost_center, c.budget - c.spent AS left_after)
    INSERT INTO maintenance.purchases (tenant_id, order_id, part_id, quantity, unit_price, total, cost_center,
                                       requested_by, idempotency_key, proposal_id)
    SELECT tenant_id, args->>'order_id', args->>'part_id', (args->>'quantity')::numeric,
           (ctx->'value'->>'amount')::numeric / (args->>'quantity')::numeric, (ctx->'value'->>'amount')::numeric,
           cost_center, ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid
      FROM charged
    RETURNING jsonb_build_object('purchase_id', purchase_id, 'order_id', order_id, 'part_id', part_id,
                                 'quantity', quantity, 'unit_price', unit_price::text, 'total', total::text,
                                 'cost_center', cost_center, 'budget_left', (SELECT left_after FROM charged)::text,
                                 'summary', 'Purchase ' || purchase_id || ' recorded: ' || quantity || ' × '
                                            || part_id || ' for work order ' || order_id || '.')
    INTO result;
    RETURN result;
END
$$;

-- read_order's reader: the order as the agent may see it. The note is third-party text;
-- define_read_tool names it, and the gate returns it marked untrusted.
CREATE FUNCTION maintenance.order_as_read(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('order_id', w.order_id, 'status', w.status, 'inspected', w.inspected, 'note', w.note)
      FROM maintenance.work_orders w
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id'
    INTO result;
    RETURN result;
END
$$;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'maintenance'::regnamespace LOOP
        EXECUTE pg_catalog.format('ALTER EXTENSION pg_toolgate DROP FUNCTION %s', f);
        EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO maintenance_owner', f);
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;

------------------------------------------------------------------------------------------------
-- 3. The three tools, bound to it (each keeps the schema version in force), and read_order's
--    policy rows.
------------------------------------------------------------------------------------------------

SELECT toolgate.define_tool(
    tool => 'request_close',
    description => 'Request that a work order be closed.',
    schema => (SELECT s.schema FROM toolgate.tool_schemas s WHERE s.tool = 'request_close'
               ORDER BY s.version DESC LIMIT 1),
    sensitive => false,
    target => 'maintenance.order_to_close(jsonb, jsonb)',
    effect => 'maintenance.close_order(jsonb, jsonb)',
    consent => 'Solicitar fechamento da OS {target.id} (tenant {tenant}). Consequência: a OS passa a '
               'close_requested e sai da fila de trabalho. Motivo informado: {args.reason}.',
    target_states => ARRAY['open']);

SELECT toolgate.define_tool(
    tool => 'request_purchase_part',
    description => 'Buy parts from the catalogue for a work order, charged to a cost centre.',
    schema => (SELECT s.schema FROM toolgate.tool_schemas s WHERE s.tool = 'request_purchase_part'
               ORDER BY s.version DESC LIMIT 1),
    sensitive => true,
    target => 'maintenance.order_to_buy_for(jsonb, jsonb)',
    effect => 'maintenance.buy_part(jsonb, jsonb)',
    value => 'maintenance.purchase_value(jsonb, jsonb)',
    consent => 'Comprar {args.quantity} × {target.part} (peça {args.part_id}) a {value.unit_price} cada, '
               'total {value.amount}, no centro de custo {value.account}, para a OS {target.id} (tenant {tenant}).',
    target_states => ARRAY['open']);

SELECT toolgate.define_read_tool(
    tool => 'read_order',
    description => 'Read a work order: its status, whether it was inspected, and its note.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id"],
        "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"}}
    }
    $schema$,
    reader => 'maintenance.order_as_read(jsonb, jsonb)',
    untrusted => ARRAY['/note']);

SELECT toolgate.set_policy(p.tenant_id, 'read_order', allowed => true, roles => p.roles, tier => 0)
  FROM (SELECT tenant_id, array_agg(DISTINCT r ORDER BY r) AS roles
          FROM toolgate.policies, unnest(roles) r
         GROUP BY tenant_id) p
 WHERE NOT EXISTS (SELECT 1 FROM toolgate.policies x WHERE x.tenant_id = p.tenant_id AND x.tool = 'read_order');

-- Every tool is someone's now.
ALTER TABLE toolgate.tools ALTER COLUMN defined_by SET NOT NULL;
