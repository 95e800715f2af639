"""Verification logic that needs no server: schema checks and how outcomes rank."""

import pytest

from podkit.verify import WEATHER_TOOL, Outcome, schema_errors, worst

SCHEMA = WEATHER_TOOL["function"]["parameters"]


@pytest.mark.parametrize(
    "arguments, errors",
    [
        ({"city": "Paris", "unit": "celsius"}, []),
        ({"city": "Rome", "unit": "celsius"}, ["arguments.city='Rome' is not one of ['Paris', 'Berlin', 'Tokyo']"]),
        ({"city": "Paris"}, ["arguments lacks required 'unit'"]),
        ({"city": "Paris", "unit": "celsius", "when": "now"}, ["arguments has unexpected 'when'"]),
        (["Paris"], ["arguments should be object, got list"]),
        ({"city": 3, "unit": "celsius"}, ["arguments.city should be string, got int"]),
    ],
)
def test_schema_errors(arguments, errors):
    assert schema_errors(arguments, SCHEMA) == errors


def test_booleans_are_not_numbers():
    assert schema_errors(True, {"type": "integer"}) == ["arguments should be integer, got bool"]


@pytest.mark.parametrize(
    "outcomes, expected",
    [
        ([], Outcome.OK),
        ([Outcome.OK, Outcome.OK], Outcome.OK),
        ([Outcome.TOOL_CALLING, Outcome.ERROR], Outcome.TOOL_CALLING),
        ([Outcome.ERROR, Outcome.UNREACHABLE, Outcome.AUTH], Outcome.UNREACHABLE),
        ([Outcome.TOOL_CALLING, Outcome.AUTH], Outcome.AUTH),
    ],
)
def test_the_first_cause_decides_the_exit_code(outcomes, expected):
    assert worst(outcomes) == expected
