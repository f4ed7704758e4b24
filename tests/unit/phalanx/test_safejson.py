"""phalanx.safejson: a body nested beyond Python's recursion is decoded with its deep part cut,
never raised; kopf's list and watch decode through it (and fail here if kopf's code moves)."""

import asyncio
import json

import pytest

from phalanx import safejson


def nested(depth: int, leaf: str = "{}") -> str:
    return '{"a":' * depth + leaf + "}" * depth


def job(depth: int) -> str:
    return ('{"kind":"TrainingJob","metadata":{"namespace":"team","name":"poison"},'
            '"spec":{"volumes":[{"name":"v","emptyDir":' + nested(depth) + "}]}}")


@pytest.mark.parametrize("depth", [1000, 10_000])
def test_a_body_too_deep_for_json_loads_is_decoded_and_cut(depth):
    with pytest.raises(RecursionError):
        json.loads(job(depth))
    obj = safejson.loads(job(depth))
    assert obj["metadata"]["name"] == "poison"
    assert safejson.depth_exceeds(obj, safejson.MAX_DEPTH) is None
    assert safejson.TOO_DEEP in json.dumps(obj)  # the cut is visible to the spec checks


def test_a_shallow_body_is_json_loads_exactly():
    text = json.dumps({"a": [1, 2.5, {"b": None}], "c": "x"})
    assert safejson.loads(text) == json.loads(text)


def test_prune_names_the_paths_it_cut():
    value = json.loads(nested(10))
    cut = safejson.prune(value, max_depth=3)
    assert cut == ["a.a.a"]
    assert value == {"a": {"a": {"a": safejson.TOO_DEEP}}}


def test_a_list_with_one_deep_item_keeps_the_others():
    body = '{"items":[{"metadata":{"name":"ok"}},{"metadata":{"name":"bad"},"spec":' + nested(3000) + "}]}"
    items = safejson.loads(body)["items"]
    assert [i["metadata"]["name"] for i in items] == ["ok", "bad"]


@pytest.mark.parametrize("line", [b"not json", b'{"type": "ADDED", "object": {', b"[1, 2]"])
def test_a_watch_line_that_is_not_an_event_is_skipped_not_raised(line):
    assert safejson.watch_line(line)["type"] == safejson.UNDECODABLE


def test_kopf_decodes_watch_lines_and_lists_through_safejson():
    from kopf._cogs.clients import api

    safejson.install_in_kopf()
    assert api.json.loads(job(5000).encode())["spec"]["volumes"][0]["emptyDir"]["a"] is not None
    assert api.json.dumps({"a": 1}) == '{"a": 1}'  # the rest of json is json

    class Response:
        async def read(self):
            return ('{"items":[' + job(5000) + "]}").encode()

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

    async def request(**_):
        return Response()

    original, api.request = api.request, request
    try:
        listed = asyncio.run(api.get(url="/apis/phalanx.dev/v1alpha1/trainingjobs", settings=None, logger=None))
    finally:
        api.request = original
    assert listed["items"][0]["metadata"]["name"] == "poison"


def test_kopf_still_decodes_where_safejson_is_installed():
    """If kopf stops calling ``json.loads`` in api.stream or ``api.get`` in its lister, the
    install above decodes nothing: fail here, not in production."""
    import inspect

    from kopf._cogs.clients import api, fetching

    assert "json.loads(line" in inspect.getsource(api.stream)
    assert "api.get(" in inspect.getsource(fetching)
    for method in safejson.KOPF_DECODERS:  # each ends in aiohttp's response.json(), replaced as a whole
        original = getattr(getattr(api, method), "__wrapped__", getattr(api, method))
        assert "response.json()" in inspect.getsource(original) and "request(" in inspect.getsource(original)


def test_a_body_json_loads_can_take_is_still_cut_past_max_depth():
    obj = safejson.loads(nested(500))
    assert safejson.depth_exceeds(obj, safejson.MAX_DEPTH + 1) is None and safejson.TOO_DEEP in json.dumps(obj)
