#!/bin/sh
# Debian packages longtail needs to build, test, fuzz, plot and benchmark (python3-zmq: the
# third-party worker scripts/pyworker.py; nodejs: the agent gateway test's OpenAI SDK agent and the
# tokenizer/template cross-checks; prometheus: promtool checks the metrics endpoint; chromium: the web
# console's browser test; python3-torch: the LoRA adapters' float64 parity test, tests/ref/lora_ref.py).
#   scripts/deps.sh check    exit 0 if everything is installed, else list what is missing
#   scripts/deps.sh install  install what is missing (root), or print the apt-get line
set -u
PKG_CONFIG_MODULES="libzmq libuv libcjson sqlite3 libcurl libseccomp openblas libsodium ompi-c libpcre2-8 libutf8proc libzstd criterion"
DEBS="build-essential pkg-config libzmq3-dev libuv1-dev libcjson-dev libsqlite3-dev libcurl4-openssl-dev \
libseccomp-dev libopenblas-dev libcriterion-dev libsodium-dev libpcre2-dev libutf8proc-dev libzstd-dev clang libclang-rt-14-dev gnuplot-nox bubblewrap \
python3 python3-numpy python3-torch python3-zmq nodejs prometheus iproute2 procps sqlite3 git ca-certificates openmpi-bin libopenmpi-dev nginx-light chromium"

missing_debs() {
  for p in $DEBS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || printf '%s ' "$p"
  done
}

check() {
  # pkg-config first: it answers for the libraries the build links.
  if command -v pkg-config >/dev/null 2>&1; then
    for m in $PKG_CONFIG_MODULES; do
      pkg-config --exists "$m" || { echo "missing pkg-config module: $m"; return 1; }
    done
  else
    echo "missing: pkg-config"; return 1
  fi
  m=$(missing_debs)
  [ -z "$m" ] && return 0
  echo "missing Debian packages: $m"
  return 1
}

install() {
  m=$(missing_debs)
  [ -z "$m" ] && { echo "deps: everything is installed"; return 0; }
  line="apt-get install -y --no-install-recommends $m"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages. As root, run:"
    echo "  apt-get update && $line"
    return 1
  fi
  echo "deps: installing $m"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when an install from them fails.
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $m || { apt-get update && apt-get install -y --no-install-recommends $m; }
}

case "${1:-check}" in
  check) check ;;
  install) install ;;
  *) echo "usage: $0 check|install" >&2; exit 2 ;;
esac
