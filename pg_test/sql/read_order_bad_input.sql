-- read_order's order_id is 1..10 digits: anything else is REJECTED schema_invalid before any row
-- is looked up, not a target_not_found that a lookup would give.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT id, r->>'outcome' AS outcome, r->>'rule' AS rule, r->'errors'->0->>'instancePath' AS path
  FROM (VALUES (''), ('abc'), ('74a'), ('12345678901'), (' 742'), ('742')) AS v(id),
       LATERAL toolgate.read_order(:'sup', v.id) r;
RESET ROLE;
