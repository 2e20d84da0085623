#!/usr/bin/env bash
# A private, relocated copy of PostgreSQL TOOLGATE_PG's install (15 to 18) under DIR, so a build of pg_toolgate can
# be installed into it without touching the system's extension directory: PostgreSQL finds its
# share and lib directories relative to its binaries. Prints the copy's pg_config. (The copy is
# made by the harness's private_pg, which scripts/mutants.sh and scripts/bench.sh call directly.)
#
#   pg_config=$(scripts/private-pg.sh target/pg-mutants)
#   CARGO_TARGET_DIR=target/mutants cargo pgrx install --pg-config "$pg_config"
#   PGBIN=$(dirname "$pg_config") scripts/cluster.sh start DIR PORT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
private_pg "${1:?usage: private-pg.sh DIR}"
echo "$PG_CONFIG"
