#!/usr/bin/env bash
# Runs jaxcredit's GPU tables on a lent GPU machine, from the repository root, within a time
# budget (docs/scaling.md, "Running on a lent GPU"):
#
#   bash accelerator/run.sh [--size gpu|smoke] [--allow-cpu] [--budget-s 290] [--from DIR]
#                           [-- more accelerator/tables.py flags]
#
# OUT (an empty folder whose files come back) receives device.md, NN_name.json per table, results.md and
# run.log: at most 8 files, the most a device call brings back. --from (default
# accelerator/out, where the previous call's files were copied and carried) is copied into OUT
# first, so that this call skips every part already done and appends to the logs.
#
# The machine's image has the JAX stack (jax 0.11.2, CUDA 13) but not all of jaxcredit's
# packages, and reaches no registry: accelerator/wheels/ (accelerator/prepare.sh) is installed
# with --no-deps --no-index into a folder of its own put on PYTHONPATH, so the preinstalled
# packages stay as they are (checked below). jaxcredit itself runs from this checkout.
set -uo pipefail
START=$(date +%s)
cd "$(dirname "$0")/.."

SIZE=gpu
BUDGET=290
FROM=accelerator/out
FLAGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; shift 2 ;;
    --budget-s) BUDGET=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --allow-cpu) FLAGS+=(--allow-cpu); shift ;;
    --) shift; FLAGS+=("$@"); break ;;
    *) echo "run.sh: unknown argument $1 (see the head of accelerator/run.sh)" >&2; exit 2 ;;
  esac
done
if [ -z "${OUT:-}" ]; then
  echo "run.sh: set OUT to an empty folder for the tables (the files to bring back)" >&2
  exit 2
fi
mkdir -p "$OUT"
if [ -d "$FROM" ] && [ "$(realpath "$FROM")" != "$(realpath "$OUT")" ]; then
  # Not -p: files fetched from a device call are read-only, and these are appended to.
  cp "$FROM"/*.json "$FROM"/*.md "$FROM"/run.log "$OUT"/ 2>/dev/null
fi
chmod u+w "$OUT"/* 2>/dev/null  # files brought back from a machine may be read-only
exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!
# OUT is collected when this script returns: let tee write the log's end first, and leave no
# half-written *.tmp behind (a 9th file would crowd out one of the 8 that come back).
trap 'rm -f "$OUT"/*.tmp; exec >&- 2>&-; wait "$TEE_PID"' EXIT
echo "=== accelerator/run.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), size $SIZE," \
     "budget ${BUDGET} s, earlier results from $FROM: $(ls "$OUT" | grep -c json) tables"

PY=${PYTHON:-python3}
SITE=${JAXCREDIT_SITE:-/tmp/jaxcredit-site}
export PYTHONUNBUFFERED=1
stack() { "$PY" -c 'import jax, jaxlib, numpy; print(jax.__version__, jaxlib.__version__,
numpy.__version__, jax.__file__, jaxlib.__file__, numpy.__file__)'; }

before=$(stack) || { echo "run.sh: $PY cannot import jax"; exit 1; }
shopt -s nullglob
wheels=(accelerator/wheels/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "run.sh: no wheels in accelerator/wheels: run accelerator/prepare.sh here and carry it"
  exit 1
fi
rm -rf "$SITE"  # a folder kept from an earlier call may hold wheels no longer in wheels.txt
"$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "${wheels[@]}" || { echo "run.sh: installing accelerator/wheels failed"; exit 1; }
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
after=$(stack) || { echo "run.sh: jax no longer imports with the wheels on PYTHONPATH"; exit 1; }
if [ "$before" != "$after" ]; then
  echo "run.sh: the wheels changed the image's JAX stack ($before -> $after); fix wheels.txt"
  exit 1
fi
echo "run.sh: ${#wheels[@]} wheels in $SITE; jax jaxlib numpy unchanged: $after"
# A wheel of a package the image has would shadow it from PYTHONPATH: say so (prepare.sh
# refuses the ones image_stack.txt names; this catches the rest of the image).
SITE="$SITE" "$PY" - <<'EOF'
import importlib.metadata as md, os, sys
site = os.path.realpath(os.environ["SITE"])
others = [p for p in sys.path if p and os.path.realpath(p) not in (site, os.getcwd())]
image = {d.metadata["Name"].lower().replace("_", "-") for d in md.distributions(path=others)}
for d in md.distributions(path=[site]):
    name = d.metadata["Name"].lower().replace("_", "-")
    if name in image:
        print(f"run.sh: warning: wheel {name} {d.version} shadows the image's own {name}")
EOF

# device.md names jaxcredit's commit: the caller's JAXCREDIT_COMMIT (the device's copy of the
# tree may come without .git), else git's.
if [ -z "${JAXCREDIT_COMMIT:-}" ]; then
  JAXCREDIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "unknown commit")
  if [ "$JAXCREDIT_COMMIT" != "unknown commit" ] && [ -n "$(git status --porcelain 2>/dev/null \
       | grep -v '^??')" ]; then
    JAXCREDIT_COMMIT="$JAXCREDIT_COMMIT with uncommitted changes"
  fi
fi
export JAXCREDIT_COMMIT
DEADLINE=$((START + BUDGET))
"$PY" accelerator/tables.py --size "$SIZE" --out "$OUT" --deadline "$DEADLINE" "${FLAGS[@]}"
rc=$?
# A crash inside XLA ends the process, not the call: go on once without the part that was
# running (tables.py marks it), if a minute is left.
if [ $rc -ne 0 ] && [ $rc -ne 2 ] && [ $rc -ne 3 ] && [ $((DEADLINE - $(date +%s))) -gt 60 ]; then
  echo "run.sh: tables.py ended with status $rc; going on without the part it was running"
  "$PY" accelerator/tables.py --size "$SIZE" --out "$OUT" --deadline "$DEADLINE" \
    --skip-running "${FLAGS[@]}"
  rc=$?
fi
echo "=== run.sh done in $(( $(date +%s) - START )) s, status $rc; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
