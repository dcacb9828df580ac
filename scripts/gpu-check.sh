#!/bin/sh
# The GPU learner's one-window check (issue 33): on a GPU machine with nothing
# reachable from it (nvcc, PyTorch, transformers, cuBLAS, NCCL as Python wheels;
# no package registry), one run of at most 10 minutes
#   1. builds the CUDA learner's tests and benchmarks (make CUDA=1 WERROR=1 gpu-build);
#   2. make test-gpu: every kernel, the whole model, ZeRO-1's shard, the trainer vs the CPU;
#   3. interoperability: a checkpoint longtail writes (the 0.6B shape and tiny-moe,
#      tests/gpu/interop.c: the bytes `longtail init` writes) loads with transformers'
#      from_pretrained unchanged, and its fp32 log-probabilities on 8 random sequences
#      match longtail's (`longtail logprobs`) within 1e-3 (bench/gpu/hf_interop.py);
#   4. make bench-gpu: tokens/s and MFU of the qwen3-0.6b, qwen3-1.7b and moe shapes at
#      4k and 16k tokens per sequence, and the same batches trained by PyTorch
#      (transformers, bf16 autocast, sdpa, AdamW) in the same run (bench/gpu/torch_train.py);
#   5. with time left, the 0.6B shape again with the tensor-core attention (lt_gpu_set_flash,
#      LT_BENCH_FLASH=1; keys gpu_*_flash), off by default until test-gpu's "flash" checks pass;
# and leaves OUT_DIR/results.md (the table rows docs/benchmarks.md records,
# `| gpu_mfu_qwen3-0.6b_16k | 41.2% |`) beside the logs and results.json.
#
#   scripts/gpu-check.sh --pack            here (Debian 12, apt): fill .deb/ (below)
#   scripts/gpu-check.sh [OUT_DIR]         on the GPU machine (default OUT_DIR build/gpu-check); through
#       the device tool: carry [".deb"], timeout_s 600, command
#       scripts/gpu-check.sh build/gpu-check; cd build/gpu-check && cp results.md results.json test-gpu.log
#       bench-gpu.log interop.log build.log "$OUT"/
#   scripts/gpu-check.sh --cpu-dry-run [OUT_DIR]
#       on a machine without a GPU: the compile check (CUDA=1 WERROR=1 gpu-build), the
#       interop check against the independent numpy forward (tests/ref/qwen3_ref.py)
#       instead of transformers, and the PyTorch side on small shapes on the CPU with a
#       plain-PyTorch decoder instead of transformers (Debian's python3-torch; PYTHON=
#       names the interpreter).  Exercises everything but the GPU and transformers.
#
# What travels to the GPU machine: the working tree, plus the Debian packages the
# learner's tests link (cJSON, OpenBLAS, libsodium, Open MPI: learner/dist.c links MPI even
# on one GPU), about 20 MB of .deb files that --pack downloads into .deb/ (git-ignored).
# The device tool carries them with carry [".deb"]; this script unpacks them into a
# private root under /tmp (never into /) and points the compiler and loader there.
# NCCL and cuBLAS come from the CUDA toolkit or, failing that, from the nvidia-* Python
# wheels beside PyTorch.  Nothing else is needed: the daemon's libraries (ZeroMQ, libuv,
# SQLite, curl, seccomp) are not, since these programs link the learner and util layers only.
#
# Budget: LT_WINDOW_S (default 570 s, inside the device tool's 10 minutes) for the whole run: each step
# gets at most what is left (`timeout`), the bench last (LT_BENCH_REPS=2 timed steps per shape; a shape
# whose warm-up step takes over 20 s is timed once); what a step measured before its time ran out stays
# in results.json (both benchmark programs rewrite it after every shape).
# Exit status: 0 when test-gpu and the interop checks pass; 2 setup, 3 build, 1 a check failed.
set -u
PYTHON=${PYTHON:-python3}
mode=gpu
case "${1:-}" in
  --pack) mode=pack; shift ;;
  --cpu-dry-run) mode=dry; shift ;;
  -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
esac
out=${1:-build/gpu-check}

DEBS="libcjson-dev libcjson1 libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 \
libsodium-dev libsodium23 libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7 \
libevent-pthreads-2.1-7 libfabric1 libibverbs1 libnl-3-200 libnl-route-3-200 libpsm-infinipath1 libpsm2-2 libucx0"

if [ "$mode" = pack ]; then
  mkdir -p .deb && rm -f .deb/*.deb
  # shellcheck disable=SC2086
  (cd .deb && apt-get download $DEBS) || { echo "gpu-check: apt-get download failed (apt-get update first?)" >&2; exit 2; }
  echo "gpu-check: $(ls .deb/*.deb | wc -l) packages, $(du -sh .deb | cut -f1) in .deb/ (carry [\".deb\"])"
  exit 0
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
rc=0
t0=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }
# Seconds left of the window, at most $1 (--cpu-dry-run: no window).
left() {
  [ "$mode" = dry ] && { echo "$1"; return; }
  l=$(( ${LT_WINDOW_S:-570} - ($(date +%s) - t0) ))
  [ "$l" -lt "$1" ] && echo "$(( l > 1 ? l : 1 ))" || echo "$1"
}

if [ "$mode" = gpu ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "gpu-check: no GPU answers (nvidia-smi)" >&2; exit 2; }
  command -v nvcc >/dev/null || PATH=$PATH:/usr/local/cuda/bin
  command -v nvcc >/dev/null || { echo "gpu-check: nvcc not found" >&2; exit 2; }
  ls .deb/*.deb >/dev/null 2>&1 || { echo "gpu-check: no .deb files in .deb/ (scripts/gpu-check.sh --pack, then carry .deb)" >&2; exit 2; }
  root=$(mktemp -d /tmp/lt-sysroot.XXXXXX)
  for f in .deb/*.deb; do dpkg-deb -x "$f" "$root" || exit 2; done
  lib=$root/usr/lib/x86_64-linux-gnu
  inc="$root/usr/include:$root/usr/include/x86_64-linux-gnu/openblas-pthread:$lib/openmpi/include"
  libs="$lib:$lib/openblas-pthread:$lib/openmpi/lib"
  # NCCL (and cuBLAS) from the Python wheels when the toolkit has none: a private lib dir
  # with the unversioned names the linker wants.
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  for l in nccl cublas cublasLt; do
    [ -e "$cuda/lib64/lib$l.so" ] || [ -e "$cuda/lib/lib$l.so" ] && continue
    so=$("$PYTHON" -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)
    so=$(find "${so:-/nonexistent}/nvidia" -name "lib$l.so*" 2>/dev/null | head -1)
    [ -n "$so" ] || { echo "gpu-check: lib$l.so neither in $cuda nor in the nvidia wheels" >&2; exit 2; }
    mkdir -p "$root/wheels/lib" && ln -sf "$so" "$root/wheels/lib/lib$l.so"
    libs="$libs:$root/wheels/lib:$(dirname "$so")"
    [ -e "$(dirname "$so")/../include/$l.h" ] && inc="$inc:$(dirname "$so")/../include"
  done
  export CPATH="$inc${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$libs${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8} # the CPU references; the rest feed the GPU
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  arch=${CUDA_ARCHS:-${arch:-90}}
  jobs=$(nproc)
  impl=transformers
  interop_impl=transformers
  dense=${LT_INTEROP_DENSE:-configs/models/qwen3-0.6b.json}
  tmo=150
else
  arch=${CUDA_ARCHS:-90}
  jobs=2
  impl=plain
  interop_impl=numpy-ref
  dense=${LT_INTEROP_DENSE:-configs/models/qwen3-0.6b.json}
  tmo=1800 # the numpy reference in float64 on two cores: minutes for the 0.6B shape
fi
mk="make --no-print-directory CUDA=1 CUDA_ARCHS=$arch WERROR=1"
build=build/release-cuda-sm$(echo "$arch" | tr ' ' _)/tests/longtail-interop # the Makefile's BUILD

step "build: $mk -j$jobs gpu-build"
$mk -j"$jobs" gpu-build >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "gpu-check: build failed" >&2; exit 3; }
grep -i 'warning' "$out/build.log" && { echo "gpu-check: the build warns" >&2; rc=1; }

if [ "$mode" = gpu ]; then
  step "make test-gpu"
  timeout "$(left 240)" $mk test-gpu >"$out/test-gpu.log" 2>&1
  cat "$out/test-gpu.log"
  grep -q ' 0 failed$' "$out/test-gpu.log" || rc=1
else
  step "make test-gpu: compiled only (no GPU here)"
  $mk -n test-gpu >/dev/null 2>&1 || rc=1
  # The CPU build of the interop tool (the GPU build's needs a CUDA runtime to start).
  make --no-print-directory -j"$jobs" gpu-interop >>"$out/build.log" 2>&1 || { echo "gpu-check: gpu-interop build failed" >&2; exit 3; }
  build=build/release/tests/longtail-interop
fi

# 3. transformers loads what longtail writes, and agrees on the log-probabilities.
echo '{}' >"$out/interop.json"
for cfg in "$dense" configs/models/tiny-moe.json; do
  key=$(basename "$cfg" .json)
  step "interop $key ($cfg, $interop_impl)"
  rm -rf "$out/interop-$key"
  if timeout "$(left "$tmo")" "$build" "$cfg" "$out/interop-$key" 8 33 >>"$out/interop.log" 2>&1 &&
     timeout "$(left "$tmo")" "$PYTHON" bench/gpu/hf_interop.py --dir "$out/interop-$key" --key "$key" --impl "$interop_impl" \
       --results "$out/interop.json" >>"$out/interop.log" 2>&1; then
    tail -1 "$out/interop.log"
  else
    echo "interop $key: FAIL (see interop.log)"; tail -5 "$out/interop.log"; rc=1
  fi
  if [ "$mode" = dry ] && [ "$key" = tiny-moe ] && [ -x bin/longtail ]; then
    # Here bin/longtail exists: the check's side is `longtail init` and `longtail logprobs`, byte for byte.
    rm -rf "$out/init-$key"
    if bin/longtail init --config "$cfg" --seed 33 --out "$out/init-$key" >/dev/null &&
       cmp -s "$out/init-$key/model.safetensors" "$out/interop-$key/ckpt/model.safetensors" &&
       bin/longtail logprobs --model "$out/init-$key" --input "$out/interop-$key/seqs.jsonl" |
         "$PYTHON" -c 'import json, sys
a = [json.loads(l)["logprobs"] for l in sys.stdin]
b = [json.loads(l)["logprobs"] for l in open(sys.argv[1])]
sys.exit(a != b)' "$out/interop-$key/longtail.jsonl"; then
      echo "interop $key: the checkpoint is longtail init's, byte for byte; the log-probabilities are longtail logprobs'" |
        tee -a "$out/interop.log"
    else
      echo "interop $key: FAIL: the check's checkpoint or log-probabilities differ from longtail init / logprobs"; rc=1
    fi
    rm -rf "$out/init-$key"
  fi
  rm -rf "$out/interop-$key/ckpt" # gigabytes; the sequences and log-probabilities stay
done

# 4. the training rates, longtail and PyTorch on the same batches.
if [ "$mode" = gpu ]; then
  step "make bench-gpu"
  rm -f bench/gpu-results.json # a warm machine keeps ignored files: no results of an earlier run
  LT_BENCH_REPS=${LT_BENCH_REPS:-2} timeout "$(left 600)" $mk bench-gpu PYTHON="$PYTHON" 2>&1 | tee "$out/bench-gpu.log"
  cp bench/gpu-results.json "$out/results.json" 2>/dev/null || echo '{}' >"$out/results.json"
  # With time left: the 0.6B shape again with the tensor-core attention (off by default until make
  # test-gpu's "flash attention" checks pass), as gpu_*_flash keys.
  if [ "$(left 600)" -ge 120 ]; then
    step "bench: qwen3-0.6b with the tensor-core attention (LT_BENCH_FLASH=1)"
    LT_BENCH_FLASH=1 LT_BENCH_SHAPES=qwen3-0.6b LT_BENCH_REPS=${LT_BENCH_REPS:-2} LT_ROOT=$(pwd) \
      timeout "$(left 600)" "build/release-cuda-sm$(echo "$arch" | tr ' ' _)/bench/gpu" "$out/flash.json" 2>&1 |
      tee -a "$out/bench-gpu.log"
    "$PYTHON" - "$out/results.json" "$out/flash.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
try:
    f = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    f = {}
r.update({k + "_flash": v for k, v in f.items() if k.startswith(("gpu_train_tokens_per_s_", "gpu_mfu_"))})
json.dump(r, open(sys.argv[1], "w"), indent=1)
EOF
  fi
else
  step "bench: the PyTorch side on small shapes, CPU, plain-PyTorch decoder (no GPU: no gpu_* keys)"
  cat >"$out/results.json" <<EOF
{"device": "cpu dry run", "train": [
 {"shape": "tiny-moe", "len": "64", "config": "configs/models/tiny-moe.json", "seq_len": 64, "tokens": 256, "status": "no GPU"},
 {"shape": "moe-10m", "len": "128", "config": "configs/models/moe-10m.json", "seq_len": 128, "tokens": 256, "status": "no GPU"}]}
EOF
  LT_BENCH_REPS=2 "$PYTHON" bench/gpu/torch_train.py --merge "$out/results.json" --impl "$impl" --device cpu 2>&1 |
    tee "$out/bench-gpu.log"
fi
"$PYTHON" - "$out/results.json" "$out/interop.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); r.update(json.load(open(sys.argv[2])))
json.dump(r, open(sys.argv[1], "w"), indent=1)
EOF

{
  echo "# GPU check ($mode), $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
  echo
  if [ "$mode" = gpu ]; then
    echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  else
    echo "device: none (--cpu-dry-run: no gpu_* rates; interop against tests/ref/qwen3_ref.py; PyTorch side with --impl plain on the CPU)"
  fi
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "python: $("$PYTHON" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1)$("$PYTHON" -c 'import transformers; print(", transformers", transformers.__version__)' 2>/dev/null)"
  echo
  echo "| key | value |"
  echo "| --- | --- |"
  "$PYTHON" bench/gpu/torch_train.py --rows "$out/results.json"
  echo
  echo "## make test-gpu"
  echo
  echo '```'
  if [ "$mode" = dry ]; then
    echo "(compiled only: no GPU)"
  else
    grep -E '^(ok|FAIL|device|[0-9]+ checks)' "$out/test-gpu.log" || tail -5 "$out/test-gpu.log"
  fi
  echo '```'
  echo
  echo "## interop and bench"
  echo
  echo '```'
  cat "$out/interop.log" "$out/bench-gpu.log" 2>/dev/null
  echo '```'
} >"$out/results.md"
echo "gpu-check: results in $out/results.md (exit $rc)"
exit "$rc"
