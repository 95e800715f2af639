"""vllmcheck: the installed vLLM reads a launch before podkit restarts the server with it.

Sent inline like podctl (``PYTHON - '<json>'``), but run by the interpreter that has vLLM (the
venv's, or the system's), with the server's environment: it costs vLLM's import, so the deploy
runs it only when a restart is due. Four steps, each vLLM's own code, none needing the GPU's
memory or the weights:

    arguments   ``vllm serve``'s own parser reads the command line and its validation runs
                (an unknown flag, a bad value, a flag that needs another)
    config      ``AsyncEngineArgs.from_cli_args(...).create_engine_config()``: the model's
                config against the context, the parallel sizes, the cache and device settings
    model       the model's own classes built from its config.json on the meta device (no memory,
                no weights; one process, tensor and pipeline parallel sizes of 1, whose splits the
                config step checked): what a checkpoint's config breaks at start (a head count of 0,
                heads that its KV heads do not divide) is refused here, with vLLM's own exception
    generation  the model's sampling defaults merged with ``--override-generation-config``,
                as vLLM gives them to each request, built into vLLM's ``SamplingParams``
                (what would answer every chat with a 400), and any key vLLM would ignore

It prints one JSON line: ``{"ok": true, "version", "seconds"}``, or ``{"ok": false, "step",
"error", "version"}`` with vLLM's own words. Never a secret: the key is not in its input. A launch it
accepts is added to ``record`` (its ``digest``, one a line), which the probe reads: the deploy does
not check that launch again.
"""

import contextlib
import importlib
import io
import json
import os
import sys
import time


class _Parsed(Exception):
    def __init__(self, args):
        super().__init__("parsed")
        self.args_namespace = args


def _last_error(text, fallback):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error:" in line:
            return brief(line.split("error:", 1)[1])
    return lines[-1] if lines else fallback


def _read(run):
    """``run()`` with vLLM's printing captured: ``(its value, None, what was printed)``, or ``(None,
    vLLM's words, what was printed)`` when reading the arguments stopped (an argparse exit or a
    validation error; :class:`_Parsed` carries the namespace out of vLLM's serve command)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return run(), None, said.getvalue()
    except _Parsed as parsed:
        return parsed.args_namespace, None, said.getvalue()
    except SystemExit:
        return None, _last_error(said.getvalue(), "vllm serve exited while reading its arguments"), said.getvalue()
    except Exception as exc:  # validation raises ValueError, TypeError, pydantic's errors
        return None, _words(exc), said.getvalue()


def parse(argv):
    """The namespace ``vllm serve ARGV`` would run with, read by ``vllm serve``'s own parser and its
    validation; vLLM's whole CLI (:func:`parse_with_cli`) where this vLLM keeps them elsewhere."""
    found = serve_parser()
    if found is None:
        return parse_with_cli(argv)
    parser, validate = found

    def read():
        args = parser.parse_args(["serve", *argv])
        validate(args)
        if getattr(args, "model_tag", None) is not None:  # as serve's own command does first
            args.model = args.model_tag
        return args

    args, error, _ = _read(read)
    return args, error


def serve_parser():
    """``(parser, validate)``: ``vllm serve``'s parser built as vLLM's CLI builds it (its
    ``make_arg_parser`` on a ``serve`` subcommand of a ``FlexibleArgumentParser``) and the validation
    its serve command runs, without importing the API server or the CLI's other commands; None
    where this vLLM has no such module."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        return None
    for where in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        make, validate = getattr(module, "make_arg_parser", None), getattr(module, "validate_parsed_serve_args", None)
        if make is None or validate is None:
            continue
        parser = FlexibleArgumentParser(prog="vllm")
        serve = parser.add_subparsers(dest="subparser").add_parser("serve", usage="vllm serve [model_tag] [options]")
        make(serve)
        return parser, validate
    return None


def parse_with_cli(argv):
    """:func:`parse` through vLLM's whole CLI: it builds its parser and validates the arguments, and
    its serve command is stopped before it starts anything."""
    from vllm.entrypoints.cli import main as cli
    from vllm.entrypoints.cli.serve import ServeSubcommand

    def intercept(args):
        if getattr(args, "model_tag", None) is not None:  # as serve's own command does first
            args.model = args.model_tag
        raise _Parsed(args)

    ServeSubcommand.cmd = staticmethod(intercept)
    sys.argv = ["vllm", "serve", *argv]
    args, error, said = _read(cli.main)
    if args is None and error is None:  # main returned: serve's command never ran
        return None, "vllm serve did not reach its server: " + _last_error(said, "no output")
    return args, error


def _words(exc):
    """vLLM's words for an exception: pydantic's first error without its URL, else the message."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(part) for part in first.get("loc") or ())
            said = ("%s: %s" % (where, first.get("msg")) if where else first.get("msg")) or str(exc)
            return brief(said)
        except Exception:  # noqa: S110 - fall back to the message
            pass
    return brief(str(exc)) or type(exc).__name__


def brief(text, most=400):
    """vLLM's words on one line, without pydantic's "Value error, " and, when long, to the end of
    the sentence that says what is wrong."""
    text = " ".join(str(text).split())
    text = text[len("Value error, ") :] if text.startswith("Value error, ") else text
    if len(text) > most:
        end = text.find(". ", 40)
        text = text[: end + 1] if 0 < end < most else text[: most - 3] + "..."
    return text


def engine_config(args):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    engine_args = AsyncEngineArgs.from_cli_args(args)
    return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


#: What the model step meets when the model's own code refuses its config (a division by a head count
#: of 0, an assertion on the heads): a refusal. Anything else (a CUDA error, a kernel the meta device
#: cannot take) is the check's limit, not the model's fault: the step says so and lets the launch pass.
MODEL_REFUSALS = (ZeroDivisionError, AssertionError, ValueError, TypeError, KeyError, IndexError, OverflowError)


def model_problem(config):
    """``(None, None)`` when vLLM builds the model from ``config`` (a VllmConfig) on the meta device
    in this one process; ``(None, its exception)`` when the model's code refuses the config (one of
    :data:`MODEL_REFUSALS`); ``("skipped", why)`` when the step itself cannot run here (a vLLM without
    these functions, a layer the meta device cannot take): the launch is not refused for that."""
    import tempfile

    store = tempfile.NamedTemporaryFile(prefix="podkit-vllmcheck-", delete=False)
    store.close()
    os.unlink(store.name)
    try:
        import torch
        from vllm.config import set_current_vllm_config
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.model_executor.model_loader.utils import initialize_model

        parallel = config.parallel_config
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "world_size"):
            if isinstance(getattr(parallel, name, None), int):
                setattr(parallel, name, 1)  # the splits were the config step's; one process builds it whole
        with set_current_vllm_config(config):
            init_distributed_environment(
                world_size=1, rank=0, distributed_init_method="file://" + store.name, local_rank=0, backend="gloo"
            )
            initialize_model_parallel(1, 1)
            with torch.device("meta"):
                initialize_model(vllm_config=config)
    except MODEL_REFUSALS as exc:
        return None, "%s: %s" % (type(exc).__name__, _words(exc))
    except Exception as exc:
        return "skipped", "%s: %s" % (type(exc).__name__, _words(exc))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(store.name)
    return None, None


def generation_problem(config, override):
    """Why the sampling defaults vLLM would give every request are refused by vLLM's own
    SamplingParams, or which keys of ``override`` vLLM does not read; None when they are fine."""
    from vllm import SamplingParams

    model = config.model_config
    ignored = unread_keys(model, override or {})
    if ignored:
        return "vLLM does not read %s from it (not a sampling default it knows)" % ", ".join(ignored)
    params = dict(model.get_diff_sampling_param())
    if "max_new_tokens" in params:
        params["max_tokens"] = params.pop("max_new_tokens")
    try:
        SamplingParams(**params)
    except (ValueError, TypeError) as exc:
        return _words(exc)
    return None


def unread_keys(model, override):
    """The keys of ``override`` that vLLM leaves out of the defaults it gives each request: each is
    set alone to a marker, and vLLM's own merge says whether the marker comes through."""
    saved, unread = model.override_generation_config, []
    try:
        for key in sorted(override):
            marker = object()
            model.override_generation_config = {key: marker}
            if not any(value is marker for value in model.get_diff_sampling_param().values()):
                unread.append(key)
    finally:
        model.override_generation_config = saved
    return unread


def config_step(args):
    """Which input a refused engine config is about: the generation config when the same launch
    without ``--override-generation-config`` passes, else the launch's other arguments."""
    if not getattr(args, "override_generation_config", None):
        return "config"
    args.override_generation_config = {}
    try:
        engine_config(args)
    except Exception:
        return "config"
    return "generation"


def check(cfg):
    os.environ.update(cfg.get("env") or {})
    start = time.monotonic()
    try:
        import vllm

        version = getattr(vllm, "__version__", None)
    except Exception as exc:
        return {"ok": False, "step": "import", "error": _words(exc), "version": None}
    args, error = parse(cfg["argv"])
    if error:
        return {"ok": False, "step": "arguments", "error": error, "version": version}
    try:
        config = engine_config(args)
    except Exception as exc:
        return {"ok": False, "step": config_step(args), "error": _words(exc), "version": version}
    skipped, refused = model_problem(config)
    if refused and not skipped:
        return {"ok": False, "step": "model", "error": refused, "version": version}
    try:
        problem = generation_problem(config, cfg.get("generation"))
    except Exception as exc:
        problem = _words(exc)
    if problem:
        return {"ok": False, "step": "generation", "error": problem, "version": version}
    answer = {"ok": True, "version": version, "seconds": round(time.monotonic() - start, 2)}
    if skipped:
        answer["model_skipped"] = refused
    return answer


def record(path, digest, keep):
    """Add ``digest`` (the launch vLLM just accepted) to the record at ``path``, newest last, the
    last ``keep`` of them, written whole and replaced in one step; a record that cannot be written
    only costs the next deploy a check."""
    try:
        with open(path) as handle:
            kept = [line for line in handle.read().split() if line != digest]
    except OSError:
        kept = []
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as handle:
            handle.write("\n".join((kept + [digest])[-keep:]) + "\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def main(argv):
    cfg = json.loads(argv[1])
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's logging and prints stay off the answer
        result = check(cfg)
    if result["ok"] and cfg.get("record") and cfg.get("digest"):
        record(cfg["record"], cfg["digest"], cfg["keep"])
    real_stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
    # the answer is out and the record written: a process that imported vLLM and torch spends seconds
    # of CPU tearing them down (their atexit hooks, threads, every module's objects), for nothing here
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
