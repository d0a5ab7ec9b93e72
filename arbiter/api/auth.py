"""Bearer tokens: one per member, persona or external agent (it may act only as itself), and one for administrators."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbiter.core.errors import ArbiterError, PermissionDenied
from arbiter.settings import persona_named, sharing_a_token

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aiohttp import web

__all__ = ("ADMIN", "Principal", "TokenAuth", "Unauthorized", "bearer_token")


class Unauthorized(ArbiterError):
    code = "unauthorized"


@dataclass(frozen=True, slots=True)
class Principal:
    persona_id: str | None  # None for the administrator

    @property
    def admin(self) -> bool:
        return self.persona_id is None


ADMIN = Principal(None)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def bearer_token(request: web.Request) -> str:
    """The token of ``Authorization: Bearer <token>``.

    A token typed with its scheme into a client that adds the scheme itself (the MCP Inspector's token box, a
    desktop client's header field) arrives as ``Bearer Bearer <token>``: taken as the token it plainly is."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("malformed Authorization header; expected 'Bearer <token>'")
    again, _, rest = token.partition(" ")
    return rest.strip() if again.lower() == "bearer" and rest.strip() else token


class TokenAuth:
    """Looks tokens up by their hash, so comparing never depends on how much of a token was right."""

    def __init__(self, persona_tokens: Mapping[str, str], admin_token: str | None) -> None:
        # The settings refuse these with a clearer message; tokens added beside them (the room's) meet them here.
        shared = sharing_a_token(persona_tokens)
        if shared:
            raise ValueError(f"personas {' and '.join(map(persona_named, shared))} have the same token")
        self._by_digest: dict[bytes, Principal] = {_digest(t): Principal(pid) for pid, t in persona_tokens.items()}
        self._admin = _digest(admin_token) if admin_token else None
        if self._admin is not None and self._admin in self._by_digest:
            persona = self._by_digest[self._admin].persona_id or ""
            raise ValueError(f"the token of {persona_named(persona)} is the admin token")

    @property
    def admin_enabled(self) -> bool:
        return self._admin is not None

    def principal(self, request: web.Request) -> Principal:
        return self.identify(bearer_token(request))

    def identify(self, token: str) -> Principal:
        """Whose token this is (from a header, or from a URL for clients that can set nothing else)."""
        try:
            digest = _digest(token)
        except UnicodeEncodeError:
            # aiohttp keeps bytes that are not UTF-8 as lone surrogates, which no token is made of.
            raise Unauthorized("malformed token; it is not valid UTF-8") from None
        if self._admin is not None and hmac.compare_digest(digest, self._admin):
            return ADMIN
        principal = self._by_digest.get(digest)
        if principal is None:
            raise Unauthorized("unknown token")
        return principal

    @staticmethod
    def persona(principal: Principal, claimed: str | None = None) -> str:
        """The calling persona's id; refuses the admin and anyone claiming to be someone else."""
        if principal.persona_id is None:
            raise PermissionDenied("this endpoint acts as a persona; use that persona's token")
        if claimed is not None and claimed != principal.persona_id:
            raise PermissionDenied(
                f"this token belongs to {principal.persona_id}; it cannot act as {claimed}", field="persona"
            )
        return principal.persona_id

    def admin(self, request: web.Request) -> None:
        if self._admin is None:
            raise PermissionDenied("the admin API is off; set ARBITER_ADMIN_TOKEN to turn it on")
        if not self.principal(request).admin:
            raise PermissionDenied("this endpoint needs the admin token")
