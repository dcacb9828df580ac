#!/bin/sh
# On a GPU machine that has CUDA but no package registry: unpack the Debian
# packages the CUDA learner's tests need (cJSON, OpenBLAS, libsodium) from DEB_DIR into a
# private root, build with CUDA=1, run `make test-gpu` and `make bench-gpu`,
# and write a results table.
#
#   scripts/gpu-check.sh [DEB_DIR] [OUT_DIR]
#
# DEB_DIR (default .debs) is filled on a machine with a registry by
#   mkdir -p .debs && (cd .debs && apt-get download libcjson-dev libcjson1 \
#     libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libsodium-dev libsodium23 \
#     libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 \
#     libfabric1 libibverbs1 libnl-3-200 libnl-route-3-200 libpsm-infinipath1 libpsm2-2 libucx0)
# (Open MPI: the learner's ranks, learner/dist.c, link it even on one GPU.)
# OUT_DIR (default build/gpu-check) receives test-gpu.log, bench-gpu.log,
# gpu-results.json and results.md.  Exit status: that of test-gpu.
set -u
debs=${1:-.debs}
out=${2:-build/gpu-check}
mkdir -p "$out"
command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "gpu-check: no GPU answers (nvidia-smi)" >&2; exit 2; }
command -v nvcc >/dev/null || PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || { echo "gpu-check: nvcc not found" >&2; exit 2; }
ls "$debs"/*.deb >/dev/null 2>&1 || { echo "gpu-check: no .deb files in $debs" >&2; exit 2; }

root=$(mktemp -d /tmp/lt-sysroot.XXXXXX)
for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$root" || exit 2; done
lib=$root/usr/lib/x86_64-linux-gnu
export CPATH="$root/usr/include:$root/usr/include/x86_64-linux-gnu/openblas-pthread:$lib/openmpi/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$lib:$lib/openblas-pthread:$lib/openmpi/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The host's default BLAS threads fight the GPU timers for cores; one is plenty for references.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}

arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
make --no-print-directory CUDA=1 CUDA_ARCHS="${CUDA_ARCHS:-${arch:-90}}" WERROR=1 -j"$(nproc)" gpu-build \
  >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "gpu-check: build failed" >&2; exit 3; }

make --no-print-directory CUDA=1 CUDA_ARCHS="${CUDA_ARCHS:-${arch:-90}}" test-gpu 2>&1 | tee "$out/test-gpu.log"
test_rc=$(grep -q ' 0 failed$' "$out/test-gpu.log" && echo 0 || echo 1)
make --no-print-directory CUDA=1 CUDA_ARCHS="${CUDA_ARCHS:-${arch:-90}}" bench-gpu 2>&1 | tee "$out/bench-gpu.log"
cp bench/gpu-results.json "$out/" 2>/dev/null

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo
  echo "## make test-gpu"
  echo
  echo '```'
  grep -E '^(ok|FAIL|device|[0-9]+ checks)' "$out/test-gpu.log"
  echo '```'
  echo
  echo "## make bench-gpu"
  echo
  echo '```'
  cat "$out/bench-gpu.log"
  echo '```'
} >"$out/results.md"
echo "gpu-check: results in $out/results.md"
exit "$test_rc"
