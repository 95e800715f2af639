"""eval: coding tasks as data (``tasks/``), run against the endpoint and scored automatically."""
