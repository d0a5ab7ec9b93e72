"""The fake's Discord rules on their own: permission computation and effective mentions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.support.fake_discord import Overwrite, Perm
from tests.support.fake_discord.model import ALL_PERMISSIONS, effective_mentions

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

SEND = Perm.SEND_MESSAGES
VIEW = Perm.VIEW_CHANNEL


@pytest.mark.parametrize(
    ("overwrites", "can_view", "can_send"),
    [
        pytest.param([], True, True, id="no-overwrites"),
        pytest.param([("everyone", 0, SEND)], True, False, id="everyone-denied-send"),
        pytest.param([("everyone", 0, SEND), ("mods", SEND, 0)], True, True, id="role-allow-beats-everyone-deny"),
        pytest.param([("mods", 0, SEND)], True, False, id="role-deny"),
        pytest.param([("mods", 0, SEND), ("user", SEND, 0)], True, True, id="member-allow-beats-role-deny"),
        pytest.param([("everyone", 0, VIEW)], False, False, id="no-view-means-nothing"),
    ],
)
def test_channel_overwrites_apply_in_discords_order(
    fake: FakeDiscord, world: World, overwrites: list[tuple[str, int, int]], can_view: bool, can_send: bool
) -> None:
    targets: dict[str, Any] = {"everyone": world.guild.everyone, "mods": world.mods, "user": world.mod}
    channel = fake.add_channel(
        world.guild,
        "tuned",
        overwrites=[Overwrite(target=targets[name], allow=allow, deny=deny) for name, allow, deny in overwrites],
    )

    permissions = fake.permissions(world.mod, channel)

    assert bool(permissions & VIEW) is can_view
    assert bool(permissions & SEND) is can_send


def test_owners_and_administrators_have_every_permission_despite_overwrites(fake: FakeDiscord) -> None:
    owner = fake.add_human("olga")
    guild = fake.add_guild("olga's", owner=owner)
    admins = fake.add_role(guild, "admins", permissions=Perm.ADMINISTRATOR)
    admin = fake.add_human("adam", guilds=[guild], roles=[admins])
    locked = fake.add_channel(guild, "locked", overwrites=[Overwrite(target=guild.everyone, deny=VIEW)])
    nobody = fake.add_human("nora", guilds=[guild])

    assert fake.permissions(owner, locked) == ALL_PERMISSIONS
    assert fake.permissions(admin, locked) == ALL_PERMISSIONS
    assert fake.permissions(nobody, locked) == 0


def test_extra_permissions_come_through_a_role_of_the_members_own(fake: FakeDiscord, world: World) -> None:
    keeper = fake.add_human("kim", permissions=Perm.MANAGE_GUILD)

    assert fake.permissions(keeper, world.lounge) & Perm.MANAGE_GUILD
    member = world.guild.member(keeper)
    assert member is not None
    assert [role.name for role in member.roles] == ["kim's role"]


@pytest.mark.parametrize(
    ("content", "allowed", "expected"),
    [
        pytest.param("hi <@{bob}>", None, (["bob"], [], False), id="default-pings-users"),
        pytest.param("hi <@!{bob}>", None, (["bob"], [], False), id="nickname-form"),
        pytest.param("hi <@{bob}>", {"parse": []}, ([], [], False), id="none-allowed"),
        pytest.param("hi <@{bob}>", {"parse": [], "users": ["{bob}"]}, (["bob"], [], False), id="listed-user"),
        pytest.param("hi <@&{mods}>", None, ([], [], False), id="unmentionable-role"),
        pytest.param("@everyone look", None, ([], [], False), id="everyone-without-permission"),
        pytest.param("hi <@{bob}> and again <@{bob}>", None, (["bob"], [], False), id="one-entry-per-user"),
    ],
)
def test_effective_mentions(
    fake: FakeDiscord, world: World, content: str, allowed: dict[str, Any] | None, expected: tuple[Any, ...]
) -> None:
    ids = {"bob": world.member.id, "mods": world.mods.id}
    filled = {key: [v.format(**ids) for v in value] for key, value in (allowed or {}).items()}

    users, roles, everyone = effective_mentions(
        content=content.format(**ids),
        author_permissions=fake.permissions(world.mod, world.lounge),
        guild=world.guild,
        users=fake.users.values(),
        allowed=None if allowed is None else filled,
        default_parse=("users", "roles", "everyone"),
        reply_to=None,
    )

    assert ([u.name for u in users], [r.name for r in roles], everyone) == expected
