#!/usr/bin/env bash
# The walkthroughs of the documentation, as written, twice, each time in a fresh database of one
# throwaway cluster (roles and key files are the cluster's and the directory's, so the second run
# proves they can be run again), with psql 16 or newer (for \bind) and ON_ERROR_STOP:
#
#  1. the README's worked example, its section "Five minutes in psql": its ```sql blocks,
#     extracted from the Markdown itself (up to the next heading of its level or above), run top
#     to bottom. It must end with work order 1001 closed by one confirmed request, and
#     toolgate.binding_report('request_close') finding nothing.
#  2. then, in the same database, docs/identity.md's walkthrough (Keycloak for acme, Auth0 for
#     globex): its ```sql blocks in one psql session and its ```sh blocks in bash between them, in
#     order (tests/walkthroughs/run_blocks.py). Keycloak and Auth0 are played on this machine by
#     tests/walkthroughs/provider.py (an HTTPS server, its CA and keys made for the run), which the
#     sh blocks' curl reaches through CURL_HOME's .curlrc; their `read`s get what it wrote in
#     `answers`. It must end with orders 1002 and 2001 closed by requests the providers' users
#     confirmed, the registrations as the walkthrough leaves them, and Auth0's token refused.
#
# Needs the extension installed into the PostgreSQL TOOLGATE_PG names (16 or newer) and the PyJWT
# environment scripts/setup.sh makes (target/pyjwt; TOOLGATE_TEST_PYTHON names another Python
# with PyJWT and cryptography).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
if [ "$PG_MAJOR" -lt 16 ]; then
    log "psql $PG_MAJOR has no \\bind: run with TOOLGATE_PG=18" >&2
    exit 2
fi
python=${TOOLGATE_TEST_PYTHON:-$root/target/pyjwt/bin/python}
if ! "$python" -c 'import jwt, cryptography' 2>/dev/null; then
    log "$python has no PyJWT and cryptography: run scripts/setup.sh, or set TOOLGATE_TEST_PYTHON" >&2
    exit 2
fi
toolgate_cli
make_work
throwaway_cluster pg "${TOOLGATE_WALK_PORT:-54411}"

python3 - "$root/README.md" >"$work/walkthrough.sql" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("\n## Five minutes in psql\n")
end = re.compile(r"\n#{1,2} ").search(text, start + 1).start()
blocks = re.findall(r"```sql\n(.*?)```", text[start:end], re.S)
if not blocks:
    sys.exit("no sql blocks in the worked example")
print("\n".join(blocks))
PY

# The walkthroughs run from the repository's root (\i examples/…) with `toolgate` on the PATH and
# ./keys beside it: a directory of its own with the examples linked in.
mkdir -p "$work/run/bin"
ln -s "$root/examples" "$work/run/examples"
ln -s "$TOOLGATE_BIN" "$work/run/bin/toolgate"
# docs/identity.md's walkthrough: this heading's section.
identity_heading='## Walkthrough: Keycloak for acme, Auth0 for globex'

# provider_start DIR: the providers played by tests/walkthroughs/provider.py, ready in DIR.
provider_pid=
provider_start() {
    "$python" "$root/tests/walkthroughs/provider.py" "$1" 2>"$1.log" &
    provider_pid=$!
    for _ in $(seq 100); do
        [ -f "$1/ready" ] && return
        kill -0 "$provider_pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$1.log" >&2
    log "the providers did not start" >&2
    exit 1
}
provider_stop() {
    if [ -n "$provider_pid" ]; then
        kill "$provider_pid" 2>/dev/null || true
        wait "$provider_pid" 2>/dev/null || true
        provider_pid=
    fi
}
trap 'rc=$?; provider_stop; work_cleanup "$rc"' EXIT

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
    findings=$(sql "$work/pg/socket" "$port" "$db" -c "SELECT count(*) FROM toolgate.binding_report('request_close')")
    if [ "$findings" != 0 ]; then
        log "run $run: toolgate.binding_report('request_close') found $findings thing(s) the worked example says it does not" >&2
        exit 1
    fi
    log "run $run: the worked example ran as written; order 1001 closed by one confirmed request, its binding reported clean"

    provider="$work/provider-$run"
    provider_start "$provider"
    if ! CURL_HOME="$provider" PATH="$work/run/bin:$PATH" "$python" "$root/tests/walkthroughs/run_blocks.py" \
        docs/identity.md "$identity_heading" "$work/run" "$work/identity-$run" "$provider/answers" -- \
        "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$work/pg/socket" -p "$port" -U postgres -d "$db" \
        >"$work/identity-$run.log"; then
        log "run $run: docs/identity.md's walkthrough stopped (above)" >&2
        exit 1
    fi
    provider_stop
    # What the walkthrough must have done: each provider's user proposed and confirmed a close,
    # each order closed once; the registrations as it left them; Auth0's token refused at the end.
    failed=$(sql "$work/pg/socket" "$port" "$db" \
        -v maria="$(jq -r .acme "$provider/expected.json")" -v globex="$(jq -r .globex "$provider/expected.json")" <<'SQL'
SELECT name FROM (VALUES
  ('acme: one proposal and one confirmed close by the realm''s maria',
   (SELECT count(*) FILTER (WHERE kind = 'call' AND outcome = 'NEEDS_CONFIRMATION') = 1
       AND count(*) FILTER (WHERE kind = 'confirm' AND outcome = 'SUCCEEDED') = 1
      FROM toolgate.audit_log WHERE tenant_id = 'acme' AND actor = :'maria' AND tool = 'request_close')),
  ('globex: one proposal and one confirmed close by Auth0''s supervisor',
   (SELECT count(*) FILTER (WHERE kind = 'call' AND outcome = 'NEEDS_CONFIRMATION') = 1
       AND count(*) FILTER (WHERE kind = 'confirm' AND outcome = 'SUCCEEDED') = 1
      FROM toolgate.audit_log WHERE tenant_id = 'globex' AND actor = :'globex' AND tool = 'request_close')),
  ('orders 1002 (acme) and 2001 (globex) closed once each',
   (SELECT count(*) = 2 FROM maintenance.close_requests r JOIN maintenance.work_orders o USING (tenant_id, order_id)
     WHERE o.status = 'close_requested' AND (tenant_id, order_id) IN (('acme', '1002'), ('globex', '2001')))),
  ('acme trusts keycloak-acme, its demo key revoked; auth0-erp dropped',
   (SELECT count(*) = 1 FROM toolgate.tenant_issuers WHERE tenant_id = 'acme' AND issuer = 'keycloak-acme' AND claim_value = 'acme')
   AND NOT EXISTS (SELECT FROM toolgate.tenant_issuers WHERE tenant_id = 'globex')
   AND NOT EXISTS (SELECT FROM toolgate.issuers WHERE issuer = 'auth0-erp')
   AND (SELECT NOT active FROM toolgate.keys WHERE kid = 'acme-idp')),
  ('Auth0''s token refused once its issuer was dropped (unknown_issuer)',
   (SELECT rule = 'identity_invalid' AND detail->>'reason' = 'unknown_issuer'
      FROM toolgate.audit_log ORDER BY audit_id DESC LIMIT 1))
) AS c(name, ok) WHERE ok IS NOT TRUE
SQL
    )
    out="$work/identity-$run/psql.out"
    grep -q 'ERROR:  issuer auth0-erp is trusted by tenant globex' "$out" || failed+=$'\ndrop_issuer was not refused while globex trusted auth0-erp'
    grep -q '^ request_close | 1$' "$out" || failed+=$'\ntoolgate.tools did not list request_close for maria'
    if [ -n "$failed" ]; then
        tail -n 30 "$out" >&2
        log "run $run: docs/identity.md's walkthrough ran, but not as it says:" >&2
        printf '%s\n' "$failed" | sed '/^$/d; s/^/  /' >&2
        exit 1
    fi
    log "run $run: $(cat "$work/identity-$run.log"); Keycloak's and Auth0's users closed orders 1002 and 2001, each confirmed"
done
