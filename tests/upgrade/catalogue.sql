-- What pg_toolgate is in the database this runs in: every object the extension owns or puts in
-- its schema, one fact a line, prefixed by the object's identity and sorted, so that two
-- databases compare with diff (scripts/upgrade-test.sh compares one updated from an older
-- version with a fresh CREATE EXTENSION). A text of several lines (a function's body, a view's
-- definition) becomes numbered lines. Lines starting with "row " are the rows of the extension's
-- tables (the test checks that a fresh install's rows are all in the updated database); every
-- other line is a catalogue fact and must be identical.
--
--   psql -X -q -At -v ON_ERROR_STOP=1 -d DB -f tests/upgrade/catalogue.sql | LC_ALL=C sort
--
-- With -v schema=NAME it describes the objects of another schema instead, and nothing of the
-- extension's (the 0.1.0 → 0.2.0 update builds the schema `maintenance` of a DBA's own, which is
-- compared with the one examples/maintenance/maintenance.sql builds).
--
-- Deliberately left out, because they differ by data, not by definition:
--   * a table's column order (attnum): ALTER TABLE ADD COLUMN appends where CREATE TABLE may
--     put the column elsewhere, so columns are compared by name;
--   * sequences' current values (how many rows were ever written), and OIDs of every kind;
--   * the rows of toolgate.audit_key (the audit HMAC key, random per install) and every
--     timestamp column of a row (when it was written);
--   * probin's directory (where the library was found), normalised to the library's name;
--   * the column option pg_attver=N that Debian's PostgreSQL 15.20 puts on every column (not an
--     option anyone sets: its value differs by table and by database);
--   * privileges on the extension's objects granted to roles other than PUBLIC, the owner and the
--     extension's four: a DBA's (refunds_owner may call toolgate.current_tenant()).
-- Other kinds of object in the schema (operators, collations, …) are listed by name only.
-- Roles are cluster-wide: two databases of one cluster see the same roles, so their lines
-- (attributes, memberships) only differ when the dumps come from two clusters.
\set ON_ERROR_STOP 1
\if :{?schema}
\else
\set schema toolgate
\endif
-- Every name qualified by its schema, whatever the caller's search_path.
SET search_path = pg_catalog;

WITH
ext AS (SELECT e.* FROM pg_extension e WHERE e.extname = 'pg_toolgate' AND :'schema' = 'toolgate'),
ns AS (SELECT n.oid, n.nspname FROM pg_namespace n WHERE n.nspname = :'schema'),
members AS (
    SELECT d.classid, d.objid, d.objsubid
      FROM pg_depend d JOIN ext ON d.refobjid = ext.oid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
),
rels AS (
    SELECT c.oid, c.relkind,
           (CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table' WHEN 'v' THEN 'view'
                           WHEN 'm' THEN 'materialized view' WHEN 'S' THEN 'sequence'
                           WHEN 'f' THEN 'foreign table' WHEN 'c' THEN 'type' END)
           || ' ' || c.oid::regclass::text AS obj
      FROM pg_class c
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
       AND (c.relnamespace IN (SELECT oid FROM ns)
            OR c.oid IN (SELECT objid FROM members WHERE classid = 'pg_class'::regclass))
),
procs AS (
    SELECT p.oid,
           (CASE p.prokind WHEN 'f' THEN 'function' WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate'
                           WHEN 'w' THEN 'window function' END)
           || ' ' || p.oid::regprocedure::text AS obj
      FROM pg_proc p
     WHERE p.pronamespace IN (SELECT oid FROM ns)
        OR p.oid IN (SELECT objid FROM members WHERE classid = 'pg_proc'::regclass)
),
-- Types of their own: not a table's row type (its table says it all) nor an array type made
-- beside another type.
types AS (
    SELECT t.oid, 'type ' || t.oid::regtype::text AS obj
      FROM pg_type t
     WHERE (t.typnamespace IN (SELECT oid FROM ns)
            OR t.oid IN (SELECT objid FROM members WHERE classid = 'pg_type'::regclass))
       AND t.typrelid = 0
       AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)
),
roles AS (
    SELECT r.oid, r.rolname, 'role ' || r.rolname AS obj
      FROM pg_roles r
     WHERE r.rolname IN ('toolgate_admin', 'toolgate_operator', 'toolgate_agent', 'toolgate_auditor', 'toolgate_dispatcher')
       AND :'schema' = 'toolgate'
),
-- One line per grantee (and grantor): the privileges it holds, with grant option or not. A NULL
-- ACL is the owner's default one. Only the extension's own grantees: PUBLIC, the object's owner
-- and the extension's roles. What a DBA grants to a role of their own (an ERP's owner may use
-- toolgate.current_tenant()) is the database's, not the extension's: an updated database that a
-- DBA used has such grants where a fresh one has none.
acls(obj, fact, acl, owner) AS (
    SELECT r.obj, 'grant', coalesce(c.relacl, acldefault((CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char", c.relowner)),
           c.relowner
      FROM rels r JOIN pg_class c ON c.oid = r.oid
    UNION ALL
    SELECT p.obj, 'grant', coalesce(f.proacl, acldefault('f', f.proowner)), f.proowner
      FROM procs p JOIN pg_proc f ON f.oid = p.oid
    UNION ALL
    SELECT t.obj, 'grant', coalesce(y.typacl, acldefault('T', y.typowner)), y.typowner
      FROM types t JOIN pg_type y ON y.oid = t.oid
    UNION ALL
    SELECT 'schema ' || n.nspname, 'grant', coalesce(n.nspacl, acldefault('n', n.nspowner)), n.nspowner
      FROM ns JOIN pg_namespace n ON n.oid = ns.oid
    UNION ALL
    SELECT r.obj, 'column ' || t.attname || ' grant', t.attacl, c.relowner
      FROM rels r JOIN pg_class c ON c.oid = r.oid JOIN pg_attribute t ON t.attrelid = r.oid
     WHERE t.attnum > 0 AND NOT t.attisdropped AND t.attacl IS NOT NULL
),
grants AS (
    SELECT g.obj, g.fact,
           'to ' || CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END || ': '
           || string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)
           || CASE WHEN a.is_grantable THEN ' with grant option' ELSE '' END
           || ' (by ' || a.grantor::regrole::text || ')' AS val
      FROM acls g, aclexplode(g.acl) a
     WHERE a.grantee IN (0, g.owner) OR a.grantee IN (SELECT oid FROM roles)
     GROUP BY g.obj, g.fact, a.grantee, a.grantor, a.is_grantable
),
facts(obj, fact, val) AS (
    -- The extension itself, its members, and the tables pg_dump keeps the rows of.
    SELECT 'extension pg_toolgate', 'version', e.extversion FROM ext e
    UNION ALL SELECT 'extension pg_toolgate', 'relocatable', e.extrelocatable::text FROM ext e
    UNION ALL SELECT 'extension pg_toolgate', 'schema', e.extnamespace::regnamespace::text FROM ext e
    UNION ALL SELECT 'extension pg_toolgate', 'owner', e.extowner::regrole::text FROM ext e
    UNION ALL
    SELECT 'extension pg_toolgate', 'config dump',
           c.cfg::regclass::text || ' ' || coalesce(nullif(e.extcondition[c.i], ''), '(every row)')
      FROM ext e, unnest(e.extconfig) WITH ORDINALITY AS c(cfg, i)
    UNION ALL
    SELECT 'extension pg_toolgate', 'member', pg_describe_object(m.classid, m.objid, m.objsubid) FROM members m
    UNION ALL
    -- Everything in the schema, member or not (a member elsewhere is in the list above).
    SELECT 'schema ' || :'schema', 'holds', pg_describe_object(o.classid, o.objid, 0)
           || CASE WHEN EXISTS (SELECT 1 FROM members m WHERE m.classid = o.classid AND m.objid = o.objid)
                   THEN '' ELSE ' (not an extension member)' END
      -- (Indexes are never members: their tables list them.)
      FROM (SELECT 'pg_class'::regclass AS classid, c.oid AS objid FROM pg_class c
             WHERE c.relnamespace IN (SELECT oid FROM ns) AND c.relkind NOT IN ('i', 'I')
            UNION ALL SELECT 'pg_proc'::regclass, p.oid FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_type'::regclass, t.oid FROM types t
            UNION ALL SELECT 'pg_operator'::regclass, o.oid FROM pg_operator o WHERE o.oprnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_collation'::regclass, o.oid FROM pg_collation o WHERE o.collnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_conversion'::regclass, o.oid FROM pg_conversion o WHERE o.connamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_statistic_ext'::regclass, o.oid FROM pg_statistic_ext o WHERE o.stxnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_opclass'::regclass, o.oid FROM pg_opclass o WHERE o.opcnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_opfamily'::regclass, o.oid FROM pg_opfamily o WHERE o.opfnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_ts_config'::regclass, o.oid FROM pg_ts_config o WHERE o.cfgnamespace IN (SELECT oid FROM ns)
            UNION ALL SELECT 'pg_ts_dict'::regclass, o.oid FROM pg_ts_dict o WHERE o.dictnamespace IN (SELECT oid FROM ns)) o
    UNION ALL
    -- The schema.
    SELECT 'schema ' || n.nspname, 'owner', n.nspowner::regrole::text FROM ns JOIN pg_namespace n ON n.oid = ns.oid
    UNION ALL
    SELECT 'schema ' || :'schema', 'default privileges',
           d.defaclrole::regrole::text || ' ' || d.defaclobjtype::text || ' ' || coalesce(d.defaclacl::text, '')
      FROM pg_default_acl d WHERE d.defaclnamespace IN (SELECT oid FROM ns)
    UNION ALL
    -- Relations: tables, views, sequences, composite types.
    SELECT r.obj, 'owner', c.relowner::regrole::text FROM rels r JOIN pg_class c ON c.oid = r.oid
    UNION ALL
    SELECT r.obj, 'persistence', CASE c.relpersistence WHEN 'p' THEN 'permanent' WHEN 'u' THEN 'unlogged' ELSE 'temporary' END FROM rels r JOIN pg_class c ON c.oid = r.oid
    UNION ALL
    SELECT r.obj, 'options', c.reloptions::text FROM rels r JOIN pg_class c ON c.oid = r.oid WHERE c.reloptions IS NOT NULL
    UNION ALL
    SELECT r.obj, 'row level security',
           CASE WHEN c.relrowsecurity THEN 'enabled' ELSE 'disabled' END
           || CASE WHEN c.relforcerowsecurity THEN ', forced' ELSE '' END
      FROM rels r JOIN pg_class c ON c.oid = r.oid WHERE r.relkind IN ('r', 'p')
    UNION ALL
    SELECT r.obj, 'replica identity', CASE c.relreplident WHEN 'd' THEN 'default' WHEN 'n' THEN 'nothing' WHEN 'f' THEN 'full' ELSE 'index' END FROM rels r JOIN pg_class c ON c.oid = r.oid WHERE r.relkind IN ('r', 'p')
    UNION ALL
    SELECT r.obj, 'access method', a.amname FROM rels r JOIN pg_class c ON c.oid = r.oid JOIN pg_am a ON a.oid = c.relam
    UNION ALL
    -- A column: type, NOT NULL, default, identity or generation, a collation other than its type's.
    SELECT r.obj, 'column ' || t.attname,
           format_type(t.atttypid, t.atttypmod)
           || CASE WHEN t.attnotnull THEN ' NOT NULL' ELSE '' END
           || CASE WHEN t.attidentity = 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
                   WHEN t.attidentity = 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
           || CASE WHEN t.attgenerated <> '' THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ') STORED'
                   WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END
           || CASE WHEN t.attcollation <> y.typcollation THEN ' COLLATE ' || t.attcollation::regcollation::text ELSE '' END
           || coalesce(' options ' || (SELECT array_agg(o ORDER BY o)::text FROM unnest(t.attoptions) o
                                        WHERE o NOT LIKE 'pg\_attver=%'), '')
      FROM rels r JOIN pg_attribute t ON t.attrelid = r.oid
      JOIN pg_type y ON y.oid = t.atttypid
      LEFT JOIN pg_attrdef d ON d.adrelid = t.attrelid AND d.adnum = t.attnum
     WHERE t.attnum > 0 AND NOT t.attisdropped AND r.relkind <> 'S'
    UNION ALL
    SELECT r.obj, 'constraint ' || k.conname, pg_get_constraintdef(k.oid)
      FROM rels r JOIN pg_constraint k ON k.conrelid = r.oid
    UNION ALL
    SELECT r.obj, 'index ' || i.indexrelid::regclass::text,
           pg_get_indexdef(i.indexrelid)
           || CASE WHEN i.indisclustered THEN ' (clustered)' ELSE '' END
           || CASE WHEN i.indisreplident THEN ' (replica identity)' ELSE '' END
           || CASE WHEN NOT i.indisvalid THEN ' (INVALID)' ELSE '' END
      FROM rels r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    SELECT r.obj, 'trigger ' || g.tgname,
           pg_get_triggerdef(g.oid) || CASE g.tgenabled WHEN 'O' THEN '' ELSE ' (enabled: ' || g.tgenabled::text || ')' END
      FROM rels r JOIN pg_trigger g ON g.tgrelid = r.oid WHERE NOT g.tgisinternal
    UNION ALL
    SELECT r.obj, 'rule ' || w.rulename, pg_get_ruledef(w.oid)
      FROM rels r JOIN pg_rewrite w ON w.ev_class = r.oid WHERE w.rulename <> '_RETURN'
    UNION ALL
    SELECT r.obj, 'policy ' || p.polname,
           CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END
           || ' FOR ' || CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                                       WHEN 'd' THEN 'DELETE' ELSE 'ALL' END
           || ' TO ' || (SELECT string_agg(q.name, ', ' ORDER BY q.name)
                           FROM (SELECT CASE o WHEN 0 THEN 'PUBLIC' ELSE o::regrole::text END AS name
                                   FROM unnest(p.polroles) o) q)
           || coalesce(' USING (' || pg_get_expr(p.polqual, p.polrelid) || ')', '')
           || coalesce(' WITH CHECK (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', '')
      FROM rels r JOIN pg_policy p ON p.polrelid = r.oid
    UNION ALL
    SELECT r.obj, 'definition', pg_get_viewdef(r.oid) FROM rels r WHERE r.relkind IN ('v', 'm')
    UNION ALL
    SELECT r.obj, 'sequence',
           s.seqtypid::regtype::text || ' start ' || s.seqstart || ' increment ' || s.seqincrement
           || ' min ' || s.seqmin || ' max ' || s.seqmax || ' cache ' || s.seqcache
           || CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END
      FROM rels r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT r.obj, 'owned by', d.refobjid::regclass::text || '.' || t.attname
           || CASE d.deptype WHEN 'i' THEN ' (identity)' ELSE '' END
      FROM rels r JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = r.oid
      JOIN pg_attribute t ON t.attrelid = d.refobjid AND t.attnum = d.refobjsubid
     WHERE r.relkind = 'S' AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
    UNION ALL
    -- Functions: signature with names and defaults, result, language and every setting, owner,
    -- body (a C function's body is its symbol), library.
    SELECT p.obj, 'arguments', pg_get_function_arguments(p.oid) FROM procs p
    UNION ALL SELECT p.obj, 'returns', pg_get_function_result(p.oid) FROM procs p
    UNION ALL SELECT p.obj, 'language', l.lanname FROM procs p JOIN pg_proc f ON f.oid = p.oid JOIN pg_language l ON l.oid = f.prolang
    UNION ALL
    SELECT p.obj, 'settings',
           CASE f.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END
           || CASE WHEN f.proisstrict THEN ' STRICT' ELSE '' END
           || CASE WHEN f.prosecdef THEN ' SECURITY DEFINER' ELSE '' END
           || CASE WHEN f.proleakproof THEN ' LEAKPROOF' ELSE '' END
           || ' PARALLEL ' || CASE f.proparallel WHEN 's' THEN 'SAFE' WHEN 'r' THEN 'RESTRICTED' ELSE 'UNSAFE' END
           || ' COST ' || f.procost
           || CASE WHEN f.proretset THEN ' ROWS ' || f.prorows ELSE '' END
           || CASE WHEN f.prosupport::oid <> 0 THEN ' SUPPORT ' || f.prosupport::regproc::text ELSE '' END
      FROM procs p JOIN pg_proc f ON f.oid = p.oid
    UNION ALL
    SELECT p.obj, 'set', c.setting FROM procs p JOIN pg_proc f ON f.oid = p.oid, unnest(f.proconfig) c(setting)
    UNION ALL SELECT p.obj, 'owner', f.proowner::regrole::text FROM procs p JOIN pg_proc f ON f.oid = p.oid
    UNION ALL
    SELECT p.obj, 'body', CASE WHEN f.prosqlbody IS NOT NULL THEN pg_get_function_sqlbody(f.oid) ELSE f.prosrc END
      FROM procs p JOIN pg_proc f ON f.oid = p.oid
    UNION ALL
    SELECT p.obj, 'library', regexp_replace(regexp_replace(f.probin, '^.*/', ''), '\.so$', '')
      FROM procs p JOIN pg_proc f ON f.oid = p.oid WHERE f.probin IS NOT NULL
    UNION ALL
    -- Types of their own: kind, owner, an enum's labels, a domain's base, default and checks.
    SELECT t.obj, 'kind', y.typtype::text FROM types t JOIN pg_type y ON y.oid = t.oid
    UNION ALL SELECT t.obj, 'owner', y.typowner::regrole::text FROM types t JOIN pg_type y ON y.oid = t.oid
    UNION ALL
    SELECT t.obj, 'labels', (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                               FROM pg_enum e WHERE e.enumtypid = t.oid)
      FROM types t JOIN pg_type y ON y.oid = t.oid WHERE y.typtype = 'e'
    UNION ALL
    SELECT t.obj, 'domain', format_type(y.typbasetype, y.typtypmod)
           || CASE WHEN y.typnotnull THEN ' NOT NULL' ELSE '' END || coalesce(' DEFAULT ' || y.typdefault, '')
      FROM types t JOIN pg_type y ON y.oid = t.oid WHERE y.typtype = 'd'
    UNION ALL
    SELECT t.obj, 'constraint ' || k.conname, pg_get_constraintdef(k.oid)
      FROM types t JOIN pg_constraint k ON k.contypid = t.oid
    UNION ALL
    -- Privileges of every kind above.
    SELECT g.obj, g.fact, g.val FROM grants g
    UNION ALL
    -- Comments on any of these objects (and their columns, constraints, triggers, policies).
    SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), 'comment', d.description
      FROM pg_description d
     WHERE (d.classoid = 'pg_class'::regclass AND (d.objoid IN (SELECT oid FROM rels)
                                                   OR d.objoid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid IN (SELECT oid FROM rels))))
        OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN (SELECT oid FROM procs))
        OR (d.classoid = 'pg_type'::regclass AND d.objoid IN (SELECT oid FROM types))
        OR (d.classoid = 'pg_namespace'::regclass AND d.objoid IN (SELECT oid FROM ns))
        OR (d.classoid = 'pg_extension'::regclass AND d.objoid IN (SELECT oid FROM ext))
        OR (d.classoid = 'pg_constraint'::regclass AND d.objoid IN (SELECT k.oid FROM pg_constraint k
                                                                     WHERE k.conrelid IN (SELECT oid FROM rels)
                                                                        OR k.contypid IN (SELECT oid FROM types)))
        OR (d.classoid = 'pg_trigger'::regclass AND d.objoid IN (SELECT g.oid FROM pg_trigger g WHERE g.tgrelid IN (SELECT oid FROM rels)))
        OR (d.classoid = 'pg_policy'::regclass AND d.objoid IN (SELECT p.oid FROM pg_policy p WHERE p.polrelid IN (SELECT oid FROM rels)))
    UNION ALL
    -- The roles the extension creates: attributes, memberships both ways, settings in this database.
    SELECT r.obj, 'attributes',
           concat_ws(' ', CASE WHEN a.rolsuper THEN 'SUPERUSER' END, CASE WHEN a.rolcanlogin THEN 'LOGIN' ELSE 'NOLOGIN' END,
                     CASE WHEN NOT a.rolinherit THEN 'NOINHERIT' END, CASE WHEN a.rolcreaterole THEN 'CREATEROLE' END,
                     CASE WHEN a.rolcreatedb THEN 'CREATEDB' END, CASE WHEN a.rolreplication THEN 'REPLICATION' END,
                     CASE WHEN a.rolbypassrls THEN 'BYPASSRLS' END, 'CONNECTION LIMIT ' || a.rolconnlimit,
                     CASE WHEN a.rolvaliduntil IS NOT NULL THEN 'VALID UNTIL ' || a.rolvaliduntil END)
      FROM roles r JOIN pg_roles a ON a.oid = r.oid
    UNION ALL
    SELECT r.obj, 'member of', m.roleid::regrole::text || CASE WHEN m.admin_option THEN ' with admin option' ELSE '' END
      FROM roles r JOIN pg_auth_members m ON m.member = r.oid
    UNION ALL
    SELECT r.obj, 'has member', m.member::regrole::text || CASE WHEN m.admin_option THEN ' with admin option' ELSE '' END
      FROM roles r JOIN pg_auth_members m ON m.roleid = r.oid
    UNION ALL
    SELECT r.obj, 'set', c.setting
      FROM roles r JOIN pg_db_role_setting s ON s.setrole = r.oid
           AND s.setdatabase IN (0, (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())),
           unnest(s.setconfig) c(setting)
)
SELECT s.line FROM (
    SELECT CASE WHEN l.n IS NULL THEN f.obj || ': ' || f.fact || ': ' || coalesce(f.val, 'NULL')
                ELSE f.obj || ': ' || f.fact || ' ' || lpad(l.n::text, 4, '0') || ': ' || l.text END AS line
      FROM facts f
      LEFT JOIN LATERAL regexp_split_to_table(f.val, E'\n') WITH ORDINALITY AS l(text, n) ON strpos(f.val, E'\n') > 0
) s ORDER BY s.line COLLATE "C";

-- The rows of every table of the extension but the audit key, without their timestamps: one
-- SELECT per table, made here and run by psql's \gexec.
SELECT format('SELECT s.line FROM (SELECT %L || (pg_catalog.to_jsonb(t) - %L::text[])::text AS line FROM %s t) s ORDER BY s.line COLLATE "C"',
              'row ' || c.oid::regclass::text || ': ',
              ARRAY(SELECT a.attname FROM pg_attribute a
                     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                       AND a.atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype)),
              c.oid::regclass)
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid JOIN pg_class c ON c.oid = d.objid
 WHERE e.extname = 'pg_toolgate' AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p')
   AND NOT (c.relname = 'audit_key' AND c.relnamespace = 'toolgate'::regnamespace) AND :'schema' = 'toolgate'
 ORDER BY c.oid::regclass::text COLLATE "C"
\gexec
