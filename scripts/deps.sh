#!/usr/bin/env bash
# Installs the Debian packages minishard needs to build and test, and nothing else.
# Run by `make` targets when a header or tool is missing, so `make demo` and `make test`
# work on a fresh Debian 12 machine. Everything comes from Debian's archive.
set -euo pipefail

# python3-pymongo and libmongoc-dev: real drivers over the wire protocol
# (tests/integration/test_wire.py, test_pymongo.py, test_mongoc.py; tests/bench/bench_wire.py).
pkgs=(libnng-dev libbson-dev libsqlite3-dev pkg-config build-essential python3 python3-pymongo libmongoc-dev)
if [ "${1:-}" = "--lint" ]; then
    pkgs+=(cppcheck shellcheck)
fi
if [ "${1:-}" = "--fuzz" ]; then
    pkgs+=(clang)  # libFuzzer ships with Debian's clang (make fuzz)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
