"""Interval arithmetic for the scheduler."""


def merge(intervals):
    """Merge overlapping or touching (start, end) intervals; the result is sorted."""
    result = []
    for start, end in sorted(intervals):
        if result and start < result[-1][1]:
            result[-1][1] = end
        else:
            result.append([start, end])
    return [tuple(item) for item in result]
