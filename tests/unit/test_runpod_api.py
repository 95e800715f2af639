"""RunPod's REST API v2 as podkit speaks it (``podkit/runpod/api.py``), against the replay built from
RunPod's own OpenAPI document, and the replay checked against that document: every answer it gives
podkit here, error answers included, matches the schema the document gives for it."""

import json

import pytest

from podkit.runpod.api import RunPodApi, RunPodError, error_said, retry_after
from testing import runpod_pods as pods
from testing.runpod_api import NO_FREE_GPUS, RunPodReplay
from testing.runpod_spec import OPERATIONS, SOURCE, Spec, load

KEY = "rp-account-key-7f3c"


def five():
    return [pods.pod(f"pod{i:010d}", f"coder-{i}", "127.0.0.1", 2200 + i) for i in range(5)]


@pytest.fixture
def replay():
    with RunPodReplay(KEY, five()) as server:
        yield server


@pytest.fixture
def waits():
    return []


@pytest.fixture
def api(replay, waits):
    return RunPodApi(KEY, replay.url, sleep=waits.append)


@pytest.mark.parametrize("page_size", [None, 1, 2, 4, 5, 1000], ids=lambda n: f"pages of {n}")
def test_every_pod_is_listed_whether_or_not_the_answer_pages(replay, api, page_size):
    """The August document answers one list; newer clients page it, with pages smaller than asked."""
    replay.page_size = page_size
    listed = api.pods()
    assert [p["id"] for p in listed] == [f"pod{i:010d}" for i in reversed(range(5))]  # newest first
    lists = [r for r in replay.requests if r["path"] == "/v2/pods"]
    assert len(lists) == (1 if page_size is None else -(-5 // min(page_size, 100)))
    assert all("pagination" not in r["answer"] for r in lists) is (page_size is None)


PAGES = {
    "a cursor that repeats": (
        [{"pods": [{"id": "a"}], "pagination": {"nextCursor": "c1"}}, {"pods": [], "pagination": {"nextCursor": "c1"}}],
        "the next page's cursor repeats",
    ),
    "a cursor that is not text": ([{"pods": [], "pagination": {"nextCursor": 7}}], "is not text: 7"),
    "no pod list": ([{"items": []}], "the answer holds no pod list"),
    "a pod that is not an object": ([{"pods": ["a"]}], "a pod in the list is not an object"),
    "hasNextPage false ends it": (
        [{"pods": [{"id": "a"}], "pagination": {"nextCursor": "c", "hasNextPage": False}}],
        None,
    ),
    "a pod on two pages is listed once": (
        [{"pods": [{"id": "a"}], "pagination": {"nextCursor": "c"}}, {"pods": [{"id": "a"}, {"id": "b"}]}],
        None,
    ),
}


@pytest.mark.parametrize("answers, error", PAGES.values(), ids=PAGES.keys())
def test_a_listing_that_cannot_be_read_whole_is_one_line(monkeypatch, answers, error):
    api = RunPodApi(KEY, "http://127.0.0.1:9")
    asked = []
    monkeypatch.setattr(
        api, "request", lambda method, path, query=None, body=None: asked.append(query) or answers.pop(0)
    )
    if error is None:
        assert [p["id"] for p in api.pods()] in (["a"], ["a", "b"])
        return
    with pytest.raises(RunPodError) as caught:
        api.pods()
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_a_cursor_the_api_never_gave_is_422_in_one_line(replay, api):
    replay.page_size = 2
    with pytest.raises(RunPodError) as caught:
        api.request("GET", "/v2/pods", {"limit": 2, "cursor": "forged"})
    assert caught.value.status == 422
    assert caught.value.said == "Unprocessable Entity: invalid cursor: cursor 'forged' is unknown"


def test_a_429_is_asked_again_after_its_retry_after(replay, api, waits):
    replay.throttle, replay.retry_after = 2, 3
    assert len(api.pods()) == 5
    assert waits == [3.0, 3.0]
    assert [r["status"] for r in replay.requests] == [429, 429, 200]


def test_a_429_that_never_ends_is_one_line_with_the_fix(replay, api, waits):
    replay.throttle = 50
    with pytest.raises(RunPodError) as caught:
        api.pods()
    assert caught.value.status == 429 and len(waits) == 4
    assert caught.value.fix() == "RunPod is rate-limiting this account: wait a minute and run it again"


def test_a_retry_after_longer_than_a_minute_is_reported_not_sat_through(replay, api, waits):
    replay.throttle, replay.retry_after = 1, 3600
    with pytest.raises(RunPodError, match="HTTP 429"):
        api.pods()
    assert waits == []


@pytest.mark.parametrize(
    "header, seconds",
    [("12", 12.0), ("Thu, 01 Jan 1970 00:00:40 GMT", 30.0), (None, None), ("soon", None), ("", None)],
)
def test_retry_after_reads_seconds_or_a_date(header, seconds):
    assert retry_after(header, now=10.0) == seconds


SHAPES = {
    "problem+json": (
        422,
        {"title": "Unprocessable Entity", "status": 422, "detail": "bad", "errors": ["$.x: no"]},
        "Unprocessable Entity: bad: $.x: no",
    ),
    "{error}, as seen live": (400, {"error": NO_FREE_GPUS}, NO_FREE_GPUS),
    "text": (502, "<html>Bad gateway</html>", "<html>Bad gateway</html>"),
    "empty": (503, "", "an empty 503 answer"),
    "escapes in RunPod's words": (400, {"error": "no\x1b[2J GPU\nfree"}, "no GPU free"),
}


@pytest.mark.parametrize("status, body, said", SHAPES.values(), ids=SHAPES.keys())
def test_both_error_shapes_and_the_rest_are_one_line(status, body, said):
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    assert error_said(status, raw) == said


def test_the_replay_answers_graphql_and_rest_v1_with_410(replay):
    import urllib.request

    for path in ("/graphql", "/v1/pods/pod0000000001/stop"):
        request = urllib.request.Request(replay.url + path, data=b"{}", method="POST")
        request.add_header("Authorization", f"Bearer {KEY}")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
        assert caught.value.code == 410


@pytest.mark.parametrize(
    "key, fix",
    [
        ("rp-wrong", "RunPod refused RUNPOD_API_KEY: make a new key under Settings > API Keys"),
        ("rp-pod-key", "the key may not do this: give it read and write access to pods (Settings > API Keys)"),
    ],
)
def test_a_refused_key_is_one_line_with_the_fix_and_never_logged(replay, key, fix):
    replay.pod_keys = {"pod0000000001": "rp-pod-key"}
    with pytest.raises(RunPodError) as caught:
        RunPodApi(key, replay.url).pods()
    assert caught.value.fix() == fix and key not in str(caught.value)
    assert key not in json.dumps(replay.requests) and KEY not in json.dumps(replay.requests)


def test_every_request_names_podkit_as_its_agent(replay, api):
    api.pods()
    api.pod("pod0000000001")
    assert {r["agent"].split("/")[0] for r in replay.requests} == {"podkit"}


def test_no_answer_is_one_line():
    with pytest.raises(RunPodError) as caught:
        RunPodApi(KEY, "http://127.0.0.1:9", timeout=2).pods()
    assert caught.value.status is None and "no answer from http://127.0.0.1:9" in str(caught.value)
    assert caught.value.fix().startswith("RunPod did not answer properly")


def test_an_id_cannot_climb_out_of_its_path_segment(replay, api):
    with pytest.raises(RunPodError) as caught:
        api.pod("../account/ssh-keys")
    assert caught.value.status == 404
    assert replay.requests[-1]["path"] == "/v2/pods/..%2Faccount%2Fssh-keys"


# --- the replay against RunPod's document -----------------------------------------------------


def test_the_copy_of_the_document_names_its_source_and_holds_what_podkit_uses():
    document = load()
    assert document["info"]["x-podkit-source"] == SOURCE and document["openapi"].startswith("3.1")
    for method, path in OPERATIONS:
        assert method in document["paths"][path], (method, path)
    text = json.dumps(document)
    for ref in set(__import__("re").findall(r'"#/components/([^/"]+)/([^"]+)"', text)):
        assert ref[1] in document["components"][ref[0]], ref  # every reference resolves in the copy


def a_day_of_calls(replay, api):
    """Every call podkit makes, the errors it meets among them."""
    replay.catalog = [pods.gpu_type("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.69, {"US-TX-3": "LOW"})]
    replay.volumes = [pods.network_volume("vol0000001")]
    replay.ssh_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk me@laptop"]
    replay.billing = {"pod0000000001": [1.5, 2.25]}
    replay.page_size = 2
    api.pods()
    api.pod("pod0000000001")
    api.action("pod0000000001", "stop")
    replay.no_gpu.add("pod0000000001")
    for call in (
        lambda: api.action("pod0000000001", "start"),  # 400 {"error"}: the one answer the document lacks
        lambda: api.action("pod0000000001", "stop"),  # 409
        lambda: api.pod("nope"),  # 404
        lambda: RunPodApi("rp-wrong", replay.url).pods(),  # 401
        lambda: api.request("POST", "/v2/pods/pod0000000002/action", body={"action": "pause"}),  # 422
        lambda: api.request("GET", "/v2/pods", {"cursor": "forged"}),  # 422
        lambda: api.create_pod({"name": "x", "image": "i", "gpu": {"id": "NVIDIA H100 80GB HBM3"}, "bogus": 1}),
    ):
        with pytest.raises(RunPodError):
            call()
    api.gpu_types(1)
    api.gpu_types(2, "COMMUNITY")
    api.network_volumes()
    api.network_volume("vol0000001")
    volume = api.create_network_volume("podkit-coder", 40, "US-TX-3")
    api.ssh_keys()
    api.set_ssh_keys(["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk me@laptop"])
    api.pod_billing("pod0000000001")
    body = {
        "name": "new",
        "image": pods.IMAGE,
        "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 1},
        "mounts": {"network": [{"volumeId": volume["id"], "path": "/workspace"}]},
        "startSsh": True,
    }
    created = api.create_pod(body)
    assert replay.wait_for_hooks()
    api.action(created["id"], "terminate")  # 204
    replay.throttle = 1
    api.pods()  # a 429 first


def test_every_answer_of_the_replay_matches_runpods_document(replay, api):
    a_day_of_calls(replay, api)
    spec = Spec()
    checked = 0
    deviations = []
    for request in replay.requests:
        if request["live_deviation"]:
            deviations.append((request["method"], request["path"], request["status"]))
            continue
        errors = spec.answer_errors(
            request["method"], request["path"], request["status"], request["content_type"], request["answer"]
        )
        assert errors == [], (request["method"], request["path"], request["status"], errors)
        checked += 1
    # the one answer RunPod was seen to give outside its document, and only that one
    assert deviations == [("POST", "/v2/pods/pod0000000001/action", 400)]
    statuses = {r["status"] for r in replay.requests}
    assert {200, 201, 204, 401, 404, 409, 422, 429} <= statuses and checked >= 20


def test_a_body_outside_the_document_is_refused_as_runpod_refuses_it(replay, api):
    with pytest.raises(RunPodError) as caught:
        api.create_network_volume("x", 5, "US-TX-3")  # below the document's 10 GB
    assert caught.value.status == 422 and "$.size: 5 is less than the minimum of 10" in caught.value.said
