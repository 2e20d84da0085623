-- The maintenance ERP's parts supplier, an ERP behind an HTTP API: `order_part_from_supplier`, an
-- outbox tool. A call is judged like any write (the same order, part and cost centre found and
-- locked, the same value from the catalogue, the same policy, quota and confirmation) and then,
-- instead of an effect here, queues the supplier's request in toolgate.outbox and answers
-- PENDING. `toolgate dispatch` sends it with the key's idempotency key; once the supplier has the
-- order, this ERP's own follow-up runs (the cost centre charged, the purchase recorded against the
-- work order). If that follow-up cannot run (the budget was spent meanwhile), the outcome is
-- PARTIAL: the supplier has the order and is never asked again; the dispatcher runs the follow-up
-- again later until it is done.
--
-- Load it after examples/maintenance/maintenance.sql, as a superuser:
--   psql -d DB -f examples/maintenance/supplier.sql
-- then point the endpoint at the supplier (its base URL; credentials are the dispatcher's):
--   SELECT toolgate.add_erp_endpoint('supplier', 'https://supplier.example/api', 'refresh_token', 5, 100);
-- and give tenants a policy row for the tool (seed000.sql's purchases' are a model).
--
-- The supplier's API is the one the dispatcher speaks (crates/fake-erp plays it in the tests and
-- the demo): POST /purchases with an Idempotency-Key, answered at once or `PENDING` with a
-- protocol polled until final, a state query by key, rotating refresh tokens, rate limits.

BEGIN;

-- Where the supplier is. A placeholder until the deployment points it at the real one: nothing
-- can be sent to port 9 of this machine.
SELECT toolgate.add_erp_endpoint('supplier', 'http://127.0.0.1:9', 'refresh_token', per_second => 5,
                                 per_minute => 100);

SET ROLE maintenance_owner;

-- The request: what the supplier is asked for, built from what the gate verified and found (the
-- order, the part, the quantity, the amount from the catalogue), never from the model's word
-- alone. The dispatcher adds the base URL, the credentials and the idempotency key. PL/pgSQL, as
-- every bound function of the examples: Citus cannot plan a SQL function's parameters, and
-- PL/pgSQL keeps its plan (docs/scale-out.md, docs/binding.md).
CREATE FUNCTION maintenance.supplier_order(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    request jsonb;
BEGIN
    SELECT jsonb_build_object(
        'method', 'POST',
        'path', '/purchases',
        'body', jsonb_build_object('tenant', ctx->>'tenant', 'order_id', ctx->'target'->>'id',
                                   'part', args->>'part_id', 'quantity', (args->>'quantity')::integer,
                                   'value', ctx->'value'->>'amount'))
      INTO request;
    RETURN request;
END
$$;

-- The follow-up once the supplier has the order, in the context of the call that asked for it
-- (row-level security on toolgate.current_tenant() holds): the purchase the supplier took is
-- charged and recorded here, as request_purchase_part's effect does, with the supplier's
-- protocol. NULL when the budget no longer has the amount: not done, the intent is PARTIAL and
-- the dispatcher tries again later (a DBA raises the budget, or refunds the supplier's order).
CREATE FUNCTION maintenance.supplier_order_received(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    recorded jsonb := maintenance.buy_part(ctx, args);
BEGIN
    IF recorded IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE maintenance.work_orders w SET updated_at = now()
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id';
    RETURN recorded || jsonb_build_object('supplier_protocol', ctx->'erp'->>'protocol',
                                          'summary', 'Ordered from the supplier and recorded: '
                                                     || (recorded->>'summary'));
END
$$;

REVOKE EXECUTE ON FUNCTION maintenance.supplier_order(jsonb, jsonb),
                           maintenance.supplier_order_received(jsonb, jsonb) FROM PUBLIC;
RESET ROLE;

SELECT toolgate.define_outbox_tool(
    tool => 'order_part_from_supplier',
    description => 'Order parts from the supplier for a work order, charged to a cost centre once the supplier has the order.',
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
    request => 'maintenance.supplier_order(jsonb, jsonb)',
    endpoint => 'supplier',
    value => 'maintenance.purchase_value(jsonb, jsonb)',
    finish => 'maintenance.supplier_order_received(jsonb, jsonb)',
    consent => 'Encomendar ao fornecedor {args.quantity} × {target.part} (peça {args.part_id}) a {value.unit_price} cada, '
               'total {value.amount}, no centro de custo {value.account}, para a OS {target.id} (tenant {tenant}).',
    target_states => ARRAY['open']);

COMMIT;
