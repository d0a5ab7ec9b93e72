"""The fake's REST API (v10): the routes discord.py uses for messages, typing, reactions, application commands,
application emojis, interaction responses and followups, the lookups it makes at login, and those a setup check
makes (the bot's guilds, a guild's roles, channels and members).

Every call is recorded before anything else happens; a ``fail_next`` rule answers in place of the route; a route
the fake does not have is answered 404 with a message naming it, and shows up in ``FakeDiscord.unknown_requests``.
Permission checks follow Discord: no VIEW_CHANNEL is 403 Missing Access (50001), another missing permission
is 403 Missing Permissions (50013).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aiohttp import web

from .commands import validate_registration
from .emojis import create_app_emoji, delete_app_emoji, list_app_emojis, usable_emoji
from .model import ALL_PARSE, FakeBot, FakeChannel, FakeMessage, Perm, permissions_in, role_permissions
from .records import ApiError, InteractionResult, PathPattern, RecordedRequest
from .webhooks import create_webhook, execute, find, list_webhooks

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .model import FakeGuild
    from .ratelimits import Verdict
    from .server import FakeDiscord

__all__ = ("ROUTES", "handle")

WEBHOOK_PARSE = ("users",)  # Discord's default for interaction responses and webhooks
SENDABLE_FLAGS = (1 << 2) | (1 << 12) | (1 << 15)  # SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS, IS_COMPONENTS_V2
MAX_CONTENT = 2000


@dataclass
class Call:
    fake: FakeDiscord
    request: web.Request
    record: RecordedRequest
    params: dict[str, str]

    @property
    def bot(self) -> FakeBot:
        assert self.record.bot is not None  # bot routes are refused with 401 before their handler runs
        return self.record.bot

    @property
    def body(self) -> Any:
        return self.record.json

    def query(self, name: str) -> str | None:
        return self.record.query.get(name)


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    handler: Callable[[Call], Awaitable[tuple[int, Any]]]
    # "bot": Authorization: Bot <token>; "interaction": the interaction token in the path; "webhook": a channel
    # webhook's id and token in the path (no authorization), or an interaction's application id and token.
    auth: str


async def handle(fake: FakeDiscord, request: web.Request) -> web.StreamResponse:
    version = request.match_info["version"]
    raw_tail = request.rel_url.raw_path[len(f"/api/{version}") :]
    body, files = await _read_body(request)
    route, params = _match(request.method, raw_tail)
    record = RecordedRequest(
        method=request.method,
        path=unquote(raw_tail),
        route=None if route is None else route.template,
        bot=_caller(fake, request, route, params),
        json=body,
        query=dict(request.query),
        files=files,
        at=fake.rate_limits.clock(),
    )
    fake.requests.append(record)
    headers: dict[str, str] = {}
    rule = next((r for r in fake._failures if r.matches(record.method, record.path, record.bot)), None)
    if rule is not None:
        rule.remaining -= 1
        rule.hits.append(record)
        record.injected = True
        status, payload, headers = rule.status, rule.body, rule.headers
    elif route is None:
        status, payload = 404, {"message": f"fake discord has no route for {record.method} {record.path}", "code": 0}
    elif route.auth == "bot" and record.bot is None:
        status, payload = 401, {"message": "401: Unauthorized", "code": 0}
    else:
        verdict = _limited(fake, record, route, params) if route.auth == "bot" else None
        if verdict is not None:
            headers = verdict.headers
        if verdict is not None and verdict.retry_after is not None:
            status, payload = 429, verdict.body or {}
        else:
            try:
                status, payload = await route.handler(Call(fake=fake, request=request, record=record, params=params))
            except ApiError as error:
                status, payload = error.status, error.body
    record.status, record.response = status, payload
    fake._notify()
    if status == 204 or payload is None:
        return web.Response(status=status, headers=headers)
    # discord.py parses a body as JSON only when Content-Type is exactly "application/json" (no charset).
    body = json.dumps(payload).encode()
    return web.Response(body=body, status=status, headers={**headers, "Content-Type": "application/json"})


def _limited(fake: FakeDiscord, record: RecordedRequest, route: Route, params: dict[str, str]) -> Verdict:
    """Count the call against the bot's rate limits; the verdict's headers go on the answer, whatever it is."""
    assert record.bot is not None
    verdict = fake.rate_limits.check(record.bot.id, route.method, route.template, params)
    record.bucket, record.retry_after, record.scope = verdict.bucket, verdict.retry_after, verdict.scope
    return verdict


def _match(method: str, raw_tail: str) -> tuple[Route | None, dict[str, str]]:
    for route, pattern in _compiled():
        if route.method != method:
            continue
        found = pattern.match(raw_tail)
        if found is not None:
            return route, {name: unquote(value) for name, value in found.items()}
    return None, {}


@functools.cache
def _compiled() -> list[tuple[Route, PathPattern]]:
    return [(route, PathPattern(route.template)) for route in ROUTES]


def _caller(fake: FakeDiscord, request: web.Request, route: Route | None, params: dict[str, str]) -> FakeBot | None:
    if route is not None and route.auth in ("interaction", "webhook"):
        for result in fake.interactions.values():
            if result.token == params.get("token"):
                return result.bot
        return None
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return fake.bots.get(token) if scheme == "Bot" else None


async def _read_body(request: web.Request) -> tuple[Any, list[str]]:
    if not request.body_exists:
        return None, []
    if request.content_type.startswith("multipart/"):
        form = await request.post()
        files = [str(value.filename) for value in form.values() if isinstance(value, web.FileField)]
        payload = form.get("payload_json")
        return (json.loads(str(payload)) if payload is not None else None), files
    text = await request.text()
    if not text:
        return None, []
    try:
        return json.loads(text), []
    except json.JSONDecodeError:
        return text, []


# -- lookups and checks --------------------------------------------------------------------------------------


def _channel(call: Call) -> FakeChannel:
    channel_id = call.params["channel_id"]
    if channel_id.isdigit():
        for guild in call.fake.guilds.values():
            channel = guild.channels.get(int(channel_id)) or guild.threads.get(int(channel_id))
            if channel is not None:
                return channel
    raise ApiError(404, 10003, "Unknown Channel")


def _guild(call: Call) -> FakeGuild:
    guild_id = call.params["guild_id"]
    guild = call.fake.guilds.get(int(guild_id)) if guild_id.isdigit() else None
    if guild is None:
        raise ApiError(404, 10004, "Unknown Guild")
    if call.bot.id not in guild.members:
        raise ApiError(403, 50001, "Missing Access")
    return guild


def _message(channel: FakeChannel, message_id: str) -> FakeMessage:
    for message in channel.history:
        if str(message.id) == message_id and not message.deleted:
            return message
    raise ApiError(404, 10008, "Unknown Message")


def _require(call: Call, channel: FakeChannel, needed: int) -> int:
    member = channel.guild.member(call.bot)
    permissions = 0 if member is None else permissions_in(member, channel)
    if not permissions & Perm.VIEW_CHANNEL:
        raise ApiError(403, 50001, "Missing Access")
    if permissions & needed != needed:
        raise ApiError(403, 50013, "Missing Permissions")
    return permissions


def _readable(bot: FakeBot, message: FakeMessage) -> bool:
    """REST reads follow the app's approved intents (the portal switch), not a gateway session's."""
    return bot.allow_message_content or message.author is bot or any(u is bot for u in message.mentions)


def _form_error(field: str, message: str) -> ApiError:
    return ApiError(
        400, 50035, "Invalid Form Body", errors={field: {"_errors": [{"code": "INVALID", "message": message}]}}
    )


def _allowed_mentions(body: dict[str, Any]) -> dict[str, Any] | None:
    allowed = body.get("allowed_mentions")
    if allowed is None:
        return None
    parse = allowed.get("parse") or []
    for kind in ("users", "roles"):
        if kind in parse and allowed.get(kind):
            raise _form_error("allowed_mentions", f"parse:[{kind!r}] and {kind}: [ids] are mutually exclusive.")
        if len(allowed.get(kind) or []) > 100:
            raise _form_error("allowed_mentions", f"{kind}: at most 100 ids.")
    return dict(allowed)


def _check_content(body: dict[str, Any], files: list[str]) -> None:
    content = body.get("content") or ""
    if len(content) > MAX_CONTENT:
        raise _form_error("content", f"Must be {MAX_CONTENT} or fewer in length.")
    if not (
        content or body.get("embeds") or files or body.get("sticker_ids") or body.get("poll") or body.get("components")
    ):
        raise ApiError(400, 50006, "Cannot send an empty message")


def _attachments(call: Call) -> list[dict[str, Any]]:
    return [
        {
            "id": str(call.fake.snowflake()),
            "filename": name,
            "size": 0,
            "url": f"{call.fake.base_url}/attachments/{name}",
            "proxy_url": f"{call.fake.base_url}/attachments/{name}",
        }
        for name in call.record.files
    ]


# What the channel webhooks (``webhooks.py``) share with the other routes.
channel_of, require, check_content, checked_mentions, attachments_of = (
    _channel,
    _require,
    _check_content,
    _allowed_mentions,
    _attachments,
)


def _emoji(raw: str) -> str:
    # Discord takes a unicode emoji or name:id; a bare word (":thumbsup:", "thumbsup") is Unknown Emoji.
    if ":" not in raw.strip(":") and raw.isascii():
        raise ApiError(400, 10014, "Unknown Emoji")
    return raw


# -- gateway and identity ------------------------------------------------------------------------------------


async def get_gateway(call: Call) -> tuple[int, Any]:
    return 200, {"url": call.fake.gateway_url}


SESSION_STARTS = 1000  # a day's IDENTIFYs, per bot


async def get_gateway_bot(call: Call) -> tuple[int, Any]:
    """The recommended shard count (the fake's ``shards``, else one per 1,000 guilds, or per the fake's lower
    ``max_guilds_per_shard``) and the session starts left
    today (each IDENTIFY uses one; the day does not end in a test)."""
    fake = call.fake
    guilds = sum(1 for guild in fake.guilds.values() if call.bot.id in guild.members)
    per_shard = min(1000, fake.max_guilds_per_shard)
    shards = fake.shards if fake.shards is not None else max(1, -(-guilds // per_shard))
    limit = {
        "total": SESSION_STARTS,
        "remaining": max(0, SESSION_STARTS - call.bot.identified),
        "reset_after": 86_400_000,
        "max_concurrency": 1,
    }
    return 200, {"url": call.fake.gateway_url, "shards": shards, "session_start_limit": limit}


async def get_me(call: Call) -> tuple[int, Any]:
    return 200, {**call.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0, "locale": "en-US"}


async def get_user(call: Call) -> tuple[int, Any]:
    user_id = call.params["user_id"]
    user = call.fake.users.get(int(user_id)) if user_id.isdigit() else None
    if user is None:
        raise ApiError(404, 10013, "Unknown User")
    return 200, user.payload()


async def get_application(call: Call) -> tuple[int, Any]:
    return 200, call.bot.application_payload()


async def get_my_guilds(call: Call) -> tuple[int, Any]:
    """The guilds the bot is in, as partial guilds in id order: ``before``/``after`` (ids) and ``limit`` (1-200,
    default 200) page through them; ``permissions`` is what its roles grant there (no overwrites, nothing implied);
    ``with_counts`` adds the approximate counts."""
    limit = call.query("limit") or "200"
    before, after = call.query("before"), call.query("after")
    if not limit.isdigit() or not 1 <= int(limit) <= 200:
        raise _form_error("limit", "int value should be less than or equal to 200.")
    if any(value is not None and not value.isdigit() for value in (before, after)):
        raise _form_error(
            "before" if before is not None and not before.isdigit() else "after", "Value is not snowflake."
        )
    mine = sorted((g for g in call.fake.guilds.values() if call.bot.id in g.members), key=lambda g: g.id)
    if after is not None:
        mine = [g for g in mine if g.id > int(after)][: int(limit)]
    elif before is not None:
        mine = [g for g in mine if g.id < int(before)][-int(limit) :]
    else:
        mine = mine[: int(limit)]
    counts = call.query("with_counts") in ("1", "true", "True")
    return 200, [_partial_guild(guild, call.bot, counts=counts) for guild in mine]


def _partial_guild(guild: FakeGuild, bot: FakeBot, *, counts: bool) -> dict[str, Any]:
    member = guild.members[bot.id]
    data: dict[str, Any] = {
        "id": str(guild.id),
        "name": guild.name,
        "icon": None,
        "banner": None,
        "owner": guild.owner_id == bot.id,
        "permissions": str(role_permissions(member)),
        "features": [],
    }
    if counts:
        data["approximate_member_count"] = len(guild.members)
        data["approximate_presence_count"] = 0
    return data


# -- channels and messages -----------------------------------------------------------------------------------


async def get_channel(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.VIEW_CHANNEL)
    return 200, channel.payload()


async def get_messages(call: Call) -> tuple[int, Any]:
    """History, newest first, as Discord returns it whatever the direction asked."""
    channel = _channel(call)
    permissions = _require(call, channel, Perm.VIEW_CHANNEL)
    if not permissions & Perm.READ_MESSAGE_HISTORY:
        return 200, []
    limit = max(1, min(100, int(call.query("limit") or 50)))
    live = channel.messages
    before, after, around = call.query("before"), call.query("after"), call.query("around")
    if after is not None:
        chosen = [m for m in live if m.id > int(after)][:limit]
    elif around is not None:
        pivot = int(around)
        older = [m for m in live if m.id < pivot][-(limit // 2) :] if limit > 1 else []
        newer = [m for m in live if m.id >= pivot][: limit - len(older)]
        chosen = older + newer
    else:
        older_than = int(before) if before is not None else None
        chosen = [m for m in live if older_than is None or m.id < older_than][-limit:]
    bot = call.bot
    return 200, [m.payload(viewer=bot, content_visible=_readable(bot, m)) for m in reversed(chosen)]


async def get_message(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.VIEW_CHANNEL | Perm.READ_MESSAGE_HISTORY)
    message = _message(channel, call.params["message_id"])
    return 200, message.payload(viewer=call.bot, content_visible=_readable(call.bot, message))


async def create_message(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, channel.send_permission)
    body = call.body if isinstance(call.body, dict) else {}
    _check_content(body, call.record.files)
    allowed = _allowed_mentions(body)
    reply_to = _reference(channel, body.get("message_reference"))
    if body.get("enforce_nonce") and body.get("nonce") is not None:
        # Discord answers a repeated nonce (same author, recent) with the message it already created.
        for earlier in reversed(channel.messages):
            if earlier.author is call.bot and earlier.nonce == body["nonce"]:
                return 200, earlier.payload(viewer=call.bot)
    message = call.fake._new_message(
        channel,
        call.bot,
        body.get("content") or "",
        allowed_mentions=allowed,
        default_parse=ALL_PARSE,
        reply_to=reply_to,
        embeds=list(body.get("embeds") or []),
        components=list(body.get("components") or []),
        attachments=_attachments(call),
        flags=int(body.get("flags") or 0) & SENDABLE_FLAGS,
        tts=bool(body.get("tts")),
        nonce=body.get("nonce"),
    )
    call.fake._publish(message)
    return 200, message.payload(viewer=call.bot)


def _reference(channel: FakeChannel, reference: dict[str, Any] | None) -> FakeMessage | None:
    if not reference or reference.get("type", 0) != 0 or reference.get("message_id") is None:
        return None
    if str(reference.get("channel_id", channel.id)) != str(channel.id):
        raise _form_error("message_reference", "Cannot reply to a message in another channel.")
    try:
        return _message(channel, str(reference["message_id"]))
    except ApiError:
        if reference.get("fail_if_not_exists", True):
            raise _form_error("message_reference", "Unknown message") from None
        return None


async def edit_message(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, 0)
    message = _message(channel, call.params["message_id"])
    if message.author is not call.bot:
        raise ApiError(403, 50005, "Cannot edit a message authored by another user")
    body = call.body if isinstance(call.body, dict) else {}
    if len(body.get("content") or "") > MAX_CONTENT:
        raise _form_error("content", f"Must be {MAX_CONTENT} or fewer in length.")
    _allowed_mentions(body)
    call.fake._apply_edit(message, body)
    return 200, message.payload(viewer=call.bot)


async def delete_message(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, 0)
    message = _message(channel, call.params["message_id"])
    if message.author is not call.bot:
        _require(call, channel, Perm.MANAGE_MESSAGES)
    call.fake._apply_delete(message)
    return 204, None


async def trigger_typing(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, channel.send_permission)
    call.fake._typing(call.bot, channel)
    return 204, None


async def add_own_reaction(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.READ_MESSAGE_HISTORY)
    message = _message(channel, call.params["message_id"])
    emoji = usable_emoji(call.fake, call.bot, call.params["emoji"])
    if not message.reactions.get(emoji):
        _require(call, channel, Perm.ADD_REACTIONS)  # adding to an existing reaction needs no ADD_REACTIONS
    call.fake._add_reaction(message, call.bot, emoji)
    return 204, None


async def remove_own_reaction(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.READ_MESSAGE_HISTORY)
    message = _message(channel, call.params["message_id"])
    call.fake._remove_reaction(message, call.bot, _emoji(call.params["emoji"]))
    return 204, None


async def remove_reaction(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.READ_MESSAGE_HISTORY | Perm.MANAGE_MESSAGES)
    message = _message(channel, call.params["message_id"])
    user = call.fake.users.get(int(call.params["user_id"])) if call.params["user_id"].isdigit() else None
    if user is None:
        raise ApiError(404, 10013, "Unknown User")
    call.fake._remove_reaction(message, user, _emoji(call.params["emoji"]))
    return 204, None


async def get_reactions(call: Call) -> tuple[int, Any]:
    channel = _channel(call)
    _require(call, channel, Perm.READ_MESSAGE_HISTORY)
    message = _message(channel, call.params["message_id"])
    return 200, [user.payload() for user in message.reactions.get(_emoji(call.params["emoji"]), [])]


# -- guilds --------------------------------------------------------------------------------------------------


async def get_guild(call: Call) -> tuple[int, Any]:
    guild = _guild(call)
    return 200, {**guild.base_payload(), "approximate_member_count": len(guild.members)}


async def get_guild_channels(call: Call) -> tuple[int, Any]:
    return 200, [channel.payload() for channel in _guild(call).channels.values()]


async def get_guild_roles(call: Call) -> tuple[int, Any]:
    return 200, [role.payload() for role in _guild(call).roles.values()]


async def get_guild_member(call: Call) -> tuple[int, Any]:
    guild = _guild(call)
    user_id = call.params["user_id"]
    member = guild.members.get(int(user_id)) if user_id.isdigit() else None
    if member is None:
        raise ApiError(404, 10007, "Unknown Member")
    return 200, member.payload()


async def get_guild_members(call: Call) -> tuple[int, Any]:
    guild = _guild(call)
    if not call.bot.allow_members:
        raise ApiError(403, 50001, "Missing Access")
    limit = max(1, min(1000, int(call.query("limit") or 1)))
    after = int(call.query("after") or 0)
    members = sorted((m for m in guild.members.values() if m.user.id > after), key=lambda m: m.user.id)
    return 200, [m.payload() for m in members[:limit]]


# -- application commands ------------------------------------------------------------------------------------


def _scope(call: Call) -> tuple[int, int | None]:
    if call.params["application_id"] != str(call.bot.application_id):
        raise ApiError(403, 20012, "You are not authorized to perform this action on this application")
    guild_id = _guild(call).id if "guild_id" in call.params else None
    return call.bot.application_id, guild_id


async def get_commands(call: Call) -> tuple[int, Any]:
    return 200, list(call.fake.commands.get(_scope(call), []))


async def put_commands(call: Call) -> tuple[int, Any]:
    """Bulk overwrite, as ``CommandTree.sync`` does: ids stay with (name, type) across overwrites."""
    scope = _scope(call)
    body = call.body if isinstance(call.body, list) else None
    if body is None:
        raise _form_error("_root", "Expected an array of commands.")
    if len(body) > 100:
        raise _form_error("_root", "At most 100 commands.")
    for index, command in enumerate(body):
        problem = validate_registration(command)
        if problem is not None:
            raise _form_error(str(index), problem)
    previous = {(c["name"], c.get("type", 1)): c["id"] for c in call.fake.commands.get(scope, [])}
    stored = []
    for command in body:
        kind = command.get("type", 1)
        entry = {
            "type": kind,
            "description": "",
            "options": [],
            "default_member_permissions": None,
            "nsfw": False,
            **command,
            "id": previous.get((command["name"], kind)) or str(call.fake.snowflake()),
            "application_id": str(scope[0]),
            "version": str(call.fake.snowflake()),
        }
        if entry["default_member_permissions"] is not None:
            entry["default_member_permissions"] = str(entry["default_member_permissions"])  # a string on the wire
        if scope[1] is not None:
            entry["guild_id"] = str(scope[1])
        stored.append(entry)
    call.fake.commands[scope] = stored
    return 200, stored


# -- interactions --------------------------------------------------------------------------------------------

RESPONSE_FLAGS = (1 << 6) | (1 << 2) | (1 << 12) | (1 << 15)  # EPHEMERAL and the sendable ones


async def interaction_callback(call: Call) -> tuple[int, Any]:
    fake = call.fake
    result = fake._interaction(call.params["interaction_id"], call.params["token"])
    if result.answered:
        raise ApiError(400, 40060, "Interaction has already been acknowledged.")
    body = call.body if isinstance(call.body, dict) else {}
    kind = body.get("type")
    data = body.get("data") or {}
    if kind not in (4, 5, 6, 7, 8, 9):
        raise _form_error("type", f"Invalid interaction callback type {kind!r}.")
    if kind == 4:
        _check_content(data, call.record.files)
        _allowed_mentions(data)
    message = None
    if kind in (4, 5):
        flags = int(data.get("flags") or 0) & RESPONSE_FLAGS
        message = fake._new_message(
            result.channel,
            result.bot,
            (data.get("content") or "") if kind == 4 else "",
            allowed_mentions=data.get("allowed_mentions"),
            default_parse=WEBHOOK_PARSE,
            type=20,
            flags=flags | (FakeMessage.LOADING if kind == 5 else 0),
            embeds=list(data.get("embeds") or []),
            components=list(data.get("components") or []),
            attachments=_attachments(call),
            webhook_id=result.bot.application_id,
            application_id=result.bot.application_id,
            interaction={
                "id": str(result.id),
                "type": result.kind,
                "name": result.command,
                "user": result.user.payload(),
                "authorizing_integration_owners": {"0": str(result.channel.guild.id)},
            },
        )
        result.message = message
        fake._publish(message)
    result.callback_type, result.callback = kind, data
    result.changed()
    fake._notify()
    if call.query("with_response") not in ("1", "true", "True"):
        return 204, None
    answer: dict[str, Any] = {
        "interaction": {
            "id": str(result.id),
            "type": result.kind,
            "response_message_loading": kind == 5,
            "response_message_ephemeral": message is not None and message.ephemeral,
        }
    }
    if message is not None:
        answer["interaction"]["response_message_id"] = str(message.id)
        answer["resource"] = {"type": kind, "message": message.payload(viewer=result.bot)}
    else:
        answer["resource"] = {"type": kind}
    return 200, answer


async def create_followup(call: Call) -> tuple[int, Any]:
    """A followup; the first one after a deferral replaces the "thinking" message, as in Discord."""
    fake = call.fake
    result = fake._interaction_by_token(call.params["application_id"], call.params["token"])
    if not result.answered:
        raise ApiError(404, 10015, "Unknown Webhook")
    body = call.body if isinstance(call.body, dict) else {}
    _check_content(body, call.record.files)
    _allowed_mentions(body)
    if result.thinking and result.message is not None:
        message = result.message
        fake._apply_edit(message, body)
    else:
        message = fake._new_message(
            result.channel,
            result.bot,
            body.get("content") or "",
            allowed_mentions=body.get("allowed_mentions"),
            default_parse=WEBHOOK_PARSE,
            flags=int(body.get("flags") or 0) & RESPONSE_FLAGS,
            embeds=list(body.get("embeds") or []),
            components=list(body.get("components") or []),
            attachments=_attachments(call),
            webhook_id=result.bot.application_id,
            application_id=result.bot.application_id,
        )
        result.followups.append(message)
        fake._publish(message)
    result.changed()
    fake._notify()
    if call.query("wait") not in ("1", "true", "True"):
        return 204, None
    return 200, message.payload(viewer=result.bot)


async def execute_webhook(call: Call) -> tuple[int, Any]:
    """``POST /webhooks/{id}/{token}``: a channel webhook's id and token execute it; an interaction's application id
    and token send a followup (discord.py sends both to the same route)."""
    hook = find(call)
    if hook is not None:
        return await execute(call, hook)
    return await create_followup(call)


def _webhook_message(call: Call) -> tuple[InteractionResult, FakeMessage]:
    result = call.fake._interaction_by_token(call.params["application_id"], call.params["token"])
    wanted = call.params["message_id"]
    if wanted == "@original":
        if result.message is None or result.message.deleted:
            raise ApiError(404, 10008, "Unknown Message")
        return result, result.message
    for message in result.followups:
        if str(message.id) == wanted and not message.deleted:
            return result, message
    raise ApiError(404, 10008, "Unknown Message")


async def get_webhook_message(call: Call) -> tuple[int, Any]:
    result, message = _webhook_message(call)
    return 200, message.payload(viewer=result.bot)


async def edit_webhook_message(call: Call) -> tuple[int, Any]:
    result, message = _webhook_message(call)
    body = call.body if isinstance(call.body, dict) else {}
    if len(body.get("content") or "") > MAX_CONTENT:
        raise _form_error("content", f"Must be {MAX_CONTENT} or fewer in length.")
    _allowed_mentions(body)
    call.fake._apply_edit(message, body)
    result.changed()
    return 200, message.payload(viewer=result.bot)


async def delete_webhook_message(call: Call) -> tuple[int, Any]:
    result, message = _webhook_message(call)
    call.fake._apply_delete(message)
    result.changed()
    return 204, None


ROUTES: list[Route] = [
    Route("GET", "/gateway", get_gateway, "bot"),
    Route("GET", "/gateway/bot", get_gateway_bot, "bot"),
    Route("GET", "/users/@me", get_me, "bot"),
    Route("GET", "/users/@me/guilds", get_my_guilds, "bot"),
    Route("GET", "/users/{user_id}", get_user, "bot"),
    Route("GET", "/oauth2/applications/@me", get_application, "bot"),
    Route("GET", "/applications/@me", get_application, "bot"),
    Route("GET", "/channels/{channel_id}", get_channel, "bot"),
    Route("GET", "/channels/{channel_id}/messages", get_messages, "bot"),
    Route("POST", "/channels/{channel_id}/messages", create_message, "bot"),
    Route("GET", "/channels/{channel_id}/messages/{message_id}", get_message, "bot"),
    Route("PATCH", "/channels/{channel_id}/messages/{message_id}", edit_message, "bot"),
    Route("DELETE", "/channels/{channel_id}/messages/{message_id}", delete_message, "bot"),
    Route("POST", "/channels/{channel_id}/typing", trigger_typing, "bot"),
    Route("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", add_own_reaction, "bot"),
    Route("DELETE", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", remove_own_reaction, "bot"),
    Route("DELETE", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}", remove_reaction, "bot"),
    Route("GET", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}", get_reactions, "bot"),
    Route("GET", "/guilds/{guild_id}", get_guild, "bot"),
    Route("GET", "/guilds/{guild_id}/channels", get_guild_channels, "bot"),
    Route("GET", "/guilds/{guild_id}/roles", get_guild_roles, "bot"),
    Route("GET", "/guilds/{guild_id}/members", get_guild_members, "bot"),
    Route("GET", "/guilds/{guild_id}/members/{user_id}", get_guild_member, "bot"),
    Route("GET", "/applications/{application_id}/emojis", list_app_emojis, "bot"),
    Route("POST", "/applications/{application_id}/emojis", create_app_emoji, "bot"),
    Route("DELETE", "/applications/{application_id}/emojis/{emoji_id}", delete_app_emoji, "bot"),
    Route("GET", "/applications/{application_id}/commands", get_commands, "bot"),
    Route("PUT", "/applications/{application_id}/commands", put_commands, "bot"),
    Route("GET", "/applications/{application_id}/guilds/{guild_id}/commands", get_commands, "bot"),
    Route("PUT", "/applications/{application_id}/guilds/{guild_id}/commands", put_commands, "bot"),
    Route("POST", "/interactions/{interaction_id}/{token}/callback", interaction_callback, "interaction"),
    Route("GET", "/channels/{channel_id}/webhooks", list_webhooks, "bot"),
    Route("POST", "/channels/{channel_id}/webhooks", create_webhook, "bot"),
    Route("POST", "/webhooks/{application_id}/{token}", execute_webhook, "webhook"),
    Route("GET", "/webhooks/{application_id}/{token}/messages/{message_id}", get_webhook_message, "interaction"),
    Route("PATCH", "/webhooks/{application_id}/{token}/messages/{message_id}", edit_webhook_message, "interaction"),
    Route("DELETE", "/webhooks/{application_id}/{token}/messages/{message_id}", delete_webhook_message, "interaction"),
]
