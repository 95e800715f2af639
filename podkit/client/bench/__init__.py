"""bench: TTFT at exact prompt lengths and a concurrency sweep, saved as a record with a chart."""
