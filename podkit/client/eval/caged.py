"""What runs inside eval's cages: a script for ``python -I -S``, standard library only, never
imported by podkit (:mod:`.cage` copies it into each cage and starts it).

A task's tests and the model's answer run in two interpreters, each in its own cage:

- ``answer``: sets its limits, imports the answer's modules from ``/workspace`` (the answer's
  files, in a tmpfs of fixed size) and serves calls to them over two pipes, one JSON line each way.
  Whatever the answer does here (patch ``unittest``, write test files, exit) stays here.
- ``tests``: sets its limits and runs the task's pristine tests from ``/tests`` with ``unittest``.
  It never sees the answer's files: the modules the tests import are stand-ins whose functions
  call the answer interpreter. Values cross as Python literals (``repr`` one way,
  ``ast.literal_eval`` the other), so nothing the answer sends can run code here or compare
  equal by a forged ``__eq__``; an exception crosses as its builtin type and message. At the end it
  asks the answer interpreter for its files and loaded modules, and names any cheat: a test file,
  conftest or sitecustomize added, a task test changed, the test framework loaded by the answer.
  Its verdict goes to the controller on a pipe of its own, as one JSON object.
"""

import ast
import builtins
import errno
import hashlib
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import resource
import sys
import types

MESSAGE_BYTES = 1 << 20  # the most one answer may send back (a return value, a file listing)
FRAMEWORKS = ("unittest", "pytest", "_pytest", "doctest", "nose", "nose2")
RUNNER_FILES = ("conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", "tox.ini", "setup.cfg")
LIMITS = {"processes": "RLIMIT_NPROC", "memory": "RLIMIT_AS", "file": "RLIMIT_FSIZE"}


def set_limits(limits):
    """The kernel's limits for this process and all it starts (set here, inside the cage's own user
    namespace, so the process count is this cage's alone)."""
    for name, rlimit in LIMITS.items():
        resource.setrlimit(getattr(resource, rlimit), (limits[name], limits[name]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def limit_hit(exc, limits):
    """The limit an exception (or one it came from) says was hit, as a line; None for any other."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, MemoryError):
            return "memory limit hit: %d MiB of address space per process" % (limits["memory"] >> 20)
        if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
            return "process limit hit: %d processes" % limits["processes"]
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return "file size limit hit: %d MiB per file" % (limits["file"] >> 20)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "workspace size limit hit: %d MiB for the workspace" % (limits["workspace"] >> 20)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def send(handle, message):
    handle.write(json.dumps(message).encode() + b"\n")
    handle.flush()


# --------------------------------------------------------------------------- the answer's side


def answer(config):
    set_limits(config["limits"])
    requests, replies = os.fdopen(config["requests"], "rb"), os.fdopen(config["replies"], "wb")
    os.chdir("/workspace")
    sys.path.insert(0, "/workspace")
    before = set(sys.modules)
    modules, failed = {}, {}
    for name in config["modules"]:
        try:
            modules[name] = importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - the answer's import may raise anything, SystemExit too
            failed[name] = exc
    for line in requests:
        ask = json.loads(line)
        try:
            reply = serve(ask, modules, failed, before, config["limits"])
        except BaseException as exc:  # noqa: BLE001
            reply = raised(exc, config["limits"])
        try:
            text = json.dumps(dict(reply, id=ask.get("id")))
        except (TypeError, ValueError, RecursionError) as exc:
            text = json.dumps(dict(raised(exc, config["limits"]), id=ask.get("id")))
        replies.write(text.encode() + b"\n")
        replies.flush()


def serve(ask, modules, failed, before, limits):
    if ask["op"] == "files":
        return {"files": listing("/workspace"), "frameworks": frameworks(before)}
    name = ask["module"]
    if name in failed:
        return raised(failed[name], limits, "importing %s: " % name)
    value = getattr(modules[name], ask["name"])
    if ask["op"] == "get":
        return {"callable": True} if callable(value) else {"value": repr(value)}
    args, kwargs = ast.literal_eval(ask["args"]), ast.literal_eval(ask["kwargs"])
    return {"value": repr(value(*args, **kwargs))}


def raised(exc, limits, prefix=""):
    return {
        "raise": type(exc).__name__,
        "message": (prefix + str(exc))[:500],
        "limit": limit_hit(exc, limits),
    }


def frameworks(before):
    return sorted(m for m in set(sys.modules) - before if m.split(".")[0] in FRAMEWORKS)


def listing(root, most=500):
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read(64 << 20)).hexdigest()
            except OSError:
                digest = None
            found.append({"path": os.path.relpath(path, root), "sha256": digest})
            if len(found) >= most:
                return found
    return found


# --------------------------------------------------------------------------- the tests' side


class Answer:
    """The answer interpreter, seen from the tests: one request, one reply."""

    def __init__(self, requests, replies):
        self.requests, self.replies = requests, replies
        self.count, self.gone, self.limits = 0, None, []

    def ask(self, **request):
        if self.gone:
            raise ConnectionError(self.gone)
        self.count += 1
        try:
            send(self.requests, dict(request, id=self.count))
            line = self.replies.readline(MESSAGE_BYTES + 1)
        except OSError:
            line = b""
        if not line.endswith(b"\n"):
            self.gone = "the answer's process ended" if not line else "the answer sent more than 1 MiB"
            raise ConnectionError(self.gone)
        try:
            reply = json.loads(line)
            if reply.get("id") != self.count:
                raise ValueError("a reply out of turn")
        except ValueError as exc:
            raise RuntimeError("the answer's process sent something else: %s" % exc) from None
        if reply.get("limit") and reply["limit"] not in self.limits:
            self.limits.append(reply["limit"])
        if "raise" in reply:
            kind = getattr(builtins, str(reply["raise"]), None)
            message = str(reply.get("message"))
            if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
                raise kind(message)
            raise RuntimeError("%s: %s" % (reply["raise"], message))
        return reply

    def value(self, reply):
        try:
            return ast.literal_eval(reply["value"])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, KeyError):
            raise TypeError("the answer returned something that is not plain data") from None


class StandIn(types.ModuleType):
    """A module of the answer, in the tests' interpreter: each name is fetched from the answer."""

    def __init__(self, name, answer):
        super().__init__(name)
        self.__answer = answer

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        answer, module = self.__answer, self.__name__
        reply = answer.ask(op="get", module=module, name=attr)
        if not reply.get("callable"):
            return answer.value(reply)

        def call(*args, **kwargs):
            return answer.value(answer.ask(op="call", module=module, name=attr, args=repr(args), kwargs=repr(kwargs)))

        call.__name__ = call.__qualname__ = attr
        return call


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names, answer):
        self.names, self.answer = set(names), answer

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self.names else None

    def create_module(self, spec):
        return StandIn(spec.name, self.answer)

    def exec_module(self, module):
        pass


def cheats(files, tests, task_files):
    """Why the answer cheated, one line each: a test or runner file added, a task test changed."""
    found = []
    digests = {entry["path"]: entry["sha256"] for entry in files if isinstance(entry, dict)}
    for name, digest in sorted(tests.items()):
        if digests.get(name, digest) != digest:
            found.append("the answer changed the task's test file %s" % name)
    for path in sorted(digests):
        base = os.path.basename(path)
        runner = base in RUNNER_FILES or base.endswith(".pth")
        if path not in task_files and (runner or (base.startswith("test") and base.endswith(".py"))):
            found.append("the answer added %s, a file a test runner would read" % path)
    return found


def tests(config):
    import unittest

    set_limits(config["limits"])
    requests, replies = os.fdopen(config["requests"], "wb"), os.fdopen(config["replies"], "rb")
    verdict = os.fdopen(config["verdict"], "w")
    answer_side = Answer(requests, replies)
    sys.meta_path.insert(0, StandIns(config["modules"], answer_side))
    stream = io.StringIO()
    suite = unittest.TestLoader().discover("/tests", pattern="test*.py", top_level_dir="/tests")
    result = unittest.TextTestRunner(stream=stream, verbosity=1).run(suite)
    pristine = {}
    for name in sorted(os.listdir("/tests")):
        with open(os.path.join("/tests", name), "rb") as handle:
            pristine[name] = hashlib.sha256(handle.read()).hexdigest()
    found = []
    try:
        state = answer_side.ask(op="files")
        found = cheats(state.get("files") or [], pristine, set(config["task_files"]))
        found += ["the answer loaded %s, a test framework, in its own interpreter" % m for m in state["frameworks"]]
    except (ConnectionError, RuntimeError, TypeError, KeyError) as exc:
        found = found or []
        stream.write("\n(the answer's files could not be read: %s)\n" % exc)
    json.dump(
        {
            "ran": result.testsRun,
            "failures": len(result.failures),
            "errors": len(result.errors),
            "passed": result.wasSuccessful() and result.testsRun > 0,
            "output": stream.getvalue()[-6000:],
            "limits": answer_side.limits,
            "cheats": found,
        },
        verdict,
    )
    verdict.close()


if __name__ == "__main__":
    config = json.loads(sys.argv[2])
    {"answer": answer, "tests": tests}[sys.argv[1]](config)
