#!/usr/bin/env bash
# Rehearses accelerator/run.sh here, on the CPU, in a Python 3.12 venv that holds only the GPU
# image's stack (accelerator/image_stack.txt, --no-deps): if the tables run there with nothing
# but accelerator/wheels added, wheels.txt is complete for the lent machine.
#
#   bash accelerator/rehearse.sh            (needs PyPI for the venv and the wheels)
#   bash accelerator/rehearse.sh --venv-only   (only step 1)
#
# Steps, each timed:
#   1. the venv (REHEARSE_VENV, default $TMPDIR/jaxcredit-image-venv): reused while its stamp
#      matches image_stack.txt, else rebuilt (about 1.2 GB, mostly from pip's cache);
#   2. accelerator/wheels: prepare.sh runs where the folder does not match wheels.txt
#      (PUREJAXRL_GIT, a bare git directory of PureJaxRL, is passed on; without any checkout
#      the races run jaxcredit alone);
#   3. run.sh --size smoke --allow-cpu into a fresh OUT, wheels installed into a fresh folder:
#      every part of every table must be done (tables.py --check);
#   4. a second call from the first one's files (run.sh --from): every part skipped, logs
#      appended, still no more than 8 files;
#   5. a call with a budget too small for any part: each one skipped by its estimate;
#   6. without --allow-cpu on a CPU: run.sh refuses with one line;
#   7. the other end of jaxcredit's supported range (`make test` runs this script as the
#      suite's first test, tests/test_accelerator_rehearsal.py; the suite runs on the
#      machine's python3): pip, asked to install jaxcredit into this
#      Python 3.12 + JAX 0.11 venv, would keep its JAX; and the public API, a training run
#      from the command line, a sweep, a plot and a resume pass their tests here.
# Every OUT is removed at the end unless KEEP=1. With no Python 3.12 on the machine the script
# says so and stops with status 0, unless REQUIRE_OTHER_END=1 (.ci/run), when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "rehearse.sh: $*" >&2; exit 1; }

find_python312() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return; fi
  if python3.12 --version >/dev/null 2>&1; then command -v python3.12; return; fi
  if command -v pyenv >/dev/null 2>&1; then  # pyenv's shim answers only for its own version
    local v
    v=$(pyenv versions --bare | grep -E '^3\.12(\.|$)' | tail -1)
    if [ -n "$v" ]; then echo "$(pyenv root)/versions/$v/bin/python3.12"; return; fi
  fi
  local found  # pyenv's own folder, when pyenv is installed but not on PATH
  found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
  if [ -n "$found" ]; then echo "$found"; return; fi
  echo "rehearse.sh: no Python 3.12 found; set PYTHON312" >&2
  return 1
}
if ! find_python312 >/dev/null 2>&1; then
  if [ "${REQUIRE_OTHER_END:-0}" = 1 ]; then fail "no Python 3.12 found; set PYTHON312"; fi
  echo "rehearse.sh: skipped (no Python 3.12 here; set PYTHON312 to rehearse the GPU script)"
  exit 0
fi

VENV=${REHEARSE_VENV:-${TMPDIR:-/tmp}/jaxcredit-image-venv}
PY="$VENV/bin/python"
want=$(sha256sum accelerator/image_stack.txt | cut -d' ' -f1)
t0=$(date +%s)
if [ -x "$PY" ] && [ "$(cat "$VENV/.image_stack.sha256" 2>/dev/null)" = "$want" ]; then
  echo "rehearse.sh: reusing $VENV"
else
  rm -rf "$VENV"
  "$(find_python312)" -m venv "$VENV"
  # --no-deps: exactly the image's list, so that a package it lacks cannot slip in as a
  # dependency and hide a missing wheel.
  "$PY" -m pip install --quiet --no-deps -r accelerator/image_stack.txt \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$VENV/.image_stack.sha256"
fi
venv_s=$(( $(date +%s) - t0 ))
if [ "${1:-}" = "--venv-only" ]; then
  echo "rehearse.sh: venv ready in ${venv_s} s ($VENV)"
  exit 0
fi

wheels_match() {
  local line name n=0
  while read -r line; do
    name=$(echo "${line%%==*}" | tr 'A-Z-' 'a-z_')
    compgen -G "accelerator/wheels/${name}-${line#*==}-*.whl" >/dev/null || return 1
    n=$((n + 1))
  done < <(grep -Ev '^\s*(#|$)' accelerator/wheels.txt)
  [ "$(ls accelerator/wheels/*.whl | wc -l)" -eq "$n" ]
}
t0=$(date +%s)
if ! wheels_match 2>/dev/null || { [ -n "${PUREJAXRL_GIT:-}" ] && [ "$(cat \
     accelerator/purejaxrl/COMMIT 2>/dev/null)" != "$(git --git-dir "$PUREJAXRL_GIT" rev-parse \
     HEAD)" ]; }; then
  bash accelerator/prepare.sh ${PUREJAXRL_GIT:-} 2> >(grep -v "is ignored: it is neither" >&2)
fi
prepare_s=$(( $(date +%s) - t0 ))

scratch=$(mktemp -d)
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$scratch"' EXIT; fi
mkdir -p "$scratch/none" "$scratch/out1" "$scratch/out2" "$scratch/out3" "$scratch/out4"
# The rehearsal is a CPU run: no GPU lookup, and a fresh folder for the wheels each time.
export JAX_PLATFORMS=cpu PYTHON="$PY"
# The rehearsal checks that every part runs, not how fast: LLVM at level 0 compiles the parts'
# programs faster on the CPU (as the test suite does, tests/conftest.py).
export XLA_FLAGS="--xla_backend_optimization_level=0${XLA_FLAGS:+ $XLA_FLAGS}"
runsh() { JAXCREDIT_SITE="$scratch/site" bash accelerator/run.sh "$@"; }

t0=$(date +%s)
OUT="$scratch/out1" runsh --size smoke --allow-cpu --budget-s 600 --from "$scratch/none"
PYTHONPATH=. "$PY" accelerator/tables.py --check "$scratch/out1" --size smoke
smoke_s=$(( $(date +%s) - t0 ))

t0=$(date +%s)
OUT="$scratch/out2" runsh --size smoke --allow-cpu --budget-s 600 --from "$scratch/out1"
PYTHONPATH=. "$PY" accelerator/tables.py --check "$scratch/out2" --size smoke
# out2's log is out1's, appended to: two calls, and no part run by the second.
[ "$(grep -c '^=== accelerator/run.sh' "$scratch/out2/run.log")" -eq 2 ] \
  || fail "the second call did not append to the first one's run.log"
[ "$(grep -c '\] run  ' "$scratch/out2/run.log")" -eq \
  "$(grep -c '\] run  ' "$scratch/out1/run.log")" ] || fail "the second call ran parts again"
resume_s=$(( $(date +%s) - t0 ))

t0=$(date +%s)
OUT="$scratch/out3" runsh --size smoke --allow-cpu --budget-s 12 --from "$scratch/none"
grep -q 'left for the next call' "$scratch/out3/run.log" || fail "a 12 s budget skipped nothing"
if grep -q '\] run  ' "$scratch/out3/run.log"; then fail "a 12 s budget started a part"; fi
if OUT="$scratch/out4" runsh --size smoke --budget-s 60 --from "$scratch/none"; then
  fail "run.sh ran on a CPU without --allow-cpu"
fi
grep -q 'JAX sees no GPU' "$scratch/out4/run.log" || fail "no one-line refusal without a GPU"
budget_s=$(( $(date +%s) - t0 ))

t0=$(date +%s)
# pip's plan for `pip install jaxcredit` here must leave the image's jax and jaxlib alone.
"$PY" -m pip install --quiet --dry-run --report "$scratch/plan.json" -e . \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$PY" - "$scratch/plan.json" <<'EOF'
import json, sys
plan = {item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.load(open(sys.argv[1]))["install"]}
moved = {name: plan[name] for name in ("jax", "jaxlib", "numpy") if name in plan}
if moved:
    sys.exit(f"rehearse.sh: installing jaxcredit would replace the image's {moved}")
EOF
# No compilation cache here: without xdist there is no crash re-run, and XLA:CPU's cache write
# is what crashes now and then (jaxcredit/compile_cache.py).
JAXCREDIT_COMPILE_CACHE=0 PYTHONPATH="$PWD:$scratch/site" "$PY" -m pytest -q -p no:cacheprovider -p no:xdist \
  tests/test_q_lambda_targets.py tests/test_cli.py::test_train_sweep_plot_and_resume
other_end_s=$(( $(date +%s) - t0 ))

echo "rehearse.sh: passed. venv ${venv_s} s, wheels ${prepare_s} s, smoke run ${smoke_s} s," \
     "second call (all skipped) ${resume_s} s, budget and no-GPU refusals ${budget_s} s," \
     "other end (pip plan, API, train, resume) ${other_end_s} s;" \
     "wheels $(du -sm accelerator/wheels | cut -f1) MiB"
