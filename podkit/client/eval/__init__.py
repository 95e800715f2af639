"""eval: coding tasks as data (``tasks/``), run against the endpoint and scored automatically.

``catalog`` loads the tasks, ``profiles`` the sampling, ``endpoint`` sends one chat,
``answers`` reads code out of an answer, ``scoring`` judges it, ``tools`` runs the
tool task, ``harness`` runs a battery and keeps its record, ``compare`` sets two
records side by side and writes the text tables. A front end imports from here.
"""

from podkit.client.eval.catalog import TASK_ORDER, load_tasks
from podkit.client.eval.compare import compare, compare_table, table
from podkit.client.eval.harness import load_record, run_host
from podkit.client.eval.profiles import PROFILES

__all__ = ["PROFILES", "TASK_ORDER", "compare", "compare_table", "load_record", "load_tasks", "run_host", "table"]
