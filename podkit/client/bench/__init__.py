"""bench: TTFT at exact prompt lengths and a concurrency sweep, or multi-turn sessions, saved as a
record with a chart.

``run`` sends the requests (:class:`Bench`), ``prompts`` builds prompts of an exact
length, ``sessions`` the conversations of the session workload and their figures,
``stats`` turns chunk timings into figures, ``report`` writes the table, the
record's path and the chart. A front end imports from here; a router's
per-replica figures are :mod:`podkit.client.replicas`.
"""

from podkit.client.bench.report import record_path, table, write_chart
from podkit.client.bench.run import Bench, BenchAborted, Options, failed_record, overall

__all__ = ["Bench", "BenchAborted", "Options", "failed_record", "overall", "record_path", "table", "write_chart"]
