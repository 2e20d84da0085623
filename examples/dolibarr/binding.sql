-- What a DBA adds to bind an ERP that already runs (examples/dolibarr/erp.sql, Dolibarr's shape)
-- to pg_toolgate, without changing the ERP's tables' owner or its application: the application
-- keeps logging in as `dolibarr_app`, the tables' owner, and keeps seeing every company's rows.
-- docs/existing-erp.md explains each step; pg_test/sql/existing_erp_dolibarr.sql checks them.
--
--   1. dolibarr_gate            a binding role: NOLOGIN, not the tables' owner, not a superuser
--   2. dolibarr_tenancy         the mapping: Dolibarr's integer entity ↔ the gate's tenant (text)
--   3. row-level security       ENABLED, not forced (the owner, the application, is not bound),
--                               with policies TO dolibarr_gate only, through the mapping
--   4. grants                   exactly what the bound functions do, and no more
--   5. bound functions          in the schema dolibarr_gate, owned by dolibarr_gate
--   6. two tools                close_intervention (a write: validated → closed) and
--                               order_part_for_project (a write with a value: the project's budget)
--   7. tenants and policy rows
--
--   tenant        entity  close_intervention       order_part_for_project
--   atelier-nord  1       tier 1 (a person says)   tier 0, up to 300 per order, 5 per conversation
--   atelier-sud   2       tier 0                   tier 0, up to 300 per order
--
-- Run it as a superuser (it creates a role and policies on tables it does not own), after
-- erp.sql, in a database where pg_toolgate is installed:
--   psql -d DB -f examples/dolibarr/binding.sql
-- Identity keys are the DBA's next step (toolgate.add_key); README.md beside this file says where.

BEGIN;

-- 1. The binding role. Not the tables' owner: PostgreSQL never applies row-level security to a
-- table's owner unless it is forced, and forcing it would hide every row from the ERP's own
-- application (toolgate.current_tenant() is NULL outside a gated call). No login, no members: the
-- bound functions run as it, so nobody may act as it. A role of that name made before is used only
-- if it is the same kind of role.
DO $$
BEGIN
    CREATE ROLE dolibarr_gate NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_authid a WHERE a.rolname = 'dolibarr_gate'
                  AND (a.rolcanlogin OR a.rolpassword IS NOT NULL OR a.rolsuper OR a.rolbypassrls))
       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m WHERE m.roleid = 'dolibarr_gate'::regrole)
       OR EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relowner = 'dolibarr_gate'::regrole
                     AND c.relnamespace = 'dolibarr'::regnamespace) THEN
        RAISE EXCEPTION 'role dolibarr_gate already exists and can log in, has a password, an attribute, members or ERP tables'
            USING ERRCODE = 'invalid_object_definition';
    END IF;
END
$$;
-- Its policies read the verified tenant of the call in progress.
GRANT USAGE ON SCHEMA toolgate TO dolibarr_gate;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO dolibarr_gate;

-- 2. The mapping: which gate tenant each Dolibarr entity is. The gate's tenant is text
-- ('atelier-nord'); Dolibarr's company is an integer (1). The DBA owns it, in a schema of the
-- DBA's own: the binding role may read it and change nothing of it (not even drop it, as it could
-- in a schema it owned), so a wrong bound function cannot move itself into another company.
CREATE SCHEMA dolibarr_tenancy;
CREATE TABLE dolibarr_tenancy.entity_tenant (
    entity    integer PRIMARY KEY,
    tenant_id text NOT NULL UNIQUE
);
INSERT INTO dolibarr_tenancy.entity_tenant (entity, tenant_id) VALUES (1, 'atelier-nord'), (2, 'atelier-sud');
REVOKE ALL ON SCHEMA dolibarr_tenancy FROM PUBLIC;
REVOKE ALL ON dolibarr_tenancy.entity_tenant FROM PUBLIC;
GRANT USAGE ON SCHEMA dolibarr_tenancy TO dolibarr_gate;
GRANT SELECT ON dolibarr_tenancy.entity_tenant TO dolibarr_gate;
-- And the binding role reads only its own call's row of it: the other companies' mapping is none
-- of a call's business (the policies below read the mapping as this role, so they see it too).
ALTER TABLE dolibarr_tenancy.entity_tenant ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_row ON dolibarr_tenancy.entity_tenant TO dolibarr_gate
    USING (tenant_id = toolgate.current_tenant());

-- 3. Row-level security, enabled and NOT forced: it binds every role but the owner, so the
-- application (the owner) sees what it always saw. The policies are TO dolibarr_gate only: inside
-- a gated call the binding role sees the rows of the entity mapped to the caller's tenant; outside
-- one (current_tenant() NULL) it sees none. Any other role that is not the owner and reads these
-- tables (a report login, a replica's reader) sees nothing from now on unless it gets a policy of
-- its own: see docs/existing-erp.md.
ALTER TABLE dolibarr.llx_projet ENABLE ROW LEVEL SECURITY;
ALTER TABLE dolibarr.llx_fichinter ENABLE ROW LEVEL SECURITY;
ALTER TABLE dolibarr.llx_commande_fournisseur ENABLE ROW LEVEL SECURITY;
ALTER TABLE dolibarr.llx_commande_fournisseurdet ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_tenant ON dolibarr.llx_projet TO dolibarr_gate
    USING (entity IN (SELECT m.entity FROM dolibarr_tenancy.entity_tenant m
                       WHERE m.tenant_id = toolgate.current_tenant()));
CREATE POLICY toolgate_tenant ON dolibarr.llx_fichinter TO dolibarr_gate
    USING (entity IN (SELECT m.entity FROM dolibarr_tenancy.entity_tenant m
                       WHERE m.tenant_id = toolgate.current_tenant()));
CREATE POLICY toolgate_tenant ON dolibarr.llx_commande_fournisseur TO dolibarr_gate
    USING (entity IN (SELECT m.entity FROM dolibarr_tenancy.entity_tenant m
                       WHERE m.tenant_id = toolgate.current_tenant()));
-- A line has no entity of its own: it is its order's.
CREATE POLICY toolgate_tenant ON dolibarr.llx_commande_fournisseurdet TO dolibarr_gate
    USING (EXISTS (SELECT FROM dolibarr.llx_commande_fournisseur c
                     JOIN dolibarr_tenancy.entity_tenant m ON m.entity = c.entity
                    WHERE c.rowid = fk_commande AND m.tenant_id = toolgate.current_tenant()));

-- 4. The grants: what the bound functions do, nothing more. No DELETE, no llx_entity, nothing of
-- the ERP's other tables.
GRANT USAGE ON SCHEMA dolibarr TO dolibarr_gate;
-- close_intervention reads the intervention, locks it FOR UPDATE (which needs UPDATE on at least
-- one column) and sets its status.
GRANT SELECT, UPDATE (fk_statut, tms) ON dolibarr.llx_fichinter TO dolibarr_gate;
-- order_part_for_project reads the project and locks it FOR UPDATE, so two gated purchases on one
-- budget wait for each other; it never changes it. tms is the column whose UPDATE grant harms least.
GRANT SELECT, UPDATE (tms) ON dolibarr.llx_projet TO dolibarr_gate;
-- It adds up the project's orders, inserts one (RETURNING needs SELECT) through its sequence,
-- and one line (no RETURNING: INSERT alone) through the line's sequence.
GRANT SELECT, INSERT ON dolibarr.llx_commande_fournisseur TO dolibarr_gate;
GRANT USAGE ON SEQUENCE dolibarr.llx_commande_fournisseur_rowid_seq TO dolibarr_gate;
GRANT INSERT ON dolibarr.llx_commande_fournisseurdet TO dolibarr_gate;
GRANT USAGE ON SEQUENCE dolibarr.llx_commande_fournisseurdet_rowid_seq TO dolibarr_gate;

-- 5. The bound functions, in a schema of their own owned by the binding role: (ctx jsonb, args
-- jsonb) RETURNS jsonb, SECURITY DEFINER (they run as dolibarr_gate, under its policies), every
-- name schema-qualified and the path pinned to pg_catalog and pg_temp, last (the schema dolibarr
-- belongs to the application's login, which could create objects there: keep it off the path).
-- Each filters on the caller's tenant through the mapping itself; the policies are the second,
-- independent guard. Each returns the gate's tenant id as text ("tenant": m.tenant_id), never
-- Dolibarr's entity: the gate compares it with the caller's tenant.
CREATE SCHEMA dolibarr_gate AUTHORIZATION dolibarr_gate;
REVOKE ALL ON SCHEMA dolibarr_gate FROM PUBLIC;
SET ROLE dolibarr_gate;

-- close_intervention's target: the intervention, locked until the call ends, its status in words.
CREATE FUNCTION dolibarr_gate.intervention(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', f.ref, 'tenant', m.tenant_id, 'entity', f.entity,
                              'state', CASE f.fk_statut WHEN 0 THEN 'draft' WHEN 1 THEN 'validated'
                                                        WHEN 2 THEN 'invoiced' WHEN 3 THEN 'closed'
                                                        ELSE 'status_' || f.fk_statut END,
                              'description', f.description)
      FROM dolibarr.llx_fichinter f
      JOIN dolibarr_tenancy.entity_tenant m ON m.entity = f.entity
     WHERE m.tenant_id = ctx->>'tenant' AND f.ref = args->>'ref'
       FOR UPDATE OF f
$$;

-- Its effect: validated → closed, only if still validated (else NULL: state_not_allowed).
CREATE FUNCTION dolibarr_gate.close_intervention(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE dolibarr.llx_fichinter f SET fk_statut = 3, tms = now()
      FROM dolibarr_tenancy.entity_tenant m
     WHERE m.entity = f.entity AND m.tenant_id = ctx->>'tenant' AND f.ref = args->>'ref' AND f.fk_statut = 1
    RETURNING jsonb_build_object('ref', f.ref, 'status', 'closed',
                                 'summary', 'Intervention ' || f.ref || ' closed.')
$$;

-- order_part_for_project's target: the project, open or not, locked until the call ends.
CREATE FUNCTION dolibarr_gate.project(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', p.ref, 'tenant', m.tenant_id, 'title', p.title,
                              'state', CASE p.fk_statut WHEN 0 THEN 'draft' WHEN 1 THEN 'open'
                                                        WHEN 2 THEN 'closed' ELSE 'status_' || p.fk_statut END)
      FROM dolibarr.llx_projet p
      JOIN dolibarr_tenancy.entity_tenant m ON m.entity = p.entity
     WHERE m.tenant_id = ctx->>'tenant' AND p.ref = args->>'project'
       FOR UPDATE OF p
$$;

-- Its value: the amount asked (before tax, as Dolibarr's total_ht), drawn on the project, against
-- what the project's budget has left: the budget less its orders that are not cancelled (6, 7)
-- or refused (9). A project without a budget has no "available".
CREATE FUNCTION dolibarr_gate.purchase_value(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('amount', args->>'amount_ht', 'account', 'projet ' || p.ref,
                              'available', p.budget_amount
                                           - (SELECT coalesce(sum(c.total_ht), 0)
                                                FROM dolibarr.llx_commande_fournisseur c
                                               WHERE c.entity = p.entity AND c.fk_projet = p.rowid
                                                 AND c.fk_statut NOT IN (6, 7, 9)))
      FROM dolibarr.llx_projet p
      JOIN dolibarr_tenancy.entity_tenant m ON m.entity = p.entity
     WHERE m.tenant_id = ctx->>'tenant' AND p.ref = ctx->'target'->>'id'
$$;

-- Its effect: a draft supplier order for the project, of the amount the person or the policy
-- consented to (ctx->'value'->'amount', never one computed again), and its line. The budget is
-- checked again in the INSERT itself: the application's own orders do not take the project's lock,
-- so one it committed since the value was read is counted here, and the answer is the ERP's named
-- refusal, budget_exceeded (the gate keeps nothing of the call). A project closed meanwhile is
-- NULL: state_not_allowed.
CREATE FUNCTION dolibarr_gate.order_part(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    amount numeric := (ctx->'value'->>'amount')::numeric;
    ordered record;
BEGIN
    INSERT INTO dolibarr.llx_commande_fournisseur (rowid, ref, entity, ref_ext, fk_projet, fk_statut, total_ht, note_private)
    SELECT q.id, '(PROV' || q.id || ')', q.entity, 'toolgate:' || (ctx->>'idempotency_key'), q.project, 0, amount,
           'Asked through pg_toolgate by ' || (ctx->>'actor')
      FROM (SELECT nextval('dolibarr.llx_commande_fournisseur_rowid_seq')::integer AS id, p.entity, p.rowid AS project
              FROM dolibarr.llx_projet p
              JOIN dolibarr_tenancy.entity_tenant m ON m.entity = p.entity
             WHERE m.tenant_id = ctx->>'tenant' AND p.ref = args->>'project' AND p.fk_statut = 1
               AND (p.budget_amount IS NULL
                    OR p.budget_amount - (SELECT coalesce(sum(c.total_ht), 0) FROM dolibarr.llx_commande_fournisseur c
                                           WHERE c.entity = p.entity AND c.fk_projet = p.rowid
                                             AND c.fk_statut NOT IN (6, 7, 9)) >= amount)) q
    RETURNING rowid, ref, total_ht INTO ordered;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM dolibarr.llx_projet p JOIN dolibarr_tenancy.entity_tenant m ON m.entity = p.entity
                    WHERE m.tenant_id = ctx->>'tenant' AND p.ref = args->>'project' AND p.fk_statut = 1) THEN
            RETURN '{"refused": "budget_exceeded"}';
        END IF;
        RETURN NULL;
    END IF;
    INSERT INTO dolibarr.llx_commande_fournisseurdet (fk_commande, description, qty, subprice, total_ht)
    VALUES (ordered.rowid, args->>'label', 1, amount, amount);
    RETURN jsonb_build_object('order', ordered.ref, 'project', args->>'project', 'total_ht', round(ordered.total_ht, 2),
                              'summary', 'Supplier order ' || ordered.ref || ' of ' || round(ordered.total_ht, 2)
                                         || ' (before tax) drafted for project ' || (args->>'project') || '.');
END
$$;

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA dolibarr_gate FROM PUBLIC;
RESET ROLE;

-- 6. The tools, as the DBA defines them (whoever defines a tool must be able to name and run what
-- it binds: toolgate_admin gets that, so it can redefine them later).
GRANT USAGE ON SCHEMA dolibarr_gate TO toolgate_admin;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA dolibarr_gate TO toolgate_admin;

SELECT toolgate.define_tool(
    tool => 'close_intervention',
    description => 'Close a validated intervention (Dolibarr fiche d''intervention) once the work is done.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["ref", "idempotency_key"],
        "properties": {
            "ref": {"type": "string", "pattern": "^FI[0-9]{4}-[0-9]{4}$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$,
    sensitive => false,
    target => 'dolibarr_gate.intervention(jsonb, jsonb)',
    effect => 'dolibarr_gate.close_intervention(jsonb, jsonb)',
    target_states => ARRAY['validated'],
    consent => 'Close intervention {target.id} ({target.description}) for {tenant}.');

SELECT toolgate.define_tool(
    tool => 'order_part_for_project',
    description => 'Draft a supplier order for a part, charged to an open project''s budget.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["project", "label", "amount_ht", "idempotency_key"],
        "properties": {
            "project": {"type": "string", "pattern": "^PJ[0-9]{4}-[0-9]{4}$"},
            "label": {"type": "string", "minLength": 1, "maxLength": 200},
            "amount_ht": {"type": "string", "pattern": "^[0-9]{1,9}(\\.[0-9]{1,2})?$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$,
    sensitive => true,
    target => 'dolibarr_gate.project(jsonb, jsonb)',
    effect => 'dolibarr_gate.order_part(jsonb, jsonb)',
    value => 'dolibarr_gate.purchase_value(jsonb, jsonb)',
    target_states => ARRAY['open'],
    consent => 'Order {args.label} for {value.amount} before tax on project {target.id} ({tenant}); '
               'left in the budget: {value.available}.');
-- The workshops read Spanish and English: each tool's template in Spanish too (a tenant reading a
-- language without one reads the template above).
SELECT toolgate.set_consent_translation('close_intervention', 'es',
       'Cerrar la intervención {target.id} ({target.description}) de {tenant}.');
SELECT toolgate.set_consent_translation('order_part_for_project', 'es',
       'Pedir {args.label} por {value.amount} sin IVA en el proyecto {target.id} ({tenant}); '
       'queda en el presupuesto: {value.available}.');

-- 7. Tenants and policy rows. A missing row is a denial, never a default.
SELECT toolgate.add_tenant('atelier-nord', 'Atelier Nord (Dolibarr entity 1)');
SELECT toolgate.add_tenant('atelier-sud', 'Atelier Sud (Dolibarr entity 2)');
-- Dolibarr keeps amounts in euros; the gate rounds them to cents and writes them the tenant's way.
SELECT toolgate.set_tenant_locale('atelier-nord', 'es', 'EUR', '1.234,56 €');
SELECT toolgate.set_tenant_locale('atelier-sud', 'en', 'EUR', '€1,234.56');
SELECT toolgate.set_policy('atelier-nord', 'close_intervention', allowed => true, roles => ARRAY['technicien'], tier => 1);
SELECT toolgate.set_policy('atelier-sud', 'close_intervention', allowed => true, roles => ARRAY['technicien'], tier => 0);
SELECT toolgate.set_policy('atelier-nord', 'order_part_for_project', allowed => true, roles => ARRAY['chef_projet'],
                           tier => 0, max_value => 300, max_calls_per_conversation => 5);
SELECT toolgate.set_policy('atelier-sud', 'order_part_for_project', allowed => true, roles => ARRAY['chef_projet'],
                           tier => 0, max_value => 300);

COMMIT;
