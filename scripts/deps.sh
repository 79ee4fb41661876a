#!/usr/bin/env bash
# Installs the Debian packages minishard needs to build and test, and nothing else.
# Run by `make` targets when a header or tool is missing, so `make demo` and `make test`
# work on a fresh Debian 12 machine. Everything comes from Debian's archive, except mongosh
# (MongoDB's shell, not packaged by Debian): npm installs it into build/mongosh, used by
# tests/integration/test_mongosh.py and the README's quick start; and MongoDB's Node.js
# driver, which npm installs into build/nodedriver (tests/integration/test_streaming_hello.py).
#   scripts/deps.sh [--lint | --fuzz | --mongosh | --nodedriver]
#   (--mongosh, --nodedriver: only node, npm and that package)
set -euo pipefail
cd "$(dirname "$0")/.."

# mongosh 2.x, pinned so the shell output the tests check does not change under them.
MONGOSH_VERSION=2.12.0
MONGOSH_DIR=build/mongosh
MONGOSH_BIN=$MONGOSH_DIR/node_modules/.bin/mongosh
# The Node.js driver 6.x, pinned: its server monitoring (the streaming hello) is what
# test_streaming_hello.py holds the server to.
NODEDRIVER_VERSION=6.22.0
NODEDRIVER_DIR=build/nodedriver
NODEDRIVER_PKG=$NODEDRIVER_DIR/node_modules/mongodb/package.json

# python3-pymongo and libmongoc-dev: real drivers over the wire protocol
# (tests/integration/test_wire.py, test_pymongo.py, test_mongoc.py; tests/bench/bench_wire.py).
pkgs=(libnng-dev libbson-dev libsqlite3-dev pkg-config build-essential python3 python3-pymongo libmongoc-dev)
pkgs+=(spin)      # the model checker: make check-model and test_model.py (docs/model/)
pkgs+=(iptables)  # the chaos soak cuts and delays links between daemons with it
# chromium (default set only, and a failure to install it is a warning): test_webview.py
# loads the config server's web view in a real headless browser, checks its DOM and takes
# a screenshot; without it that part says it skipped and the endpoint checks still run.
soft=()
if [ "${1:-}" = "--lint" ]; then
    pkgs+=(cppcheck shellcheck)
fi
if [ "${1:-}" = "--fuzz" ]; then
    pkgs+=(clang)  # libFuzzer ships with Debian's clang (make fuzz)
fi
want_mongosh=0
want_nodedriver=0
case "${1:-}" in
    "") want_mongosh=1; want_nodedriver=1; soft=(chromium) ;;
    --mongosh) want_mongosh=1; pkgs=() ;;
    --nodedriver) want_nodedriver=1; pkgs=() ;;
esac
# node and npm: Debian's nodejs (18.19 on Debian 12, what mongosh 2.12 needs) and npm, unless
# a node and npm are already on PATH (e.g. from another repository).
if { [ $want_mongosh = 1 ] && [ ! -x "$MONGOSH_BIN" ]; } ||
   { [ $want_nodedriver = 1 ] && [ ! -f "$NODEDRIVER_PKG" ]; }; then
    command -v node >/dev/null || pkgs+=(nodejs)
    command -v npm >/dev/null || pkgs+=(npm)
fi

# install_mongosh: npm install into build/mongosh (~150 MB, ~30-60 s, needs the npm registry).
# A failure is a warning, not an error: the build and every other test go on without it, and
# test_mongosh.py says it skipped and why.
install_mongosh() {
    [ -x "$MONGOSH_BIN" ] && return 0
    echo "deps: installing mongosh $MONGOSH_VERSION into $MONGOSH_DIR (npm)" >&2
    mkdir -p "$MONGOSH_DIR"
    if ! npm install --no-audit --no-fund --loglevel=error --prefix "$MONGOSH_DIR" \
            "mongosh@$MONGOSH_VERSION" >&2; then
        echo "deps: WARNING: npm could not install mongosh; test_mongosh.py will be skipped" >&2
    fi
    return 0
}

# install_nodedriver: npm install of the mongodb package into build/nodedriver (~10 MB, a few
# seconds). npm runs with HOME in a temporary directory (nothing written to the user's) and
# without its update check or telemetry. Quick when present: nothing is asked of npm then. A
# failure is a warning: test_streaming_hello.py says its driver test skipped and why.
install_nodedriver() {
    local home
    [ -f "$NODEDRIVER_PKG" ] && grep -q "\"version\": \"$NODEDRIVER_VERSION\"" "$NODEDRIVER_PKG" && return 0
    echo "deps: installing the Node.js driver mongodb $NODEDRIVER_VERSION into $NODEDRIVER_DIR (npm)" >&2
    mkdir -p "$NODEDRIVER_DIR"
    home=$(mktemp -d)
    if ! HOME=$home DO_NOT_TRACK=1 npm_config_update_notifier=false \
            npm install --no-audit --no-fund --loglevel=error --prefix "$NODEDRIVER_DIR" \
            "mongodb@$NODEDRIVER_VERSION" >&2; then
        echo "deps: WARNING: npm could not install mongodb $NODEDRIVER_VERSION; the Node driver" \
             "test of test_streaming_hello.py will be skipped" >&2
    fi
    rm -rf "$home"
    return 0
}

# install_npm_packages: those asked for (each a warning at worst).
install_npm_packages() {
    [ $want_mongosh = 1 ] && install_mongosh
    [ $want_nodedriver = 1 ] && install_nodedriver
    return 0
}

# not_installed PKG...: prints those of PKG not installed.
not_installed() {
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            echo "$p"
        fi
    done
}
mapfile -t missing < <(not_installed "${pkgs[@]}")
mapfile -t soft_missing < <(not_installed "${soft[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#soft_missing[@]} -eq 0 ]; then
    install_npm_packages
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: need root or sudo to install ${missing[*]} ${soft_missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#soft_missing[@]} -gt 0 ]; then
    echo "deps: installing ${soft_missing[*]}" >&2
    $sudo apt-get install -y -qq --no-install-recommends "${soft_missing[@]}" ||
        echo "deps: WARNING: could not install ${soft_missing[*]}; test_webview.py's browser part will be skipped" >&2
fi
install_npm_packages
exit 0
