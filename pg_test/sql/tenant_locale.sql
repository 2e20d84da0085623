-- A tenant reads its proposals in its own language and currency (toolgate.set_tenant_locale):
-- the gate's sentences, the words that consent, the challenge word, how amounts are written, and
-- the one rounding, to the currency's minor unit, after which what the person reads is what the
-- audit keeps and what the effect charges. The tool here has no consent template of its own, so
-- every sentence of its text is the gate's.
\set VERBOSITY terse
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE loc_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT USAGE ON SCHEMA toolgate TO loc_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO loc_owner;
CREATE SCHEMA loc AUTHORIZATION loc_owner;
SET ROLE loc_owner;
-- Supplier accounts: a balance to pay from; each payment keeps the amount it was charged.
CREATE TABLE loc.accounts (tenant_id text, account text, balance numeric NOT NULL, PRIMARY KEY (tenant_id, account));
CREATE TABLE loc.payments (tenant_id text, account text, amount numeric NOT NULL, key text);
ALTER TABLE loc.accounts ENABLE ROW LEVEL SECURITY;
ALTER TABLE loc.accounts FORCE ROW LEVEL SECURITY;
ALTER TABLE loc.payments ENABLE ROW LEVEL SECURITY;
ALTER TABLE loc.payments FORCE ROW LEVEL SECURITY;
CREATE POLICY own ON loc.accounts USING (tenant_id = toolgate.current_tenant());
CREATE POLICY own ON loc.payments USING (tenant_id = toolgate.current_tenant());
CREATE FUNCTION loc.account(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, loc, pg_temp AS $$
    SELECT jsonb_build_object('id', account, 'tenant', tenant_id, 'state', 'open', 'balance', balance)
      FROM loc.accounts WHERE tenant_id = ctx->>'tenant' AND account = args->>'account' FOR UPDATE $$;
-- The amount as the model asked it, finer than any currency: the gate rounds it.
CREATE FUNCTION loc.amount(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, loc, pg_temp AS $$
    SELECT jsonb_build_object('amount', args->'amount', 'account', ctx->'target'->>'id',
                              'available', ctx->'target'->'balance') $$;
CREATE FUNCTION loc.pay(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, loc, pg_temp AS $$
    WITH paid AS (UPDATE loc.accounts SET balance = balance - (ctx->'value'->>'amount')::numeric
                   WHERE tenant_id = ctx->>'tenant' AND account = ctx->'target'->>'id' RETURNING tenant_id, account)
    INSERT INTO loc.payments SELECT tenant_id, account, (ctx->'value'->>'amount')::numeric, ctx->>'idempotency_key'
      FROM paid RETURNING jsonb_build_object('paid', amount::text) $$;
REVOKE ALL ON FUNCTION loc.account(jsonb, jsonb), loc.amount(jsonb, jsonb), loc.pay(jsonb, jsonb) FROM PUBLIC;
RESET ROLE;
SELECT toolgate.define_tool('pay_supplier', 'Pay a supplier from one of its accounts.', $schema$
    {"type": "object", "additionalProperties": false, "required": ["account", "amount", "idempotency_key"],
     "properties": {"account": {"type": "string", "maxLength": 20},
                    "amount": {"type": "string", "pattern": "^[0-9]{1,9}([.][0-9]{1,6})?$"},
                    "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}}}
    $schema$, sensitive => true, target => 'loc.account(jsonb, jsonb)', value => 'loc.amount(jsonb, jsonb)',
    effect => 'loc.pay(jsonb, jsonb)') IS NOT NULL AS defined;

SET ROLE toolgate_admin;
SELECT toolgate.add_tenant(t, 'Locale ' || t) FROM unnest(ARRAY['loc-br', 'loc-us', 'loc-es', 'loc-jp', 'loc-kw']) t;
-- loc-br keeps what a tenant has until it says otherwise: Portuguese, reais.
SELECT toolgate.set_tenant_locale('loc-us', 'en', 'USD', '$1,234.56');
SELECT toolgate.set_tenant_locale('loc-es', 'es', 'EUR', '1.234,56 €');
SELECT toolgate.set_tenant_locale('loc-jp', 'en', 'JPY', '¥1,234');
SELECT toolgate.set_tenant_locale('loc-kw', 'en', 'KWD', '1,234.56 KWD');
SELECT tenant_id, language, currency, minor_unit, money_format FROM toolgate.tenants
 WHERE tenant_id LIKE 'loc-%' ORDER BY tenant_id;
-- What set_tenant_locale refuses, each with its reason; nothing changes.
\set ON_ERROR_STOP 0
SELECT toolgate.set_tenant_locale('loc-us', 'de', 'EUR', '1.234,56 €');
SELECT toolgate.set_tenant_locale('loc-us', 'en', 'usd', '$1,234.56');
SELECT toolgate.set_tenant_locale('loc-us', 'en', 'XTS', '$1,234.56');
SELECT toolgate.set_tenant_locale('loc-us', 'en', 'USD', '$1.234.56');
SELECT toolgate.set_tenant_locale('loc-us', 'en', 'USD', '$1,234.56', 7);
SELECT toolgate.set_tenant_locale('loc-nowhere', 'en', 'USD', '$1,234.56');
\set ON_ERROR_STOP 1
-- A code the gate does not list, with its minor unit given.
SELECT toolgate.set_tenant_locale('loc-br', 'pt', 'XTS', 'XTS 1.234,56', 1);
SELECT currency, minor_unit FROM toolgate.tenants WHERE tenant_id = 'loc-br';
SELECT toolgate.set_tenant_locale('loc-br', 'pt', 'BRL', 'R$ 1.234,56');
-- Thresholds are in each tenant's own currency.
SELECT toolgate.set_policy(t, 'pay_supplier', allowed => true, roles => ARRAY['supervisor'], tier => 1,
                           max_value => m, max_calls_per_conversation => 10, tier2_above => t2, tier3_above => t3)
  FROM (VALUES ('loc-br', 100000, 100, 1000), ('loc-us', 100000, 100, 1000), ('loc-es', 100000, 100, 1000),
               ('loc-jp', 10000000, 100000, 1000000), ('loc-kw', 100000, 100, 1000)) p(t, m, t2, t3);
RESET ROLE;
SET ROLE toolgate_agent;
\set ON_ERROR_STOP 0
SELECT toolgate.set_tenant_locale('loc-us', 'pt', 'BRL', 'R$ 1.234,56');
\set ON_ERROR_STOP 1
RESET ROLE;
INSERT INTO loc.accounts
SELECT t, 'A1', b FROM (VALUES ('loc-br', 5000), ('loc-us', 5000), ('loc-es', 5000), ('loc-jp', 500000),
                             ('loc-kw', 5000)) v(t, b);
RESET client_min_messages;
\set pk `${TOOLGATE_MINT:?} key idp-loc-br`
SELECT toolgate.add_key('loc-br', 'idp-loc-br', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-loc-br`
SELECT toolgate.add_key('loc-br', 'chan-loc-br', 'channel', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key idp-loc-us`
SELECT toolgate.add_key('loc-us', 'idp-loc-us', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-loc-us`
SELECT toolgate.add_key('loc-us', 'chan-loc-us', 'channel', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key idp-loc-es`
SELECT toolgate.add_key('loc-es', 'idp-loc-es', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-loc-es`
SELECT toolgate.add_key('loc-es', 'chan-loc-es', 'channel', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key idp-loc-jp`
SELECT toolgate.add_key('loc-jp', 'idp-loc-jp', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-loc-jp`
SELECT toolgate.add_key('loc-jp', 'chan-loc-jp', 'channel', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key idp-loc-kw`
SELECT toolgate.add_key('loc-kw', 'idp-loc-kw', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-loc-kw`
SELECT toolgate.add_key('loc-kw', 'chan-loc-kw', 'channel', :'pk') IS NULL AS added;
\set br `${TOOLGATE_MINT:?} id loc-br bea supervisor`
\set us `${TOOLGATE_MINT:?} id loc-us una supervisor`
\set es `${TOOLGATE_MINT:?} id loc-es eva supervisor`
\set jp `${TOOLGATE_MINT:?} id loc-jp jun supervisor`
\set kw `${TOOLGATE_MINT:?} id loc-kw kai supervisor`

SET ROLE toolgate_agent;
-- 1. A tier-2 text in each language: the gate's sentences, the amounts as each tenant writes
-- them, the balance before and after, what to answer.
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS br_pid
  FROM toolgate.call(:'br', 'c-br', 'pay_supplier', '{"account": "A1", "amount": "250", "idempotency_key": "loc-br-1"}') r \gset
\echo :text
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS us_pid
  FROM toolgate.call(:'us', 'c-us', 'pay_supplier', '{"account": "A1", "amount": "250", "idempotency_key": "loc-us-1"}') r \gset
\echo :text
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS es_pid
  FROM toolgate.call(:'es', 'c-es', 'pay_supplier', '{"account": "A1", "amount": "250", "idempotency_key": "loc-es-1"}') r \gset
\echo :text

-- 2. A "yes" counts in the proposal's language only, unless that language lists it: "sim" and
-- "yes" are not "sí" in loc-es; "sim" and "sí" are not "yes" in loc-us; Portuguese lists "yes".
\set t `${TOOLGATE_MINT:?} yes loc-es :es_pid sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'es', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-es :es_pid yes`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'es', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-es :es_pid ¡Sí!`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'es', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-us :us_pid sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'us', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-us :us_pid sí`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'us', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-us :us_pid Yes.`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'us', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-br :br_pid yes`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'br', :'t') r;

-- 3. Tier 3: the challenge word is in the tenant's language, and only it, typed, consents.
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'us', 'c-us3', 'pay_supplier', '{"account": "A1", "amount": "1500", "idempotency_key": "loc-us-3"}') r \gset
SELECT regexp_replace(:'text', 'CONFIRM-[0-9A-F]{6}', 'CONFIRM-XXXXXX') AS text;
SELECT substring(:'text' from 'CONFIRM-[0-9A-F]{6}') AS word \gset
\set t `${TOOLGATE_MINT:?} yes loc-us :pid yes`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'us', :'t') r;
\set t `${TOOLGATE_MINT:?} yes loc-us :pid :word`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'us', :'t') r;
SELECT r->'proposal'->>'text' AS text
  FROM toolgate.call(:'es', 'c-es3', 'pay_supplier', '{"account": "A1", "amount": "1500", "idempotency_key": "loc-es-3"}') r \gset
SELECT regexp_replace(:'text', 'CONFIRMAR-[0-9A-F]{6}', 'CONFIRMAR-XXXXXX') AS text;

-- 4. The round trip, for currencies of 0, 2 and 3 minor units: the amount asked, finer than the
-- currency, is rounded once (half away from zero); the person reads it, the audit keeps it, the
-- effect charges it.
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'jp', 'c-jp', 'pay_supplier', '{"account": "A1", "amount": "1234.5", "idempotency_key": "loc-jp-1"}') r \gset
\echo :text
\set t `${TOOLGATE_MINT:?} yes loc-jp :pid yes`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'jp', :'t') r;
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'kw', 'c-kw', 'pay_supplier', '{"account": "A1", "amount": "12.3455", "idempotency_key": "loc-kw-1"}') r \gset
\echo :text
\set t `${TOOLGATE_MINT:?} yes loc-kw :pid yes`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'kw', :'t') r;
SELECT r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'us', 'c-us4', 'pay_supplier', '{"account": "A1", "amount": "33.165", "idempotency_key": "loc-us-4"}') r \gset
\echo :text
\set t `${TOOLGATE_MINT:?} yes loc-us :pid yes`
SELECT r->>'outcome' AS outcome, r->'result'->>'paid' AS paid FROM toolgate.confirm(:'us', :'t') r;
RESET ROLE;
-- Shown = audited = charged, for every payment made here.
SELECT p.tenant_id, p.language, p.currency, p.amount AS proposed, a.detail->'value'->>'amount' AS audited,
       (SELECT amount FROM loc.payments m WHERE m.key = p.idempotency_key) AS charged
  FROM toolgate.proposals p
  JOIN toolgate.audit a ON a.proposal_id = p.proposal_id AND a.kind = 'confirm' AND a.outcome = 'SUCCEEDED'
 WHERE p.tool = 'pay_supplier' ORDER BY p.tenant_id, p.idempotency_key;

-- 5. The currency changed while a proposal was live: the same digits are another amount, so the
-- proposal is invalidated; its language stays the one it was written in.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'us', 'c-us5', 'pay_supplier', '{"account": "A1", "amount": "20", "idempotency_key": "loc-us-5"}') r \gset
RESET ROLE;
SET ROLE toolgate_admin;
SELECT toolgate.set_tenant_locale('loc-us', 'es', 'MXN', '$1,234.56');
RESET ROLE;
SET ROLE toolgate_agent;
\set t `${TOOLGATE_MINT:?} yes loc-us :pid yes`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'us', :'t') r;
RESET ROLE;
SELECT status FROM toolgate.proposals WHERE proposal_id = :'pid';
SELECT detail->>'reason' AS reason, detail->>'currency' AS currency, detail->>'currency_now' AS currency_now
  FROM toolgate.audit WHERE proposal_id = :'pid' AND kind = 'confirm';

-- 6. A consent template per language: a tenant reading Spanish reads the tool's Spanish one; a
-- tenant whose language has none reads the tool's own (here none: the gate's, in its language).
SET ROLE toolgate_admin;
SELECT toolgate.set_consent_translation('pay_supplier', 'es',
       'Pagar {value.amount} al proveedor desde la cuenta {target.id} ({tenant}).') AS version;
\set ON_ERROR_STOP 0
SELECT toolgate.set_consent_translation('pay_supplier', 'de', 'Zahlen {value.amount}.');
SELECT toolgate.set_consent_translation('pay_supplier', 'en', 'Pay {args.iban}.');
SELECT toolgate.set_consent_translation('no_such_tool', 'en', 'Pay.');
\set ON_ERROR_STOP 1
SELECT consent_translations FROM toolgate.tool_bindings WHERE tool = 'pay_supplier';
RESET ROLE;
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'text' AS text
  FROM toolgate.call(:'es', 'c-es6', 'pay_supplier', '{"account": "A1", "amount": "80", "idempotency_key": "loc-es-6"}') r \gset
\echo :text
SELECT r->'proposal'->>'text' AS text
  FROM toolgate.call(:'kw', 'c-kw6', 'pay_supplier', '{"account": "A1", "amount": "80", "idempotency_key": "loc-kw-6"}') r \gset
\echo :text
RESET ROLE;
SET ROLE toolgate_admin;
SELECT toolgate.set_consent_translation('pay_supplier', 'es', NULL) AS version;
SELECT consent_translations IS NULL AS none_left FROM toolgate.tool_bindings WHERE tool = 'pay_supplier';
RESET ROLE;
