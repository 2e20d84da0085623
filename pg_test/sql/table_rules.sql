-- The rules the tables every call writes keep themselves, whoever writes them (even a superuser
-- going around the gate): closed lists and ranges checked by domains, the rows' shapes by table
-- CHECKs. Each refused row names the rule; the same rows with valid values go in (rolled back).
\set VERBOSITY terse
BEGIN;
INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply)
VALUES ('shopping-c', 'request_close', 'rules-1', 'd', 'user-40', 'settled', '{}');
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, challenge, schema_version, policy_version,
                                status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 3, 'c', 1, 1,
        'live', now());
INSERT INTO toolgate.quota_usage (tenant_id, actor, conversation_id, tool, used) VALUES ('shopping-c', 'user-40', 'rules', 'request_close', 0);
INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, duration_us)
VALUES ('dispatch', 'shopping-c', 'request_close', 'PARTIAL', 0);
INSERT INTO maintenance.work_orders (tenant_id, order_id, status) VALUES ('shopping-c', '9999999999', 'closed');
SELECT (SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = 'rules-1') AS ledger,
       (SELECT count(*) FROM toolgate.proposals WHERE conversation_id = 'rules') AS proposals,
       (SELECT count(*) FROM toolgate.quota_usage WHERE conversation_id = 'rules') AS quota,
       (SELECT count(*) FROM maintenance.work_orders WHERE order_id = '9999999999') AS orders;
ROLLBACK;

-- The ledger: a state of its three, and a reply exactly when settled.
INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state)
VALUES ('shopping-c', 'request_close', 'rules-1', 'd', 'user-40', 'done');
INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state)
VALUES ('shopping-c', 'request_close', 'rules-1', 'd', 'user-40', 'settled');
INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply)
VALUES ('shopping-c', 'request_close', 'rules-1', 'd', 'user-40', 'reserved', '{}');
-- A proposal: a status of its six, a tier from 1 to 3, a challenge exactly at tier 3.
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 1, 1, 1,
        'approved', now());
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 0, 1, 1,
        'live', now());
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 4, 1, 1,
        'live', now());
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 3, 1, 1,
        'live', now());
-- An existing proposal cannot be moved to a status outside the list either.
BEGIN;
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest,
                                idempotency_key, text, tier, schema_version, policy_version, status, expires_at)
VALUES ('shopping-c', 'rules', 'user-40', 'request_close', '870', '{}', 'd', 'rules-1', 't', 1, 1, 1,
        'live', now());
UPDATE toolgate.proposals SET status = 'approved' WHERE tenant_id = 'shopping-c' AND conversation_id = 'rules';
ROLLBACK;
-- The quota's count never below zero, inserted or updated.
INSERT INTO toolgate.quota_usage (tenant_id, actor, conversation_id, tool, used) VALUES ('shopping-c', 'user-40', 'rules', 'request_close', -1);
BEGIN;
INSERT INTO toolgate.quota_usage (tenant_id, actor, conversation_id, tool, used) VALUES ('shopping-c', 'user-40', 'rules', 'request_close', 0);
UPDATE toolgate.quota_usage SET used = used - 1 WHERE tenant_id = 'shopping-c' AND conversation_id = 'rules';
ROLLBACK;
-- The audit: a kind of its four, an outcome of its eight.
INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, duration_us)
VALUES ('effect', 'shopping-c', 'request_close', 'SUCCEEDED', 0);
INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, duration_us)
VALUES ('call', 'shopping-c', 'request_close', 'DONE', 0);
-- The example ERP's orders: a number of digits, a state of its three.
INSERT INTO maintenance.work_orders (tenant_id, order_id, status) VALUES ('shopping-c', 'OS-1', 'open');
INSERT INTO maintenance.work_orders (tenant_id, order_id, status) VALUES ('shopping-c', '9999999999', 'reopened');
BEGIN;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status) VALUES ('shopping-c', '9999999999', 'open');
UPDATE maintenance.work_orders SET status = 'reopened' WHERE tenant_id = 'shopping-c' AND order_id = '9999999999';
ROLLBACK;
-- Nothing of the above was written.
SELECT (SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = 'rules-1') AS ledger,
       (SELECT count(*) FROM toolgate.proposals WHERE conversation_id = 'rules') AS proposals,
       (SELECT count(*) FROM toolgate.quota_usage WHERE conversation_id = 'rules') AS quota,
       (SELECT count(*) FROM toolgate.audit WHERE outcome = 'DONE' OR kind = 'effect') AS audit,
       (SELECT count(*) FROM maintenance.work_orders WHERE status = 'reopened' OR order_id = 'OS-1') AS orders;
