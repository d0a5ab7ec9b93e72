"""The OpenAPI document: served, valid OpenAPI 3.1, complete, generated from the wire models, and true.

"True" means real responses validate against the schema the document gives for their route and status.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any, Literal

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from pydantic import BaseModel

from arbiter import contract
from arbiter.api.app import package_version
from arbiter.api.openapi import openapi_document
from arbiter.api.routes import ENDPOINTS, HistoryQuery
from tests.arbiter.api.conftest import CHANNEL, route_template

if TYPE_CHECKING:
    from arbiter.server import Arbiter
    from tests.arbiter.api.conftest import Api

REF = "#/components/schemas/{model}"
CH = f"/v1/channels/{CHANNEL}"
METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture
async def document(api: Api) -> dict[str, Any]:
    served: dict[str, Any] = await api.call("GET", "/v1/openapi.json", None)
    return served


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def _refs(node: Any) -> list[str]:
    """Every $ref under ``node``."""
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def _component(ref: str) -> str:
    prefix = "#/components/schemas/"
    assert ref.startswith(prefix), ref
    return ref.removeprefix(prefix)


# --- the document ---------------------------------------------------------------------------------------


async def test_document_is_served_without_a_token_and_is_the_generated_one(document: dict[str, Any]) -> None:
    assert document == openapi_document(package_version())


async def test_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1.")
    validate(document, cls=OpenAPIV31SpecValidator)
    # The validator is not a rubber stamp: the same document with a parameter in a place OpenAPI has not got fails.
    broken = copy.deepcopy(document)
    broken["paths"]["/v1/channels/{channel_id}/status"]["get"]["parameters"][0]["in"] = "body"
    with pytest.raises(OpenAPIValidationError):
        validate(broken, cls=OpenAPIV31SpecValidator)


async def test_every_served_route_is_documented_and_nothing_more(arbiter: Arbiter, document: dict[str, Any]) -> None:
    served = {
        (route.method, route.resource.canonical)
        for route in arbiter.app.router.routes()
        if route.resource is not None and route.method != "HEAD"  # aiohttp adds HEAD beside each GET by itself
    }
    documented = {(method, path) for method, path, _ in _operations(document)}
    assert served == documented


async def test_every_endpoint_of_the_table_is_documented_with_its_access(document: dict[str, Any]) -> None:
    for endpoint in ENDPOINTS:
        operation = document["paths"][endpoint.path][endpoint.method.lower()]
        assert operation["x-access"] == endpoint.access.value
        assert str(endpoint.status) in operation["responses"]
        assert ("security" in operation) == (endpoint.access.value != "public")


async def test_path_parameters_are_declared(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), (method, path)


async def test_history_query_parameters_come_from_the_query_model(document: dict[str, Any]) -> None:
    operation = document["paths"]["/v1/channels/{channel_id}/history"]["get"]
    query = {p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "query"}
    assert query == HistoryQuery.model_json_schema()["properties"]


async def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for ref in _refs(document):
        assert _component(ref) in schemas, ref


async def test_bodies_and_responses_are_generated_from_the_wire_models(document: dict[str, Any]) -> None:
    """Every request and response schema is a reference to a component that is exactly what pydantic generates
    for the arbiter.contract model of that name: nothing is written by hand."""
    schemas = document["components"]["schemas"]
    checked: set[str] = set()
    for method, path, operation in _operations(document):
        uses: list[tuple[Literal["validation", "serialization"], Any]] = []
        if "requestBody" in operation:
            uses += [("validation", media) for media in operation["requestBody"]["content"].values()]
        for response in operation["responses"].values():
            uses += [("serialization", media) for media in response.get("content", {}).values()]
        for mode, media in uses:
            if "schema" not in media:
                assert path == "/v1/openapi.json", (method, path)  # the document does not describe itself
                continue
            schema = media["schema"]
            inline = {key: value for key, value in schema.items() if key not in {"$ref", "oneOf"}}
            assert inline == {}, (method, path, schema)
            for ref in _refs(schema):
                name = _component(ref)
                model = getattr(contract, name, None)
                assert isinstance(model, type) and issubclass(model, BaseModel), (method, path, name)
                generated = model.model_json_schema(mode=mode, ref_template=REF)
                nested = generated.pop("$defs", {})
                assert schemas[name] == generated, name
                for nested_name, nested_schema in nested.items():
                    assert schemas[nested_name] == nested_schema, nested_name
                checked.add(name)
    assert {e.body.__name__ for e in ENDPOINTS if e.body} <= checked
    assert {e.response.__name__ for e in ENDPOINTS if e.response} <= checked
    assert "ErrorBody" in checked


async def test_request_bodies_reject_unknown_fields_in_the_document_too(document: dict[str, Any]) -> None:
    # The wire models forbid extra fields; clients generated from the document must learn that.
    schemas = document["components"]["schemas"]
    for endpoint in ENDPOINTS:
        if endpoint.body is not None:
            assert schemas[endpoint.body.__name__].get("additionalProperties") is False, endpoint.body.__name__


# --- real responses against their documented schemas ----------------------------------------------------


def _template_for(document: dict[str, Any], method: str, path: str) -> str:
    template = route_template(document, method, path)
    assert template is not None, (method, path)
    return template


def _check(document: dict[str, Any], method: str, path: str, status: int, body: Any) -> None:
    template = _template_for(document, method, path)
    responses = document["paths"][template][method.lower()]["responses"]
    assert str(status) in responses, (method, template, status)
    media = responses[str(status)].get("content", {}).get("application/json")
    if body is None:
        assert media is None, (method, template, status)
        return
    schema = {**media["schema"], "components": document["components"]}
    errors = sorted(OAS31Validator(schema).iter_errors(body), key=str)
    assert not errors, (method, template, status, [e.message for e in errors])
    if "$ref" in media["schema"]:
        # Output models allow extra keys in the schema; a field the document does not name is still a lie.
        properties = document["components"]["schemas"][_component(media["schema"]["$ref"])]["properties"]
        assert set(body) <= set(properties), (method, template, set(body) - set(properties))


class Recorder:
    """Calls the API and checks each answer against the document."""

    def __init__(self, api: Api, document: dict[str, Any]) -> None:
        self.api = api
        self.document = document
        self.checked: set[tuple[str, str, int]] = set()

    async def __call__(self, method: str, path: str, who: str | None = "hana", *, expect: int = 200, **kw: Any) -> Any:
        body = await self.api.call(method, path, who, expect=expect, **kw)
        _check(self.document, method, path, expect, body)
        self.checked.add((method, _template_for(self.document, method, path), expect))
        return body


async def test_real_responses_match_their_documented_schemas(api: Api, document: dict[str, Any], lobby: str) -> None:
    call = Recorder(api, document)
    await call("GET", "/v1/health", None)
    await call("PUT", f"{CH}", "admin", json={})
    await call("GET", "/v1/channels", "admin")
    await call("GET", f"{CH}/settings", "admin")
    await call("PATCH", f"{CH}/settings", "admin", json={"topic": "weekend plans", "daily_token_budget": None})
    await call("PUT", f"{CH}/personas/mio", "admin", json={"muted": False})
    await call("PUT", "/v1/personas/kai", "kai", json={"display_name": "Kaito"}, expect=204)
    await call("POST", f"{CH}/messages", "admin", json={"author_id": "u1", "author_name": "Yuki", "text": "Kaito?"})
    await call("PUT", f"{CH}/standing", "mio", json={"cannot_post": "it lacks the Send Messages permission there"})
    claim = await call("POST", f"{CH}/claims", "kai", json={"tier": "long", "notes": True, "own_lines": 30})
    await call("GET", f"{CH}/status", "kai")  # with you, a claim, priority and refunds
    await call("GET", f"{CH}/status", "admin")
    refused = await call("POST", f"{CH}/claims", "hana", json={"tier": "remark"})
    assert refused["granted"] is False
    spoken = await call("POST", f"{CH}/claims/{claim['claim']['claim_id']}/speak", "kai", json={"text": "Yes?"})
    seq = spoken["message"]["seq"]
    await call("PUT", f"{CH}/messages/{seq}/platform-id", "kai", json={"platform_message_id": "d-1"})
    again = await call("POST", f"{CH}/claims", "hana", json={"tier": "aizuchi"})
    notes = {"topic": "Kaito's plans", "open_questions": [], "agreed": [], "speakers": [{"name": "Yuki", "note": "?"}]}
    release = {"memory": {"seq": seq, "state": notes}}
    await call("DELETE", f"{CH}/claims/{again['claim']['claim_id']}", "hana", json=release)
    await call("GET", f"{CH}/memory", "hana")
    await call("DELETE", f"{CH}/memory/hana", "admin", expect=204)
    await call("DELETE", f"{CH}/memory", "admin", expect=204)
    nod = await call("POST", f"{CH}/consume", "hana", json={"text": "ooh", "amount": 5})
    await call("POST", f"{CH}/messages/{nod['message']['seq']}/retract", "hana")
    await call("POST", f"{CH}/usage", "hana", json={"prompt_tokens": 10, "completion_tokens": 2})
    await call("GET", f"{CH}/history?limit=1", "hana")
    await call("GET", "/v1/personas", "hana")
    await call("PATCH", f"{CH}/platform-messages/d-1", "admin", json={"text": "Yes? Sorry, what?"})
    await call("DELETE", f"{CH}/platform-messages/d-1", "admin")
    # Errors have their documented shape too.
    await call("GET", "/v1/channels/nowhere/status", "hana", expect=404)
    await call("POST", f"{CH}/claims", "hana", json={"tier": "huge"}, expect=422)
    await call("POST", f"{CH}/claims", "hana", data=b"{", expect=400)
    await call("GET", f"{CH}/status", None, expect=401)
    await call("GET", f"{CH}/settings", "hana", expect=403)
    await call("PUT", f"{CH}/messages/{seq}/platform-id", "kai", json={"platform_message_id": "d-2"}, expect=409)
    await call("POST", f"{CH}/consume", "hana", data=b'{"text": "' + b"x" * 70_000 + b'"}', expect=413)
    await call("DELETE", f"{CH}/history", "admin", expect=204)
    # Every endpoint's success answer was checked.
    assert {(e.method, e.path, e.status) for e in ENDPOINTS} <= call.checked
