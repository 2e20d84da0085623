-- CREATE EXTENSION adopts pg_toolgate's roles, which outlive it (they are the cluster's), only as
-- group roles (security review of 0.2.0, item 13): one that can log in, or has a password or an
-- attribute, is refused and nothing is created; its members are named in a WARNING.
\set VERBOSITY terse
CREATE DATABASE toolgate_roles;
ALTER ROLE toolgate_auditor LOGIN PASSWORD 'not-a-group';
\c toolgate_roles
CREATE EXTENSION pg_toolgate;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'toolgate';
\c toolgate_regress
ALTER ROLE toolgate_auditor NOLOGIN PASSWORD NULL;
\c toolgate_roles
-- toolgate_agent has members here (the application logins of earlier scenarios): adopted, named.
SET client_min_messages = warning;
CREATE EXTENSION pg_toolgate;
RESET client_min_messages;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'toolgate';
\c toolgate_regress
DROP DATABASE toolgate_roles;
