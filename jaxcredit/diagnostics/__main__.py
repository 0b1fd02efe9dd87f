"""``python -m jaxcredit.diagnostics [...]`` is ``jaxcredit diagnose [...]``."""

import sys

from jaxcredit.cli import main

if __name__ == "__main__":
    main(["diagnose", *sys.argv[1:]])
