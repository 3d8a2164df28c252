#!/usr/bin/env bash
# Install the system packages that `make test` and CI need, if any are missing:
# make, redis-server, the PostgreSQL server (initdb, pg_ctl, postgres) and client,
# Debian's headless Chromium (the browser tests drive it through Playwright with
# executable_path: no browser download) and python3-venv; as root also iproute2 and
# nftables (the partition drill).
#
# As root it installs them with apt-get. Otherwise it prints the exact command to run
# and exits 1. Exit 0 means everything is there. `.ci/run` and `make test` both call it.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

have() { command -v "$1" >/dev/null 2>&1; }

have_pg_server() {
    have pg_ctl && have initdb && have postgres && return 0
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && return 0
    done
    return 1
}

missing=()
have make || missing+=(make)
have redis-server || missing+=(redis-server)
have_pg_server || missing+=(postgresql)
have psql || missing+=(postgresql-client)
have chromium || missing+=(chromium)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# The partition drill (root only: network namespaces and packet filter rules) needs ip
# and nft or iptables; CI runs as root, so there it must never be skipped for want of them.
if [ "$(id -u)" -eq 0 ]; then
    have ip || missing+=(iproute2)
    have nft || have iptables || missing+=(nftables)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if ! have apt-get; then
    echo "install_system_deps: missing ${missing[*]}, and apt-get is not available:" \
        "install the equivalent packages with this system's package manager" >&2
    exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install_system_deps: missing system packages: ${missing[*]}" >&2
    echo "install_system_deps: run this once as root, then run make test again:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "install_system_deps: installing ${missing[*]}" >&2
apt-get update -qq
apt-get install -y -qq "${missing[@]}" </dev/null
