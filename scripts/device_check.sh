#!/usr/bin/env bash
# The CUDA backend's device check, for a session lent a GPU (an H200): build with CUDA, test against the reference, bench.
#
#   bash scripts/device_check.sh prepare   # HERE, before asking for the GPU: fetches the build dependencies the GPU
#                                          # machine lacks (Highway, nlohmann-json, GoogleTest) into .devdeps/
#   bash scripts/device_check.sh           # THERE (the device tool's `run`, carry [".devdeps"], timeout_s 420)
#
# On the GPU machine it (1) configures and builds with -DROTARY_BUILD_CUDA=ON for sm_90 into build-device/,
# (2) runs the CUDA tests: the whole matrix on the GPU against the reference and bit for bit against the host
# grid emulator, graph capture/replay, the accuracy contract, plus the emulator tests, (3) runs
# `rotary bench --backend cuda --json` (Llama-3-8B q+k at T = 1, 4096, 32768, 131072; bf16/f16/f32; both
# pairings; in and out of place; each with a device-to-device copy of the same bytes as the limit and a
# one-thread-per-pair peer), (4) times the peers in Python (torch eager HF rotation; flashinfer and flash-attn
# when importable) on the same shapes, and (5) writes summary.md with the issue's targets checked.
# Everything goes to $OUT (the device tool's folder) or out/device_check/. Expected: ~3 minutes on an H200.
# Exit status: non-zero if a build or a test failed (the bench still runs after a test failure), if the bench
# failed, or if the bench's one-thread-per-pair peer disagreed with rotary's results (the summary's check).
# A GPU is required: with one listed by nvidia-smi the tests run with ROTARY_REQUIRE_GPU=1, so a GPU test
# that finds no usable CUDA device fails instead of skipping. On a machine without a GPU (no nvidia-smi, or
# none listed) it builds nothing and exits 0 saying it skipped, unless ROTARY_REQUIRE_GPU=1 is already set.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEPS="$ROOT/.devdeps"
PKGS=(libhwy1 libhwy-dev nlohmann-json3-dev libgtest-dev libgmock-dev)

log() { printf '\n==> [device_check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "${1:-}" == prepare ]]; then
  log "downloading ${PKGS[*]} into $DEPS (the GPU machine has no package registry)"
  rm -rf "$DEPS" && mkdir -p "$DEPS/debs" "$DEPS/root"
  (cd "$DEPS/debs" && apt-get download "${PKGS[@]}")
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$DEPS/root"; done
  rm -rf "$DEPS/debs" "$DEPS/root/usr/share/doc"
  du -sh "$DEPS"
  log "ready: call the device tool's run with command 'bash scripts/device_check.sh', carry [\".devdeps\"], timeout_s 420"
  exit 0
fi

OUT_DIR="${OUT:-$ROOT/out/device_check}"
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/device_check.log") 2>&1
start=$SECONDS
status=0

log "machine"
gpus=0
command -v nvidia-smi >/dev/null && gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [[ "$gpus" == 0 ]]; then
  why="no GPU on this machine ($(command -v nvidia-smi >/dev/null && echo 'nvidia-smi lists none' || echo 'no nvidia-smi'))"
  if [[ "${ROTARY_REQUIRE_GPU:-0}" == 1 ]]; then
    log "FAILED: ROTARY_REQUIRE_GPU=1, got $why"
    exit 1
  fi
  log "SKIPPED: $why: nothing built or tested (run it on the GPU machine; set ROTARY_REQUIRE_GPU=1 to fail here)"
  exit 0
fi
export ROTARY_REQUIRE_GPU=1  # a GPU is listed: a test that cannot use one fails (REQUIRE_GPU in device_test.cc)
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv || true
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
nvcc --version | tail -2
cmake --version | head -1
nproc

log "1. configure + build with CUDA (sm_90) into build-device/"
PREFIX_ARGS=()
if [[ -d "$DEPS/root/usr" ]]; then
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS/root/usr;$DEPS/root/usr/lib/x86_64-linux-gnu/cmake;$DEPS/root/usr/share/cmake")
  export LD_LIBRARY_PATH="$DEPS/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "using carried dependencies in $DEPS/root"
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$SECONDS
cmake -S . -B build-device "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DROTARY_BUILD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DROTARY_INSTALL=OFF "${PREFIX_ARGS[@]}"
cmake --build build-device -j "$(nproc)" --target rotary_cli cuda_device_test cuda_emulator_matrix_test \
      cuda_emulator_behaviour_test cuda_emulator_table_copies_test cuda_device_plan_test
echo "build: $((SECONDS - t0)) s"

log "2. CUDA tests on the GPU (matrix vs reference and vs the emulator, graphs, accuracy) + emulator tests"
t0=$SECONDS
for t in cuda_device_test cuda_emulator_matrix_test cuda_emulator_behaviour_test cuda_emulator_table_copies_test cuda_device_plan_test; do
  echo "--- $t"
  report=()
  [[ "$t" == cuda_device_test ]] && report=(--gtest_output="json:$OUT_DIR/$t.json")  # at most 8 files come back
  if ! "build-device/tests/$t" --gtest_brief=1 "${report[@]}"; then
    echo "FAILED: $t"
    status=1
  fi
done
echo "tests: $((SECONDS - t0)) s"

log "3. rotary bench --backend cuda --json"
t0=$SECONDS
build-device/rotary bench --backend cuda --json | tee "$OUT_DIR/bench_cuda.jsonl" || status=1
echo "bench: $((SECONDS - t0)) s"

log "4. peers in Python (torch eager HF rotation; flashinfer / flash-attn if importable)"
t0=$SECONDS
PYTHONUNBUFFERED=1 python3 scripts/cuda_peers.py bench | tee "$OUT_DIR/peers.jsonl" || echo "peers failed (status kept)"
echo "peers: $((SECONDS - t0)) s"

log "5. summary"
if ! python3 scripts/cuda_peers.py summary "$OUT_DIR/bench_cuda.jsonl" "$OUT_DIR/peers.jsonl" | tee "$OUT_DIR/summary.md"; then
  echo "FAILED: summary (the one-thread-per-pair peer disagreed with rotary, or the summary could not be made)"
  status=1
fi

log "done in $((SECONDS - start)) s, status $status (results in $OUT_DIR)"
exit "$status"
