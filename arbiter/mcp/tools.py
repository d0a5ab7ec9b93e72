"""The MCP tools: one row per tool, with the models it takes and answers. No MCP SDK here: ``arbiter.mcp.server``
turns the table into the SDK's tools, so this module is the whole of what an MCP client can do.

The reference design's tools keep their names, argument names and result shapes: ``consume {amount, message,
from}`` answers ``{success, resource, message}``, ``status`` answers ``{resource}``, ``history`` answers ``{history:
[{from, message}]}``, so an agent written for it works unchanged. Ours add to them (optional arguments, more keys in
the answer) and add ``claim``, ``speak``, ``release`` and ``register``; ``add`` is the reference's human ``/add``,
for the admin token. Every tool calls the service, as the HTTP API does: the same pool, idle cap, priority, tiers.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from arbiter import contract as wire
from arbiter.api.errors import validation_error
from arbiter.core.errors import ArbiterError, InvalidRequest, PermissionDenied
from arbiter.core.models import AuthorKind, RefusalReason, Tier

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from arbiter.service import ArbiterService

__all__ = ("TOOLS", "Access", "Caller", "Tool", "ToolFailure", "allowed", "describe", "history_entries", "run_tool")

ClaimId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,40}$")]

# The reference design's answers, word for word, so that agents (and prompts) written for it read ours the same.
CONSUMED = "Resource consumed."
NOT_ENOUGH = "Not enough resource."


class Access(enum.Enum):
    MEMBER = "a persona's or an agent's token"
    ANY = "any token"
    ADMIN = "the admin token"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls (a persona or agent id; None for the administrator) and the channel their URL names, if any."""

    member: str | None
    channel: str | None = None


class ToolFailure(Exception):
    """A tool call that did nothing: its one-line reason goes back to the client as a tool error."""


# --- arguments ------------------------------------------------------------------------------------------


class _Args(BaseModel):
    # Unknown arguments are refused, so a typo is an error and not a silent no-op (as in the HTTP API).
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ChannelArgs(_Args):
    channel: wire.Id | None = Field(None, description="the channel; leave it out when the URL names one")


class ConsumeArgs(_ChannelArgs):
    amount: wire.Amount | None = Field(
        None, description="what to spend; it buys the dearest tier it covers (by default aizuchi 5, remark 60, long 80)"
    )
    message: wire.Text = Field(description="what to say; it must fit the tier's length (see status)")
    from_: wire.Id | None = Field(None, alias="from", description="your id; optional, it must be your token's")
    tier: Tier | None = Field(None, description="instead of amount: the tier to speak in")
    based_on_seq: wire.Seq | None = Field(None, description="the last history seq the message answers")


class StatusArgs(_ChannelArgs):
    pass


class HistoryArgs(_ChannelArgs):
    after: wire.Seq | None = Field(None, description="a page of messages after this seq; leave out for the latest")
    limit: Annotated[int, Field(ge=1, le=200, strict=True)] = 50


class ClaimArgs(_ChannelArgs):
    tier: Tier
    based_on_seq: wire.Seq | None = None


class SpeakArgs(_ChannelArgs):
    claim_id: ClaimId
    message: wire.Text
    tier: Tier | None = Field(None, description="the claim's tier (the default) or a cheaper one")
    based_on_seq: wire.Seq | None = None


class ReleaseArgs(_ChannelArgs):
    claim_id: ClaimId


class RegisterArgs(_Args):
    display_name: wire.Name
    aliases: list[wire.Name] = Field(default_factory=list, max_length=10, description="other names you answer to")
    color: wire.Color | None = Field(None, description="your colour in the local room, #rrggbb")


class AddArgs(_ChannelArgs):
    from_: wire.Name = Field(alias="from", description="who said it (a person's name)")
    message: wire.Text


# --- answers --------------------------------------------------------------------------------------------


class ConsumeResult(BaseModel):
    success: bool
    resource: int = Field(description="the pool's level after this call")
    message: str
    reason: RefusalReason | None = None
    retry_after: float | None = None
    tier: Tier | None = Field(None, description="the tier spoken in")
    seq: int | None = Field(None, description="the message's seq in the history")


class StatusResult(wire.StatusView):
    resource: int = Field(description="the pool's level (the same as level)")


class HistoryEntry(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from", description="a member's id (what it passes as from), or a person's name")
    message: str


class HistoryResult(BaseModel):
    history: list[HistoryEntry] = Field(description="oldest first")
    next_after: int = Field(description="pass as after for the next page")
    has_more: bool


class RegisterResult(BaseModel):
    id: str
    display_name: str


class AddResult(BaseModel):
    success: bool
    seq: int


# --- the tools ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    service: ArbiterService
    caller: Caller
    args: Any

    @property
    def member(self) -> str:
        assert self.caller.member is not None
        return self.caller.member

    @property
    def channel(self) -> str:
        """The channel: the URL's, or the argument's; both may be given only if they agree."""
        named = getattr(self.args, "channel", None)
        if named is not None and self.caller.channel is not None and named != self.caller.channel:
            raise InvalidRequest(
                f"this URL is for channel {self.caller.channel}; leave channel out or use the URL of {named}",
                field="channel",
            )
        channel = named or self.caller.channel
        if channel is None:
            raise InvalidRequest(
                "no channel: use a channel's URL (/channels/<channel>/mcp) or give it here", field="channel"
            )
        return channel


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    access: Access
    args: type[_Args]
    result: type[BaseModel]
    run: Callable[[Call], Awaitable[BaseModel]]


async def _consume(call: Call) -> BaseModel:
    args: ConsumeArgs = call.args
    if args.from_ is not None and args.from_ != call.member:
        raise PermissionDenied(f"this token belongs to {call.member}; it cannot speak as {args.from_}", field="from")
    if args.amount is None and args.tier is None:
        raise InvalidRequest("give amount (what to spend) or tier", field="amount")
    result = await call.service.consume(
        call.channel, call.member, args.message, tier=args.tier, amount=args.amount, based_on_seq=args.based_on_seq
    )
    if result.granted:
        message = CONSUMED
    else:
        message = NOT_ENOUGH if result.reason is RefusalReason.INSUFFICIENT else (result.detail or str(result.reason))
    return ConsumeResult(
        success=result.granted,
        resource=result.level,
        message=message,
        reason=result.reason,
        retry_after=result.retry_after,
        tier=result.message.tier if result.message else None,
        seq=result.message.seq if result.message else None,
    )


async def _status(call: Call) -> BaseModel:
    status = await call.service.status(call.channel, call.caller.member)
    # The service's answer, checked already, with the reference's name for the level beside it: not validated again.
    return StatusResult.model_construct(**dict(status), resource=status.level)


def history_entries(messages: list[wire.MessageView]) -> list[HistoryEntry]:
    """The reference's ``{from, message}``: members by the id they pass as ``from``, people by their name (their id
    is a platform number that means nothing to a model)."""
    return [
        HistoryEntry(
            from_=m.author_id if m.author_kind is AuthorKind.PERSONA else m.author_name,
            message=m.text,
        )
        for m in messages
    ]


async def _history(call: Call) -> BaseModel:
    args: HistoryArgs = call.args
    if args.after is None:
        messages = await call.service.recent(call.channel, args.limit)
        last = messages[-1].seq if messages else 0
        return HistoryResult(history=history_entries(messages), next_after=last, has_more=False)
    page = await call.service.history(call.channel, after=args.after, limit=args.limit)
    return HistoryResult(history=history_entries(page.messages), next_after=page.next_after, has_more=page.has_more)


async def _claim(call: Call) -> BaseModel:
    args: ClaimArgs = call.args
    return await call.service.claim(call.channel, call.member, args.tier, based_on_seq=args.based_on_seq)


async def _speak(call: Call) -> BaseModel:
    args: SpeakArgs = call.args
    return await call.service.speak(
        call.channel, call.member, args.claim_id, args.message, tier=args.tier, based_on_seq=args.based_on_seq
    )


async def _release(call: Call) -> BaseModel:
    args: ReleaseArgs = call.args
    return await call.service.release(call.channel, call.member, args.claim_id)


async def _register(call: Call) -> BaseModel:
    args: RegisterArgs = call.args
    await call.service.register_persona(call.member, args.display_name, args.aliases, color=args.color)
    return RegisterResult(id=call.member, display_name=args.display_name)


def _author_id(name: str) -> str:
    """A person's id from the name the reference's ``/add`` gives (``user``, ``Ken Tanaka`` -> ``Ken-Tanaka``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-_.")[:64] or "human"


async def _add(call: Call) -> BaseModel:
    args: AddArgs = call.args
    result = await call.service.record_message(
        call.channel, author_id=_author_id(args.from_), author_name=args.from_, text=args.message
    )
    return AddResult(success=True, seq=result.seq)


TOOLS: tuple[Tool, ...] = (
    Tool("consume", "Spend and speak", "Spend from the channel's shared pool and say something, in one step. "
         "amount buys the dearest tier it covers; a refusal (success false) is an answer, not an error: wait or "
         "say less.", Access.MEMBER, ConsumeArgs, ConsumeResult, _consume),
    Tool("status", "The pool and the tiers", "The pool's level (resource), each tier's cost and length, and "
         "whether you may speak now (tiers.<tier>.may_claim, with the reason and retry_after if not).",
         Access.ANY, StatusArgs, StatusResult, _status),
    Tool("history", "The conversation", "The latest messages, oldest first; with after, a page of the messages "
         "after that seq.", Access.ANY, HistoryArgs, HistoryResult, _history),
    Tool("claim", "Claim a tier", "Hold a tier's cost before writing (the two-step turn): then speak on the "
         "claim, or release it to pass.", Access.MEMBER, ClaimArgs, wire.ClaimResult, _claim),
    Tool("speak", "Speak on a claim", "Say something on your claim, in its tier or a cheaper one (the "
         "difference comes back at once).", Access.MEMBER, SpeakArgs, wire.SpeakResult, _speak),
    Tool("release", "Pass", "Give a claim back unspoken: its cost returns to the pool at once.", Access.MEMBER,
         ReleaseArgs, wire.ReleaseResult, _release),
    Tool("register", "Your name", "How you appear to the others: your display name (messages that name it give "
         "you the floor), other names, your colour.", Access.MEMBER, RegisterArgs, RegisterResult, _register),
    Tool("add", "Add a person's message", "Record what a person said (the reference's /add): it costs nothing "
         "and gives the floor back to the members.", Access.ADMIN, AddArgs, AddResult, _add),
)  # fmt: skip

_BY_NAME = {tool.name: tool for tool in TOOLS}


def allowed(tool: Tool, caller: Caller) -> bool:
    if tool.access is Access.ADMIN:
        return caller.member is None
    if tool.access is Access.MEMBER:
        return caller.member is not None
    return True


# The service's error fields, as the tools' arguments name them.
_ARGUMENT = {"channel_id": "channel", "persona": "from", "text": "message"}


def describe(error: ArbiterError) -> str:
    """One line naming the argument at fault, for a tool error."""
    field = _ARGUMENT.get(error.field or "", error.field)
    if field and not error.message.startswith(f"{field}:"):
        return f"{field}: {error.message}"
    return error.message


async def run_tool(service: ArbiterService, caller: Caller, name: str, arguments: dict[str, Any]) -> BaseModel:
    """Run one tool call. Raises ToolFailure, naming the argument at fault, for anything refused: then nothing
    changed (the service changes nothing for a call it refuses)."""
    tool = _BY_NAME.get(name)
    if tool is None:
        raise ToolFailure(f"no tool {name!r}; see tools/list")
    if not allowed(tool, caller):
        raise ToolFailure(f"{name} needs {tool.access.value}")
    try:
        args = tool.args.model_validate(arguments)
        return await tool.run(Call(service, caller, args))
    except ValidationError as error:
        raise ToolFailure(describe(validation_error(error))) from None
    except ArbiterError as error:
        raise ToolFailure(describe(error)) from None
