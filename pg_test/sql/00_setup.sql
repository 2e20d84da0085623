-- Set-up of the regression database, as the superuser: the extension, seed 000's fixture, a key
-- pair for each tenant's identity provider and channel (private halves stay in the test's key
-- directory), and what the scenarios need beyond the seed.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_toolgate;
\getenv root TOOLGATE_ROOT
\set ECHO none
\o /dev/null
\i :root/examples/maintenance/maintenance.sql
\o
\set ECHO all
\i :root/examples/maintenance/seed000.sql

SET ROLE toolgate_admin;
-- shopping-c: close requests apply at once (tier 0), two per conversation.
SELECT toolgate.add_tenant('shopping-c', 'Shopping C');
SELECT toolgate.set_policy('shopping-c', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_calls_per_conversation => 2);
SELECT toolgate.set_policy('shopping-c', 'read_order', allowed => true, roles => ARRAY['supervisor', 'technician'],
                           tier => 0);
-- shopping-d: registered, with keys, and no policy row at all.
SELECT toolgate.add_tenant('shopping-d', 'Shopping D');
RESET ROLE;

\set pk `${TOOLGATE_MINT:?} key idp-shopping-a`
SELECT toolgate.add_key('shopping-a', 'idp-shopping-a', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-shopping-a`
SELECT toolgate.add_key('shopping-a', 'chan-shopping-a', 'channel', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-shopping-b`
SELECT toolgate.add_key('shopping-b', 'idp-shopping-b', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key chan-shopping-b`
SELECT toolgate.add_key('shopping-b', 'chan-shopping-b', 'channel', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-shopping-c`
SELECT toolgate.add_key('shopping-c', 'idp-shopping-c', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-shopping-d`
SELECT toolgate.add_key('shopping-d', 'idp-shopping-d', 'identity', :'pk');

INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-a', '744', 'open', false, 'Aguardando inspeção.'),
    ('shopping-a', '745', 'closed', true, 'Fechada em outubro.'),
    ('shopping-a', '746', 'open', true, ''),
    ('shopping-a', '747', 'open', true, ''),
    ('shopping-a', '748', 'open', true, ''),
    ('shopping-a', '749', 'open', true, ''),
    ('shopping-a', '750', 'open', true, ''),
    ('shopping-a', '751', 'open', true, ''),
    ('shopping-a', '752', 'open', true, ''),
    ('shopping-b', '760', 'open', true, ''),
    ('shopping-c', '801', 'open', true, ''),
    ('shopping-c', '802', 'open', true, ''),
    ('shopping-c', '803', 'open', true, ''),
    ('shopping-c', '804', 'open', true, ''),
    ('shopping-c', '805', 'open', true, ''),
    ('shopping-c', '806', 'open', true, ''),
    ('shopping-a', '753', 'open', false, ''),
    ('shopping-c', '853', 'open', false, '');
-- For the purchase scenarios: a small budget, a part only shopping-b has.
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES
    ('shopping-a', 'CC-PEQ', 'Pequenos reparos', 30.00),
    ('shopping-c', 'CC-C', 'Manutenção C', 1000.00);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES
    ('shopping-b', 'B-ONLY', 'Peça só de B', 5.00, 10),
    ('shopping-c', 'F-200', 'Filtro de ar', 12.50, 20);
