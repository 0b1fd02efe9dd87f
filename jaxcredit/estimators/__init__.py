"""Credit estimators: pure, time-major functions and the init / assign / loss records built on them."""

from jaxcredit.estimators.base import Estimator
