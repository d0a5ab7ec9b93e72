"""The room in a real browser: headless Chromium (Debian's chromium package) driven by Playwright, against the
arbiter served in process with real persona runtimes on the scripted provider.

Skips with the reason when /usr/bin/chromium or the playwright package is missing, unless
AIZUCHI_REQUIRE_SERVICES=1, which turns the skip into a failure. Saves a screenshot to test-artifacts/room.png.
Playwright drives the system's Chromium (``executable_path``): ``playwright install`` is never needed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from arbiter.contract import Tier
from tests.support.room import room_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from playwright.async_api import Browser, Page

    from tests.support.room import RoomServer

CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"

# What the person says, one line at a time, until the personas have shown what the test waits for.
LINES = [
    "Hi everyone! What should we cook tonight?",
    "Rin, any ideas for a dessert?",
    "Theo, do you like curry, or is it too spicy?",
    "Juno, what would you bring to a picnic?",
    "Honestly I could eat pancakes every day.",
    "Should we invite the neighbours too?",
    "What about a movie after dinner?",
    "I think I will bake bread this weekend.",
    "Does anyone here grow their own vegetables?",
    "Tea or coffee in the morning?",
    "What was the best meal you ever had?",
    "Let us plan the menu for Saturday.",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the browser test is required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"no browser for the room's browser test: {reason}")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _unavailable("the playwright package is missing (pip install playwright)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            yield launched
        finally:
            await launched.close()


# --- reading the page -----------------------------------------------------------------------------------

WATCH = """() => {
  // The test's own eyes on the page: every gauge value and persona activity shown, however briefly.
  window.seen = { levels: [], activities: new Set() };
  const gauge = document.getElementById("gauge");
  new MutationObserver(() => window.seen.levels.push(Number(gauge.getAttribute("aria-valuenow"))))
    .observe(gauge, { attributes: true, attributeFilter: ["aria-valuenow"] });
  const personas = document.getElementById("personas");
  new MutationObserver(() => {
    for (const item of personas.querySelectorAll("li")) window.seen.activities.add(item.dataset.activity);
  }).observe(personas, { childList: true });
}"""

FELL_AND_RECOVERED = """(capacity) => {
  const levels = window.seen.levels;
  const low = levels.findIndex((level) => level < capacity);
  return low >= 0 && levels.slice(low).includes(capacity);
}"""

CHART_DRAWN = """() => {
  // Some pixel of the chart is the level line's green: the chart is drawn, not blank.
  const canvas = document.getElementById("chart");
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 1] > pixels[i] + 40 && pixels[i + 1] > pixels[i + 2] + 20) return true;
  }
  return false;
}"""


async def messages(page: Page) -> list[dict[str, str]]:
    """The conversation as shown: each message's seq, author kind, tier, cost and text."""
    shown: list[dict[str, str]] = await page.eval_on_selector_all(
        "#messages li",
        """items => items.map((item) => ({
          seq: item.dataset.seq, kind: item.dataset.authorKind, tier: item.dataset.tier || "",
          cost: item.dataset.cost || "", name: item.querySelector(".who").textContent,
          text: item.querySelector(".text").textContent,
        }))""",
    )
    return shown


async def say(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")
    await page.locator("#messages li[data-author-kind='human'] .text", has_text=text).last.wait_for()
    assert await page.input_value("#text") == ""


async def converse_until(
    page: Page, lines: Iterator[str], done: Callable[[], Awaitable[bool]], what: str, *, each_s: float = 4.0
) -> None:
    """Say one line after another until ``done()`` holds; give the personas ``each_s`` seconds per line."""
    loop = asyncio.get_running_loop()
    for line in itertools.islice(lines, 6):
        await say(page, line)
        deadline = loop.time() + each_s
        while loop.time() < deadline:
            if await done():
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"the personas never {what}; the room showed {await messages(page)}")


async def shown_tiers(page: Page) -> set[tuple[str, str]]:
    """(tier, cost) of every persona message shown."""
    return {(m["tier"], m["cost"]) for m in await messages(page) if m["kind"] == "persona"}


def watch_problems(page: Page) -> list[tuple[str, str]]:
    """(what, where) of every console error and uncaught exception on the page, as they happen."""
    problems: list[tuple[str, str]] = []
    page.on("console", lambda m: problems.append((m.text, m.location["url"])) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append((f"uncaught: {error}", "")))
    return problems


# --- the test, in the order a person would go -----------------------------------------------------------


async def open_the_room(page: Page, room: RoomServer) -> None:
    """/ leads to the lobby, which the personas join; the page lists them and follows the stream."""
    await page.goto(room.url + "/")
    assert page.url == room.url + "/room/lobby"
    await page.locator("#connection[data-state='live']").wait_for()
    assert room.opened == ["lobby"]
    listed = await page.eval_on_selector_all("#personas li", "items => items.map((item) => item.dataset.persona)")
    assert sorted(listed) == ["juno", "rin", "theo"]
    await page.evaluate(WATCH)


async def chat(page: Page, room: RoomServer, lines: Iterator[str]) -> None:
    """Type; see a remark and an aizuchi; see the gauge fall and recover, the chart and the personas' activity."""
    await page.fill("#name", "Yui")

    async def remark_and_aizuchi() -> bool:
        return {"aizuchi", "remark"} <= {tier for tier, _cost in await shown_tiers(page)}

    await converse_until(page, lines, remark_and_aizuchi, "both nodded and remarked")
    shown = await messages(page)
    assert {m["name"] for m in shown if m["kind"] == "persona"} <= {"Rin", "Theo", "Juno"}
    # What the page shows is what the arbiter recorded.
    recorded = {str(m.seq): m.text for m in (await room.arbiter.service.history("lobby", limit=200)).messages}
    assert {m["seq"]: m["text"] for m in shown}.items() <= recorded.items()

    # Recovery is 1 s here, so the pool is full again soon after the personas stop.
    await page.wait_for_function(FELL_AND_RECOVERED, arg=100, timeout=15_000)
    await page.wait_for_function(CHART_DRAWN)
    activities = set(await page.evaluate("() => [...window.seen.activities]"))
    assert {"thinking", "spoke"} <= activities, activities


async def tune(page: Page, room: RoomServer, lines: Iterator[str]) -> None:
    """A refused value shows the API's error; a new tier cost takes effect; pause and resume."""
    service = room.arbiter.service
    cost = page.locator("input[name='tiers.aizuchi.cost']")
    await cost.fill("0")
    await page.click("#apply")
    await page.locator("#settings-error", has_text="tiers.aizuchi.cost").wait_for()
    assert await cost.get_attribute("aria-invalid") == "true"
    assert (await service.settings("lobby")).tiers[Tier.AIZUCHI].cost == 5

    await cost.fill("7")
    await cost.press("Enter")
    await page.locator("#settings-note", has_text="Saved").wait_for()
    assert await page.text_content("#settings-error") == ""
    assert (await service.settings("lobby")).tiers[Tier.AIZUCHI].cost == 7
    await page.locator("#tier-costs li[data-tier='aizuchi']", has_text="7").wait_for()

    async def nod_at_the_new_cost() -> bool:
        return ("aizuchi", "7") in await shown_tiers(page)

    await converse_until(page, lines, nod_at_the_new_cost, "nodded at the new cost")

    await page.click("#pause")
    await page.locator("#pause", has_text="Resume").wait_for()
    assert await page.is_visible("#paused-note")
    assert (await service.settings("lobby")).paused
    await page.click("#pause")
    await page.locator("#pause", has_text="Pause").wait_for()
    assert not (await service.settings("lobby")).paused


async def reload(page: Page) -> None:
    """The history is still there after a reload, and so is the person's name."""
    before = [(m["seq"], m["text"]) for m in await messages(page)]
    await page.reload()
    await page.locator("#connection[data-state='live']").wait_for()
    after = [(m["seq"], m["text"]) for m in await messages(page)]
    assert after[: len(before)] == before
    assert await page.input_value("#name") == "Yui"


async def test_a_person_chats_with_the_personas_and_tunes_the_room(browser: Browser, sqlite_url: str) -> None:
    async with room_server(sqlite_url, recovery_s=1.0) as room:
        page = await browser.new_page(viewport={"width": 1366, "height": 800})
        page.set_default_timeout(10_000)
        problems = watch_problems(page)
        lines = iter(LINES)

        await open_the_room(page, room)
        await chat(page, room, lines)
        await tune(page, room, lines)
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "room.png"))
        await reload(page)

        await page.close()
        # Chromium logs every 4xx answer; the one refused setting is the only error the page may have seen.
        refused = (
            "Failed to load resource: the server responded with a status of 422",
            f"{room.url}/room/api/lobby/settings",
        )
        assert [(text[: len(refused[0])], url) for text, url in problems] == [refused], problems


async def test_the_page_follows_changes_to_the_history_and_survives_a_dropped_stream(
    browser: Browser, sqlite_url: str
) -> None:
    async with room_server(sqlite_url, personas=(), hands=("probe",)) as room:
        service = room.arbiter.service
        page = await browser.new_page()
        page.set_default_timeout(10_000)
        problems = watch_problems(page)
        await page.goto(room.url + "/room/garden")
        await page.locator("#connection[data-state='live']").wait_for()
        for platform_id in ("g1", "g2"):
            await service.record_message(
                "garden",
                author_id="ken",
                author_name="Ken",
                text=f"posted as {platform_id}",
                platform_message_id=platform_id,
            )
        spoken = await service.consume("garden", "probe", "Indeed.", tier=Tier.AIZUCHI)
        assert spoken.message is not None
        await page.locator("#messages li[data-tier='aizuchi']", has_text="Indeed.").wait_for()

        await service.edit_message("garden", "g1", "edited on the platform")
        await page.locator("#messages li[data-seq='1']", has_text="edited on the platform").wait_for()
        await service.delete_message("garden", "g2")
        await page.locator("#messages li[data-seq='2']").wait_for(state="detached")
        await service.retract("garden", "probe", spoken.message.seq)
        await page.locator(f"#messages li[data-seq='{spoken.message.seq}']").wait_for(state="detached")
        assert [m["text"] for m in await messages(page)] == ["edited on the platform"]

        # The stream drops. What happens before the page is back (it waits half a second before it reconnects)
        # shows once it is: a new message exactly once, and the edit and the deletion of messages it showed.
        g3 = await service.record_message(
            "garden", author_id="ken", author_name="Ken", text="soon deleted", platform_message_id="g3"
        )
        await page.locator(f"#messages li[data-seq='{g3.seq}']").wait_for()
        room.arbiter.hub.close_all()
        await service.edit_message("garden", "g1", "edited while the page was away")
        await service.delete_message("garden", "g3")
        said = await service.record_message("garden", author_id="ken", author_name="Ken", text="said meanwhile")
        await page.locator(f"#messages li[data-seq='{said.seq}']").wait_for()
        await page.locator(f"#messages li[data-seq='{g3.seq}']").wait_for(state="detached")
        await page.locator("#messages li[data-seq='1']", has_text="edited while the page was away").wait_for()
        assert [(m["seq"], m["text"]) for m in await messages(page)] == [
            ("1", "edited while the page was away"),
            (str(said.seq), "said meanwhile"),
        ]
        assert await page.get_attribute("#connection", "data-state") == "live"

        await service.clear_history("garden")
        await page.locator("#messages li").first.wait_for(state="detached")
        assert await page.is_visible("#empty")
        await page.close()
        assert problems == []
