#!/usr/bin/env bash
# Prepares, on a machine with PyPI, what a lent GPU machine needs to run accelerator/run.sh:
#
#   bash accelerator/prepare.sh [PUREJAXRL_GIT_DIR]      (or PUREJAXRL_GIT=DIR bash ...)
#
# 1. accelerator/wheels/: the wheels of accelerator/wheels.txt for CPython 3.12 manylinux
#    x86_64 (the GPU machine's python3 is 3.12.3 and reaches no registry), --no-deps: the list
#    names every package the image lacks, and nothing it has (checked against image_stack.txt).
# 2. accelerator/purejaxrl/: PureJaxRL's purejaxrl/ folder at HEAD of a bare git directory
#    (e.g. `git clone --bare` of github.com/luchris429/purejaxrl), laid out as
#    `--purejaxrl accelerator/purejaxrl` expects (accelerator/purejaxrl/purejaxrl/ppo.py), and
#    its commit in accelerator/purejaxrl/COMMIT. Without a git directory an existing checkout
#    is kept. PureJaxRL's code is never committed here (.gitignore).
#
# Both folders are ignored by git; they travel with the checkout (docs/scaling.md, "Running on a
# lent GPU"). PYTHON picks the interpreter whose pip downloads (any version: pip downloads for
# --python-version 3.12 whatever it runs on).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
LIST=accelerator/wheels.txt
DEST=accelerator/wheels
GIT_DIR_ARG=${1:-${PUREJAXRL_GIT:-}}

norm() { tr 'A-Z_.' 'a-z--' | sed -E 's/-+/-/g'; }
names() { grep -Ev '^\s*(#|$)' "$1" | sed -E 's/\s*[=<>!~].*//' | norm | sort; }

# Anything the image already has must stay the image's: a wheel of it would shadow it.
clash=$(comm -12 <(names "$LIST") <(names accelerator/image_stack.txt))
if [ -n "$clash" ]; then
  echo "prepare.sh: $LIST names packages the GPU image already has: $clash" >&2
  exit 2
fi

# Download into a fresh folder, then swap it in, so that no wheel of an older pin stays behind
# (two versions of one package stop the whole --no-deps install there).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$tmp" -r "$LIST"
wanted=$(names "$LIST" | wc -l)
got=$(ls "$tmp"/*.whl | wc -l)
if [ "$wanted" != "$got" ]; then
  echo "prepare.sh: $LIST names $wanted packages but $got wheels came down" >&2
  exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp"/*.whl "$DEST"/
echo "prepare.sh: $got wheels in $DEST, $(du -sm "$DEST" | cut -f1) MiB" \
     "($(du -sb "$DEST" | cut -f1) bytes; at most 64 MiB travel in all)"

if [ -n "$GIT_DIR_ARG" ]; then
  commit=$(git --git-dir "$GIT_DIR_ARG" rev-parse HEAD)
  rm -rf accelerator/purejaxrl
  mkdir -p accelerator/purejaxrl
  git --git-dir "$GIT_DIR_ARG" archive HEAD purejaxrl LICENSE | tar -x -C accelerator/purejaxrl
  echo "$commit" > accelerator/purejaxrl/COMMIT
  echo "prepare.sh: PureJaxRL $commit in accelerator/purejaxrl" \
       "($(du -sk accelerator/purejaxrl | cut -f1) KiB)"
elif [ -f accelerator/purejaxrl/purejaxrl/ppo.py ]; then
  echo "prepare.sh: keeping accelerator/purejaxrl (PureJaxRL $(cat accelerator/purejaxrl/COMMIT" \
       "2>/dev/null || echo 'of unknown commit'))"
else
  echo "prepare.sh: no PureJaxRL: pass the bare git directory of luchris429/purejaxrl as the" \
       "first argument (or PUREJAXRL_GIT); run.sh --size gpu needs it for its races" >&2
fi
