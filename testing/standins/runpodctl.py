"""A stand-in for runpodctl, RunPod's CLI, on stand-in pods (testing/netpods.py) talking to the
replay of RunPod's API (testing/runpod_api.py), in the two builds a pod's image may carry:

    new/runpodctl pod stop <podId>     the v2 builds (POST /v2/pods/<id>/action {"action": "stop"});
    new/runpodctl stop pod <podId>     the old syntax, kept as an alias; prints the pod as JSON
    new/runpodctl pod get <podId>      (and "get pod"): GET /v2/pods/<id>
    old/runpodctl stop pod <podId>     an old build: GraphQL's podStop, which RunPod has switched
    old/runpodctl get pod <podId>      off (410): "Error: statuscode 410", exit 1; it knows no "pod ..."

What the real one does: it reads the API key from RUNPOD_API_KEY (RunPod puts a pod-scoped key
there in every pod) or its config file, and on failure cobra prints ``Error: <why>`` to stderr and
exits 1; without a key the new one says what ``NO_KEY`` says (runpod/runpodctl, ErrNoCredentials).
This one reads the key from the environment only, never argv, and asks $RUNPOD_API_BASE_URL
(default https://api.runpod.io). ``new/`` and ``old/`` hold a ``runpodctl`` each that runs this
file with its build.

If RUNPODCTL_STANDIN_LOG names a file (or RUNPOD_STANDIN_LOG: a caller that passes on only the
RUNPOD_* variables keeps that one), each call appends one JSON line to it: the time, the build,
argv, whether RUNPOD_API_KEY was set (never its value), the exit code and the outcome.
Standard library only.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

DEFAULT_API = "https://api.runpod.io"
NO_KEY = (
    "api key not found. get your key at https://www.runpod.io/console/user/settings "
    "then: export RUNPOD_API_KEY=your-key OR run: runpodctl doctor"
)
STOP = "mutation stopPod($podId: String!) { podStop(input: {podId: $podId}) { id desiredStatus } }"
GET = "query pod($podId: String!) { pod(input: {podId: $podId}) { id desiredStatus } }"


def call(method, path, key, body=None):
    """The JSON answer; raises RuntimeError with the one line runpodctl would print."""
    url = os.environ.get("RUNPOD_API_BASE_URL", DEFAULT_API).rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": "Bearer " + key, "User-Agent": "runpodctl-standin (podkit tests)"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise RuntimeError("statuscode %d" % exc.code) from None
    except (OSError, ValueError) as exc:
        raise RuntimeError('%s "%s": %s' % (method.title(), url, getattr(exc, "reason", exc))) from None


def run(build, argv):
    """Exit code and outcome (one line) of one call; prints what runpodctl prints."""
    words = tuple(argv[:2])
    if build == "old" and words[:1] == ("pod",):
        print('Error: unknown command "pod" for "runpodctl"', file=sys.stderr)
        return 1, "unknown command"
    verbs = {("pod", "stop"): "stop", ("stop", "pod"): "stop", ("pod", "get"): "get", ("get", "pod"): "get"}
    if words not in verbs or len(argv) != 3:
        print("Error: this runpodctl stand-in plays only stopping and reading one pod", file=sys.stderr)
        return 1, "usage error"
    verb, pod_id = verbs[words], argv[2]
    key = os.environ.get("RUNPOD_API_KEY", "")
    if not key:
        print("Error: " + NO_KEY, file=sys.stderr)
        return 1, "no api key"
    try:
        if build == "old":  # GraphQL, as old builds speak it
            query = STOP if verb == "stop" else GET
            answer = call("POST", "/graphql", key, {"query": query, "variables": {"podId": pod_id}})
        elif verb == "stop":
            answer = call("POST", "/v2/pods/%s/action" % pod_id, key, {"action": "stop"})
        else:
            answer = call("GET", "/v2/pods/%s" % pod_id, key)
    except RuntimeError as exc:
        print("Error: %s" % exc, file=sys.stderr)
        return 1, "error: %s" % exc
    print(json.dumps(answer, indent=2))
    return 0, "%s pod %s" % (verb, pod_id)


def main(build, argv):
    code, outcome = run(build, argv)
    log = os.environ.get("RUNPODCTL_STANDIN_LOG") or os.environ.get("RUNPOD_STANDIN_LOG")
    if log:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build": build,
            "argv": argv,
            "api_key_set": bool(os.environ.get("RUNPOD_API_KEY")),
            "exit": code,
            "outcome": outcome,
        }
        with open(log, "a") as handle:
            handle.write(json.dumps(line) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
