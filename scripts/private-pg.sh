#!/usr/bin/env bash
# A private, relocated copy of the system's PostgreSQL 15 under DIR, so a build of pg_toolgate can
# be installed into it without touching the system's extension directory: PostgreSQL finds its
# share and lib directories relative to its binaries. Prints the copy's pg_config.
#
#   pg_config=$(scripts/private-pg.sh target/pg-mutants)
#   CARGO_TARGET_DIR=target/mutants cargo pgrx install --pg-config "$pg_config"
#   PGBIN=$(dirname "$pg_config") scripts/cluster.sh start DIR PORT
set -euo pipefail
dir=$(realpath -m "${1:?usage: private-pg.sh DIR}")
src_bin=/usr/lib/postgresql/15
if [ ! -x "$dir/lib/postgresql/15/bin/postgres" ]; then
    mkdir -p "$dir/lib/postgresql" "$dir/share/postgresql" "$dir/include/postgresql"
    cp -a "$src_bin" "$dir/lib/postgresql/"
    cp -a /usr/share/postgresql/15 "$dir/share/postgresql/"
    # Headers are only read (by pgrx's bindgen): share them.
    ln -sfn /usr/include/postgresql/15 "$dir/include/postgresql/15"
    chmod -R a+rX "$dir"
fi
echo "$dir/lib/postgresql/15/bin/pg_config"
