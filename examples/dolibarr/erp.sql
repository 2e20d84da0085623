-- An ERP that already runs, in the shape of Dolibarr (an open-source ERP): nobody here wrote it,
-- and pg_toolgate knows nothing of it. Its tables live in the schema `dolibarr`, are prefixed
-- `llx_`, carry Dolibarr's integer ids and its multi-company column `entity` (an integer: the
-- company a row belongs to), and are owned by `dolibarr_app`, the role the ERP's own application
-- logs in as. That last point is what makes it "already running": the application connects as the
-- tables' owner and sees every company's rows, and nothing added to bind it to the gate may change
-- that. examples/dolibarr/binding.sql is what the DBA adds; docs/existing-erp.md is the recipe.
--
--   llx_entity                   the companies (entity 1, entity 2)
--   llx_projet                   projects, with a budget (budget_amount)
--   llx_fichinter                interventions: fk_statut 0 draft, 1 validated, 2 invoiced, 3 closed
--   llx_commande_fournisseur     supplier orders (fk_statut 0 draft … 6/7 cancelled, 9 refused),
--   llx_commande_fournisseurdet  and their lines, amounts in numeric(24,8) as Dolibarr keeps them
--
-- Only the columns the example uses are here; a real Dolibarr has many more, which change nothing
-- of the recipe. Run it as a superuser (it creates a login role) in a database where pg_toolgate
-- is installed, before binding.sql:
--   psql -d DB -f examples/dolibarr/erp.sql
-- In a real deployment this file is the ERP you already have: skip it.

BEGIN;

-- 1. The ERP's application: it logs in (give it a password of your own) and owns its tables.
DO $$
BEGIN
    CREATE ROLE dolibarr_app LOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;
CREATE SCHEMA dolibarr AUTHORIZATION dolibarr_app;
SET ROLE dolibarr_app;

-- 2. The ERP's tables, as its installer made them: integer ids from sequences (serial), the
-- company as an integer column, no row-level security.
CREATE TABLE dolibarr.llx_entity (
    rowid  serial PRIMARY KEY,
    label  varchar(255) NOT NULL,
    active smallint NOT NULL DEFAULT 1
);
CREATE TABLE dolibarr.llx_projet (
    rowid         serial PRIMARY KEY,
    entity        integer NOT NULL DEFAULT 1,
    ref           varchar(50) NOT NULL,
    title         varchar(255) NOT NULL,
    fk_statut     integer NOT NULL DEFAULT 0,          -- 0 draft, 1 open, 2 closed
    budget_amount numeric(24, 8),                      -- NULL: no budget
    tms           timestamp NOT NULL DEFAULT now(),
    UNIQUE (ref, entity)
);
CREATE TABLE dolibarr.llx_fichinter (
    rowid       serial PRIMARY KEY,
    entity      integer NOT NULL DEFAULT 1,
    ref         varchar(30) NOT NULL,
    fk_projet   integer,
    fk_statut   smallint NOT NULL DEFAULT 0,           -- 0 draft, 1 validated, 2 invoiced, 3 closed
    description text,
    tms         timestamp NOT NULL DEFAULT now(),
    UNIQUE (ref, entity)
);
CREATE TABLE dolibarr.llx_commande_fournisseur (
    rowid         serial PRIMARY KEY,
    ref           varchar(180) NOT NULL,               -- '(PROVn)' while a draft, as Dolibarr does
    entity        integer NOT NULL DEFAULT 1,
    ref_ext       varchar(255),                        -- an external system's reference
    fk_projet     integer,
    fk_statut     smallint NOT NULL DEFAULT 0,
    total_ht      numeric(24, 8) NOT NULL DEFAULT 0,
    note_private  text,
    date_creation timestamp NOT NULL DEFAULT now(),
    UNIQUE (ref, entity)
);
CREATE TABLE dolibarr.llx_commande_fournisseurdet (
    rowid       serial PRIMARY KEY,
    fk_commande integer NOT NULL REFERENCES dolibarr.llx_commande_fournisseur,
    description text,
    qty         real NOT NULL DEFAULT 1,
    subprice    numeric(24, 8),
    total_ht    numeric(24, 8)
);

-- 3. What the ERP holds today, in two companies. Project PJ2611-0001 has spent 400 of its 1000.
INSERT INTO dolibarr.llx_entity (label) VALUES ('Atelier Nord'), ('Atelier Sud');
INSERT INTO dolibarr.llx_projet (entity, ref, title, fk_statut, budget_amount) VALUES
    (1, 'PJ2611-0001', 'Remplacement du groupe froid', 1, 1000),
    (1, 'PJ2611-0002', 'Audit énergétique', 2, 500),
    (2, 'PJ2611-0003', 'Toiture hall B', 1, 800);
INSERT INTO dolibarr.llx_fichinter (entity, ref, fk_projet, fk_statut, description) VALUES
    (1, 'FI2611-0001', 1, 1, 'Dépose du groupe froid'),
    (1, 'FI2611-0002', 1, 0, 'Brouillon: repose'),
    (1, 'FI2611-0003', 1, 1, 'Mise en service'),
    (1, 'FI2611-0004', 2, 3, 'Relevés terminés'),
    (2, 'FI2611-0005', 3, 1, 'Bâchage provisoire'),
    (2, 'FI2611-0006', 3, 1, 'Remplacement des tuiles');
INSERT INTO dolibarr.llx_commande_fournisseur (ref, entity, fk_projet, fk_statut, total_ht) VALUES
    ('CF2611-0001', 1, 1, 3, 400),
    ('CF2611-0002', 2, 3, 3, 100),
    ('CF2611-0003', 1, 1, 6, 999);                    -- cancelled: it spends nothing
INSERT INTO dolibarr.llx_commande_fournisseurdet (fk_commande, description, qty, subprice, total_ht) VALUES
    (1, 'Groupe froid 40 kW', 1, 400, 400),
    (2, 'Bâches', 10, 10, 100),
    (3, 'Commande annulée', 1, 999, 999);

RESET ROLE;
COMMIT;
