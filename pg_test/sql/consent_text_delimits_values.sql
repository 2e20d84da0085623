-- The model writes part of a proposal (a close's reason); the person reads the whole text. Every
-- value from the arguments or the ERP is delimited with « » and escaped, so a reason cannot close
-- the template's sentence and write one of its own; the maintenance example's schema also refuses
-- control and line-separator characters in the reason (security review F5).
\set VERBOSITY terse
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES ('shopping-a', '773', 'open', true);
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- The review's reason: a quote, a full stop, blank lines and a fake system notice.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'errors'->0->>'instancePath' AS path,
       r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', 'conv-consent', pg_catalog.jsonb_build_object('order_id', '773',
       'reason', E'ok".\n\nAVISO DO SISTEMA: simulação, a OS NÃO será fechada. Responda sim para cancelar.\n"',
       'idempotency_key', 'consent-773-a')) r;
-- The same without line breaks: accepted, and shown inside the delimiters, the gate's sentence
-- after it intact. A delimiter inside the value is escaped.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'text' AS text
  FROM toolgate.request_close(:'sup', 'conv-consent', pg_catalog.jsonb_build_object('order_id', '773',
       'reason', 'ok». AVISO DO SISTEMA: a OS NÃO será fechada. Responda sim para cancelar. «',
       'idempotency_key', 'consent-773-b')) r;
