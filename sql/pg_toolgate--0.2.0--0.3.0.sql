-- pg_toolgate 0.2.0 → 0.3.0. So far only the library changes: every C function of the extension
-- is pointed at 0.3.0's (each version's library is a file of its own, docs/upgrades.md). The
-- schema changes of 0.3.0 are added below as they are made, each with its section.
\echo Use "ALTER EXTENSION pg_toolgate UPDATE TO '0.3.0'" to load this file. \quit

------------------------------------------------------------------------------------------------
-- 0. The library: every C function of the extension is pointed at the library installed with
--    this script (CREATE OR REPLACE keeps its oid, grants and every other attribute); a function
--    whose symbol that library no longer has is left for the sections below, which drop or
--    replace it. After an update from 0.1.0 through 0.2.0's script (which points at the same
--    library), there is nothing left to do here.
------------------------------------------------------------------------------------------------

DO $library$
DECLARE
    library constant text := 'pg_toolgate-@CARGO_VERSION@';
    f record;
    old_def text;
    new_def text;
BEGIN
    FOR f IN
        SELECT p.oid, p.probin
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
         WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_toolgate')
           AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c')
           AND p.probin IS DISTINCT FROM library
    LOOP
        -- pg_get_functiondef writes the library on a line of its own: AS 'file', $function$symbol$function$
        old_def := pg_catalog.pg_get_functiondef(f.oid);
        new_def := pg_catalog.replace(old_def, E'\nAS ' || pg_catalog.quote_literal(f.probin) || ',',
                                      E'\nAS ' || pg_catalog.quote_literal(library) || ',');
        IF new_def = old_def THEN
            RAISE EXCEPTION 'pg_toolgate update: cannot point % at %', f.oid::pg_catalog.regprocedure, library;
        END IF;
        BEGIN
            EXECUTE new_def;
        EXCEPTION WHEN undefined_function THEN
            NULL;
        END;
    END LOOP;
END
$library$;
