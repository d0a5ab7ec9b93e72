"""The room in a real browser: headless Chromium (Debian's chromium package) driven by Playwright, against the
arbiter served in process with real persona runtimes on the scripted provider.

Skips with the reason when /usr/bin/chromium or the playwright package is missing, unless
AIZUCHI_REQUIRE_SERVICES=1, which turns the skip into a failure. Playwright drives the system's Chromium
(``executable_path``): ``playwright install`` is never needed.

Screenshots of the room on a phone and on a desktop, light and dark, go to test-artifacts/ (gitignored). With
AIZUCHI_README_SCREENSHOT=<path> (``make screenshot`` sets docs/room.png), the desktop one in the light theme, with
the default settings, is also saved there: the README's picture.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import os
import re
import shutil
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from aizuchi.fleet import Cast, offline_notice
from arbiter.contract import DialogueState, MemoryUpdate, SpeakerNote, Tier
from bots.llm.profiles import ProviderProfile
from bots.llm.scripted import GENERIC
from bots.persona import load_personas
from tests.support.eventually import eventually
from tests.support.pictures import png
from tests.support.proxy import tcp_proxy
from tests.support.room import PERSONAS_DIR, ROOM_PERSONAS, room_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from playwright.async_api import Browser, BrowserContext, FloatRect, Page

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
PHONE = {"width": 390, "height": 844}
SETTLE_MS = 4000  # room.js's: how long a persona is shown as having just spoken or passed
DESKTOP = {"width": 1366, "height": 800}

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


# One Chromium (and one Playwright driver) per module and xdist worker: launching them costs a couple of seconds of
# CPU, each test's. The tests run in the module's event loop, the one the browser was launched in. Isolation is
# the context's: each page is in a fresh one (its own storage), and every context a test opened is closed after it.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
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


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The shared browser, left as the test found it: the contexts the test opened are closed, passed or not."""
    try:
        yield chromium
    finally:
        for context in chromium.contexts:
            await context.close()


CLOCKED: weakref.WeakSet[BrowserContext] = weakref.WeakSet()  # contexts whose clock new_page installed


async def new_page(
    browser: Browser, *, viewport: dict[str, int] = DESKTOP, scheme: str = "light", clock: bool = False
) -> Page:
    """A page in a fresh context (its own storage): a person's first visit, on a screen of this size and theme.
    ``clock``: the page's clock is Playwright's, running in real time until ``all_personas`` moves it on."""
    context = await browser.new_context(viewport=viewport, color_scheme=scheme)  # type: ignore[arg-type]
    if clock:
        await context.clock.install()
        CLOCKED.add(context)
    page = await context.new_page()
    page.set_default_timeout(10_000)
    return page


# --- reading the page -----------------------------------------------------------------------------------

WATCH = """() => {
  // The test's own eyes on the page: every gauge value, persona activity and outage text shown, however briefly.
  window.seen = { levels: [], activities: [], outage: [] };
  const gauge = document.getElementById("gauge");
  new MutationObserver(() => window.seen.levels.push(Number(gauge.getAttribute("aria-valuenow"))))
    .observe(gauge, { attributes: true, attributeFilter: ["aria-valuenow"] });
  const personas = document.getElementById("personas");
  new MutationObserver(() => {
    for (const item of personas.querySelectorAll("li[data-persona]")) {
      window.seen.activities.push([item.dataset.persona, item.dataset.activity]);
    }
  }).observe(personas, { childList: true });
  const outage = document.getElementById("outage-text");
  new MutationObserver(() => window.seen.outage.push(outage.textContent))
    .observe(outage, { childList: true, characterData: true, subtree: true });
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

# Every piece of text shown, and the text in every field, against what is behind it: the WCAG contrast ratio,
# with the colours blended through transparency and opacity as the browser paints them.
CONTRAST = """() => {
  const parse = (css) => {
    const m = css.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  };
  const over = (top, bottom) => ({
    r: top.r * top.a + bottom.r * (1 - top.a), g: top.g * top.a + bottom.g * (1 - top.a),
    b: top.b * top.a + bottom.b * (1 - top.a), a: 1,
  });
  const luminance = ({ r, g, b }) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const behind = (node) => {
    const layers = [];
    for (let n = node; n; n = n.parentElement) {
      const style = getComputedStyle(n);
      if (style.backgroundImage !== "none") return null; // a pattern: not text's background
      const color = parse(style.backgroundColor);
      if (color && color.a > 0) { layers.push(color); if (color.a >= 1) break; }
    }
    return layers.reverse().reduce((bottom, top) => over(top, bottom), { r: 255, g: 255, b: 255, a: 1 });
  };
  const opacity = (node) => {
    let value = 1;
    for (let n = node; n; n = n.parentElement) value *= Number(getComputedStyle(n).opacity);
    return value;
  };
  const nodes = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) if (walker.currentNode.textContent.trim()) nodes.add(walker.currentNode.parentElement);
  for (const field of document.querySelectorAll("input, textarea")) if (field.value) nodes.add(field);
  const failures = [];
  let checked = 0;
  for (const node of nodes) {
    if (!node.checkVisibility({ visibilityProperty: true })) continue;
    const box = node.getBoundingClientRect();
    if (box.width <= 1 || box.height <= 1) continue; // visually hidden, for screen readers
    if (node.closest("button:disabled, canvas")) continue; // WCAG exempts inactive controls
    const background = behind(node);
    if (!background) continue;
    const ink = parse(getComputedStyle(node).color);
    ink.a *= opacity(node);
    const text = over(ink, background);
    const [light, dark] = [luminance(text), luminance(background)].sort((a, b) => b - a);
    const ratio = (light + 0.05) / (dark + 0.05);
    checked += 1;
    if (ratio < 4.5) {
      failures.push({ text: (node.value || node.textContent).trim().slice(0, 40), ratio: ratio.toFixed(2),
                      color: getComputedStyle(node).color, background: JSON.stringify(background) });
    }
  }
  return { checked, failures };
}"""

# Elements that reach past the right edge of the window: the page would scroll sideways.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const out = [...document.querySelectorAll("body *")].filter((node) => {
    const box = node.getBoundingClientRect();
    return box.width > 0 && (box.right > width + 0.5 || box.left < -0.5);
  });
  return { scroll: document.documentElement.scrollWidth - width,
           out: out.slice(0, 5).map((node) => node.id || node.className || node.tagName) };
}"""

# Everything a finger can tap that is shown, and smaller than 44 px either way (WCAG 2.5.5): which, and its size.
SMALL_TARGETS = """() => [...document.querySelectorAll("button, input, textarea, select, summary, a, [role='tab']")]
  .filter((node) => node.checkVisibility({ visibilityProperty: true }))
  .map((node) => {
    const box = node.getBoundingClientRect();
    const what = node.id || node.name || node.getAttribute("aria-label") || node.textContent.trim();
    return { what, width: Math.round(box.width), height: Math.round(box.height) };
  })
  .filter(({ width, height }) => width < 44 || height < 44)"""

# Every text on the page, shown or not, and every title and accessible label: where "a aizuchi" would be wrong.
WORDING = """() => [document.body.textContent, document.body.innerText,
  ...[...document.querySelectorAll("[title], [aria-label]")].flatMap(
    (node) => [node.getAttribute("title") || "", node.getAttribute("aria-label") || ""])]"""

BACKGROUND_LUMINANCE = """() => {
  const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/\\d+/g).map(Number);
  return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
}"""


async def messages(page: Page) -> list[dict[str, str]]:
    """The conversation as shown: each message's seq, author, tier, cost, name, text and chip colour."""
    shown: list[dict[str, str]] = await page.eval_on_selector_all(
        "#messages li",
        """items => items.map((item) => ({
          seq: item.dataset.seq, kind: item.dataset.authorKind, author: item.dataset.author,
          tier: item.dataset.tier || "", cost: item.dataset.cost || "", name: item.querySelector(".who").textContent,
          text: item.querySelector(".text").textContent,
          color: getComputedStyle(item.querySelector(".who")).backgroundColor,
        }))""",
    )
    return shown


async def activities(page: Page) -> dict[str, str]:
    """What the personas panel says each persona is doing."""
    shown: dict[str, str] = await page.eval_on_selector_all(
        "#personas li[data-persona]",
        "items => Object.fromEntries(items.map((item) => [item.dataset.persona, item.dataset.activity]))",
    )
    return shown


async def seen_activities(page: Page) -> set[str]:
    return {what for _persona, what in await page.evaluate("() => window.seen.activities")}


async def all_personas(page: Page, activity: str) -> None:
    """Wait until the personas panel shows every persona doing ``activity``. A persona that has just spoken or
    passed is shown so for SETTLE_MS (4 s) first: on a page with Playwright's clock (``new_page(clock=True)``), the
    clock is moved past that span rather than waited through. (One that speaks or passes later still shows it for
    4 s of real time.)"""
    if page.context in CLOCKED:
        await page.clock.fast_forward(SETTLE_MS)
    await page.wait_for_function(
        "(what) => [...document.querySelectorAll('#personas li')].every((li) => li.dataset.activity === what)",
        arg=activity,
    )


async def say(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")
    await page.locator("#messages li[data-author-kind='human'] .text", has_text=text).last.wait_for()
    # Cleared once the arbiter has answered the post (the stream may bring the message a moment before).
    await page.wait_for_function("() => document.getElementById('text').value === ''")


async def persona_spoke_after(page: Page, seq: int) -> bool:
    return any(m["kind"] == "persona" and int(m["seq"]) > seq for m in await messages(page))


async def last_seq(page: Page) -> int:
    return max((int(m["seq"]) for m in await messages(page)), default=0)


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


async def bounds(page: Page, selector: str) -> FloatRect:
    found = await page.locator(selector).bounding_box()
    assert found is not None, f"{selector} is not shown"
    return found


async def small_targets(page: Page) -> list[dict[str, Any]]:
    small: list[dict[str, Any]] = await page.evaluate(SMALL_TARGETS)
    return small


async def no_a_aizuchi(page: Page) -> None:
    """No sentence on the page says "a aizuchi" (the tier's name starts with a vowel: "an aizuchi")."""
    for text in await page.evaluate(WORDING):
        assert not re.search(r"\ba aizuchi", text, re.IGNORECASE), text


async def open_room(page: Page, url: str) -> None:
    await page.goto(url)
    await page.locator("#connection[data-state='live']").wait_for()
    await page.evaluate(WATCH)


async def contrast_failures(page: Page) -> list[dict[str, Any]]:
    result: dict[str, Any] = await page.evaluate(CONTRAST)
    assert result["checked"] > 20, result  # it did look at the page
    failures: list[dict[str, Any]] = result["failures"]
    return failures


# --- a person's first visit, on a desktop -----------------------------------------------------------------


async def first_visit(page: Page, room: RoomServer) -> None:
    """/ leads to the lobby, which the personas join; the page lists them, follows the stream, and the first
    Enter sends (the name field has a name in it)."""
    await page.goto(room.url + "/")
    assert page.url == room.url + "/room/lobby"
    await page.locator("#connection[data-state='live']").wait_for()
    assert room.opened == ["lobby"]
    assert sorted(await activities(page)) == ["juno", "rin", "theo"]
    await page.evaluate(WATCH)
    assert await page.input_value("#name") == "Guest"
    await say(page, "Hello!")
    assert (await messages(page))[-1]["name"] == "Guest"
    await page.fill("#name", "Yui")


async def chat(page: Page, room: RoomServer, lines: Iterator[str]) -> None:
    """Type; see a remark and an aizuchi; see the gauge fall and recover, the chart and the personas' activity."""

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
    assert {"thinking", "spoke"} <= await seen_activities(page)


async def refused(page: Page, field: str, value: str) -> tuple[str, list[str]]:
    """Type ``value`` into the settings field ``field`` and apply: the error shown, and the fields marked."""
    await page.fill(f"#settings input[name='{field}']", value)
    await page.click("#apply")
    await page.locator("#settings-error:not(:empty)").wait_for()
    marked = await page.eval_on_selector_all(
        "#settings input[aria-invalid='true']", "inputs => inputs.map((input) => input.name)"
    )
    return await page.text_content("#settings-error") or "", marked


async def tune(page: Page, room: RoomServer, lines: Iterator[str]) -> None:
    """A refused value is explained in the panel's words, on the field that was changed; a field put right is no
    longer marked; a new tier cost takes effect."""
    service = room.arbiter.service
    cost = page.locator("input[name='tiers.aizuchi.cost']")

    error, marked = await refused(page, "tiers.aizuchi.cost", "0")
    assert (error, marked) == ("Aizuchi cost must be at least 1.", ["tiers.aizuchi.cost"])
    assert (await service.settings("lobby")).tiers[Tier.AIZUCHI].cost == 5
    await cost.fill("5")  # put right: no longer marked, and the error goes with it
    assert await cost.get_attribute("aria-invalid") is None
    assert await page.text_content("#settings-error") == ""
    await page.click("#apply")
    await page.locator("#settings-note", has_text="Nothing changed.").wait_for()
    assert await page.locator("#settings input[aria-invalid]").count() == 0

    # The arbiter names the remark's cost (it must not be below the aizuchi's), but the one changed is marked.
    error, marked = await refused(page, "tiers.aizuchi.cost", "70")
    assert marked == ["tiers.aizuchi.cost"]
    assert error == "Aizuchi cost: remark must cost at least as much as aizuchi (70), not 60."
    await cost.fill("5")

    error, marked = await refused(page, "tiers.aizuchi.recovery_s", "5000")
    assert (error, marked) == ("Aizuchi recovery (s) must be at most 3600.", ["tiers.aizuchi.recovery_s"])
    await page.fill("input[name='tiers.aizuchi.recovery_s']", "1")

    await cost.fill("7")
    await cost.press("Enter")
    await page.locator("#settings-note", has_text="Saved").wait_for()
    assert await page.text_content("#settings-error") == ""
    assert (await service.settings("lobby")).tiers[Tier.AIZUCHI].cost == 7
    await page.locator("#tier-costs li[data-tier='aizuchi']", has_text="7").wait_for()

    async def nod_at_the_new_cost() -> bool:
        return ("aizuchi", "7") in await shown_tiers(page)

    await converse_until(page, lines, nod_at_the_new_cost, "nodded at the new cost")


async def pause_and_resume(page: Page, room: RoomServer) -> None:
    """Paused, the room says so and the personas show it; a question asked meanwhile is answered after the resume."""
    service = room.arbiter.service
    await page.click("#pause")  # a claim held now is refused when it speaks: nobody speaks after this
    await page.locator("#quiet", has_text="Paused: the personas stay quiet until you resume.").wait_for()
    assert (await service.settings("lobby")).paused
    await page.wait_for_function("() => document.getElementById('gauge').dataset.quiet === 'paused'")
    await all_personas(page, "paused")

    await say(page, "Is anyone still there? What are you all doing tonight?")
    asked = await last_seq(page)
    await room.settled("lobby")  # each persona looked, and was refused
    assert not await persona_spoke_after(page, asked)

    await page.click("#quiet-action")  # the banner's "Resume"
    await page.locator("#quiet").wait_for(state="hidden")
    assert not (await service.settings("lobby")).paused
    assert await page.text_content("#pause") == "Pause"
    await page.wait_for_function(
        "(seq) => [...document.querySelectorAll('#messages li')].some("
        "(li) => li.dataset.authorKind === 'persona' && Number(li.dataset.seq) > seq)",
        arg=asked,
    )


async def reload(page: Page, room: RoomServer) -> None:
    """The history is still there after a reload, and so is the person's name; nobody is shown as having just
    spoken (the replayed messages are history, not news)."""
    await room.settled("lobby")
    before = [(m["seq"], m["text"]) for m in await messages(page)]
    await page.reload()
    await page.locator("#connection[data-state='live']").wait_for()
    assert set((await activities(page)).values()) == {"waiting"}
    after = [(m["seq"], m["text"]) for m in await messages(page)]
    assert after[: len(before)] == before
    assert await page.input_value("#name") == "Yui"
    # A dropped stream replays too; it is no news either.
    await page.evaluate(WATCH)
    room.arbiter.hub.close_all()
    await page.locator("#connection[data-state='offline']").wait_for()
    await page.locator("#connection[data-state='live']").wait_for()
    await asyncio.sleep(0.3)  # a span in which nothing may happen: no activity but waiting is news
    assert await seen_activities(page) <= {"waiting", "unknown"}


async def test_a_person_chats_with_the_personas_and_tunes_the_room(browser: Browser) -> None:
    async with room_server(recovery_s=1.0) as room:
        page = await new_page(browser)
        problems = watch_problems(page)
        lines = iter(LINES)

        await first_visit(page, room)
        await chat(page, room, lines)
        await tune(page, room, lines)
        await pause_and_resume(page, room)
        await reload(page, room)

        await page.close()
        # Chromium logs every 4xx answer; the three refused settings are the only errors the page may have seen.
        refused = (
            "Failed to load resource: the server responded with a status of 422",
            f"{room.url}/room/api/lobby/settings",
        )
        assert [(text[: len(refused[0])], url) for text, url in problems] == [refused] * 3, problems


# --- any screen, either theme ----------------------------------------------------------------------------


async def check_a_phone(page: Page, panels_picture: Path) -> None:
    """The conversation fills the screen; the composer is at the bottom, wide, on two lines; the pool and the
    personas are at the top; the side panels are one tap away; nothing scrolls sideways."""
    assert await page.evaluate(OVERFLOW) == {"scroll": 0, "out": []}
    box = await page.locator("#text").bounding_box()
    assert box is not None and box["width"] >= 300, box
    composer = await page.locator("#composer").bounding_box()
    assert composer is not None and composer["y"] + composer["height"] <= PHONE["height"], composer
    label = await page.locator("label[for='name']").bounding_box()
    assert label is not None and label["height"] < 30, label  # one line, not six
    for strip in ("#strip-level", "#strip-personas li[data-persona='rin']"):
        assert await page.is_visible(strip), strip
    assert not await page.is_visible("#settings")
    assert await small_targets(page) == []  # 44 px to tap: the panels' toggle, the note's Hide, the fields, Send

    await page.click("#view-toggle")
    for panel in ("#gauge", "#pool-explained", "#personas", "#settings", "#apply"):
        assert await page.is_visible(panel), panel
    assert not await page.is_visible("#composer")
    assert await page.evaluate(OVERFLOW) == {"scroll": 0, "out": []}
    # The settings come before what grows (the notes), and every field, button and Forget is big enough to tap.
    assert (await bounds(page, "#settings-title"))["y"] < (await bounds(page, "#memory-title"))["y"]
    assert await page.locator("#memories button.forget").count() > 0
    assert await small_targets(page) == []
    await no_a_aizuchi(page)
    assert await contrast_failures(page) == []
    await page.screenshot(path=str(panels_picture))
    await page.click("#view-toggle")
    assert await page.is_visible("#composer")


async def check_a_desktop(page: Page) -> None:
    assert await page.evaluate(OVERFLOW) == {"scroll": 0, "out": []}
    for shown in ("#composer", "#gauge", "#personas", "#settings"):
        assert await page.is_visible(shown), shown
    assert not await page.is_visible("#strip")
    assert not await page.is_visible("#view-toggle")
    # The row of tiers says what the numbers are, and a line says what the pool is, in an owner's words.
    assert (await page.text_content(".costs-caption") or "").startswith("Cost of a turn")
    assert await page.get_attribute("#tier-costs li[data-tier='remark']", "title") == "a remark costs 60"
    assert await page.get_attribute("#tier-costs li[data-tier='aizuchi']", "title") == "an aizuchi costs 5"
    explained = " ".join((await page.text_content("#pool-explained") or "").split())
    assert explained == (
        "The personas' replies spend from this shared pool: a nod (aizuchi) little, a remark more, each refunded "
        "after its recovery."
    )
    assert "pool-explained" in (await page.get_attribute("#gauge", "aria-describedby") or "").split()
    await no_a_aizuchi(page)
    # The composer's labels on one line, and the fields under them, side by side.
    name_label, text_label = await bounds(page, "label[for='name']"), await bounds(page, "label[for='text']")
    assert abs(name_label["y"] - text_label["y"]) < 1 and abs(name_label["height"] - text_label["height"]) < 1
    assert abs((await bounds(page, "#name"))["y"] - (await bounds(page, "#text"))["y"]) < 1


async def test_the_room_on_a_phone_and_a_desktop_in_light_and_dark(browser: Browser) -> None:
    # With the note that the personas are offline stand-ins, as `make run` starts it. The desktop picture in the
    # light theme is the README's: for it, the default settings too. Otherwise the tiers recover in 1 s, not 5 s:
    # nothing checked here depends on how fast, and the personas' second and third answers need not wait for it.
    personas = load_personas(PERSONAS_DIR, list(ROOM_PERSONAS))
    scripted = ProviderProfile(name="scripted", provider="scripted")
    notice = offline_notice(Cast(personas, {persona.id: scripted for persona in personas}))
    readme = os.environ.get("AIZUCHI_README_SCREENSHOT")
    async with room_server(recovery_s=None if readme else 1.0, notice=notice) as room:
        page = await new_page(browser)
        await open_room(page, room.url + "/room/lobby")
        await page.fill("#name", "Yui")
        for line in LINES[:3]:
            await say(page, line)
            asked = await last_seq(page)
            await page.wait_for_function(
                "(seq) => [...document.querySelectorAll('#messages li')].some("
                "(li) => li.dataset.authorKind === 'persona' && Number(li.dataset.seq) > seq)",
                arg=asked,
            )
            if readme:
                await asyncio.sleep(1.5)  # a span for a nod or two more, for the README's picture: none is asserted
        await page.wait_for_function(CHART_DRAWN)

        # The page that was there for the conversation (its chart shows it) on a desktop in the light theme; a new
        # visit for each of the others.
        ARTIFACTS.mkdir(exist_ok=True)
        for screen, viewport, scheme in (
            ("desktop", DESKTOP, "light"),
            ("desktop", DESKTOP, "dark"),
            ("phone", PHONE, "light"),
            ("phone", PHONE, "dark"),
        ):
            if page.is_closed():
                page = await new_page(browser, viewport=viewport, scheme=scheme)
                await open_room(page, room.url + "/room/lobby")
            problems = watch_problems(page)
            # The theme follows the system's: a light page or a dark one.
            assert (await page.evaluate(BACKGROUND_LUMINANCE) < 0.2) is (scheme == "dark")
            assert await contrast_failures(page) == [], (screen, scheme)
            picture = ARTIFACTS / f"room-{screen}-{scheme}.png"
            await page.locator("#text").blur()
            await page.screenshot(path=str(picture))
            if (screen, scheme) == ("desktop", "light") and readme:
                shutil.copyfile(picture, readme)
            if screen == "phone":
                await check_a_phone(page, ARTIFACTS / f"room-phone-{scheme}-panels.png")
            else:
                await check_a_desktop(page)
            await page.context.close()
            assert problems == []

        # Tiers the pool cannot afford are greyed, still readable: with the runtimes stopped, a claim made for Juno
        # holds a long remark's cost.
        for runtime in room.runtimes:
            await runtime.close()
        await eventually(pool_full(room), what="every spend refunded (5 s at most)", within=10.0)
        await room.arbiter.service.record_message("lobby", author_id="yui", author_name="Yui", text="Juno?")
        held = await room.arbiter.service.claim("lobby", "juno", Tier.LONG)
        assert held.claim is not None
        for scheme in ("light", "dark"):
            page = await new_page(browser, scheme=scheme)
            await open_room(page, room.url + "/room/lobby")
            await page.locator("#tier-costs li.short[data-tier='long']").wait_for()
            assert (
                await page.text_content("#tier-costs li[data-tier='long']") == "long80 (more than the pool holds now)"
            )
            assert await contrast_failures(page) == [], scheme
            await page.context.close()
        await room.arbiter.service.release("lobby", "juno", held.claim.claim_id)


# --- what the personas are doing, and why they are quiet ------------------------------------------------------


async def test_persona_states_follow_their_claims(browser: Browser) -> None:
    # A provider slow enough to see a persona think, and to ask someone else while it does.
    async with room_server(latency_s=2.0) as room:
        page = await new_page(browser)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        await page.fill("#name", "Yui")
        await say(page, "Hi everyone! What should we cook tonight?")

        thinker = page.locator("#personas li[data-activity='thinking']").first
        await thinker.wait_for()
        persona = await thinker.get_attribute("data-persona")
        other = next(name for name in ("Rin", "Theo", "Juno") if name.lower() != persona)
        # Asked, someone else has the floor: the thinker's answer could no longer be posted, so it gives its claim
        # back without a word.
        await say(page, f"{other}, what do you think?")
        await page.locator(f"#personas li[data-persona='{persona}'][data-activity='passed']").wait_for()
        await page.locator("#personas li[data-activity='spoke']").first.wait_for()
        await page.close()
        assert problems == []


async def test_the_room_says_why_the_personas_are_quiet(browser: Browser) -> None:
    notice = "Rin, Theo and Juno are offline stand-ins: lines from the persona files, no language model."
    async with room_server(notice=notice) as room:
        service = room.arbiter.service
        page = await new_page(browser, clock=True)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        quiet = page.locator("#quiet")
        assert await quiet.is_hidden()

        # The offline stand-ins: said once, and hidden for the rest of the visit when the person has read it.
        assert await page.text_content("#notice-text") == notice
        await page.click("#notice-hide")
        await page.reload()
        await page.locator("#connection[data-state='live']").wait_for()
        assert await page.locator("#notice").is_hidden()

        # The idle cap: the bots have had their turns; a person speaking (or a higher cap) wakes them.
        await page.fill("#s-idle-cap", "1")
        await page.click("#apply")
        await page.fill("#name", "Yui")
        await say(page, "Hello there, what are you all up to?")
        await quiet.filter(has_text="say something to wake them").wait_for()
        assert "taken 1 turn without a person (the idle cap)" in (await quiet.text_content() or "")
        await all_personas(page, "quiet")  # once the one who spoke has been shown speaking for a moment
        assert await page.get_attribute("#gauge", "data-quiet") == "idle"
        await room.settled("lobby")
        await page.fill("#s-idle-cap", "12")
        await page.click("#apply")
        await quiet.wait_for(state="hidden")

        # Today's tokens are spent: quiet until the budget resets, which the room says when.
        await room.settled("lobby")
        await service.report_usage("lobby", "rin", 90, 10, cache_read_tokens=60, cache_write_tokens=20)
        await page.fill("#s-budget", "50")
        await page.click("#apply")
        await quiet.filter(has_text="Today's token budget is spent").wait_for()
        # Beside the persona, its tokens today, the provider's prompt cache's share apart.
        usage = page.locator('#personas li[data-persona="rin"] .usage')
        await usage.filter(has_text="90 in (cache 60 read, 20 written), 10 out today").wait_for()
        text = await quiet.text_content() or ""
        assert re.search(r"resets at \d{1,2}:\d{2}( [AP]M)? \(in (\d+ h )?\d+ min\)", text), text
        await all_personas(page, "quiet")
        await page.fill("#s-budget", "")  # no limit
        await page.click("#apply")
        await quiet.wait_for(state="hidden")
        assert (await service.settings("lobby")).daily_token_budget is None

        # Switched off, or every persona muted.
        await service.update_settings("lobby", {"enabled": False})
        await quiet.filter(has_text="The personas are switched off in this room.").wait_for()
        await service.update_settings("lobby", {"enabled": True})
        await quiet.wait_for(state="hidden")
        for persona in ("rin", "theo", "juno"):
            await service.set_persona("lobby", persona, muted=True)
        await quiet.filter(has_text="Every persona is muted or switched off in this room.").wait_for()
        await all_personas(page, "muted")
        await page.close()
        assert problems == []


async def test_the_room_names_a_persona_whose_key_was_refused(browser: Browser) -> None:
    # It cannot speak until it is restarted with a good key: the room says who, and what to fix.
    async with room_server() as room:
        service = room.arbiter.service
        page = await new_page(browser)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        banner = page.locator("#cannot-speak")
        assert await banner.is_hidden()
        reason = (
            "the API refused the key in ANTHROPIC_API_KEY (profile 'anthropic'): Anthropic API 401: invalid x-api-key;"
            " put a valid key in .env and start again"
        )
        await service.register_persona("rin", "Rin", cannot_speak=reason)
        await service.set_persona("lobby", "rin", muted=False)  # a change the page hears, and reads the state after
        await banner.filter(has_text=f"Rin cannot speak: {reason}.").wait_for()
        assert await banner.get_attribute("role") == "alert"
        await page.locator("#personas [data-persona='rin'][data-activity='stopped']").wait_for()
        await page.close()
        assert problems == []


# --- loading, outages, a dropped stream --------------------------------------------------------------------


async def test_before_the_data_arrives_the_page_says_it_is_loading(browser: Browser) -> None:
    async with room_server(personas=(), hands=("probe",)) as room:
        await room.arbiter.service.ensure_channel("garden")
        await room.arbiter.service.record_message("garden", author_id="ken", author_name="Ken", text="hello")
        page = await new_page(browser)
        held: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # The network holds the answer. (A lambda: playwright cannot wrap a builtin method.)
        await page.route("**/snapshot", lambda route: held.set_result(route))  # noqa: PLW0108
        await page.goto(room.url + "/room/garden")
        route = await held

        # A room with history: no "No messages yet", no full gauge.
        assert await page.is_visible("#loading")
        assert await page.locator("#empty").is_hidden()
        assert await page.text_content("#gauge-text") == "…"
        assert await page.get_attribute("#gauge", "aria-busy") == "true"
        assert await page.get_attribute("#gauge-fill", "style") is None  # empty, not full
        assert await page.text_content("#personas") == "Loading…"

        await route.continue_()
        await page.locator("#messages li", has_text="hello").wait_for()
        assert await page.locator("#loading").is_hidden()
        assert await page.locator("#empty").is_hidden()
        assert await page.text_content("#gauge-text") == "100 / 100"
        await page.close()


async def test_an_outage_is_shown_and_clears_when_the_arbiter_is_back(browser: Browser) -> None:
    async with (
        room_server(personas=(), hands=("probe",)) as room,
        tcp_proxy("127.0.0.1", room.server.port or 0) as proxy,
    ):
        service = room.arbiter.service
        page = await new_page(browser)
        problems = watch_problems(page)
        await open_room(page, proxy.url + "/room/garden")
        outage = page.locator("#outage")
        assert await outage.is_hidden()
        assert await activities(page) == {"probe": "waiting"}

        proxy.cut()
        await outage.filter(has_text="The arbiter cannot be reached: the room is not live.").wait_for()
        assert await page.get_attribute("#connection", "data-state") == "offline"
        assert await activities(page) == {"probe": "unknown"}
        assert await page.text_content("#gauge-note") == "last known: offline"

        # Sending and saving fail, and say why; what was typed stays.
        await page.fill("#name", "Yui")
        await page.fill("#text", "typed while the arbiter was away")
        await page.press("#text", "Enter")
        await page.locator("#say-error", has_text="The arbiter cannot be reached.").wait_for()
        await page.fill("#s-capacity", "90")
        await page.click("#apply")
        await page.locator("#settings-error", has_text="The arbiter cannot be reached.").wait_for()

        # It counts down to the next try, and tries again and again.
        await page.wait_for_function(
            """() => {
              const counts = window.seen.outage.map((text) => text.match(/Trying again in (\\d+) s/))
                .filter(Boolean).map((match) => Number(match[1]));
              return counts.some((count, i) => i > 0 && count < counts[i - 1]);
            }"""
        )
        said = await service.record_message("garden", author_id="ken", author_name="Ken", text="said meanwhile")

        proxy.restore()
        await page.click("#reconnect")  # or wait for the next try
        await page.locator("#connection[data-state='live']").wait_for()
        assert await outage.is_hidden()
        assert await page.text_content("#say-error") == ""
        assert await page.text_content("#settings-error") == ""
        await page.locator(f"#messages li[data-seq='{said.seq}']").wait_for()
        assert await activities(page) == {"probe": "waiting"}
        assert await page.input_value("#text") == "typed while the arbiter was away"
        await page.press("#text", "Enter")
        await page.locator("#messages li", has_text="typed while the arbiter was away").wait_for()
        await page.close()
        # What Chromium logs of the outage: failed loads and sockets, nothing else.
        assert all(re.search(r"ERR_|WebSocket", text) for text, _url in problems), problems


async def test_the_page_follows_changes_to_the_history_and_survives_a_dropped_stream(browser: Browser) -> None:
    async with room_server(personas=(), hands=("probe",)) as room:
        service = room.arbiter.service
        page = await new_page(browser)
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
        await page.locator("#connection[data-state='live']").wait_for()

        await service.clear_history("garden")
        await page.locator("#messages li").first.wait_for(state="detached")
        assert await page.is_visible("#empty")
        await page.close()
        assert problems == []


# --- colours --------------------------------------------------------------------------------------------------


def pool_full(room: RoomServer) -> Callable[[], Awaitable[bool]]:
    async def full() -> bool:
        status = await room.arbiter.service.status("lobby")
        return status.level == status.capacity

    return full


def _rgb(hex_color: str) -> str:
    red, green, blue = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


async def test_each_persona_keeps_its_colour_whatever_the_set(browser: Browser, sqlite_url: str) -> None:
    files = {persona.id: persona for persona in load_personas(PERSONAS_DIR, ["rin", "theo", "mio", "sora"])}

    async def speak(room: RoomServer, persona_ids: tuple[str, ...]) -> None:
        service = room.arbiter.service
        await service.ensure_channel("lobby")
        for persona_id in persona_ids:
            persona = files.get(persona_id)
            if persona is not None:
                await service.register_persona(persona_id, persona.display_name, color=persona.color)
            await service.record_message("lobby", author_id="ken", author_name="Ken", text=f"{persona_id}?")
            assert (await service.consume("lobby", persona_id, "Mm.", tier=Tier.AIZUCHI)).granted

    # One run with the English set, the next with others: one has no colour in its file.
    async with room_server(sqlite_url, personas=(), hands=("rin", "theo")) as room:
        await speak(room, ("rin", "theo"))
    async with room_server(sqlite_url, personas=(), hands=("mio", "sora", "nova")) as room:
        await speak(room, ("mio", "sora", "nova"))
        colours: list[dict[str, str]] = []
        for _visit in range(2):
            page = await new_page(browser)
            await open_room(page, room.url + "/room/lobby")
            shown = {m["author"]: m["color"] for m in await messages(page) if m["kind"] == "persona"}
            assert shown.keys() == {"rin", "theo", "mio", "sora", "nova"}
            expected = {pid: shown[pid] for pid in ("mio", "sora", "nova")}

            # The list is drawn again as the page's state comes in; Chromium sometimes reports a chip's computed
            # colour as "" just after: read until the list shows its colours.
            async def listed(page: Page = page, expected: dict[str, str] = expected) -> bool:
                chips = await page.eval_on_selector_all(
                    "#personas li",
                    "items => Object.fromEntries(items.map((item) => "
                    "[item.dataset.persona, getComputedStyle(item.querySelector('.who')).backgroundColor]))",
                )
                return bool(chips == expected)

            await eventually(listed, what=f"the persona list in the colours {expected}", every=0.1)
            colours.append(shown)
            await page.context.close()

    first, second = colours
    assert first == second  # nova's, made from its id, too
    assert {pid: first[pid] for pid in files} == {pid: _rgb(p.color or "") for pid, p in files.items()}
    assert len(set(first.values())) == 5, first


async def test_the_room_shows_what_each_persona_remembers_and_forgets_it_on_request(browser: Browser) -> None:
    async with room_server() as room:
        page = await new_page(browser)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        assert await page.text_content("#memories") == "No notes yet."
        assert not await page.is_visible("#forget-all")

        await say(page, "Rin, what should we cook tonight?")
        # Rin answers, and her notes (kept by the offline stand-in, by rule) reach the page with the memory event.
        rin = page.locator("#memories li[data-persona='rin']")
        await rin.wait_for()
        facts = await rin.locator(".facts li").all_text_contents()
        assert "Guest: asked: Rin, what should we cook tonight?" in facts
        assert "Open: Guest: Rin, what should we cook tonight?" in facts
        stored = {m.persona: m for m in (await room.arbiter.service.memories("lobby")).memories}
        assert f"up to message {stored['rin'].seq}" in (await rin.text_content() or "")

        await say(page, "Theo, and what would you bring?")
        await page.locator("#memories li[data-persona='theo']").wait_for()
        # Nobody is about to take notes again. The personas would talk among themselves up to the idle cap (12 turns,
        # some 10 s): a cap of 1 stops them now, as the one they would reach stops them later.
        await room.arbiter.service.update_settings("lobby", {"idle_cap": 1})
        await room.settled("lobby")

        # One "Forget" per persona, each named for whose notes it forgets.
        forgets = await page.locator("#memories").aria_snapshot()
        names = re.findall(r'button "([^"]*)"', forgets)
        noted = await page.eval_on_selector_all(
            "#memories li[data-persona] .head .who", "chips => chips.map((c) => c.textContent)"
        )
        assert names == [f"Forget {name}'s notes" for name in noted], forgets
        assert {"Forget Rin's notes", "Forget Theo's notes"} <= set(names)
        await page.get_by_role("button", name="Forget Rin's notes", exact=True).click()
        await rin.wait_for(state="detached")
        assert "rin" not in {m.persona for m in (await room.arbiter.service.memories("lobby")).memories}
        assert await page.is_visible("#memories li[data-persona='theo']")
        await page.click("#forget-all")
        await page.locator("#memories .placeholder").wait_for()
        assert not await page.is_visible("#forget-all")
        await page.close()
        assert problems == []


# --- what a newcomer meets first: the settings in reach, errors that stay put, words that fit ------------------

ROOM_HANDS = {"rin": "Rin", "theo": "Theo", "juno": "Juno"}


async def take_notes(room: RoomServer, persona_id: str, notes: DialogueState) -> None:
    """Store ``notes`` as what ``persona_id`` remembers of the lobby, as a persona does: with a pass."""
    service = room.arbiter.service
    said = await service.record_message("lobby", author_id="ken", author_name="Ken", text="What do you all think?")
    claimed = await service.claim("lobby", persona_id, Tier.AIZUCHI)
    assert claimed.claim is not None, claimed
    await service.release("lobby", persona_id, claimed.claim.claim_id, memory=MemoryUpdate(seq=said.seq, state=notes))


def long_notes(persona: str) -> DialogueState:
    """As much as a persona may note (nearly the cap): a long list in the room."""
    return DialogueState(
        topic=f"{persona}'s view of the week's plans",
        open_questions=[f"Who brings the {thing}?" for thing in ("bread", "cheese", "plates", "music", "chairs")],
        agreed=["Saturday at noon", "the park by the river"],
        speakers=[
            SpeakerNote(name=f"Guest {n}", note=f"likes {n} kinds of tea, asked about the park") for n in range(9)
        ],
    )


async def hands_in_the_lobby(room: RoomServer) -> None:
    await room.arbiter.service.ensure_channel("lobby")
    for persona_id, name in ROOM_HANDS.items():
        await room.arbiter.service.register_persona(persona_id, name)


async def test_the_settings_stay_in_reach_however_long_the_notes(browser: Browser) -> None:
    # A laptop's window less its browser's bars: 663 px, with every persona's notes near their cap.
    short = {"width": 1366, "height": 663}
    async with room_server(personas=(), hands=tuple(ROOM_HANDS)) as room:
        await hands_in_the_lobby(room)
        for persona_id in ROOM_HANDS:
            await take_notes(room, persona_id, long_notes(persona_id))
        page = await new_page(browser, viewport=short)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        assert await page.locator("#memories li[data-persona]").count() == 3
        side = await page.evaluate("() => [document.getElementById('side').scrollHeight, innerHeight]")
        assert side[0] > 2 * side[1], side  # the notes are long: the side panels scroll

        # The settings' heading and their first fields are in the window as the page opens; the notes are below.
        assert await page.evaluate("() => document.getElementById('side').scrollTop") == 0
        settings = await bounds(page, "#settings-title")
        capacity = await bounds(page, "#s-capacity")
        assert capacity["y"] + capacity["height"] <= short["height"], (settings, capacity)
        assert (await bounds(page, "#memory-title"))["y"] > settings["y"]

        # The notes fold, with a count of whose notes they hold, and stay folded on the next visit.
        toggle = page.locator("#memory-toggle")
        assert await toggle.get_attribute("aria-expanded") == "true"
        assert " ".join((await toggle.text_content() or "").split()) == "Memory (3)"
        await toggle.click()
        assert await toggle.get_attribute("aria-expanded") == "false"
        await page.locator("#memories").wait_for(state="hidden")
        await page.reload()
        await page.locator("#connection[data-state='live']").wait_for()
        assert await page.locator("#memories").is_hidden()
        # Folded, the notes take a line: their heading, which says whose notes there are.
        assert (await bounds(page, ".memory-panel"))["height"] < 80
        await toggle.click()
        await page.locator("#memories li[data-persona='rin']").wait_for()
        await page.close()
        assert problems == []


async def test_a_refused_setting_stays_marked_and_holds_no_other_back(browser: Browser) -> None:
    async with room_server(personas=(), hands=("probe",)) as room:
        service = room.arbiter.service
        page = await new_page(browser)
        problems = watch_problems(page)
        await open_room(page, room.url + "/room/lobby")
        cost = page.locator("input[name='tiers.aizuchi.cost']")

        async def marked() -> dict[str, str]:
            """Each field marked, with the words of the message that describes it."""
            shown: dict[str, str] = await page.eval_on_selector_all(
                "#settings input[aria-invalid='true']",
                """inputs => Object.fromEntries(inputs.map((input) => [input.name,
                  document.getElementById(input.getAttribute("aria-describedby")).textContent]))""",
            )
            return shown

        refused = {"tiers.aizuchi.cost": "Aizuchi cost must be at least 1."}
        await cost.fill("0")
        await page.click("#apply")
        await page.locator("#settings-error:not(:empty)").wait_for()
        assert await marked() == refused
        assert await page.text_content("#settings-error") == "Aizuchi cost must be at least 1."
        assert await page.is_visible("#settings-error-tiers-aizuchi-cost")

        # A pause and a resume leave it marked: the value is still the one refused.
        await page.click("#pause")
        await page.locator("#settings-note", has_text="Paused.").wait_for()
        assert await marked() == refused
        await page.click("#pause")
        await page.locator("#settings-note", has_text="Resumed.").wait_for()
        assert await marked() == refused

        # Another field changed meanwhile is saved; the refused one stays as typed, and marked.
        await page.fill("#s-capacity", "90")
        assert await marked() == refused  # typing elsewhere does not put it right either
        await page.click("#apply")
        await page.locator("#settings-note", has_text="Saved the other changes; the marked ones were not.").wait_for()
        settings = await service.settings("lobby")
        assert (settings.capacity, settings.tiers[Tier.AIZUCHI].cost) == (90, 5)
        assert await page.input_value("#s-capacity") == "90"
        assert await cost.input_value() == "0"
        assert await marked() == refused

        # A value refused because of another field's goes through once that field is changed too.
        await cost.fill("70")
        assert await marked() == {}  # a new value: not known to be wrong
        await page.click("#apply")
        await page.locator("#settings-error:not(:empty)").wait_for()
        assert await marked() == {
            "tiers.aizuchi.cost": "Aizuchi cost: remark must cost at least as much as aizuchi (70), not 60."
        }
        await page.fill("input[name='tiers.remark.cost']", "75")
        await page.click("#apply")
        await page.locator("#settings-note", has_text="Saved.").wait_for()
        assert await marked() == {}
        assert await page.text_content("#settings-error") == ""
        tiers = (await service.settings("lobby")).tiers
        assert (tiers[Tier.AIZUCHI].cost, tiers[Tier.REMARK].cost) == (70, 75)
        await page.close()
        # Chromium logs each refusal: the first Apply, the one that saved the capacity (refused first with the
        # cost in it), the 70, and the 70 and 75 together was taken at once.
        assert [text for text, _url in problems] == [
            "Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"
        ] * 3, problems


async def test_cjk_text_is_never_in_italics(browser: Browser) -> None:
    async with room_server(personas=(), hands=("mio", "rin")) as room:
        service = room.arbiter.service
        await service.ensure_channel("lobby")
        await service.register_persona("mio", "みお")
        await service.register_persona("rin", "Rin")
        nods = {"mio": "なるほど、OKです。", "rin": "Right, I see: なるほど."}
        for persona_id, nod in (*nods.items(), ("rin", "Mm, right.")):
            await service.record_message("lobby", author_id="ken", author_name="Ken", text="Dinner at eight?")
            assert (await service.consume("lobby", persona_id, nod, tier=Tier.AIZUCHI)).granted
        page = await new_page(browser)
        await open_room(page, room.url + "/room/lobby")
        styles = await page.eval_on_selector_all(
            "#messages li[data-tier='aizuchi'] .text",
            """texts => texts.map((text) => {
              // Each piece of text in the nod, and how it is set.
              const walker = document.createTreeWalker(text, NodeFilter.SHOW_TEXT);
              const pieces = [];
              while (walker.nextNode()) {
                const node = walker.currentNode;
                pieces.push([node.textContent, getComputedStyle(node.parentElement).fontStyle]);
              }
              return { text: text.textContent, lang: text.lang, pieces };
            })""",
        )
        assert styles == [
            # Japanese: all of it upright (the Latin "OK" too), marked as Japanese.
            {"text": nods["mio"], "lang": "ja", "pieces": [["なるほど、OKです。", "normal"]]},
            # English with a Japanese word: the English in italics, the Japanese upright.
            {
                "text": nods["rin"],
                "lang": "",
                "pieces": [["Right, I see: ", "italic"], ["なるほど", "normal"], [".", "italic"]],
            },
            {"text": "Mm, right.", "lang": "", "pieces": [["Mm, right.", "italic"]]},
        ]
        await page.close()


async def test_on_a_phone_everything_to_tap_is_big_enough(browser: Browser) -> None:
    # The banners with buttons (paused, the note about stand-ins) and the notes with their Forget buttons, shown.
    notice = "Rin, Theo and Juno are offline stand-ins: lines from the persona files, no language model."
    async with room_server(personas=(), hands=tuple(ROOM_HANDS), notice=notice) as room:
        await hands_in_the_lobby(room)
        for persona_id in ROOM_HANDS:
            await take_notes(room, persona_id, DialogueState(topic="dinner"))
        await room.arbiter.service.update_settings("lobby", {"paused": True})
        for scheme in ("light", "dark"):
            page = await new_page(browser, viewport=PHONE, scheme=scheme)
            problems = watch_problems(page)
            await open_room(page, room.url + "/room/lobby")
            for shown in ("#quiet-action", "#notice-hide", "#view-toggle", "#name", "#text", "#attach", "#send"):
                assert await page.is_visible(shown), shown
            assert await small_targets(page) == [], scheme
            await page.click("#view-toggle")
            for shown in ("#switch-room", "#apply", "#pause", "#memory-toggle", "#forget-all"):
                assert await page.is_visible(shown), shown
            assert await page.locator("#memories button.forget").count() == 3
            assert await small_targets(page) == [], scheme
            assert await contrast_failures(page) == [], scheme
            await page.context.close()
            assert problems == []


PASTE = """([name, type, data]) => {
  // What the browser does when a person pastes a screenshot: a paste event whose clipboard holds the file.
  const bytes = Uint8Array.from(atob(data), (char) => char.charCodeAt(0));
  const clipboard = new DataTransfer();
  clipboard.items.add(new File([bytes], name, { type }));
  const text = document.getElementById("text");
  text.focus();
  text.dispatchEvent(new ClipboardEvent("paste", { clipboardData: clipboard, bubbles: true, cancelable: true }));
}"""

SHOWN_PICTURES = """() => [...document.querySelectorAll("#messages li .pictures img")].map((img) => ({
  // Drawn: the browser decoded the bytes the arbiter served.
  src: img.getAttribute("src"), width: img.naturalWidth, height: img.naturalHeight, complete: img.complete,
}))"""


async def test_a_person_shows_the_personas_a_picture_and_they_answer_about_it(browser: Browser) -> None:
    photo_lines = {line.replace("{name}", "Yui") for line in GENERIC["en"].photos}
    async with room_server(personas=("rin",)) as room:
        page = await new_page(browser)
        await open_room(page, room.url + "/room/lobby")
        await page.fill("#name", "Yui")

        # Picked, but not a picture at all (a file named .png): the arbiter says so, nothing is posted, and the
        # file stays there to be taken back.
        await page.set_input_files(
            "#picture", files=[{"name": "notes.png", "mimeType": "image/png", "buffer": b"shopping: eggs, milk"}]
        )
        await page.locator("#attachments li").wait_for()
        await page.fill("#text", "Rin, look!")
        await page.press("#text", "Enter")
        await page.locator("#say-error", has_text="image 1 (notes.png) is not an image").wait_for()
        assert await messages(page) == []
        await page.click("#attachments button[aria-label='Take back notes.png']")
        assert await page.locator("#attachments").is_hidden()

        # Pasted into the message box: previewed, then sent with the words, shown in the conversation.
        picture = png(120, 80)
        await page.evaluate(PASTE, ["image.png", "image/png", base64.b64encode(picture).decode()])
        await page.locator("#attachments li img").wait_for()
        await page.press("#text", "Enter")
        await page.locator("#messages li[data-author-kind='human'] .pictures img").wait_for()
        await page.wait_for_function("() => document.getElementById('text').value === ''")
        assert await page.locator("#attachments").is_hidden() and await page.inner_text("#say-error") == ""
        await page.wait_for_function(
            "() => [...document.querySelectorAll('#messages .pictures img')].every((img) => img.complete)"
        )
        [shown] = await page.evaluate(SHOWN_PICTURES)
        name = f"{hashlib.sha256(picture).hexdigest()}.png"
        assert shown == {"src": f"/room/images/{name}", "width": 120, "height": 80, "complete": True}
        [said] = [m for m in await messages(page) if m["kind"] == "human"]
        assert said["text"] == "Rin, look! [attached: image.png]"

        # Rin's model (the offline stand-in) was shown it, fetched from the arbiter and given inline.
        await page.wait_for_function(
            "(lines) => [...document.querySelectorAll(\"#messages li[data-author-kind='persona'] .text\")]"
            ".some((text) => lines.includes(text.textContent))",
            arg=sorted(photo_lines),
            timeout=20_000,
        )
        [image] = (await room.arbiter.service.history("lobby")).messages[0].images
        assert image.local and image.width == 120
        await page.screenshot(path=str(ARTIFACTS / "room-picture.png"))
        await page.close()

        # On a phone: a picture waiting to be sent, and its button to take it back, big enough to tap.
        phone = await new_page(browser, viewport=PHONE)
        await open_room(phone, room.url + "/room/lobby")
        await phone.evaluate(PASTE, ["image.png", "image/png", base64.b64encode(picture).decode()])
        await phone.locator("#attachments li img").wait_for()
        assert await small_targets(phone) == []
        await phone.screenshot(path=str(ARTIFACTS / "room-picture-phone.png"))
        await phone.context.close()
