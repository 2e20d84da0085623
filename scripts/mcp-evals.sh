#!/usr/bin/env bash
# The MCP evals: `toolgate mcp` driven by a scripted model and a scripted person
# (tests/mcp/evals.py, on the Python MCP SDK) against seed 000's lab (`toolgate lab`) on a
# throwaway cluster, each case judged by what reached the ERP and the audit and run 3 times
# (pass^3; TOOLGATE_EVAL_RUNS changes it). The normal server runs four legs: stdio speaking
# protocol 2025-11-25 (elicitation/create), stdio and Streamable HTTP speaking 2026-07-28
# (input_required), and Streamable HTTP speaking 2025-11-25 with no conversation header (an MCP
# session, elicitation/create on the call's stream). The same cases also run against four deliberately broken servers
# (toolgate-mcp-broken, built with `--features broken`, one behaviour each named by
# TOOLGATE_MCP_BROKEN), each leg on a lab database of its own and all at once. Prints one score
# table, a column per server and leg, and exits non-zero when the normal server fails any case or a
# broken server passes a case that concerns it (evals.py's CONCERNS); with --write-docs it also
# writes the table to docs/evals.md.
#
# Assumes what scripts/setup.sh does: the extension installed into the PostgreSQL TOOLGATE_PG
# names, and target/mcp-venv. TOOLGATE_KEEP=1 keeps the work directory (each server's stderr is
# evals-SERVER/mcp-server.log there, each run's log SERVER.log).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

write_docs=
for arg in "$@"; do
    case $arg in
    --write-docs) write_docs=1 ;;
    *) log "usage: scripts/mcp-evals.sh [--write-docs]" >&2; exit 2 ;;
    esac
done
runs=${TOOLGATE_EVAL_RUNS:-3}
python=$root/target/mcp-venv/bin/python
if ! "$python" -c 'import mcp, psycopg' 2>/dev/null; then
    log "target/mcp-venv lacks mcp or psycopg: run scripts/setup.sh" >&2
    exit 2
fi
toolgate_cli
# Its own binary, so that target/debug/toolgate never has the broken behaviours.
cargo build --quiet -p toolgate-mcp --features broken --bin toolgate-mcp-broken
broken_bin=${CARGO_TARGET_DIR:-$root/target}/debug/toolgate-mcp-broken
# Each leg: name, server, transport, protocol revision.
legs=(
    "normal normal stdio 2025-11-25"
    "normal-modern normal stdio 2026-07-28"
    "normal-http normal http 2026-07-28"
    "normal-http-session normal http 2025-11-25"
    "answer_from_argument answer_from_argument stdio 2025-11-25"
    "no_elicitation_is_consent no_elicitation_is_consent stdio 2025-11-25"
    "any_channel_message any_channel_message stdio 2025-11-25"
    "foreign_state foreign_state stdio 2026-07-28"
)

make_work
throwaway_cluster pg "${TOOLGATE_EVAL_PORT:-54401}"
host=$work/pg/socket
log "throwaway cluster on 127.0.0.1:$port (socket $host)"
started=$SECONDS
pids=()
names=()
for leg in "${legs[@]}"; do
    read -r s server transport revision <<<"$leg"
    names+=("$s")
    db=evals_${s//-/_}
    "$TOOLGATE_BIN" lab --host "$host" --port "$port" --dbname "$db" --keys "$work/keys" >/dev/null
    # The normal server runs with TOOLGATE_MCP_BROKEN set: without the feature it must do nothing.
    server_args=(--env TOOLGATE_MCP_BROKEN=answer_from_argument)
    [ "$server" = normal ] || server_args=(--server "$broken_bin" --broken "$server")
    "$python" tests/mcp/evals.py --toolgate "$TOOLGATE_BIN" --host "$host" --port "$port" \
        --dbname "$db" --keys "$work/keys/$db" --work "$work/evals-$s" --transport "$transport" \
        --revision "$revision" --runs "$runs" --results "$work/results-$s.json" "${server_args[@]}" 2>"$work/$s.log" &
    pids+=($!)
done
log "running ${#legs[*]} legs at once: ${names[*]}"
for pid in "${pids[@]}"; do wait "$pid" || true; done
log "all servers done in $((SECONDS - started)) s"

# The normal server's whole logs; of a broken one, each case's score only.
for s in "${names[@]}"; do
    if [[ $s == normal* ]]; then
        cat "$work/$s.log" >&2
    else
        grep -E '^\[[a-z_]+ [a-z]+ [0-9-]+\] (ok  |FAIL) [0-9]+/' "$work/$s.log" >&2 || true
    fi
done
results=()
for s in "${names[@]}"; do
    if [ ! -s "$work/results-$s.json" ]; then
        log "no results from the $s server; its log:" >&2
        tail -n 30 "$work/$s.log" >&2
        exit 1
    fi
    results+=("$work/results-$s.json")
done
rc=0
"$python" tests/mcp/evals.py --report "${results[@]}" --table "$work/table.md" || rc=$?
if [ "$rc" != 0 ] && [ -s "$work/evals-normal/mcp-server.log" ]; then
    log "the normal server's last lines of stderr:" >&2
    tail -n 20 "$work/evals-normal/mcp-server.log" >&2
fi

if [ -n "$write_docs" ] && [ -f "$work/table.md" ]; then
    commit=$(git rev-parse --short HEAD)
    {
        cat <<DOC
# MCP evals

\`scripts/mcp-evals.sh\` starts a throwaway cluster, loads seed 000's lab into it (\`toolgate lab\`:
the maintenance example, its tenants, logins and keys) and runs [tests/mcp/evals.py](../tests/mcp/evals.py):
a scripted model, a client of the Python SDK (\`mcp\` 2.3.0), drives \`toolgate mcp\` as supervisor
(or technician) user-17 of shopping-a, and a scripted person answers the server's questions. Each
case is judged by what reached the ERP and the audit, read as the superuser, never by what the
server said alone. Each case runs $runs times, each run with its own server process (a fresh
conversation) and fresh orders, keys and cost centres (pass^$runs: a case passes only if every run
does).

The normal server runs four legs: over stdio speaking protocol 2025-11-25 (the person is asked
with \`elicitation/create\` within the call, and the client hears \`tools/list_changed\`), over stdio
speaking 2026-07-28, over Streamable HTTP speaking 2026-07-28 (the person is asked through an
\`input_required\` result whose \`requestState\` the server sealed; a bearer token on every request),
and over Streamable HTTP speaking 2025-11-25 as a stock host does, with no conversation header (the
server's MCP session is the conversation, and the person is asked with \`elicitation/create\` on
the call's response stream).
A case that does not apply to a leg is n/a: the \`requestState\` cases need 2026-07-28; the 401,
metadata and malformed JSON-RPC case and the two-processes case need HTTP; the expired-token case
needs stdio (over HTTP the bearer check answers 401 first).

The same cases run against four deliberately broken servers, to show the evals catch them:
\`toolgate-mcp-broken\`, built only with \`cargo build -p toolgate-mcp --features broken\` (the
\`toolgate\` binary never has this code), with one behaviour named by \`TOOLGATE_MCP_BROKEN\`:
\`answer_from_argument\` takes the person's answer from a tool argument (a word, or a token it reads
unverified) and signs it itself; \`no_elicitation_is_consent\` takes a client that cannot ask the
person, or an answer that never came, as a "sim"; \`any_channel_message\` lets \`confirm_proposal\`
take the newest channel message even when it answers another proposal (or was already used),
signing its answer for the one asked; \`foreign_state\` trusts the retry of an \`input_required\`
call without opening its \`requestState\`, applying the answer to whichever proposal the call makes
live now. The normal server runs with \`TOOLGATE_MCP_BROKEN\` set too, which without the feature
does nothing. Each leg runs on a lab database of its own, all eight at once. A cell is the runs
that passed; "caught" marks a case that concerns that broken server (\`CONCERNS\` in evals.py) and
that it failed, as it must: the script fails if the normal server fails any case or a broken
server passes one that concerns it. The other failures of a broken server are its bug showing
elsewhere too.

Last run: $(date -u +%Y-%m-%d), on the tree based on commit $commit, PostgreSQL $PG_MAJOR.

DOC
        cat "$work/table.md"
    } >docs/evals.md
    log "wrote docs/evals.md"
fi
exit "$rc"
