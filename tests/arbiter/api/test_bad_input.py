"""Bad input: each request gets its documented 4xx, a JSON error naming the field, and changes nothing.

"Changes nothing" is checked by reading the channel back through the API (status as the admin and as two
personas, the whole history, the settings, the channel list) before and after, on a channel that has a
message, a spend in flight and a held claim, so a stray write would show.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.api.app import package_version
from arbiter.api.openapi import openapi_document
from arbiter.core.rules import NOD_FIRST_S
from tests.arbiter.api.conftest import route_template
from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS

if TYPE_CHECKING:
    from tests.arbiter.api.conftest import Api
    from tests.support.clock import FakeClock

CH = "/v1/channels/lobby"
DOCUMENT = openapi_document(package_version())
NOWHERE = "/v1/channels/nowhere"

_NO_BODY = object()


@dataclasses.dataclass(frozen=True)
class Bad:
    method: str
    path: str  # may name {kai_claim}, {hana_seq}, {human_seq}: the fixture's claim and messages
    status: int
    field: str | frozenset[str] | None = None  # None: the error names no field
    who: str | None = "hana"
    json: Any = _NO_BODY
    data: bytes | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    code: str | None = None


def bad(case_id: str, method: str, path: str, status: int, field: str | frozenset[str] | None = None, **kw: Any) -> Any:
    return pytest.param(Bad(method, path, status, field, **kw), id=case_id)


def either(*fields: str) -> frozenset[str]:
    """Where a rule ties two fields together, naming either of them names the problem."""
    return frozenset(fields)


TOO_LONG_TEXT = "x" * 4_001
CONSUME = f"{CH}/consume"
CLAIMS = f"{CH}/claims"
USAGE = f"{CH}/usage"
SETTINGS = f"{CH}/settings"
MESSAGES = f"{CH}/messages"

AMOUNTS = [
    bad("amount-negative", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": -5}),
    bad("amount-zero", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": 0}),
    bad("amount-huge", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": 10**12}),
    bad("amount-above-capacity", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": 101}),
    bad("amount-below-cheapest-tier", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": 4}),
    bad("amount-non-numeric", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": "lots"}),
    bad("amount-numeric-string", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": "5"}),
    bad("amount-fraction", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": 5.5}),
    bad("amount-boolean", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": True}),
    bad("amount-list", "POST", CONSUME, 422, "amount", json={"text": "hi", "amount": [5]}),
    bad("amount-and-tier-missing", "POST", CONSUME, 422, either("amount", "tier"), json={"text": "hi"}),
    bad("amount-null", "POST", CONSUME, 422, either("amount", "tier"), json={"text": "hi", "amount": None}),
    bad(
        "amount-and-tier-both",
        "POST",
        CONSUME,
        422,
        either("amount", "tier"),
        json={"text": "hi", "amount": 5, "tier": "aizuchi"},
    ),
    bad("tokens-negative", "POST", USAGE, 422, "prompt_tokens", json={"prompt_tokens": -1, "completion_tokens": 1}),
    bad("tokens-huge", "POST", USAGE, 422, "completion_tokens", json={"prompt_tokens": 1, "completion_tokens": 10**12}),
    bad("tokens-string", "POST", USAGE, 422, "prompt_tokens", json={"prompt_tokens": "10", "completion_tokens": 1}),
    bad("tokens-float", "POST", USAGE, 422, "prompt_tokens", json={"prompt_tokens": 1.5, "completion_tokens": 1}),
    bad(
        "tokens-boolean", "POST", USAGE, 422, "completion_tokens", json={"prompt_tokens": 1, "completion_tokens": False}
    ),
    bad("tokens-missing", "POST", USAGE, 422, "completion_tokens", json={"prompt_tokens": 1}),
    bad("capacity-zero", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": 0}),
    bad("capacity-negative", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": -100}),
    bad("capacity-huge", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": 10**9}),
    bad("capacity-string", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": "100"}),
    bad("capacity-float", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": 100.5}),
    bad("capacity-boolean", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": True}),
    bad("idle-cap-zero", "PATCH", SETTINGS, 422, "idle_cap", who="admin", json={"idle_cap": 0}),
    bad("budget-negative", "PATCH", SETTINGS, 422, "daily_token_budget", who="admin", json={"daily_token_budget": -1}),
    bad("claim-ttl-zero", "PATCH", SETTINGS, 422, "claim_ttl_s", who="admin", json={"claim_ttl_s": 0}),
    bad(
        "tier-cost-zero",
        "PATCH",
        SETTINGS,
        422,
        "tiers.aizuchi.cost",
        who="admin",
        json={"tiers": {"aizuchi": {"cost": 0}}},
    ),
    bad(
        "recovery-negative",
        "PATCH",
        SETTINGS,
        422,
        "tiers.remark.recovery_s",
        who="admin",
        json={"tiers": {"remark": {"recovery_s": -1.0}}},
    ),
    bad(
        "recovery-string",
        "PATCH",
        SETTINGS,
        422,
        "tiers.remark.recovery_s",
        who="admin",
        json={"tiers": {"remark": {"recovery_s": "5"}}},
    ),
    bad("paused-string", "PATCH", SETTINGS, 422, "paused", who="admin", json={"paused": "yes"}),
    bad("paused-number", "PATCH", SETTINGS, 422, "paused", who="admin", json={"paused": 1}),
    bad("topic-too-long", "PATCH", SETTINGS, 422, "topic", who="admin", json={"topic": "t" * 301}),
]

CROSS_FIELD = [
    bad(
        "remark-dearer-than-long",
        "PATCH",
        SETTINGS,
        422,
        either("tiers.remark.cost", "tiers.long.cost"),
        who="admin",
        json={"tiers": {"remark": {"cost": 90}}},
    ),
    bad(
        "aizuchi-dearer-than-remark",
        "PATCH",
        SETTINGS,
        422,
        either("tiers.aizuchi.cost", "tiers.remark.cost"),
        who="admin",
        json={"tiers": {"aizuchi": {"cost": 61}}},
    ),
    bad(
        "tier-cost-above-capacity",
        "PATCH",
        SETTINGS,
        422,
        "tiers.long.cost",
        who="admin",
        json={"tiers": {"long": {"cost": 150}}},
    ),
    bad(
        "capacity-below-tier-cost",
        "PATCH",
        SETTINGS,
        422,
        either("capacity", "tiers.remark.cost", "tiers.long.cost"),
        who="admin",
        json={"capacity": 50},
    ),
    bad(
        "aizuchi-longer-than-remark",
        "PATCH",
        SETTINGS,
        422,
        either("tiers.aizuchi.max_length", "tiers.remark.max_length"),
        who="admin",
        json={"tiers": {"aizuchi": {"max_length": 500}}},
    ),
    bad(
        "create-with-broken-settings",
        "PUT",
        "/v1/channels/den",
        422,
        "tiers.long.cost",
        who="admin",
        json={"capacity": 70},
    ),
    bad(
        "create-with-out-of-range-setting",
        "PUT",
        "/v1/channels/den",
        422,
        "capacity",
        who="admin",
        json={"capacity": 0},
    ),
]

TIERS = [
    bad("claim-unknown-tier", "POST", CLAIMS, 422, "tier", json={"tier": "huge"}),
    bad("claim-tier-wrong-case", "POST", CLAIMS, 422, "tier", json={"tier": "LONG"}),
    bad("claim-tier-number", "POST", CLAIMS, 422, "tier", json={"tier": 2}),
    bad("claim-tier-missing", "POST", CLAIMS, 422, "tier", json={}),
    bad("claim-no-body", "POST", CLAIMS, 422, "tier"),
    bad("consume-unknown-tier", "POST", CONSUME, 422, "tier", json={"text": "hi", "tier": "shout"}),
    bad(
        "speak-unknown-tier",
        "POST",
        f"{CH}/claims/{{kai_claim}}/speak",
        422,
        "tier",
        who="kai",
        json={"text": "hi", "tier": "huge"},
    ),
    bad(
        "speak-dearer-than-claimed",
        "POST",
        f"{CH}/claims/{{kai_claim}}/speak",
        422,
        "tier",
        who="kai",
        json={"text": "hi", "tier": "remark"},
    ),
    bad(
        "settings-unknown-tier",
        "PATCH",
        SETTINGS,
        422,
        "tiers.huge",
        who="admin",
        json={"tiers": {"huge": {"cost": 1}}},
    ),
    bad(
        "settings-unknown-tier-field",
        "PATCH",
        SETTINGS,
        422,
        "tiers.long.colour",
        who="admin",
        json={"tiers": {"long": {"colour": 1}}},
    ),
]

CHANNELS = [
    bad(
        "consume-unknown-channel",
        "POST",
        f"{NOWHERE}/consume",
        404,
        "channel_id",
        json={"text": "hi", "tier": "aizuchi"},
        code="unknown_channel",
    ),
    bad("claim-unknown-channel", "POST", f"{NOWHERE}/claims", 404, "channel_id", json={"tier": "aizuchi"}),
    bad(
        "speak-unknown-channel",
        "POST",
        f"{NOWHERE}/claims/{{kai_claim}}/speak",
        404,
        "channel_id",
        who="kai",
        json={"text": "hi"},
    ),
    bad("release-unknown-channel", "DELETE", f"{NOWHERE}/claims/{{kai_claim}}", 404, "channel_id", who="kai"),
    bad("status-unknown-channel", "GET", f"{NOWHERE}/status", 404, "channel_id"),
    bad("history-unknown-channel", "GET", f"{NOWHERE}/history", 404, "channel_id"),
    bad(
        "observe-unknown-channel",
        "POST",
        f"{NOWHERE}/messages",
        404,
        "channel_id",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": "hi"},
    ),
    bad("retract-unknown-channel", "POST", f"{NOWHERE}/messages/{{hana_seq}}/retract", 404, "channel_id"),
    bad(
        "usage-unknown-channel",
        "POST",
        f"{NOWHERE}/usage",
        404,
        "channel_id",
        json={"prompt_tokens": 1, "completion_tokens": 1},
    ),
    bad("settings-unknown-channel", "GET", f"{NOWHERE}/settings", 404, "channel_id", who="admin"),
    bad("patch-unknown-channel", "PATCH", f"{NOWHERE}/settings", 404, "channel_id", who="admin", json={"paused": True}),
    bad(
        "persona-policy-unknown-channel",
        "PUT",
        f"{NOWHERE}/personas/kai",
        404,
        "channel_id",
        who="admin",
        json={"muted": True},
    ),
    bad("clear-unknown-channel", "DELETE", f"{NOWHERE}/history", 404, "channel_id", who="admin"),
    bad("channel-id-with-space", "PUT", "/v1/channels/bad%20id", 422, "channel_id", who="admin", json={}),
    bad("channel-id-too-long", "PUT", f"/v1/channels/{'c' * 65}", 422, "channel_id", who="admin", json={}),
    bad("channel-id-leading-dash", "GET", "/v1/channels/-lobby/status", 422, "channel_id"),
]

PERSONAS = [
    bad(
        "policy-unknown-persona",
        "PUT",
        f"{CH}/personas/nobody",
        404,
        either("persona", "persona_id"),
        who="admin",
        json={"muted": True},
    ),
    bad(
        "policy-bad-persona-id", "PUT", f"{CH}/personas/no%20body", 422, "persona_id", who="admin", json={"muted": True}
    ),
    bad("policy-string-flag", "PUT", f"{CH}/personas/kai", 422, "muted", who="admin", json={"muted": "true"}),
    bad(
        "register-another-persona",
        "PUT",
        "/v1/personas/kai",
        403,
        either("persona", "persona_id"),
        json={"display_name": "Kai?"},
    ),
    bad(
        "register-unknown-persona",
        "PUT",
        "/v1/personas/nobody",
        403,
        either("persona", "persona_id"),
        json={"display_name": "Nobody"},
    ),
    bad("register-empty-name", "PUT", "/v1/personas/hana", 422, "display_name", json={"display_name": "  "}),
    bad(
        "register-too-many-aliases",
        "PUT",
        "/v1/personas/hana",
        422,
        "aliases",
        json={"display_name": "Hana", "aliases": [f"a{n}" for n in range(11)]},
    ),
    bad("body-names-another-persona", "POST", CLAIMS, 403, "persona", json={"tier": "aizuchi", "persona": "kai"}),
    bad(
        "body-names-unknown-persona",
        "POST",
        CONSUME,
        403,
        "persona",
        json={"text": "hi", "tier": "aizuchi", "persona": "nobody"},
    ),
    bad(
        "usage-as-another-persona",
        "POST",
        USAGE,
        403,
        "persona",
        json={"prompt_tokens": 1, "completion_tokens": 1, "persona": "mio"},
    ),
    bad(
        "speak-on-anothers-claim",
        "POST",
        f"{CH}/claims/{{kai_claim}}/speak",
        403,
        "claim_id",
        json={"text": "mine now"},
    ),
    bad("release-anothers-claim", "DELETE", f"{CH}/claims/{{kai_claim}}", 403, "claim_id"),
    bad("retract-anothers-message", "POST", f"{CH}/messages/{{hana_seq}}/retract", 403, "seq", who="kai"),
    bad("retract-a-human-message", "POST", f"{CH}/messages/{{human_seq}}/retract", 403, "seq"),
    bad(
        "link-anothers-message",
        "PUT",
        f"{CH}/messages/{{hana_seq}}/platform-id",
        403,
        "seq",
        who="kai",
        json={"platform_message_id": "d-1"},
    ),
]

TOKENS = [
    bad("token-missing", "GET", f"{CH}/status", 401, who=None, code="unauthorized"),
    bad(
        "token-unknown",
        "GET",
        f"{CH}/status",
        401,
        who=None,
        headers={"Authorization": "Bearer not-a-token"},
        code="unauthorized",
    ),
    bad(
        "token-wrong-scheme",
        "GET",
        f"{CH}/status",
        401,
        who=None,
        headers={"Authorization": f"Basic {ADMIN_TOKEN}"},
        code="unauthorized",
    ),
    bad("token-empty", "GET", f"{CH}/status", 401, who=None, headers={"Authorization": "Bearer "}, code="unauthorized"),
    bad("token-missing-on-write", "POST", CLAIMS, 401, who=None, json={"tier": "aizuchi"}, code="unauthorized"),
    bad("token-missing-on-admin", "PATCH", SETTINGS, 401, who=None, json={"paused": True}, code="unauthorized"),
    bad(
        "token-half-right",
        "POST",
        CLAIMS,
        401,
        who=None,
        json={"tier": "aizuchi"},
        headers={"Authorization": f"Bearer {PERSONA_TOKENS['hana'][:-1]}"},
        code="unauthorized",
    ),
    bad("admin-endpoint-persona-token", "PATCH", SETTINGS, 403, json={"paused": True}, code="forbidden"),
    bad("list-without-token", "GET", "/v1/channels", 401, who=None, code="unauthorized"),
    bad("edit-persona-token", "PATCH", f"{CH}/platform-messages/p1", 403, json={"text": "x"}, code="forbidden"),
    bad(
        "edit-unknown-message",
        "PATCH",
        f"{CH}/platform-messages/nope",
        404,
        "platform_message_id",
        who="admin",
        json={"text": "x"},
    ),
    bad("edit-empty-text", "PATCH", f"{CH}/platform-messages/p1", 422, "text", who="admin", json={"text": "  "}),
    bad(
        "edit-bad-platform-id",
        "PATCH",
        f"{CH}/platform-messages/a%20b",
        422,
        "platform_message_id",
        who="admin",
        json={"text": "x"},
    ),
    bad("delete-unknown-message", "DELETE", f"{CH}/platform-messages/nope", 404, "platform_message_id", who="admin"),
    bad("register-bad-colour", "PUT", "/v1/personas/hana", 422, "color", json={"display_name": "Hana", "color": "red"}),
    bad(
        "admin-observe-persona-token",
        "POST",
        MESSAGES,
        403,
        json={"author_id": "u1", "author_name": "Yuki", "text": "hi"},
        code="forbidden",
    ),
    bad("admin-clear-persona-token", "DELETE", f"{CH}/history", 403, code="forbidden"),
    bad("admin-create-persona-token", "PUT", "/v1/channels/den", 403, json={}, code="forbidden"),
    bad("persona-endpoint-admin-token", "POST", CLAIMS, 403, who="admin", json={"tier": "aizuchi"}, code="forbidden"),
    bad(
        "persona-consume-admin-token",
        "POST",
        CONSUME,
        403,
        who="admin",
        json={"text": "hi", "tier": "aizuchi"},
        code="forbidden",
    ),
    bad(
        "persona-register-admin-token",
        "PUT",
        "/v1/personas/hana",
        403,
        who="admin",
        json={"display_name": "Hana"},
        code="forbidden",
    ),
]

TEXTS = [
    bad("text-empty", "POST", CONSUME, 422, "text", json={"text": "", "tier": "aizuchi"}),
    bad("text-blank", "POST", CONSUME, 422, "text", json={"text": " \n\t ", "tier": "aizuchi"}),
    bad("text-oversized", "POST", CONSUME, 422, "text", json={"text": TOO_LONG_TEXT, "tier": "long"}),
    bad("text-missing", "POST", CONSUME, 422, "text", json={"tier": "aizuchi"}),
    bad("text-null", "POST", CONSUME, 422, "text", json={"text": None, "tier": "aizuchi"}),
    bad("text-number", "POST", CONSUME, 422, "text", json={"text": 42, "tier": "aizuchi"}),
    bad("speak-text-empty", "POST", f"{CH}/claims/{{kai_claim}}/speak", 422, "text", who="kai", json={"text": ""}),
    bad(
        "speak-text-oversized",
        "POST",
        f"{CH}/claims/{{kai_claim}}/speak",
        422,
        "text",
        who="kai",
        json={"text": TOO_LONG_TEXT},
    ),
    bad(
        "observe-text-empty",
        "POST",
        MESSAGES,
        422,
        "text",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": ""},
    ),
    bad(
        "observe-text-oversized",
        "POST",
        MESSAGES,
        422,
        "text",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": TOO_LONG_TEXT},
    ),
    bad(
        "observe-author-name-empty",
        "POST",
        MESSAGES,
        422,
        "author_name",
        who="admin",
        json={"author_id": "u1", "author_name": "", "text": "hi"},
    ),
    bad(
        "observe-author-id-bad",
        "POST",
        MESSAGES,
        422,
        "author_id",
        who="admin",
        json={"author_id": "u 1", "author_name": "Yuki", "text": "hi"},
    ),
    bad(
        "observe-author-kind-unknown",
        "POST",
        MESSAGES,
        422,
        "author_kind",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": "hi", "author_kind": "alien"},
    ),
    bad(
        "observe-platform-id-empty",
        "POST",
        MESSAGES,
        422,
        "platform_message_id",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": "hi", "platform_message_id": ""},
    ),
    bad(
        "observe-mention-bad",
        "POST",
        MESSAGES,
        422,
        "mentions.0",
        who="admin",
        json={"author_id": "u1", "author_name": "Yuki", "text": "hi", "mentions": ["not an id"]},
    ),
    bad(
        "link-platform-id-too-long",
        "PUT",
        f"{CH}/messages/{{hana_seq}}/platform-id",
        422,
        "platform_message_id",
        json={"platform_message_id": "p" * 65},
    ),
]

MALFORMED = [
    bad("json-syntax", "POST", CLAIMS, 400, data=b"{bad", code="malformed_json"),
    bad("json-truncated", "POST", CLAIMS, 400, data=b'{"tier": "aizuchi"', code="malformed_json"),
    bad("json-single-quotes", "POST", CLAIMS, 400, data=b"{'tier': 'aizuchi'}", code="malformed_json"),
    bad("json-array", "POST", CLAIMS, 400, data=b'["aizuchi"]', code="malformed_json"),
    bad("json-null", "POST", CLAIMS, 400, data=b"null", code="malformed_json"),
    bad("json-string", "POST", CONSUME, 400, data=b'"hi"', code="malformed_json"),
    bad("json-not-utf8", "POST", CONSUME, 400, data=b'{"text": "\xff\xfe", "tier": "aizuchi"}', code="malformed_json"),
    bad("json-settings-syntax", "PATCH", SETTINGS, 400, who="admin", data=b"{capacity: 5}", code="malformed_json"),
    bad("unknown-field-consume", "POST", CONSUME, 422, "loud", json={"text": "hi", "tier": "aizuchi", "loud": True}),
    bad("unknown-field-claim", "POST", CLAIMS, 422, "priority", json={"tier": "aizuchi", "priority": 1}),
    bad("unknown-field-settings", "PATCH", SETTINGS, 422, "colour", who="admin", json={"colour": "blue"}),
    # Null is not "leave it as it is" (leaving the field out is); it would otherwise change nothing silently.
    bad("null-capacity", "PATCH", SETTINGS, 422, "capacity", who="admin", json={"capacity": None}),
    bad("null-paused", "PATCH", SETTINGS, 422, "paused", who="admin", json={"paused": None}),
    bad(
        "null-tier-cost",
        "PATCH",
        SETTINGS,
        422,
        "tiers.remark.cost",
        who="admin",
        json={"tiers": {"remark": {"cost": None}}},
    ),
    bad("null-muted", "PUT", f"{CH}/personas/kai", 422, "muted", who="admin", json={"muted": None}),
    bad(
        "unknown-field-usage",
        "POST",
        USAGE,
        422,
        "cost_usd",
        json={"prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.1},
    ),
    bad("unknown-field-policy", "PUT", f"{CH}/personas/kai", 422, "banned", who="admin", json={"banned": True}),
    bad("body-too-large", "POST", CONSUME, 413, data=b'{"text": "' + b"x" * 70_000 + b'"}', code="too_large"),
    bad(
        "body-too-large-admin",
        "PATCH",
        SETTINGS,
        413,
        who="admin",
        data=b'{"topic": "' + b"t" * 66_000 + b'"}',
        code="too_large",
    ),
]

PATHS_AND_QUERIES = [
    bad("seq-not-a-number", "POST", f"{CH}/messages/abc/retract", 422, "seq"),
    bad("seq-zero", "POST", f"{CH}/messages/0/retract", 422, "seq"),
    bad("seq-negative", "POST", f"{CH}/messages/-1/retract", 422, "seq"),
    bad("seq-leading-zero", "POST", f"{CH}/messages/01/retract", 422, "seq"),
    bad("seq-fraction", "PUT", f"{CH}/messages/1.5/platform-id", 422, "seq", json={"platform_message_id": "d-1"}),
    bad("seq-huge", "POST", f"{CH}/messages/{10**20}/retract", 422, "seq"),
    bad("seq-unknown", "POST", f"{CH}/messages/999/retract", 404, "seq"),
    bad("claim-id-too-long", "DELETE", f"{CH}/claims/{'a' * 41}", 422, "claim_id"),
    bad("claim-id-bad-characters", "DELETE", f"{CH}/claims/a%21b", 422, "claim_id"),
    bad("claim-id-unknown", "DELETE", f"{CH}/claims/nope", 404, "claim_id", code="unknown_claim"),
    bad("speak-unknown-claim", "POST", f"{CH}/claims/nope/speak", 404, "claim_id", json={"text": "hi"}),
    bad("based-on-seq-ahead", "POST", CLAIMS, 422, "based_on_seq", json={"tier": "remark", "based_on_seq": 99}),
    bad("based-on-seq-negative", "POST", CLAIMS, 422, "based_on_seq", json={"tier": "remark", "based_on_seq": -1}),
    bad("based-on-seq-string", "POST", CLAIMS, 422, "based_on_seq", json={"tier": "remark", "based_on_seq": "1"}),
    bad("history-after-negative", "GET", f"{CH}/history?after=-1", 422, "after"),
    bad("history-after-not-a-number", "GET", f"{CH}/history?after=abc", 422, "after"),
    bad("history-limit-zero", "GET", f"{CH}/history?limit=0", 422, "limit"),
    bad("history-limit-too-big", "GET", f"{CH}/history?limit=201", 422, "limit"),
    bad("history-limit-fraction", "GET", f"{CH}/history?limit=1.5", 422, "limit"),
    bad("route-unknown", "GET", "/v1/nothing", 404, code="no_route"),
    bad("route-unknown-under-channel", "POST", f"{CH}/shout", 404, json={}, code="no_route"),
    bad("route-unversioned", "GET", "/channels/lobby/status", 404, code="no_route"),
    bad("method-delete-status", "DELETE", f"{CH}/status", 405, code="method_not_allowed"),
    bad("method-get-consume", "GET", CONSUME, 405, code="method_not_allowed"),
    bad("method-patch-claims", "PATCH", CLAIMS, 405, json={"tier": "aizuchi"}, code="method_not_allowed"),
    bad("method-post-settings", "POST", SETTINGS, 405, who="admin", json={"paused": True}, code="method_not_allowed"),
]


@pytest.fixture
async def busy(api: Api, lobby: str, clock: FakeClock) -> dict[str, str]:
    """The lobby with a human message, a persona message whose cost is in flight, and kai's held claim (a nod's,
    claimed long enough ago that the others' remarks no longer wait for it: a refusal would hide the error)."""
    human = await api.observe("hello bots", platform_message_id="d-0")
    spoken = await api.consume("hana", "Hello! How was your day?", tier="remark")
    claim = await api.claim("kai", "aizuchi")
    assert spoken["granted"] and claim["granted"]
    clock.advance(NOD_FIRST_S)
    assert await api.level() == 35  # the remark's cost is still in flight, and kai's claim still held
    return {
        "human_seq": str(human["seq"]),
        "hana_seq": str(spoken["message"]["seq"]),
        "kai_claim": claim["claim"]["claim_id"],
    }


@pytest.mark.parametrize(
    "case", [*AMOUNTS, *CROSS_FIELD, *TIERS, *CHANNELS, *PERSONAS, *TOKENS, *TEXTS, *MALFORMED, *PATHS_AND_QUERIES]
)
async def test_bad_request_is_refused_and_changes_nothing(api: Api, busy: dict[str, str], case: Bad) -> None:
    before = await api.snapshot()
    kwargs: dict[str, Any] = {"headers": case.headers}
    if case.json is not _NO_BODY:
        kwargs["json"] = case.json
    if case.data is not None:
        kwargs["data"] = case.data
    error = await api.error(case.method, case.path.format(**busy), case.who, expect=case.status, **kwargs)
    if case.field is None:
        assert error.get("field") is None, error
    elif isinstance(case.field, frozenset):
        assert error.get("field") in case.field, error
    else:
        assert error.get("field") == case.field, error
    if case.code is not None:
        assert error["code"] == case.code, error
    assert await api.snapshot() == before
    template = route_template(DOCUMENT, case.method, case.path)
    if template is not None:  # a route that exists must list this answer among its documented ones
        assert str(case.status) in DOCUMENT["paths"][template][case.method.lower()]["responses"]


async def test_unauthorized_answer_says_how_to_authenticate(api: Api, lobby: str) -> None:
    response = await api.client.get(f"{CH}/status")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_speaking_twice_on_a_claim_with_new_text_conflicts(api: Api, lobby: str) -> None:
    claim_id = (await api.claim("hana", "remark"))["claim"]["claim_id"]
    await api.speak("hana", claim_id, "first thought")
    before = await api.snapshot()
    error = await api.error("POST", f"{CH}/claims/{claim_id}/speak", json={"text": "second thought"}, expect=409)
    assert error["field"] == "claim_id"
    assert await api.snapshot() == before


async def test_speaking_on_a_released_claim_conflicts(api: Api, lobby: str) -> None:
    claim_id = (await api.claim("hana", "remark"))["claim"]["claim_id"]
    await api.release("hana", claim_id)
    before = await api.snapshot()
    error = await api.error("POST", f"{CH}/claims/{claim_id}/speak", json={"text": "too late"}, expect=409)
    assert error["field"] == "claim_id"
    assert await api.snapshot() == before


async def test_releasing_a_spoken_claim_conflicts(api: Api, lobby: str) -> None:
    claim_id = (await api.claim("hana", "remark"))["claim"]["claim_id"]
    await api.speak("hana", claim_id, "said it")
    before = await api.snapshot()
    error = await api.error("DELETE", f"{CH}/claims/{claim_id}", expect=409)
    assert error["field"] == "claim_id"
    assert await api.snapshot() == before


async def test_linking_a_platform_id_another_message_has_is_refused(api: Api, lobby: str) -> None:
    human = await api.observe("hi", platform_message_id="d-1")
    seq = (await api.consume("hana", "hello", tier="aizuchi"))["message"]["seq"]
    assert seq != human["seq"]
    before = await api.snapshot()
    error = await api.error("PUT", f"{CH}/messages/{seq}/platform-id", json={"platform_message_id": "d-1"}, expect=422)
    assert error["field"] == "platform_message_id"
    assert await api.snapshot() == before


async def test_a_rejected_channel_is_not_created(api: Api, lobby: str) -> None:
    await api.error("PUT", "/v1/channels/den", "admin", json={"capacity": 70}, expect=422)
    await api.error("GET", "/v1/channels/den/status", "admin", expect=404)
    listed = await api.call("GET", "/v1/channels", "admin")
    assert [c["channel_id"] for c in listed["channels"]] == ["lobby"]
