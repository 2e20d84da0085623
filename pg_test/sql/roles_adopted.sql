-- CREATE EXTENSION adopts pg_toolgate's roles, which outlive it (they are the cluster's), only as
-- group roles (security review of 0.2.0, item 13): one that can log in, or has a password or an
-- attribute, is refused and nothing is created; a member that may grant the role on (ADMIN
-- OPTION) is named in a WARNING (other members, in a NOTICE, are not shown here: which logins
-- exist depends on what ran before on this cluster).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE DATABASE toolgate_roles;
ALTER ROLE toolgate_auditor LOGIN PASSWORD 'not-a-group';
\c toolgate_roles
SET client_min_messages = warning;
CREATE EXTENSION pg_toolgate;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'toolgate';
\c toolgate_regress
ALTER ROLE toolgate_auditor NOLOGIN PASSWORD NULL;
DO $$ BEGIN CREATE ROLE roles_grantor NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT toolgate_operator TO roles_grantor WITH ADMIN OPTION;
\c toolgate_roles
SET client_min_messages = warning;
CREATE EXTENSION pg_toolgate;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'toolgate';
\c toolgate_regress
REVOKE toolgate_operator FROM roles_grantor;
DROP ROLE roles_grantor;
DROP DATABASE toolgate_roles;
