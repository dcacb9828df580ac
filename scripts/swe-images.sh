#!/bin/sh
# make swe-images: the swe-mini task image (examples/swe-mini, docs/swe.md) built offline from Debian's packages.
#
# Two layers, as SWE-bench's images split environment and repository:
#   base   Debian bookworm minbase by mmdebstrap from the configured Debian mirror, with what the tasks run and
#          nothing else: python3 (unittest), make, tcc as cc (with libc6-dev's headers and crt files); no docs,
#          man pages, locales or apt lists.  Cached as examples/swe-mini/images/base.tar, keyed by this script's
#          package list: rebuilt only when that changes (or with SWE_IMAGES_REBUILD=1).
#   repos  examples/swe-mini/repos/NAME at /testbed/NAME, written fresh every time (a second).
# then an OCI image layout written by scripts/oci_layout.py: examples/swe-mini/images/swe-mini, ref name latest, the
# reference the task rows use (oci:images/swe-mini:latest, relative to the tasks file).  The images/ folder is
# git-ignored.  Needs root (mmdebstrap's root mode) for the base layer.
set -eu
cd "$(dirname "$0")/.."
EX=examples/swe-mini
OUT=$EX/images
SUITE=${SWE_IMAGES_SUITE:-bookworm}
PKGS=python3,make,tcc,libc6-dev
KEY="$SUITE $PKGS v1"
start=$(date +%s)
mkdir -p "$OUT"

if [ "${SWE_IMAGES_REBUILD:-0}" = 1 ] || [ ! -f "$OUT/base.tar" ] || [ "$(cat "$OUT/base.key" 2>/dev/null)" != "$KEY" ]; then
  command -v mmdebstrap >/dev/null || { echo "swe-images: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }
  rm -f "$OUT/base.tar" "$OUT/base.key"
  # dpkg never writes docs, man pages or locales; the hooks drop apt's lists and caches and make tcc the cc.
  # Debian's own python3 runs mmdebstrap's tar filter (a python3 wrapper earlier in PATH costs seconds a package).
  PATH=/usr/sbin:/usr/bin:/sbin:/bin mmdebstrap --variant=minbase --include="$PKGS" --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='ln -sf tcc "$1/usr/bin/cc"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/usr/share/doc "$1"/usr/share/man' \
    --customize-hook='find "$1/usr/lib/python3" "$1/usr/lib/python3.11" -name __pycache__ -prune -exec rm -rf {} +' \
    --format=tar "$SUITE" "$OUT/base.tar.tmp"
  mv "$OUT/base.tar.tmp" "$OUT/base.tar"
  echo "$KEY" > "$OUT/base.key"
  echo "swe-images: base layer $(du -h "$OUT/base.tar" | cut -f1) in $(($(date +%s) - start)) s"
fi

# The repositories' layer: /testbed/NAME for each, root-owned, one fixed time (the same tar from the same files).
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --mode='u+rwX,go+rX,go-w' \
  --transform 's,^repos,testbed,' -C "$EX" -cf "$OUT/repos.tar" repos

python3 scripts/oci_layout.py --out "$OUT/swe-mini" --tag latest --workdir /testbed \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
  --env PYTHONDONTWRITEBYTECODE=1 "$OUT/base.tar" "$OUT/repos.tar"
rm -f "$OUT/repos.tar"
echo "swe-images: oci:$OUT/swe-mini:latest in $(($(date +%s) - start)) s"
