"""Experiments on the engine: a list of runs, each a run directory, readers for the report, and
the shell every experiment script shares.

An experiment script (``experiments/*/run.py``) is a list of :class:`Case` objects (a run
directory name, a ``TrainConfig``, hyper-parameter settings) and a report. :func:`run_cases`
trains each case with the host loop (``agents.host_loop.run_experiment``: one compiled program
per case, all seeds vmapped, checkpoints between chunks) into ``<out>/<case.name>/``, so every
run can be plotted and inspected with the command line (``jaxcredit plot <out>/<case>``). A case
whose run directory is complete is skipped and a partial one is resumed: an interrupted
experiment continues where it stopped.

Outputs never overwrite results: by default an experiment writes into a new folder under
``runs/experiments/``; :func:`publish` copies the report files into the experiment's committed
``results/`` folder only when asked (and refuses to replace files there without ``force``).

The parts, one job each: ``runs`` (the cases, training them, reading their metrics),
``tables`` (the report's numbers, tables and figures) and ``script`` (a script's flags and its
``main``). Scripts import this package as ``X`` and use the names below.
"""

from jaxcredit.experiment.runs import (TIMING_FILE, Case, area, curves, default_out, final,
                                       is_complete, run_cases)
from jaxcredit.experiment.script import (OutputArgs, chosen_size, main, print_report, publish,
                                         publish_if_asked, run_and_report, with_overrides)
from jaxcredit.experiment.tables import (CREDIT_ERROR_METRICS, aggregate_table, case_results,
                                         credit_error_entries, credit_error_tables,
                                         gain_share_table, line_style, markdown_table,
                                         mean_ci_cell, oracle_of, plot_curve_panels, result_cell)

__all__ = ["TIMING_FILE", "Case", "area", "curves", "default_out", "final", "is_complete",
           "run_cases", "OutputArgs", "chosen_size", "main", "print_report", "publish",
           "publish_if_asked", "run_and_report", "with_overrides", "CREDIT_ERROR_METRICS",
           "aggregate_table", "case_results", "credit_error_entries", "credit_error_tables",
           "gain_share_table", "line_style", "markdown_table", "mean_ci_cell", "oracle_of",
           "plot_curve_panels", "result_cell"]
