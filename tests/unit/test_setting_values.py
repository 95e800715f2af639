"""Every number finite and in range, every flag a real bool: checked over every declared setting.

The lists come from ``SETTINGS`` and each setting's type, so a setting added later is covered
without touching this file."""

import dataclasses
import json
import math
import re
import typing

import pytest

from podkit.settings import SETTINGS, Settings, SettingsError
from tests.helpers import sample_data

_TYPES = typing.get_type_hints(Settings)


def _kinds(setting) -> set[type]:
    hint = _TYPES[setting.attr]
    return set(typing.get_args(hint)) | {hint} if typing.get_args(hint) else {hint}


NUMERIC = [s for s in SETTINGS if _kinds(s) & {int, float} and bool not in _kinds(s)]
FLAGS = [s for s in SETTINGS if _kinds(s) == {bool}]
HOSTILE_NUMBERS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 10**400, -(10**400), True, False, "1e3", [1]]


def refusal(key, value) -> str:
    """The one line a datum is refused with (any other exception fails the test)."""
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping({**sample_data(), key: value})
    message = str(error.value)
    assert "\n" not in message and message.startswith(key), message
    return message


def test_the_lists_are_derived_from_the_declarations():
    names = {s.name for s in NUMERIC}
    assert {"podkit_edge_port", "podkit_idle_stop_minutes", "podkit_usd_per_hour", "vllm_max_model_len"} <= names
    assert {s.name for s in FLAGS} == {
        "podkit_use_system_vllm",
        "podkit_prefer_fp8",
        "podkit_plan_measure",
        "podkit_public",
    }


@pytest.mark.parametrize("value", HOSTILE_NUMBERS, ids=lambda v: repr(v)[:12])
@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.name)
def test_a_number_is_finite_in_range_and_a_number(setting, value):
    message = refusal(setting.name, value)
    # the refusal says the range it wants
    assert re.search(r"from .* to \d+|\(0, 1\]", message), message


@pytest.mark.parametrize("setting", NUMERIC, ids=lambda s: s.name)
def test_a_numeric_default_is_accepted_as_is(setting):
    value = getattr(Settings.from_mapping(sample_data()), setting.attr)
    assert value == setting.default or (setting.default is None and value is None)


MEANT = [("false", False), ("False", False), ("true", True), ("", False), ("no", False), (0, False), (1, True)]


@pytest.mark.parametrize("value", [datum for datum, _ in MEANT] + [0.0, None, [False]], ids=repr)
@pytest.mark.parametrize("setting", FLAGS, ids=lambda s: s.name)
def test_a_flag_is_a_real_bool(setting, value):
    message = refusal(setting.name, value)
    meant = next((bool_ for datum, bool_ in MEANT if datum == value and type(datum) is type(value)), None)
    if value == 0.0 and isinstance(value, float):
        assert message.endswith(f"got 0.0: write {setting.name} = False, without quotes")
    elif meant is None:
        assert f"write {setting.name} = True or {setting.name} = False" in message
    else:
        fix = f"write {setting.name} = {meant}, without quotes"
        assert message == f"{setting.name} must be True or False (a Python bool), got {value!r}: {fix}"


@pytest.mark.parametrize("setting", FLAGS, ids=lambda s: s.name)
@pytest.mark.parametrize("value", [True, False])
def test_a_flag_takes_true_and_false(setting, value):
    assert getattr(Settings.from_mapping({**sample_data(), setting.name: value}), setting.attr) is value


def test_the_string_false_does_not_expose_the_edge():
    assert refusal("podkit_public", "false") == (
        "podkit_public must be True or False (a Python bool), got 'false': write podkit_public = False, without quotes"
    )


@pytest.mark.parametrize(
    "key, value, where",
    [
        ("vllm_generation_config", {"temperature": math.nan}, "vllm_generation_config['temperature'] is nan"),
        ("vllm_generation_config", {"stop": [1, math.inf]}, "vllm_generation_config['stop'][1] is inf"),
        ("vllm_extra_args", ["--max-num-seqs", -math.inf], "vllm_extra_args[1] is -inf"),
        ("vllm_extra_env", {"X": math.nan}, "vllm_extra_env['X'] is nan"),
    ],
)
def test_nan_and_infinity_inside_a_datum_are_refused(key, value, where):
    assert refusal(key, value).startswith(where + ": a datum holds finite numbers only")


@pytest.mark.parametrize(
    "key, ends, outside",
    [
        ("podkit_fetch_timeout", (1, 7 * 86400), (0.5, 7 * 86400 + 1)),
        ("podkit_ready_timeout", (1, 86400), (0, 86401)),
        ("podkit_log_max_bytes", (1024, 2**40), (1023, 2**40 + 1)),
        ("podkit_log_keep", (1, 1000), (0, 1001)),
        ("podkit_start_retries", (0, 1000), (-1, 1001)),
        ("podkit_edge_port", (1, 65535), (0, 65536)),
        ("podkit_cluster_port", (1, 65535), (0, 65536)),
        ("vllm_port", (1, 65535), (0, 65536)),
        ("podkit_idle_stop_minutes", (0, 0.1, 525600), (-0.1, 0.05, 525601)),
        ("podkit_usd_per_hour", (0, 1000), (-0.01, 1000.5)),
        ("podkit_cluster_rank", (0, 1023), (-1, 1024)),
        ("vllm_max_model_len", (16, 2**24), (15, 2**24 + 1)),
        ("vllm_gpu_memory_utilization", (1e-9, 1), (0, 1.0001)),
        ("vllm_tensor_parallel_size", (1, 256), (0, 257)),
        ("vllm_pipeline_parallel_size", (1, 1024), (0, 1025)),
    ],
)
def test_each_range_holds_at_its_ends(key, ends, outside):
    for value in ends:
        Settings.from_mapping({**sample_data(), key: value})
    for value in outside:
        refusal(key, value)


def test_every_numeric_setting_has_its_range_tested():
    tested = {key for key, _, _ in test_each_range_holds_at_its_ends.pytestmark[0].args[1]}
    assert tested == {s.name for s in NUMERIC}, "a numeric setting without a range test"


@pytest.mark.parametrize("given, taken", [(8000.0, 8000), ("8000", 8000), (" 8002 ", 8002)])
def test_a_port_written_as_a_whole_float_or_digits_is_its_number(given, taken):
    assert Settings.from_mapping({**sample_data(), "podkit_edge_port": given}).edge_port == taken


@pytest.mark.parametrize("key", ["podkit_edge_port", "podkit_log_keep", "vllm_max_model_len"])
def test_a_whole_number_is_not_a_fraction(key):
    assert "whole" in refusal(key, 20.5) or "integer" in refusal(key, 20.5) or "token count" in refusal(key, 20.5)


ANYTHING = [math.nan, math.inf, 10**400, -(10**400), 1e308, True, None, "", "false", "\u00e9", [], {}, [math.nan]]


@pytest.mark.parametrize("value", ANYTHING, ids=lambda v: repr(v)[:12])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_no_datum_ends_in_a_traceback_and_what_passes_is_strict_json(setting, value):
    """Whatever a datum holds, the outcome is a Settings or one SettingsError line (no
    OverflowError, ValueError, TypeError), and what passes serializes as strict JSON."""
    try:
        settings = Settings.from_mapping({**sample_data(), setting.name: value})
    except SettingsError as error:
        assert "\n" not in str(error)
        return
    json.dumps(dataclasses.asdict(settings), allow_nan=False, default=str)
