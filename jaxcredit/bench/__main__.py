"""``python -m jaxcredit.bench {train,estimators} [...]`` is ``jaxcredit bench ...``."""

import sys

from jaxcredit.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]])
