#!/usr/bin/env bash
# One entry point for newcomers and CI: install what is missing, build, run the main job or every test.
#
#   bash scripts/dev.sh main    # deps + build + `rotary report` with plots (default preset llama-3.1-8b)
#   bash scripts/dev.sh test    # deps + build + all C++ tests (ctest) + all Python tests (pytest)
#   bash scripts/dev.sh deps | build | python | cpp-test | py-test   (the individual steps)
#   bash scripts/dev.sh cuda-build   # CUDA build (needs nvcc, no GPU; CPU kernels for one Highway target) + its GPU test (skips)
#
# Environment: ROTARY_VENV (default ~/.cache/rotary/venv), ROTARY_BUILD_DIR (default build/cpp),
#              ROTARY_REPORT_DIR (default out/report), ROTARY_SKIP_APT=1 to skip apt,
#              ROTARY_WHEEL=path.whl to install that wheel instead of building with `pip install .`,
#              ROTARY_HWY_TARGETS (cuda-build only: all | sanitize | static, default static).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${ROTARY_VENV:-$HOME/.cache/rotary/venv}"
BUILD="${ROTARY_BUILD_DIR:-build/cpp}"
REPORT_DIR="${ROTARY_REPORT_DIR:-out/report}"
JOBS="$(nproc 2>/dev/null || echo 2)"

APT_PACKAGES=(build-essential cmake ninja-build pkg-config git
              nlohmann-json3-dev libhwy-dev libgtest-dev libgmock-dev
              python3 python3-dev python3-venv python3-pip
              clang libclang-rt-14-dev)

log() { printf '\n==> %s\n' "$*" >&2; }

step_deps() {
  if [[ "${ROTARY_SKIP_APT:-0}" != 1 ]]; then
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
      log "apt-get install ${missing[*]}"
      local SUDO=""
      [[ $(id -u) -ne 0 ]] && SUDO="sudo"
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtualenv $VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c "import sys; sys.exit(0)" 2>/dev/null; then
    log "virtualenv $VENV is broken, recreating"; rm -rf "$VENV"; python3 -m venv "$VENV"
  fi
  # Skip pip when every requirement is already satisfied (fast re-runs).
  if ! "$VENV/bin/python" "$ROOT/scripts/check_requirements.py" "$ROOT/python/requirements-dev.txt" 2>/dev/null; then
    log "pip install -r python/requirements-dev.txt (torch, transformers, onnxruntime, ...)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -r "$ROOT/python/requirements-dev.txt"
  fi
}

step_build() {  # step_build [TARGET...]  (no target: everything, tests included)
  log "configure + build C++ ($BUILD${*:+: $*})"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  if (($#)); then
    cmake --build "$BUILD" -j "$JOBS" --target "$@"
  else
    cmake --build "$BUILD" -j "$JOBS"
  fi
}

step_python() {
  if [[ -n "${ROTARY_WHEEL:-}" ]]; then  # CI: the wheel that scripts/package_check.sh built from the sdist
    log "pip install $ROTARY_WHEEL (the packaged wheel; no second build)"
    "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$ROTARY_WHEEL"
    return
  fi
  log "pip install . (Python package, builds the extension with scikit-build-core)"
  "$VENV/bin/python" -m pip install -q --no-build-isolation "$ROOT"
}

step_cpp_test() {
  log "C++ tests (ctest)"
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
}

step_py_test() {
  log "Python tests (pytest)"
  # Run from a neutral directory so the installed package (not python/rotary sources) is imported.
  local cli="$BUILD/rotary"
  [[ "$cli" = /* ]] || cli="$ROOT/$cli"
  (cd "$ROOT/python/tests" && ROTARY_CLI="$cli" \
     "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider .)
}

# The CUDA backend built with nvcc into build-cuda (one architecture, sm_90, unless ROTARY_CUDA_ARCHS says
# otherwise): the library, the CLI's CUDA sources (bench --backend cuda) and the GPU test, which then runs (it
# skips without a GPU; the emulator tests already ran in the ordinary build). CI runs this to catch CUDA
# compile and link errors, so its CPU kernels are compiled for the baseline Highway target only
# (ROTARY_HWY_TARGETS=static; set ROTARY_HWY_TARGETS=all for a build that ships); scripts/device_check.sh
# builds and runs everything on a GPU.
step_cuda_build() {
  local nvcc
  nvcc="$(command -v nvcc || true)"
  [[ -n "$nvcc" ]] || nvcc=/usr/local/cuda/bin/nvcc
  [[ -x "$nvcc" ]] || { log "nvcc not found: skipping the CUDA build"; return 0; }
  local dir="${ROTARY_CUDA_BUILD_DIR:-build-cuda}"
  log "configure + build with CUDA ($dir, $nvcc, architectures ${ROTARY_CUDA_ARCHS:-90})"
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROTARY_BUILD_CUDA=ON \
        -DROTARY_HWY_TARGETS="${ROTARY_HWY_TARGETS:-static}" \
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${ROTARY_CUDA_ARCHS:-90}" >/dev/null
  # The shared library by its file name (in a Ninja build `rotary` names the CLI's executable, not the library
  # target), the GPU test, and the CLI's CUDA sources (the cuda bench and its naive peer kernel) compiled, not
  # the whole CLI: its other files are the CPU build's, and its link adds nothing the device test's does not.
  cmake --build "$dir" -j "$JOBS" --target librotary.so cuda_device_test \
        CMakeFiles/rotary_cli.dir/tools/cli/bench_cuda.cc.o CMakeFiles/rotary_cli.dir/tools/cli/cuda/naive_rope.cu.o
  log "GPU test ($dir; it skips without a GPU)"
  "$dir/tests/cuda_device_test" --gtest_brief=1
}

step_main() {
  log "rotary report (main job) -> $REPORT_DIR"
  mkdir -p "$REPORT_DIR"
  ROTARY_PYTHON="$VENV/bin/python" "$BUILD/rotary" report --out "$REPORT_DIR"
  log "report written to $REPORT_DIR (report.json, bands.csv, *.png)"
}

case "${1:-}" in
  main)     step_deps; step_build rotary_cli; step_python; step_main ;;
  test)     step_deps; step_build; step_python; step_cpp_test; step_py_test ;;
  deps)     step_deps ;;
  build)    step_build ;;
  python)   step_python ;;
  cpp-test) step_cpp_test ;;
  py-test)  step_py_test ;;
  cuda-build) step_cuda_build ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
