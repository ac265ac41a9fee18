#!/usr/bin/env bash
# Installs what building and testing ember needs: Debian packages (when missing) and a Python
# venv with the pinned test requirements. Idempotent and quick when everything is there.
# Usage: scripts/setup.sh [--python-only|--system-only]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}

packages=(build-essential cmake ninja-build pkg-config git python3 python3-venv
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libxxhash-dev libicu-dev
  clang libclang-rt-dev bible-kjv-text chromium)

if [ "$mode" != "--python-only" ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if [ "$mode" != "--system-only" ]; then
  venv=${EMBER_VENV:-$root/.venv}
  stamp="$venv/.requirements-$(sha256sum "$root/requirements/test.txt" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "setup: creating Python venv $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -r "$root/requirements/test.txt"
    touch "$stamp"
  fi
fi
