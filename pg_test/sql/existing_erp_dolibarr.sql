-- An ERP that already runs, bound without changing it (docs/existing-erp.md): examples/dolibarr/
-- erp.sql is the ERP (Dolibarr's shape, its application logging in as the tables' owner),
-- binding.sql what the DBA adds (a binding role that owns nothing, row-level security enabled and
-- not forced, policies TO that role through an entity ↔ tenant mapping, exact grants). The ERP's
-- application sees every company before and after; the binding role sees nothing outside a call;
-- agents close interventions and order parts in their own company only, within the budget; the
-- two tenant mistakes a binding can make are shown with deliberately wrong target functions.
\set VERBOSITY terse
SET client_min_messages = warning;
\getenv root TOOLGATE_ROOT
\set ECHO none
\o /dev/null
\i :root/examples/dolibarr/erp.sql
\o
\set ECHO all
RESET client_min_messages;
-- The ERP as it runs: its application (the tables' owner) sees both companies.
SET ROLE dolibarr_app;
SELECT 'fichinter' AS t, entity, count(*) FROM dolibarr.llx_fichinter GROUP BY entity
UNION ALL SELECT 'projet', entity, count(*) FROM dolibarr.llx_projet GROUP BY entity
UNION ALL SELECT 'commande_fournisseur', entity, count(*) FROM dolibarr.llx_commande_fournisseur GROUP BY entity
ORDER BY 1, 2;
RESET ROLE;

SET client_min_messages = warning;
\set ECHO none
\o /dev/null
\i :root/examples/dolibarr/binding.sql
\o
\set ECHO all
RESET client_min_messages;
\set pk `${TOOLGATE_MINT:?} key idp-atelier-nord`
SELECT toolgate.add_key('atelier-nord', 'idp-atelier-nord', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-atelier-nord`
SELECT toolgate.add_key('atelier-nord', 'chan-atelier-nord', 'channel', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-atelier-sud`
SELECT toolgate.add_key('atelier-sud', 'idp-atelier-sud', 'identity', :'pk');

-- What the DBA added, and what it did not change: the tables' owner is still the application,
-- row-level security is enabled and not forced, the policies name the binding role only, and the
-- bound functions belong to the binding role, which is neither owner, superuser, BYPASSRLS nor
-- able to log in.
SELECT c.relname, pg_get_userbyid(c.relowner) AS owner, c.relrowsecurity AS rls, c.relforcerowsecurity AS forced
  FROM pg_class c WHERE c.relnamespace = 'dolibarr'::regnamespace AND c.relkind = 'r' ORDER BY c.relname;
SELECT tablename, policyname, roles FROM pg_policies WHERE schemaname = 'dolibarr' ORDER BY tablename;
SELECT rolname, rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname IN ('dolibarr_app', 'dolibarr_gate') ORDER BY 1;
SELECT tool, target, value, effect FROM toolgate.tool_bindings
 WHERE tool IN ('close_intervention', 'order_part_for_project') ORDER BY tool;
SELECT DISTINCT pg_get_userbyid(p.proowner) AS owner, p.prosecdef AS security_definer, p.proconfig AS settings
  FROM pg_proc p WHERE p.pronamespace = 'dolibarr_gate'::regnamespace;

-- The application still sees, and writes, every company's rows.
SET ROLE dolibarr_app;
WITH touched AS (UPDATE dolibarr.llx_projet SET tms = tms RETURNING entity)
SELECT entity, count(*) AS updated FROM touched GROUP BY entity ORDER BY entity;
SELECT 'fichinter' AS t, entity, count(*) FROM dolibarr.llx_fichinter GROUP BY entity
UNION ALL SELECT 'projet', entity, count(*) FROM dolibarr.llx_projet GROUP BY entity
UNION ALL SELECT 'commande_fournisseur', entity, count(*) FROM dolibarr.llx_commande_fournisseur GROUP BY entity
ORDER BY 1, 2;
RESET ROLE;

-- The binding role outside a call: no tenant, so no row of any company (nor of the mapping); and nothing it was not
-- granted (the companies' table, a DELETE, the mapping).
SET ROLE dolibarr_gate;
SELECT toolgate.current_tenant() IS NULL AS no_tenant;
SELECT (SELECT count(*) FROM dolibarr.llx_fichinter) AS fichinter, (SELECT count(*) FROM dolibarr.llx_projet) AS projet,
       (SELECT count(*) FROM dolibarr.llx_commande_fournisseur) AS commandes,
       (SELECT count(*) FROM dolibarr_tenancy.entity_tenant) AS mapping_rows;
WITH u AS (UPDATE dolibarr.llx_fichinter SET fk_statut = 3 WHERE ref = 'FI2611-0005' RETURNING 1)
SELECT count(*) AS updated FROM u;
SELECT count(*) FROM dolibarr.llx_entity;
DELETE FROM dolibarr.llx_fichinter;
UPDATE dolibarr_tenancy.entity_tenant SET entity = 2 WHERE tenant_id = 'atelier-nord';
UPDATE dolibarr.llx_fichinter SET description = '' WHERE ref = 'FI2611-0005';
RESET ROLE;

SET ROLE toolgate_agent;
\set nord `${TOOLGATE_MINT:?} id atelier-nord jeanne technicien`
\set sud `${TOOLGATE_MINT:?} id atelier-sud samir technicien`
\set chef `${TOOLGATE_MINT:?} id atelier-nord claire chef_projet`
-- Closing an intervention of its own company: atelier-nord's row says tier 1, so a proposal a
-- person reads, then applied by that person's signed yes.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'nord', 'c1', 'close_intervention', '{"ref": "FI2611-0001", "idempotency_key": "dolibarr-close-1"}') r \gset
\echo :outcome
\echo :text
\set yes `${TOOLGATE_MINT:?} yes atelier-nord :pid sí`
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, r->'result'->>'ref' AS ref,
       r->'result'->>'status' AS status
  FROM toolgate.confirm(:'nord', :'yes') r;
-- atelier-sud's row says tier 0: applied at once.
SELECT r->>'outcome' AS outcome, r->'result'->>'ref' AS ref, r->'result'->>'status' AS status
  FROM toolgate.call(:'sud', 'c1', 'close_intervention', '{"ref": "FI2611-0005", "idempotency_key": "dolibarr-close-2"}') r;
-- The other company's intervention is as missing as one that does not exist; a draft and an
-- intervention closed already are in a state the tool does not allow.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c1', 'close_intervention', '{"ref": "FI2611-0006", "idempotency_key": "dolibarr-close-3"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c1', 'close_intervention', '{"ref": "FI2611-9999", "idempotency_key": "dolibarr-close-4"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c1', 'close_intervention', '{"ref": "FI2611-0002", "idempotency_key": "dolibarr-close-5"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c1', 'close_intervention', '{"ref": "FI2611-0001", "idempotency_key": "dolibarr-close-6"}') r;

-- Ordering parts for project PJ2611-0001 (budget 1000, 400 spent; a cancelled order of 999 does
-- not count): 250 applies at once; 350 is over the row's 300; 200 applies (150 left); 200 more
-- is over what the budget has left.
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, r->'result'->>'total_ht' AS total_ht
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0001", "label": "Compresseur", "amount_ht": "250.00", "idempotency_key": "dolibarr-buy-1"}') r;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0001", "label": "Condenseur", "amount_ht": "350.00", "idempotency_key": "dolibarr-buy-2"}') r;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, r->'result'->>'total_ht' AS total_ht
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0001", "label": "Vannes", "amount_ht": "200", "idempotency_key": "dolibarr-buy-3"}') r;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0001", "label": "Vannes", "amount_ht": "200", "idempotency_key": "dolibarr-buy-4"}') r;
-- A closed project, and the other company's project.
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0002", "label": "Sonde", "amount_ht": "10", "idempotency_key": "dolibarr-buy-5"}') r;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.call(:'chef', 'c2', 'order_part_for_project',
       '{"project": "PJ2611-0003", "label": "Tuiles", "amount_ht": "10", "idempotency_key": "dolibarr-buy-6"}') r;
RESET ROLE;

-- The budget taken meanwhile. The application's own orders do not take the project's lock, so
-- one it commits between the value the gate judged and the effect is seen only by the effect's
-- own check. One session cannot interleave two, so the test makes the application's order land in
-- that window: a trigger, for this test only, on the gate's quota counter (written at step 6,
-- after the value and before the effect) inserts it as the application, for conversation c3 only.
SET ROLE dolibarr_app;
CREATE FUNCTION dolibarr.app_orders_meanwhile() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO dolibarr.llx_commande_fournisseur (ref, entity, fk_projet, fk_statut, total_ht)
    VALUES ('CF2611-0004', 1, 1, 1, 120);
    RETURN NULL;
END
$$;
RESET ROLE;
CREATE TRIGGER app_orders_meanwhile AFTER INSERT ON toolgate.quota_usage
    FOR EACH ROW WHEN (NEW.conversation_id = 'c3') EXECUTE FUNCTION dolibarr.app_orders_meanwhile();
SET ROLE toolgate_agent;
-- 100 of the 150 left, judged within the budget; then the application's 120 leaves 30, and the
-- effect refuses in the ERP's words.
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.call(:'chef', 'c3', 'order_part_for_project',
       '{"project": "PJ2611-0001", "label": "Filtre", "amount_ht": "100", "idempotency_key": "dolibarr-buy-7"}') r;
RESET ROLE;
DROP TRIGGER app_orders_meanwhile ON toolgate.quota_usage;
DROP FUNCTION dolibarr.app_orders_meanwhile();
SELECT outcome, rule, detail->>'reason' AS reason, detail->>'function' AS function
  FROM toolgate.audit WHERE tenant_id = 'atelier-nord' AND tool = 'order_part_for_project' AND rule = 'budget_exceeded'
 ORDER BY audit_id;
-- The refused call keeps nothing: no order, no quota (two applied in c2; c3 none). In this one
-- session the application's order was part of the call's transaction and went with it; a real
-- application's, committed in its own, stays.
SELECT conversation_id, used FROM toolgate.quota_usage WHERE tenant_id = 'atelier-nord' ORDER BY conversation_id;

-- The ERP as its application sees it now: both companies, the two closed interventions, the two
-- orders the gate drafted (draft refs, the call's key in ref_ext), nothing of the refused ones.
SET ROLE dolibarr_app;
SELECT entity, ref, fk_statut FROM dolibarr.llx_fichinter ORDER BY ref;
SELECT c.entity, c.ref ~ '^\(PROV[0-9]+\)$' AS draft_ref, c.ref_ext, c.fk_statut, c.total_ht, d.description, d.total_ht AS line_ht
  FROM dolibarr.llx_commande_fournisseur c LEFT JOIN dolibarr.llx_commande_fournisseurdet d ON d.fk_commande = c.rowid
 ORDER BY c.rowid;
RESET ROLE;

-- Row-level security is the second guard, through the mapping: a careless target function that
-- neither filters on the tenant nor reads it from the mapping (it claims the caller's) still finds
-- nothing of the other company, because the binding role's policies hide it.
SET ROLE dolibarr_gate;
CREATE FUNCTION dolibarr_gate.careless_intervention(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', f.ref, 'tenant', ctx->>'tenant', 'state', 'validated')
      FROM dolibarr.llx_fichinter f WHERE f.ref = args->>'ref' FOR UPDATE
$$;
-- The two tenant mistakes: the ERP's entity as a number (the gate's tenant is text), and as text
-- ("1" is not the tenant "atelier-nord").
CREATE FUNCTION dolibarr_gate.intervention_entity_number(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', f.ref, 'tenant', f.entity, 'state', 'validated')
      FROM dolibarr.llx_fichinter f JOIN dolibarr_tenancy.entity_tenant m ON m.entity = f.entity
     WHERE m.tenant_id = ctx->>'tenant' AND f.ref = args->>'ref' FOR UPDATE OF f
$$;
CREATE FUNCTION dolibarr_gate.intervention_entity_text(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', f.ref, 'tenant', f.entity::text, 'state', 'validated')
      FROM dolibarr.llx_fichinter f JOIN dolibarr_tenancy.entity_tenant m ON m.entity = f.entity
     WHERE m.tenant_id = ctx->>'tenant' AND f.ref = args->>'ref' FOR UPDATE OF f
$$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA dolibarr_gate FROM PUBLIC;
RESET ROLE;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA dolibarr_gate TO toolgate_admin;
\set wrong_schema '{"type": "object", "additionalProperties": false, "required": ["ref", "idempotency_key"], "properties": {"ref": {"type": "string"}, "idempotency_key": {"type": "string", "minLength": 8}}}'
SELECT toolgate.define_tool('close_intervention_wrong', 'A deliberately wrong binding.', :'wrong_schema', false,
                            'dolibarr_gate.careless_intervention(jsonb, jsonb)', 'dolibarr_gate.close_intervention(jsonb, jsonb)') IS NOT NULL AS defined;
SELECT toolgate.set_policy('atelier-nord', 'close_intervention_wrong', allowed => true, roles => ARRAY['technicien'], tier => 0);
SET ROLE toolgate_agent;
-- It finds atelier-nord's own draft (its effect then refuses the state: it is not validated) and
-- nothing of atelier-sud's validated FI2611-0006, which it would otherwise have claimed for the
-- caller and closed.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c4', 'close_intervention_wrong', '{"ref": "FI2611-0002", "idempotency_key": "dolibarr-wrong-0"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c4', 'close_intervention_wrong', '{"ref": "FI2611-0006", "idempotency_key": "dolibarr-wrong-1"}') r;
RESET ROLE;
SELECT toolgate.define_tool('close_intervention_wrong', 'A deliberately wrong binding.', :'wrong_schema', false,
                            'dolibarr_gate.intervention_entity_number(jsonb, jsonb)', 'dolibarr_gate.close_intervention(jsonb, jsonb)') IS NOT NULL AS defined;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c4', 'close_intervention_wrong', '{"ref": "FI2611-0003", "idempotency_key": "dolibarr-wrong-2"}') r;
RESET ROLE;
SELECT toolgate.define_tool('close_intervention_wrong', 'A deliberately wrong binding.', :'wrong_schema', false,
                            'dolibarr_gate.intervention_entity_text(jsonb, jsonb)', 'dolibarr_gate.close_intervention(jsonb, jsonb)') IS NOT NULL AS defined;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'nord', 'c4', 'close_intervention_wrong', '{"ref": "FI2611-0003", "idempotency_key": "dolibarr-wrong-3"}') r;
-- The right one, through the mapping, closes it.
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status
  FROM toolgate.call(:'sud', 'c4', 'close_intervention', '{"ref": "FI2611-0006", "idempotency_key": "dolibarr-close-7"}') r;
RESET ROLE;
SELECT outcome, rule, detail->>'reason' AS reason, detail->>'function' AS function
  FROM toolgate.audit WHERE tool = 'close_intervention_wrong' ORDER BY audit_id;
-- Nothing of it changed the ERP: FI2611-0003 is still validated; FI2611-0006 closed by atelier-sud.
SET ROLE dolibarr_app;
SELECT entity, ref, fk_statut FROM dolibarr.llx_fichinter WHERE ref IN ('FI2611-0003', 'FI2611-0006') ORDER BY ref;
RESET ROLE;
-- The binding report: nothing wrong or risky in the two tools bound the recipe's way; the wrong
-- target's answers are in the audit, and the report says so.
SELECT tool, count(r.severity) AS findings
  FROM unnest(ARRAY['close_intervention', 'order_part_for_project']) tool
  LEFT JOIN LATERAL toolgate.binding_report(tool) r ON true GROUP BY tool ORDER BY tool;
SELECT severity, function FROM toolgate.binding_report('close_intervention_wrong') ORDER BY 1, 2;
