-- Seed 000's maintenance ERP, behind pg_toolgate: work orders, a parts catalogue, cost centres
-- with budgets, purchases and close requests, under the schema `maintenance`, owned by the role
-- `maintenance_owner`; and the functions that bind the contract's three tools to it:
--
--   request_close          (write)  ask to close an open, inspected work order
--   request_purchase_part  (write, sensitive)  buy parts from the catalogue for an open work
--                                   order, charged to a cost centre's budget
--   read_order             (read)   a work order, its note marked as untrusted third-party text
--
-- Tenants, keys and policy rows are the deployment's, not the ERP's: examples/maintenance/
-- seed000.sql is seed 000's (two tenants, orders 741–743, parts, cost centres).
--
-- Run it as a superuser (it creates a role) in a database where pg_toolgate is installed:
--   psql -d DB -f examples/maintenance/maintenance.sql

BEGIN;

-- 1. The ERP's owner: a role of its own, not a superuser, that no application logs in as.
-- A role of that name made before (by hand, or by an earlier run) is used only if it is the same
-- kind of role: one that can log in, or has members, is refused (its members would act as the
-- ERP's owner).
DO $$
BEGIN
    CREATE ROLE maintenance_owner NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_authid a WHERE a.rolname = 'maintenance_owner'
                  AND (a.rolcanlogin OR a.rolpassword IS NOT NULL OR a.rolsuper OR a.rolbypassrls))
       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m WHERE m.roleid = 'maintenance_owner'::regrole) THEN
        RAISE EXCEPTION 'role maintenance_owner already exists and can log in, has a password, an attribute or members'
            USING ERRCODE = 'invalid_object_definition';
    END IF;
END
$$;
-- It reads the verified tenant of the call in progress for row-level security.
GRANT USAGE ON SCHEMA toolgate TO maintenance_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO maintenance_owner;

CREATE SCHEMA maintenance AUTHORIZATION maintenance_owner;
SET ROLE maintenance_owner;

-- 2. The ERP's tables. The tenant leads every key. The order's number and state, written by
-- every close, are checked by domains: a domain's check is prepared once per server process, a
-- table's CHECK at every statement that writes the table.
CREATE DOMAIN maintenance.order_number AS text CHECK (VALUE ~ '^[0-9]{1,10}$');
CREATE DOMAIN maintenance.order_status AS text CHECK (VALUE IN ('open', 'close_requested', 'closed'));
CREATE TABLE maintenance.work_orders (
    tenant_id  text NOT NULL,
    order_id   maintenance.order_number NOT NULL,
    status     maintenance.order_status NOT NULL,
    inspected  boolean NOT NULL DEFAULT false,
    -- Free text written by third parties: returned as untrusted data, never as instructions.
    note       text NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id)
);

-- The parts catalogue: the price and the per-purchase limit come from here, never from a call.
CREATE TABLE maintenance.parts (
    tenant_id    text NOT NULL,
    part_id      text NOT NULL CHECK (part_id ~ '^[A-Za-z0-9._-]{1,40}$'),
    name         text NOT NULL,
    unit_price   numeric(12, 2) NOT NULL CHECK (unit_price > 0),
    max_quantity integer NOT NULL CHECK (max_quantity >= 1),
    PRIMARY KEY (tenant_id, part_id)
);

-- Budgets per cost centre. `spent` can never pass `budget`: purchases charge it atomically.
CREATE TABLE maintenance.cost_centers (
    tenant_id   text NOT NULL,
    cost_center text NOT NULL CHECK (cost_center ~ '^[A-Za-z0-9._-]{1,40}$'),
    name        text NOT NULL,
    budget      numeric(14, 2) NOT NULL CHECK (budget >= 0),
    spent       numeric(14, 2) NOT NULL DEFAULT 0 CHECK (spent >= 0 AND spent <= budget),
    PRIMARY KEY (tenant_id, cost_center)
);

CREATE TABLE maintenance.purchases (
    -- Random, not sequential: an id in a reply says nothing of other tenants' volume.
    purchase_id     uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    order_id        text NOT NULL,
    part_id         text NOT NULL,
    quantity        integer NOT NULL CHECK (quantity >= 1),
    unit_price      numeric(12, 2) NOT NULL,
    total           numeric(14, 2) NOT NULL CHECK (total = quantity * unit_price),
    cost_center     text NOT NULL,
    requested_by    text NOT NULL,
    idempotency_key text NOT NULL,
    proposal_id     uuid,
    purchased_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, purchase_id),
    FOREIGN KEY (tenant_id, order_id) REFERENCES maintenance.work_orders,
    FOREIGN KEY (tenant_id, part_id) REFERENCES maintenance.parts,
    FOREIGN KEY (tenant_id, cost_center) REFERENCES maintenance.cost_centers,
    -- The ERP's own defence in depth: one purchase per key, whatever the gate does.
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TABLE maintenance.close_requests (
    request_id      uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    order_id        text NOT NULL,
    reason          text NOT NULL,
    requested_by    text NOT NULL,
    idempotency_key text NOT NULL,
    proposal_id     uuid,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id),
    FOREIGN KEY (tenant_id, order_id) REFERENCES maintenance.work_orders,
    UNIQUE (tenant_id, idempotency_key)
);

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

-- 3. The binding functions: (ctx jsonb, args jsonb) RETURNS jsonb, SECURITY DEFINER, a pinned
-- search_path, executable by nobody but their owner. Each filters on ctx->>'tenant' itself; the
-- row-level security above is the second, independent guard.

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

-- request_close's effect: the order's new status, only if it is still open and inspected, then the
-- close request for the order it closed (none if it moved: NULL, and the gate answers
-- state_not_allowed). An error leaves nothing of it: the gate runs its bound functions in a
-- subtransaction. Each statement names the tenant and returns plain columns: on a Citus cluster
-- each runs on the tenant's node, in the call's backend (docs/scale-out.md).
CREATE FUNCTION maintenance.close_order(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    closed text;
    request uuid;
BEGIN
    UPDATE maintenance.work_orders SET status = 'close_requested', updated_at = now()
     WHERE tenant_id = ctx->>'tenant' AND order_id = args->>'order_id' AND status = 'open' AND inspected
    RETURNING order_id INTO closed;
    IF closed IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key, proposal_id)
    VALUES (ctx->>'tenant', closed, args->>'reason', ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid)
    RETURNING request_id INTO request;
    RETURN jsonb_build_object('order_id', closed, 'status', 'close_requested', 'request_id', request,
                              'summary', 'Close of work order ' || closed || ' requested (ERP request ' || request || ').');
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

-- Its effect: charge the total the person consented to, taking the amount only if the budget still
-- has it, in one statement (parallel purchases never overspend, and `spent <= budget` holds in the
-- table too; NULL when it no longer does), then record the purchase it paid for.
CREATE FUNCTION maintenance.buy_part(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    left_after numeric;
    p maintenance.purchases;
BEGIN
    UPDATE maintenance.cost_centers c SET spent = c.spent + (ctx->'value'->>'amount')::numeric
     WHERE c.tenant_id = ctx->>'tenant' AND c.cost_center = args->>'cost_center'
           AND c.spent + (ctx->'value'->>'amount')::numeric <= c.budget
    RETURNING c.budget - c.spent INTO left_after;
    IF left_after IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO maintenance.purchases (tenant_id, order_id, part_id, quantity, unit_price, total, cost_center,
                                       requested_by, idempotency_key, proposal_id)
    VALUES (ctx->>'tenant', args->>'order_id', args->>'part_id', (args->>'quantity')::numeric,
            (ctx->'value'->>'amount')::numeric / (args->>'quantity')::numeric, (ctx->'value'->>'amount')::numeric,
            args->>'cost_center', ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid)
    RETURNING * INTO p;
    RETURN jsonb_build_object('purchase_id', p.purchase_id, 'order_id', p.order_id, 'part_id', p.part_id,
                              'quantity', p.quantity, 'unit_price', p.unit_price::text, 'total', p.total::text,
                              'cost_center', p.cost_center, 'budget_left', left_after::text,
                              'summary', 'Purchase ' || p.purchase_id || ' recorded: ' || p.quantity || ' × '
                                         || p.part_id || ' for work order ' || p.order_id || '.');
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

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA maintenance FROM PUBLIC;
RESET ROLE;

-- 4. The tools, as the DBA defines them (toolgate_admin's right). Free text a person will read
-- (a close's reason) holds no control, format or line-separator character.
SELECT toolgate.define_tool(
    tool => 'request_close',
    description => 'Request that a work order be closed.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "reason", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "reason": {"type": "string", "minLength": 8, "maxLength": 120,
                       "pattern": "^[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}]*$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$,
    sensitive => false,
    target => 'maintenance.order_to_close(jsonb, jsonb)',
    effect => 'maintenance.close_order(jsonb, jsonb)',
    consent => 'Solicitar fechamento da OS {target.id} (tenant {tenant}). Consequência: a OS passa a '
               'close_requested e sai da fila de trabalho. Motivo informado: {args.reason}.',
    target_states => ARRAY['open']);

-- Quantity is bounded here and again by the part's own limit in the catalogue. The price is not
-- an argument: the value is quantity × the catalogue's unit price.
SELECT toolgate.define_tool(
    tool => 'request_purchase_part',
    description => 'Buy parts from the catalogue for a work order, charged to a cost centre.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "part_id", "quantity", "cost_center", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "part_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
            "cost_center": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$,
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

COMMIT;
