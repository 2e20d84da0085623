-- A careless bound function on a worker: a read tool whose reader takes the tenant from the
-- arguments instead of the gate's context. shopping-b and shopping-c are on the same worker, so
-- the reader's query for shopping-c's order runs in shopping-b's call, in the same backend, on a
-- shard of that worker: the ERP's row-level security on toolgate.current_tenant() (the gate's
-- verified tenant, set in that backend) still keeps it out.
SET citus.enable_ddl_propagation = off;
SET ROLE maintenance_owner;
CREATE FUNCTION maintenance.careless_order(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('order_id', w.order_id, 'tenant', w.tenant_id, 'status', w.status)
              FROM maintenance.work_orders w
             WHERE w.tenant_id = args->>'shop' AND w.order_id = args->>'order_id');
END
$$;
REVOKE EXECUTE ON FUNCTION maintenance.careless_order(jsonb, jsonb) FROM PUBLIC;
RESET ROLE;
RESET citus.enable_ddl_propagation;
SELECT toolgate.define_read_tool('careless_read', 'An order of any shop (a binding mistake).',
       '{"type": "object", "additionalProperties": false, "required": ["shop", "order_id"],
         "properties": {"shop": {"type": "string", "maxLength": 63}, "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"}}}',
       'maintenance.careless_order(jsonb, jsonb)');
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-b', 'careless_read', allowed => true, roles => ARRAY['supervisor'], tier => 0);
RESET ROLE;
-- A new bound function: distribute() again puts it on every node (the rest is done already).
SELECT object, layout FROM toolgate.distribute() WHERE object LIKE 'maintenance.careless%';
REVOKE EXECUTE ON FUNCTION maintenance.careless_order(jsonb, jsonb) FROM PUBLIC;
-- Both tenants' shards on one worker.
SELECT count(DISTINCT nodeport) AS workers FROM pg_dist_shard_placement
 WHERE shardid IN (get_shard_id_for_distribution_column('maintenance.work_orders', 'shopping-b'),
                   get_shard_id_for_distribution_column('maintenance.work_orders', 'shopping-c'));
SET SESSION AUTHORIZATION toolgate_citus_app;
\set supb `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
-- Its own order: read. shopping-c's order, which exists: nothing, as for an order that does not.
SELECT r->>'outcome' AS outcome, r->'result'->>'tenant' AS tenant
  FROM toolgate.tenant_read('shopping-b', :'supb', 'careless_read', '{"shop": "shopping-b", "order_id": "760"}') r;
SELECT toolgate.tenant_read('shopping-b', :'supb', 'careless_read', '{"shop": "shopping-c", "order_id": "801"}') AS a \gset
SELECT toolgate.tenant_read('shopping-b', :'supb', 'careless_read', '{"shop": "shopping-c", "order_id": "9999"}') AS b \gset
SELECT :'a'::jsonb = :'b'::jsonb AS indistinguishable, :'a'::jsonb->>'outcome' AS outcome, :'a'::jsonb->>'rule' AS rule;
RESET SESSION AUTHORIZATION;
SELECT tenant_id, order_id FROM maintenance.work_orders WHERE order_id = '801';
