#!/usr/bin/env bash
# Installs the Debian packages Tandem builds with, only those missing (idempotent, quiet).
# Sourced by tools/demo.sh and tools/test.sh; needs root (or sudo) only when something is missing.
tandem_install_deps() {
  local pkgs=(cmake g++ make pkg-config git
              libtbb-dev libhwloc-dev libmimalloc-dev libabsl-dev
              libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
              nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "tandem: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Configures and builds into $1 (default build/) with the remaining arguments passed to cmake.
tandem_build() {
  local dir=${1:-build}
  shift || true
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
}
