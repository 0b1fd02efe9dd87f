"""Merges several ``run.py`` result folders into one table and plot.

Long runs are split by length (and learner) into separate processes so that one slow or stuck
program does not hold up the rest; this script puts their ``results.json`` files back together.
Cells must not overlap, and every folder must have used the same number of updates and seeds.

Usage: ``python experiments/key_to_door/combine.py OUT_DIR IN_DIR [IN_DIR ...]``
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import LEARNERS, write_outputs  # noqa: E402


def combine(folders: list[str]) -> tuple[dict, dict]:
    """(results by length then learner, meta) from the ``results.json`` of each folder."""
    results, metas = {}, []
    for folder in folders:
        with open(os.path.join(folder, "results.json")) as f:
            data = json.load(f)
        metas.append(data["meta"])
        for length, row in data["results"].items():
            for label, entry in row.items():
                if label in results.get(length, {}):
                    raise ValueError(f"cell (L={length}, {label}) appears in more than one folder")
                results.setdefault(length, {})[label] = entry
    for key in ("updates", "seeds", "num_envs"):
        values = {m[key] for m in metas}
        if len(values) != 1:
            raise ValueError(f"folders differ in {key}: {sorted(values)}")
    learners = [l for l in LEARNERS if any(l in row for row in results.values())]
    missing = [(L, l) for L in results for l in learners if l not in results[L]]
    if missing:
        raise ValueError(f"missing cells {missing}")
    ordered = {L: {l: results[L][l] for l in learners}
               for L in sorted(results, key=int)}
    meta = {**metas[0], "combined_from": folders,
            "wall_seconds": sum(m["wall_seconds"] for m in metas),
            "command": [m["command"] for m in metas]}
    return ordered, meta


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("combine.py: error: usage: combine.py OUT_DIR IN_DIR [IN_DIR ...]", file=sys.stderr)
        return 2
    try:
        results, meta = combine(args[1:])
    except (OSError, ValueError, KeyError) as e:
        print(f"combine.py: error: {e}", file=sys.stderr)
        return 2
    write_outputs(results, args[0], meta)
    print(f"wrote {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
