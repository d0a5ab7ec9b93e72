"""The served OpenAPI document against the server, checked by schemathesis: a real ``aizuchi arbiter`` process on
a localhost port, on SQLite and on PostgreSQL, is sent what the document allows and what it forbids (its
examples, boundary and negative cases, random ones, and chains of calls linked by the ids they return), and
every answer is checked with every check schemathesis has: no 5xx, a documented status, content type, headers
and body, invalid data refused and valid data accepted, an Allow header on each 405, auth not ignored.

Schemathesis runs through its command line, its stable interface (its pytest plugin follows pytest's internals,
which move). Each operation is called with the token its ``x-access`` names, so that the calls reach the rules
rather than stop at 403. The event stream is left out: its answer is a WebSocket that never ends; its 400 and 422
are tested by hand below. The run is bounded (a few examples per operation, a fixed seed) to stay quick and
repeatable; ``AIZUCHI_SCHEMATHESIS_EXAMPLES`` raises the bound for a longer hunt.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS
from tests.support.arbiters import ROOT, arbiter_process_blocking
from tests.support.postgres import create_database, drop_database

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.arbiters import ArbiterProcess

EXAMPLES = int(os.environ.get("AIZUCHI_SCHEMATHESIS_EXAMPLES", "10"))
EVENTS = "/v1/channels/{channel_id}/events"
MULTIPLEXED = "/v1/events"
# The token each kind of access is called with: a persona endpoint as hana, an endpoint any token may call as kai.
TOKENS = {"admin": ADMIN_TOKEN, "persona": PERSONA_TOKENS["hana"], "persona or admin": PERSONA_TOKENS["kai"]}
# Channels the calls find: "0" is what schemathesis tries first for an id, "lobby" the API examples' (docs/api.md).
CHANNELS = ("0", "lobby")


def call(base: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, str, Any]:
    """One request, as it is (http.client adds no header of its own beside Host): status, content type, JSON."""
    address = urlsplit(base)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        sent = headers if payload is None else {**headers, "Content-Type": "application/json"}
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        return response.status, response.getheader("Content-Type", ""), json.loads(raw) if raw else None
    finally:
        connection.close()


def seed(url: str) -> None:
    """A little of everything for the calls to find: channels, a human message with a platform id, a persona's
    message, a held claim, registered names."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    hana = {"Authorization": f"Bearer {PERSONA_TOKENS['hana']}"}
    calls: list[tuple[str, str, dict[str, str], dict[str, Any]]] = [
        ("PUT", "/v1/personas/hana", hana, {"display_name": "Hana", "aliases": ["はな"]}),
    ]
    for channel in CHANNELS:
        calls += [
            ("PUT", f"/v1/channels/{channel}", admin, {"topic": "weekend plans"}),
            (
                "POST",
                f"/v1/channels/{channel}/messages",
                admin,
                {"author_id": "u1", "author_name": "Yui", "text": "Hana, any plans?", "platform_message_id": "0"},
            ),
            ("POST", f"/v1/channels/{channel}/consume", hana, {"tier": "remark", "text": "Sleeping, mostly."}),
            ("POST", f"/v1/channels/{channel}/claims", hana, {"tier": "aizuchi"}),
        ]
    for method, path, headers, body in calls:
        status, _, answer = call(url, method, path, headers, body)
        assert status in (200, 204), (method, path, status, answer)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ArbiterProcess]:
    """A seeded arbiter process; when the test is done, its log is checked to hold no token."""
    if request.param == "sqlite":
        database_url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    else:
        database_url = asyncio.run(create_database())
        request.addfinalizer(lambda: asyncio.run(drop_database(database_url)))
    # INFO: everything the arbiter says in a normal run is searched for secrets, not only its warnings.
    with arbiter_process_blocking(database_url, tmp_path, log_level="INFO") as process:
        seed(process.url)
        yield process
    log = process.stderr.read_text(errors="replace")
    for who, token in {"admin": ADMIN_TOKEN, **PERSONA_TOKENS}.items():
        assert token not in log, f"{who}'s token is in the arbiter's log:\n{log[-4000:]}"


def config(document: dict[str, Any]) -> str:
    """schemathesis.toml: the run's bounds, and the token for each operation by its documented access."""
    by_access: dict[str, list[str]] = {}
    for item in document["paths"].values():
        for operation in item.values():
            by_access.setdefault(operation["x-access"], []).append(operation["operationId"])
    lines = [
        "seed = 12",
        "[generation]",
        f"max-examples = {EXAMPLES}",
        'database = "none"',  # nothing kept between runs: each is the same, and leaves no files behind
        # A well-formed request that breaks a rule of the channel's state is a 422 too; valid data refused by the
        # wire models is caught by tests/support/schemathesis_checks.py instead.
        "[checks.positive_data_acceptance]",
        'expected-statuses = ["2xx", "401", "403", "404", "409", "422"]',
    ]
    for access, token in TOKENS.items():
        lines += [
            "[[operations]]",
            f"include-operation-id = {json.dumps(sorted(by_access[access]))}",
            f'headers = {{ Authorization = "Bearer {token}" }}',
        ]
    lines += [
        # DELETE .../history clears the history, which goes on existing (empty): reading it after is no
        # use-after-free.
        "[[operations]]",
        'include-operation-id = "history"',
        "checks.use_after_free.enabled = false",
        # A persona registers only itself: calls for any other id are refused before anything else is looked at.
        "[[operations]]",
        'include-operation-id = "register"',
        'parameters = { persona_id = "hana" }',
    ]
    return "\n".join(lines) + "\n"


# The default bound takes about 30 s, 60 examples per operation about a minute: six seconds an example is ample.
RUN_S = max(240, EXAMPLES * 6)


@pytest.mark.timeout(RUN_S + 60)
def test_schemathesis_finds_the_server_true_to_its_document(served: ArbiterProcess, tmp_path: Path) -> None:
    _, _, document = call(served.url, "GET", "/v1/openapi.json", {})
    (tmp_path / "schemathesis.toml").write_text(config(document))
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", "schemathesis.toml", "--no-color"]
    command += ["run", f"{served.url}/v1/openapi.json", "--checks", "all", "--exclude-path", EVENTS]
    command += ["--exclude-path", MULTIPLEXED, "--workers", "1"]  # WebSockets both: their tests drive them
    # The MCP endpoint speaks JSON-RPC, not this document's JSON: the MCP tests (tests/arbiter/mcp) drive it.
    command += ["--exclude-tag", "mcp"]
    mcp = sum("mcp" in operation["tags"] for item in document["paths"].values() for operation in item.values())
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_checks", "PYTHONPATH": ROOT}
    # Hypothesis keeps the Unicode tables it derives (which code points UTF-8 encodes: a loop over all of them,
    # some 1.5 s of CPU) in its storage directory, by default under the cwd, a fresh tmp_path here: the checkout's
    # own keeps them from one run to the next. No examples are kept there: the run's database is "none".
    env.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(ROOT, ".hypothesis"))
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_S, check=False)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    # It really ran: every operation but the two streams and MCP was tested, with no error that kept a case from
    # running.
    found = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", report)
    assert found is not None, report
    selected, total, tested = map(int, found.groups())
    assert mcp > 0
    assert selected == tested == total - 2 - mcp, report
    assert re.search(r"Test cases:\s+(\d+) generated, \1 passed", report), report


# --- the event stream, by hand ---------------------------------------------------------------------------


def test_the_event_stream_answers_its_documented_errors(served: ArbiterProcess) -> None:
    _, _, document = call(served.url, "GET", "/v1/openapi.json", {})
    responses = document["paths"][EVENTS]["get"]["responses"]
    token = {"Authorization": f"Bearer {PERSONA_TOKENS['kai']}"}
    # Asking for the upgrade, so that only the query can be what is wrong.
    upgrade = {
        **token,
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    cases = [
        ("", token, 400, None),  # a plain GET, not a WebSocket upgrade
        ("?after=-1", upgrade, 422, "after"),
        (f"?after={2**63}", upgrade, 422, "after"),
        ("?after=abc", upgrade, 422, "after"),
        ("?after=%00", upgrade, 422, "after"),
    ]
    for query, headers, status, field in cases:
        got, content_type, answer = call(served.url, "GET", f"/v1/channels/lobby/events{query}", headers)
        assert got == status, (query, answer)
        assert str(status) in responses, (query, sorted(responses))
        assert content_type.startswith("application/json"), query
        assert answer["error"].get("field") == field, (query, answer)
