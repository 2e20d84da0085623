#!/usr/bin/env bash
# Debian packages of pg_toolgate, named and laid out as PGDG names its extensions:
#
#   postgresql-NN-pg-toolgate_VERSION-1_ARCH.deb   for each PostgreSQL major NN built: the library
#       (/usr/lib/postgresql/NN/lib/pg_toolgate-VERSION.so) and the control file and SQL scripts
#       (/usr/share/postgresql/NN/extension/), Depends: postgresql-NN
#   toolgate_VERSION-1_ARCH.deb                     the `toolgate` command (/usr/bin/toolgate), the
#       systemd units of the MCP server, the dispatcher, the audit seal's timer and the approvals
#       console (/lib/systemd/system/), their example
#       environment files (/etc/toolgate/*.env.example), and the units' system users, made by
#       postinst; installing starts nothing
#
# and SHA256SUMS beside them, in OUT (default target/packages). Built with the standard tools:
# `cargo pgrx package` (release) for each major, `cargo build --release` for the command, and
# `dpkg-deb`. Reproducible: the same commit gives byte-identical packages. Every timestamp is the
# commit's (SOURCE_DATE_EPOCH), the owners root, the build's paths remapped out of the binaries
# (--remap-path-prefix), the build in a target directory of its own (target/package).
#
#   scripts/package.sh                    every major of PG_VERSIONS (lib.sh) and the command
#   scripts/package.sh 15                 the extension for 15 only, and the command
#   scripts/package.sh --release 0.1.0 15 the extension package of a released version, built from
#                                         its commit in RELEASES (no command package), into
#                                         target/packages-0.1.0: what scripts/package-test.sh
#                                         updates from
#   scripts/package.sh --check-reproducible
#                                         build everything twice, the second time from an empty
#                                         target directory, and compare the packages byte for byte
#                                         (two full release builds: the better part of an hour)
#
# The packages of a tree with uncommitted changes are built, but say so (their version gets
# "+dirty"): what ships comes from a commit. scripts/package-test.sh installs them and checks.
# Environment: PACKAGE_OUT (OUT), PACKAGE_PROFILE (release, or dev: below), PACKAGE_TARGET_DIR
# (target/package for release), PACKAGE_REVISION (1),
# PACKAGE_MAINTAINER (the packages' Maintainer: a name and a mailbox; a placeholder by default).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

check=false
release=""
majors=()
usage() { log "usage: package.sh [--check-reproducible] [--release VERSION] [MAJOR…]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --check-reproducible) check=true ;;
    --release) release=${2:-}; [ -n "$release" ] || usage; shift ;;
    1[0-9]) majors+=("$1") ;;
    *) usage ;;
    esac
    shift
done
[ ${#majors[@]} -gt 0 ] || read -r -a majors <<<"$PG_VERSIONS"

out=$(realpath -m "${PACKAGE_OUT:-target/packages}")
# The release profile (LTO, one codegen unit: what ships) in a target directory of its own, the
# binaries' paths remapped; or the dev profile (PACKAGE_PROFILE=dev): packages of the debug builds
# the tests already made (target/, and the upgrade test's target/upgrade/target-VERSION for
# --release), in minutes, their version marked "+dev", nothing remapped: what scripts/test.sh
# installs and checks. Only release packages ship.
profile=${PACKAGE_PROFILE:-release}
case $profile in
release) target_dir=$(realpath -m "${PACKAGE_TARGET_DIR:-target/package}") ;;
dev) target_dir=$(realpath -m "${PACKAGE_TARGET_DIR:-target}") ;;
*) log "PACKAGE_PROFILE is release or dev, not $profile" >&2; exit 2 ;;
esac
revision=${PACKAGE_REVISION:-1}
arch=$(dpkg --print-architecture)
export SOURCE_DATE_EPOCH
# The source built: this tree, or a released version's (its commit's archive, lib.sh's
# release_source), whose packages carry its version and its commit's time.
if [ -n "$release" ]; then
    src=$(release_source "$release") || exit 2
    version=$release
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct "$(release_commit "$release")")
    case $profile in
    release) target_dir=$target_dir-$release ;;
    dev) target_dir=$(realpath -m "${PACKAGE_TARGET_DIR:-${TOOLGATE_UPGRADE_DIR:-target/upgrade}/target-$release}") ;;
    esac
    out=$(realpath -m "${PACKAGE_OUT:-target/packages-$release}")
else
    src=$root
    version=$(tree_version)
    [ -n "$version" ] || { log "no [workspace.package] version in Cargo.toml" >&2; exit 2; }
    git diff --quiet HEAD -- 2>/dev/null || { version=$version+dirty; log "uncommitted changes: the packages say $version"; }
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
fi
[ "$profile" = release ] || version=$version+$profile
if $check && [ "$profile" != release ]; then
    log "--check-reproducible checks what ships: the release profile" >&2
    exit 2
fi
# Whoever builds a release names themselves; the default names no one's mailbox (.invalid).
maintainer=${PACKAGE_MAINTAINER:-pg_toolgate authors <maintainers@pg-toolgate.invalid>}
sysroot=$(rustc --print sysroot)

# doc_files DIR PACKAGE: the copyright and the Debian changelog every package carries.
doc_files() {
    local doc=$1/usr/share/doc/$2
    mkdir -p "$doc"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: pg_toolgate"
        echo
        echo "Files: *"
        echo "Copyright: 2026 the pg_toolgate authors"
        echo "License: MIT"
        sed 's/^$/./; s/^/ /' LICENSE | tail -n +3
    } >"$doc/copyright"
    {
        echo "$2 ($version-$revision) unstable; urgency=medium"
        echo
        echo "  * pg_toolgate $version: CHANGELOG.md of the source tells what changed."
        echo
        echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
    } | gzip -9n >"$doc/changelog.Debian.gz"
}

# deb DIR: DIR (its DEBIAN/control written) as a package in $1/../NAME_VERSION_ARCH.deb.
deb() {
    local dir=$1 name
    name=$(sed -n 's/^Package: //p' "$dir/DEBIAN/control")
    # The control file's Installed-Size, in KiB, of what the package installs.
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$dir" | cut -f1)" >>"$dir/DEBIAN/control"
    find "$dir" -type d -exec chmod 0755 {} +
    dpkg-deb --root-owner-group -Zxz --build "$dir" "$stage/${name}_${version}-${revision}_${arch}.deb" >/dev/null
}

# build STAGE: every package into STAGE.
build() {
    stage=$1
    # The binaries name no path of this machine: the tree, the target directory, cargo's registry
    # and the toolchain (the last prefix that matches wins).
    export CARGO_TARGET_DIR=$target_dir
    if [ "$profile" = release ]; then
        export RUSTFLAGS="--remap-path-prefix=$src=/build/pg_toolgate --remap-path-prefix=$target_dir=/build/target --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/build/cargo --remap-path-prefix=$sysroot=/build/rust"
    fi
    rm -rf "$stage"
    mkdir -p "$stage"
    local v pkg dir lib share
    for v in "${majors[@]}"; do
        pg_version "$v"
        pg_fetch "$PG_MAJOR"
        pkg=postgresql-$v-pg-toolgate
        log "building $pkg (cargo pgrx package, $profile, PostgreSQL $v)"
        (cd "$src" && cargo pgrx package --profile "$profile" --pg-config "$PG_CONFIG" --out-dir "$stage/pgrx-$v") >"$stage/build-$v.log" 2>&1 ||
            { tail -30 "$stage/build-$v.log" >&2; exit 1; }
        # pgrx lays the files out as this PostgreSQL's pg_config says; a package puts them where
        # Debian's postgresql-NN has them, whatever PostgreSQL built it (18 is a relocated copy here).
        lib=$stage/pgrx-$v$("$PG_CONFIG" --pkglibdir)
        share=$stage/pgrx-$v$("$PG_CONFIG" --sharedir)/extension
        dir=$stage/$pkg
        mkdir -p "$dir/DEBIAN" "$dir/usr/lib/postgresql/$v/lib" "$dir/usr/share/postgresql/$v/extension"
        # (0.1.0's library is pg_toolgate.so; from 0.2.0 on, pg_toolgate-VERSION.so.)
        install -m 0644 "$lib"/pg_toolgate*.so "$dir/usr/lib/postgresql/$v/lib/"
        strip --strip-unneeded "$dir/usr/lib/postgresql/$v/lib/"pg_toolgate*.so
        install -m 0644 "$share"/pg_toolgate* "$dir/usr/share/postgresql/$v/extension/"
        doc_files "$dir" "$pkg"
        cat >"$dir/DEBIAN/control" <<EOF
Package: $pkg
Version: $version-$revision
Architecture: $arch
Maintainer: $maintainer
Depends: postgresql-$v, libc6, libgcc-s1
Section: database
Priority: optional
Homepage: https://pgxn.org/dist/pg_toolgate/
Description: guardrails for the writes an LLM agent proposes, in PostgreSQL $v
 pg_toolgate runs the whole gate of an agent's tool call in one transaction:
 identity from a signed token, a strict schema, tenant and role authorization,
 quotas, human confirmation bound to what is applied, idempotency, the effect
 on the DBA's own tables and an audit row without secrets.
 .
 This package holds the extension for PostgreSQL $v.
EOF
        deb "$dir"
    done

    if [ -n "$release" ]; then
        (cd "$stage" && sha256sum -- *.deb >SHA256SUMS)
        return
    fi
    log "building toolgate (cargo build, $profile)"
    cargo build --profile "$profile" --locked -p toolgate-cli >"$stage/build-cli.log" 2>&1 || { tail -30 "$stage/build-cli.log" >&2; exit 1; }
    dir=$stage/toolgate
    mkdir -p "$dir/DEBIAN" "$dir/usr/bin" "$dir/lib/systemd/system" "$dir/etc/toolgate"
    # (cargo puts the dev profile's output in debug/.)
    install -m 0755 "$target_dir/$([ "$profile" = dev ] && echo debug || echo release)/toolgate" "$dir/usr/bin/toolgate"
    strip --strip-unneeded "$dir/usr/bin/toolgate"
    install -m 0644 packaging/systemd/toolgate-mcp.service packaging/systemd/toolgate-dispatch.service \
        packaging/systemd/toolgate-audit.service packaging/systemd/toolgate-audit.timer \
        packaging/systemd/toolgate-console.service "$dir/lib/systemd/system/"
    install -m 0644 packaging/env/mcp.env.example packaging/env/dispatch.env.example packaging/env/audit.env.example \
        packaging/env/console.env.example "$dir/etc/toolgate/"
    doc_files "$dir" toolgate
    cat >"$dir/DEBIAN/control" <<EOF
Package: toolgate
Version: $version-$revision
Architecture: $arch
Maintainer: $maintainer
Depends: adduser, libc6, libgcc-s1
Section: database
Priority: optional
Homepage: https://pgxn.org/dist/pg_toolgate/
Description: pg_toolgate's services: MCP server, dispatcher, audit seal, console
 The toolgate command: toolgate mcp serves agent hosts over MCP (stdio or
 Streamable HTTP), toolgate dispatch delivers the outbox's intents to ERPs
 behind HTTP, toolgate audit seals and exports the audit, toolgate console
 is where approvers sign in and decide, toolgate login keeps a person's
 identity token, and keys, tokens and confirmations for
 the DBA. The systemd units are installed, none enabled nor started.
EOF
    printf '/etc/toolgate/%s.env.example\n' mcp dispatch audit console >"$dir/DEBIAN/conffiles"
    install -m 0755 packaging/debian/toolgate.postinst "$dir/DEBIAN/postinst"
    deb "$dir"

    (cd "$stage" && sha256sum -- *.deb >SHA256SUMS)
}

build "$out"
log "packages in $out:"
sed 's/^/  /' "$out/SHA256SUMS"
if $check; then
    log "again, from an empty target directory ($target_dir-again), to compare"
    first=$out
    target_dir=$target_dir-again
    rm -rf "$target_dir"
    build "$out-again"
    if cmp -s "$first/SHA256SUMS" "$out-again/SHA256SUMS"; then
        log "reproducible: both builds gave byte-identical packages"
    else
        log "NOT reproducible:" >&2
        diff "$first/SHA256SUMS" "$out-again/SHA256SUMS" >&2 || true
        exit 1
    fi
fi
