"""`coevolve report`: a comparison's or a run's report, rebuilt from its files.

Two steps: collect (coevolve.report.collecting: typed records from the run
store, aggregated over seeds) and render (coevolve.report.rendering: tables, CSV,
markdown, results.json, and the end-of-run table `coevolve run` prints;
coevolve.report.plots draws the figures). The names below are what the
commands and tests use.
"""

from coevolve.report.collecting import (aggregate, at_template, baselines, best_starting_point, collect,
                                        fmt_number, run_rows, starting_point, task_of_run, verdict)
from coevolve.report.rendering import (BUDGET_STATEMENT, STARTING_POINT, _table_rows_csv, _write_csv, agent_table,
                                       context_rows, es_updates, render, render_agent_run, render_comparison,
                                       render_run, run_table)

__all__ = ["BUDGET_STATEMENT", "STARTING_POINT", "_table_rows_csv", "_write_csv", "agent_table", "aggregate",
           "at_template", "baselines", "best_starting_point", "collect", "context_rows", "es_updates", "fmt_number",
           "render", "render_agent_run", "render_comparison", "render_run", "run_rows", "run_table", "starting_point",
           "task_of_run", "verdict"]
