#!/usr/bin/env bash
# The README's worked example in psql, as written: its ```sql blocks, extracted from the Markdown
# itself, run top to bottom by psql (16 or newer, for \bind) with ON_ERROR_STOP, twice, each time
# in a fresh database of one throwaway cluster (roles and key files are the cluster's and the
# directory's, so the second run proves the example can be run again). Each run must end with work
# order 1001 closed by one confirmed request. Needs the extension installed into the PostgreSQL
# TOOLGATE_PG names (16 or newer).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
if [ "$PG_MAJOR" -lt 16 ]; then
    log "psql $PG_MAJOR has no \\bind: run with TOOLGATE_PG=18" >&2
    exit 2
fi
toolgate_cli
make_work
throwaway_cluster pg "${TOOLGATE_WALK_PORT:-54411}"

python3 - "$root/README.md" >"$work/walkthrough.sql" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("### A worked example in psql\n")
end = text.index("\n### ", start + 1)
blocks = re.findall(r"```sql\n(.*?)```", text[start:end], re.S)
if not blocks:
    sys.exit("no sql blocks in the worked example")
print("\n".join(blocks))
PY

# The example runs from the repository's root (\i examples/…) with `toolgate` on the PATH and
# ./keys beside it: a directory of its own with the examples linked in.
mkdir -p "$work/run/bin"
ln -s "$root/examples" "$work/run/examples"
ln -s "$TOOLGATE_BIN" "$work/run/bin/toolgate"
for run in 1 2; do
    db=walkthrough_$run
    as_postgres "$PGBIN/createdb" -h "$work/pg/socket" -p "$port" "$db"
    if ! (cd "$work/run" && PATH="$work/run/bin:$PATH" "$PGBIN/psql" -X -v ON_ERROR_STOP=1 \
        -h "$work/pg/socket" -p "$port" -U postgres -d "$db" -f "$work/walkthrough.sql") >"$work/run-$run.out" 2>&1; then
        tail -n 30 "$work/run-$run.out" >&2
        log "run $run: the worked example stopped at an error (above)" >&2
        exit 1
    fi
    closed=$(sql "$work/pg/socket" "$port" "$db" -c \
        "SELECT count(*) FROM maintenance.close_requests r JOIN maintenance.work_orders o USING (tenant_id, order_id)
          WHERE r.tenant_id = 'acme' AND r.order_id = '1001' AND o.status = 'close_requested'")
    if [ "$closed" != 1 ] || ! grep -q '"outcome": "SUCCEEDED"' "$work/run-$run.out"; then
        tail -n 30 "$work/run-$run.out" >&2
        log "run $run: order 1001 was not closed by one confirmed request ($closed)" >&2
        exit 1
    fi
    log "run $run: the worked example ran as written; order 1001 closed by one confirmed request"
done
