-- Erasure of a person (docs/audit.md#erasure), in a tenant of its own: the audit names each actor
-- by a pseudonym (a keyed hash under a key of their own), never by the token's subject, and
-- auditors read the person through audit_log and effects; erase_actor destroys one person's key:
-- their rows stay, still sealed and verified, still counted, and name nobody, while another
-- person's rows are untouched; the gate's own state names them by the pseudonym; a person
-- who calls again gets a new one; bad input; who may.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('erase', 'Erasure');
SELECT toolgate.set_policy('erase', 'request_close', allowed => true, roles => ARRAY['supervisor'], tier => 0,
                           max_calls_per_conversation => 5);
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-erase`
SELECT toolgate.add_key('erase', 'idp-erase', 'identity', :'pk') IS NULL AS added;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('erase', '961', 'open', true, ''), ('erase', '962', 'open', true, ''), ('erase', '963', 'open', true, '');
\set maria `${TOOLGATE_MINT:?} id erase maria.silva@example.com supervisor`
\set joao `${TOOLGATE_MINT:?} id erase joao.souza@example.com supervisor`
-- Maria closes two orders and is refused once; João closes one.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'maria', 'conv-m',
       '{"order_id": "961", "reason": "Serviço concluído", "idempotency_key": "erase-key-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'maria', 'conv-m',
       '{"order_id": "962", "reason": "Serviço concluído", "idempotency_key": "erase-key-2"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'maria', 'conv-m',
       '{"order_id": "962", "reason": "Serviço concluído", "idempotency_key": "erase-key-3"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'joao', 'conv-j',
       '{"order_id": "963", "reason": "Serviço concluído", "idempotency_key": "erase-key-4"}') r;
RESET ROLE;
-- The audit itself holds no subject: a pseudonym per person, the same for each of their rows.
SELECT count(*) AS rows, count(DISTINCT actor) AS pseudonyms, bool_and(actor ~ '^p:[A-Za-z0-9_-]{22}$') AS all_pseudonyms,
       count(*) FILTER (WHERE a::text LIKE '%example.com%') AS rows_naming_anyone
  FROM toolgate.audit a WHERE tenant_id = 'erase';
-- An auditor reads who, through the views.
SET ROLE toolgate_auditor;
SELECT actor, outcome, rule, target FROM toolgate.audit_log WHERE tenant_id = 'erase' ORDER BY audit_id;
SELECT actor, target FROM toolgate.effects WHERE tenant_id = 'erase' ORDER BY at;
RESET ROLE;
SELECT checkpoint, sealed_rows FROM toolgate.seal('erase');

-- Maria asks to be erased. Her key is destroyed; her three rows stay, name nobody, and still
-- verify; the ledger's keys and her conversation's quota name her pseudonym.
CREATE TEMP TABLE before AS SELECT audit_id, actor FROM toolgate.audit WHERE tenant_id = 'erase';
SET ROLE toolgate_admin;
SELECT erased, pseudonym ~ '^p:' AS pseudonym, audit_rows, gate_rows
  FROM toolgate.erase_actor('erase', 'maria.silva@example.com');
RESET ROLE;
SELECT count(*) AS rows_changed FROM toolgate.audit a JOIN before b USING (audit_id) WHERE a.actor IS DISTINCT FROM b.actor;
SELECT count(*) AS keys_left FROM toolgate.person_keys WHERE tenant_id = 'erase';
SELECT (SELECT count(*) FROM toolgate.ledger WHERE tenant_id = 'erase' AND actor LIKE 'maria%') AS ledger_naming_her,
       (SELECT count(*) FROM toolgate.quota_usage WHERE tenant_id = 'erase' AND actor LIKE 'maria%') AS quota_naming_her,
       (SELECT count(*) FROM toolgate.ledger l JOIN toolgate.erasures e ON (e.tenant_id, e.pseudonym) = (l.tenant_id, l.actor)
         WHERE l.tenant_id = 'erase') AS ledger_by_pseudonym;
SET ROLE toolgate_auditor;
SELECT actor ~ '^p:' AS pseudonym_only, actor LIKE 'joao%' AS joao, outcome, rule, target
  FROM toolgate.audit_log WHERE tenant_id = 'erase' ORDER BY audit_id;
SELECT actor ~ '^p:' AS pseudonym_only, target FROM toolgate.effects WHERE tenant_id = 'erase' ORDER BY at;
SELECT count(*) AS erasures, bool_and(erased_by = 'toolgate_admin') AS by_admin FROM toolgate.erasures WHERE tenant_id = 'erase';
SELECT checkpoint, status, detail FROM toolgate.verify_audit('erase');
SELECT schema_valid, blocked_actions, effects FROM toolgate.panel WHERE tenant_id = 'erase';
RESET ROLE;

-- Maria calls again (her retried key is now another actor's: erased is final): a new key, a new
-- pseudonym, not her old one.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'maria', 'conv-m',
       '{"order_id": "961", "reason": "Serviço concluído", "idempotency_key": "erase-key-1"}') r;
RESET ROLE;
SELECT a.actor <> ALL (SELECT pseudonym FROM toolgate.erasures WHERE tenant_id = 'erase') AS new_pseudonym,
       k.person
  FROM toolgate.audit a JOIN toolgate.person_keys k ON (k.tenant_id, k.pseudonym) = (a.tenant_id, a.actor)
 WHERE a.tenant_id = 'erase' ORDER BY a.audit_id DESC LIMIT 1;

-- Bad input: an actor the audit never named, or erased already, is left as it is, and says so;
-- an unknown tenant and NULLs are refused.
SET ROLE toolgate_admin;
SELECT * FROM toolgate.erase_actor('erase', 'nobody@example.com');
SELECT * FROM toolgate.erase_actor('nowhere', 'maria.silva@example.com');
SELECT * FROM toolgate.erase_actor('erase', NULL);
RESET ROLE;

-- Personal values in arguments: a tool whose schema marks the customer's CPF "x-personal". The
-- audit names the target (the customer) by pseudonym, auditors read it back through audit_log,
-- and the arguments' HMAC is of the pseudonym, so it does not confirm a guessed CPF; a call whose
-- arguments the schema refuses makes no key. Erasing the CPF leaves its rows naming nobody.
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE crm_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
RESET client_min_messages;
GRANT USAGE ON SCHEMA toolgate TO crm_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO crm_owner;
CREATE SCHEMA crm AUTHORIZATION crm_owner;
GRANT USAGE ON SCHEMA crm TO toolgate_admin;
SET ROLE crm_owner;
CREATE TABLE crm.customers (tenant_id text NOT NULL, cpf text NOT NULL, note text, PRIMARY KEY (tenant_id, cpf));
INSERT INTO crm.customers VALUES ('erase', '12345678901', NULL), ('erase', '10987654321', NULL);
CREATE FUNCTION crm.target(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, crm, pg_temp AS $$
    SELECT jsonb_build_object('id', c.cpf, 'tenant', c.tenant_id, 'state', 'active')
      FROM crm.customers c WHERE c.tenant_id = ctx->>'tenant' AND c.cpf = args->>'cpf' FOR UPDATE
$$;
CREATE FUNCTION crm.effect(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, crm, pg_temp AS $$
    UPDATE crm.customers c SET note = args->>'note' WHERE c.tenant_id = ctx->>'tenant' AND c.cpf = args->>'cpf'
    RETURNING jsonb_build_object('summary', 'Noted.')
$$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA crm FROM PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA crm TO toolgate_admin;
RESET ROLE;
SET ROLE toolgate_admin;
SELECT toolgate.define_tool('note_customer', 'Note something about a customer.',
    '{"type": "object", "additionalProperties": false, "required": ["cpf", "note", "idempotency_key"],
      "properties": {"cpf": {"type": "string", "pattern": "^[0-9]{11}$", "x-personal": true},
                     "note": {"type": "string", "maxLength": 200},
                     "idempotency_key": {"type": "string", "minLength": 8}}}',
    false, 'crm.target(jsonb, jsonb)', 'crm.effect(jsonb, jsonb)') AS version;
SELECT toolgate.set_policy('erase', 'note_customer', allowed => true, roles => ARRAY['supervisor'], tier => 0);
RESET ROLE;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'joao', 'conv-crm', 'note_customer',
       '{"cpf": "12345678901", "note": "Prefere ligação", "idempotency_key": "crm-key-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'joao', 'conv-crm', 'note_customer',
       '{"cpf": "12345678901", "note": "Prefere e-mail", "idempotency_key": "crm-key-2"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'joao', 'conv-crm', 'note_customer',
       '{"cpf": "10987654321", "note": "Prefere e-mail", "idempotency_key": "crm-key-3"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'joao', 'conv-crm', 'note_customer',
       '{"cpf": "123", "note": "Prefere e-mail", "idempotency_key": "crm-key-4"}') r;
RESET ROLE;
SELECT count(*) AS rows, count(*) FILTER (WHERE a::text LIKE '%12345678901%' OR a::text LIKE '%10987654321%') AS naming_a_cpf,
       count(DISTINCT target) AS targets, bool_and(target ~ '^p:') FILTER (WHERE target IS NOT NULL) AS pseudonyms
  FROM toolgate.audit a WHERE tenant_id = 'erase' AND tool = 'note_customer';
-- HMAC-SHA256 (RFC 2104) in SQL, under the audit key: the first call's args_hmac is the HMAC of
-- its arguments' canonical form with the CPF's pseudonym in its place, not with the CPF.
CREATE FUNCTION pg_temp.padded(k bytea, pad integer) RETURNS bytea LANGUAGE sql AS $$
    SELECT string_agg(set_byte('\x00'::bytea, 0, (CASE WHEN i < length(k) THEN get_byte(k, i) ELSE 0 END) # pad), ''::bytea
                      ORDER BY i)
      FROM generate_series(0, 63) i
$$;
CREATE FUNCTION pg_temp.hmac(m text) RETURNS text LANGUAGE sql AS $$
    SELECT encode(sha256(pg_temp.padded(k.secret, 92) || sha256(pg_temp.padded(k.secret, 54) || convert_to(m, 'UTF8'))), 'hex')
      FROM toolgate.audit_key k WHERE k.key_id = 1
$$;
SELECT a.args_hmac = pg_temp.hmac('{"cpf":"12345678901","idempotency_key":"crm-key-1","note":"Prefere ligação"}') AS of_the_cpf,
       a.args_hmac = pg_temp.hmac(format('{"cpf":"%s","idempotency_key":"crm-key-1","note":"Prefere ligação"}', a.target))
         AS of_its_pseudonym
  FROM toolgate.audit a WHERE a.tenant_id = 'erase' AND a.tool = 'note_customer' ORDER BY a.audit_id LIMIT 1;
SELECT count(*) AS keys, count(*) FILTER (WHERE person = '123') AS key_of_refused FROM toolgate.person_keys WHERE tenant_id = 'erase';
-- An outbox tool's deliveries name their target as the call's row does: the dispatcher's
-- functions write it through toolgate.audited_target.
SELECT toolgate.audited_target('erase', 'note_customer', '{"cpf": "10987654321", "note": "x"}', '10987654321')
         = (SELECT a.target FROM toolgate.audit a WHERE a.tenant_id = 'erase' AND a.tool = 'note_customer'
             ORDER BY a.audit_id OFFSET 2 LIMIT 1) AS as_the_call,
       toolgate.audited_target('erase', 'note_customer', '{"cpf": "10987654321", "note": "x"}', '42') AS not_a_personal_value,
       toolgate.audited_target('erase', 'request_close', '{"order_id": "961"}', '961') AS unmarked_tool;
SET ROLE toolgate_auditor;
SELECT actor, target, outcome, rule FROM toolgate.audit_log WHERE tenant_id = 'erase' AND tool = 'note_customer' ORDER BY audit_id;
SELECT actor, target FROM toolgate.effects WHERE tenant_id = 'erase' AND tool = 'note_customer' ORDER BY at;
RESET ROLE;
SET ROLE toolgate_admin;
SELECT erased, audit_rows, gate_rows FROM toolgate.erase_actor('erase', '12345678901');
RESET ROLE;
SET ROLE toolgate_auditor;
SELECT actor, target ~ '^p:' AS target_pseudonym, target = '10987654321' AS other_customer
  FROM toolgate.audit_log WHERE tenant_id = 'erase' AND tool = 'note_customer' ORDER BY audit_id;
SELECT checkpoint, status FROM toolgate.verify_audit('erase');
RESET ROLE;

-- Who may: only an administrator erases; nobody but the extension's owner reads the keys; the
-- erasures are append-only.
SET ROLE toolgate_agent;
SELECT * FROM toolgate.erase_actor('erase', 'joao.souza@example.com');
SELECT count(*) FROM toolgate.person_keys;
SET ROLE toolgate_auditor;
SELECT * FROM toolgate.erase_actor('erase', 'joao.souza@example.com');
SELECT count(*) FROM toolgate.person_keys;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.erase_actor('erase', 'joao.souza@example.com');
RESET ROLE;
DELETE FROM toolgate.erasures WHERE tenant_id = 'erase';
SELECT count(*) AS keys FROM toolgate.person_keys WHERE tenant_id = 'erase';
