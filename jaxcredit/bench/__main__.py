"""``python -m jaxcredit.bench {estimators,train} [options]``."""

import importlib
import sys

from jaxcredit.xla_flags import configure_cpu_flags

configure_cpu_flags()  # before anything imports jax (see jaxcredit.xla_flags)

BENCHMARKS = {"estimators": "jaxcredit.bench.estimators", "train": "jaxcredit.bench.train"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m jaxcredit.bench {{{','.join(BENCHMARKS)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
