-- pg_toolgate on a Citus cluster (docs/scale-out.md). On one node nothing here is used.
--
-- toolgate.distribute(), run once on the coordinator after CREATE EXTENSION pg_toolgate (Citus
-- creates the extension on every worker too), turns the extension's tables into Citus's layout:
--   * the tables a call writes (ledger, proposals, approvals, conversations, quota_usage,
--     limit_usage, audit, outbox, person_keys), the audit's checkpoints and erasures, distributed by tenant_id and
--     co-located, so one tenant's rows are on one node;
--   * the configuration (tenants, keys, issuers, tools, schemas, bindings, policy, limits,
--     switches, their history, the audit key, the seal keys, administrators, ERP endpoints) as
--     reference tables,
--     a copy on every node, read locally by every call;
--   * the entry points routed by tenant (tenant_call, tenant_confirm, tenant_read,
--     tenant_approve, tenant_pending, tenant_approval_history) delegated to
--     the node that holds the tenant's shard: the whole call, the DBA's bound functions and the
--     row-level security on toolgate.current_tenant() included, runs in one backend there; so
--     are the outbox's, which name a tenant (tenant_claim_outbox, renew_outbox, settle_outbox with
--     the tool's finish function, resolve_outbox, requeue_outbox);
--   * the ERP's tables it is given distributed by their tenant_id and co-located with the gate's
--     (a table whose tenant is another column: create_distributed_table(…, colocate_with =>
--     'toolgate.ledger') by hand, before);
--   * every bound function of every tool present on every node (after the ERP's tables: a
--     function may name a table's row type);
-- Running it again does what is left to do. The audit's ids need nothing of it: each node draws
-- its own (toolgate.node_audit_id, below).

-- The node's Citus group (0 on one server, and on a coordinator): what sets an audit id's range.
CREATE FUNCTION toolgate.node_group() RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    node integer;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        EXECUTE 'SELECT groupid FROM pg_catalog.pg_dist_local_group' INTO node;
    END IF;
    RETURN coalesce(node, 0);
END
$$;
COMMENT ON FUNCTION toolgate.node_group() IS
    'The gate''s: this node''s Citus group id, 0 without Citus (the high bits of the audit ids drawn here).';
REVOKE ALL ON FUNCTION toolgate.node_group() FROM PUBLIC;

-- The audit's ids: the sequence's next value under the node's group (toolgate.node_audit_id, in
-- Rust), so an id drawn on one node never collides with another's, on a worker added at any time.
ALTER TABLE toolgate.audit ALTER COLUMN audit_id
    SET DEFAULT toolgate.node_audit_id(pg_catalog.nextval('toolgate.audit_audit_id_seq'));
REVOKE ALL ON FUNCTION toolgate.node_audit_id(bigint) FROM PUBLIC;

CREATE FUNCTION toolgate.distribute(erp_tables regclass[] DEFAULT '{}') RETURNS TABLE (object text, layout text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reference constant text[] := ARRAY['tenants', 'keys', 'issuers', 'tenant_issuers', 'tools', 'tool_schemas',
                                       'erp_endpoints', 'tool_bindings', 'erp_credentials', 'policies',
                                       'policy_history', 'tool_history', 'write_switches', 'audit_key',
                                       'administrators', 'erp_endpoint_history', 'limits', 'limit_history',
                                       'seal_keys', 'audit_retention'];
    tenant_tables constant text[] := ARRAY['ledger', 'proposals', 'conversations', 'quota_usage', 'audit', 'outbox',
                                           'limit_usage', 'audit_checkpoints', 'audit_purges', 'person_keys',
                                           'erasures', 'approvals'];
    entry_points constant text[] := ARRAY['toolgate.tenant_call(text,text,text,text,jsonb)',
                                          'toolgate.tenant_read(text,text,text,jsonb)',
                                          'toolgate.tenant_confirm(text,text,text)',
                                          'toolgate.tenant_approve(text,text,text,text,text)',
                                          'toolgate.tenant_pending(text,text)',
                                          'toolgate.tenant_approval_history(text,text)',
                                          'toolgate.tenant_audit_trail(text,text,jsonb)',
                                          'toolgate.tenant_claim_outbox(text,integer,interval,text[])',
                                          'toolgate.renew_outbox(text,text,text,uuid,interval)',
                                          'toolgate.note_outbox(text,text,text,uuid,text,jsonb)',
                                          'toolgate.settle_outbox(text,text,text,uuid,text,jsonb,interval,jsonb)',
                                          'toolgate.resolve_outbox(text,text,text,text,text,jsonb)',
                                          'toolgate.requeue_outbox(text,text,text,text)',
                                          'toolgate.tenant_seal(text,integer,interval)'];
    t text;
    erp regclass;
    fk record;
    fks text[] := '{}';
    fn text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'toolgate.distribute needs Citus: CREATE EXTENSION citus, and add the workers, first'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'toolgate.distribute runs on the Citus coordinator'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    -- The reference tables keep a copy on the coordinator, which running this again, and a call
    -- refused there (routing_required, audited), need: it must be in Citus's metadata.
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE groupid = 0) THEN
        RAISE EXCEPTION 'toolgate.distribute needs the coordinator registered in Citus''s metadata'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'SELECT citus_set_coordinator_host(''<its host name>'', <its port>) first, then run it again.';
    END IF;
    IF NOT toolgate.administers(session_user) THEN
        RAISE EXCEPTION 'only an administrator of this database may distribute pg_toolgate'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- The configuration's triggers (administrators only; tell backends a row changed) run on each
    -- node's copy: what Citus calls unsafe triggers, here on purpose.
    SET LOCAL citus.enable_unsafe_triggers = on;
    -- Functions are distributed in the same transaction as tables: one connection per node.
    SET LOCAL citus.multi_shard_modify_mode = 'sequential';

    IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'toolgate.tenants'::regclass) THEN
        -- Citus turns a table referenced by a foreign key into a Citus table only with the whole
        -- graph at once, which it cannot do for an extension's tables: the keys between the
        -- configuration tables are set aside (here and on the workers, where CREATE EXTENSION made
        -- them too) and made again between the reference tables.
        FOR fk IN SELECT c.conrelid::regclass AS rel, c.conname, pg_get_constraintdef(c.oid) AS def
                    FROM pg_constraint c
                   WHERE c.contype = 'f' AND c.connamespace = 'toolgate'::regnamespace
                   ORDER BY c.conrelid::regclass::text, c.conname LOOP
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.rel, fk.conname);
            PERFORM run_command_on_workers(format('ALTER TABLE %s DROP CONSTRAINT %I', fk.rel, fk.conname));
            fks := fks || format('ALTER TABLE %s ADD CONSTRAINT %I %s', fk.rel, fk.conname, fk.def);
        END LOOP;
        FOREACH t IN ARRAY reference LOOP
            PERFORM create_reference_table(format('toolgate.%I', t)::regclass);
        END LOOP;
        FOREACH t IN ARRAY fks LOOP
            EXECUTE t;
        END LOOP;
    END IF;
    FOREACH t IN ARRAY reference LOOP
        -- A configuration table a later version added (no foreign keys): on its own.
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = format('toolgate.%I', t)::regclass) THEN
            PERFORM create_reference_table(format('toolgate.%I', t)::regclass);
        END IF;
        object := 'toolgate.' || t; layout := 'reference';
        RETURN NEXT;
    END LOOP;

    -- The audit's rows so far moved to their months' partitions, while it is one server's: once
    -- distributed, Citus cannot attach a partition that holds rows.
    IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'toolgate.audit'::regclass) THEN
        PERFORM toolgate.audit_partitions();
    END IF;
    FOREACH t IN ARRAY tenant_tables LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = format('toolgate.%I', t)::regclass) THEN
            IF t = 'ledger' THEN
                PERFORM create_distributed_table('toolgate.ledger', 'tenant_id');
            ELSE
                PERFORM create_distributed_table(format('toolgate.%I', t)::regclass, 'tenant_id',
                                                 colocate_with => 'toolgate.ledger');
            END IF;
        END IF;
        object := 'toolgate.' || t; layout := 'distributed by tenant_id';
        RETURN NEXT;
    END LOOP;

    FOREACH erp IN ARRAY erp_tables LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = erp) THEN
            PERFORM create_distributed_table(erp, 'tenant_id', colocate_with => 'toolgate.ledger');
        END IF;
        object := erp::text; layout := 'distributed by tenant_id';
        RETURN NEXT;
    END LOOP;

    FOREACH fn IN ARRAY entry_points LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass AND o.objid = fn::regprocedure
                                                      AND o.distribution_argument_index IS NOT NULL) THEN
            PERFORM create_distributed_function(fn::regprocedure, distribution_arg_name => 'tenant',
                                               colocate_with => 'toolgate.ledger');
        END IF;
        object := fn; layout := 'delegated by tenant';
        RETURN NEXT;
    END LOOP;

    -- Every bound function on every node (a delegated call runs them there).
    FOR fn IN SELECT DISTINCT f FROM toolgate.tool_bindings b,
                  LATERAL unnest(ARRAY[b.target, b.value, b.effect, b.reader, b.request, b.finish]) AS f
               WHERE f IS NOT NULL ORDER BY f LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass AND o.objid = fn::regprocedure) THEN
            PERFORM create_distributed_function(fn::regprocedure);
        END IF;
        object := fn; layout := 'on every node';
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION toolgate.distribute(regclass[]) IS
    'On a Citus coordinator: the extension''s tables (and the ERP tables given) distributed by tenant, configuration as reference tables, the tenant_* entry points delegated to the tenant''s node.';
REVOKE ALL ON FUNCTION toolgate.distribute(regclass[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.distribute(regclass[]) TO toolgate_admin;

-- Whether a call for `tenant` runs where the tenant's rows are: always on one node; on a Citus
-- cluster (toolgate.distribute() ran), only on the node that holds the tenant's shard, where Citus
-- delegated a tenant_* call. The gate refuses a call anywhere else (routing_required): its rows,
-- and the row-level security of the ERP's, are on another node. Read under the placements of
-- now, so a shard moved away is seen at once.
CREATE FUNCTION toolgate.tenant_is_here(tenant text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    here boolean := true;
BEGIN
    -- Static SQL, planned once a backend (a string EXECUTEd was planned at every call): PL/pgSQL
    -- resolves Citus's names only when the branch first runs, which is never without Citus.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::pg_catalog.regclass)
               OR EXISTS (SELECT FROM pg_catalog.pg_dist_placement p JOIN pg_catalog.pg_dist_local_group l USING (groupid)
                           WHERE p.shardid = pg_catalog.get_shard_id_for_distribution_column('toolgate.ledger', tenant))
          INTO here;
    END IF;
    RETURN here;
END
$$;
COMMENT ON FUNCTION toolgate.tenant_is_here(text) IS
    'The gate''s: true unless the ledger is distributed (Citus) and the tenant''s shard is on another node.';
REVOKE ALL ON FUNCTION toolgate.tenant_is_here(text) FROM PUBLIC;
