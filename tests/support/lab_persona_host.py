"""A persona host of the lab (tests/support/netns.py): one process, run inside a host's namespace, that speaks
in its channels as its personas through the real client a persona process uses (``bots.arbiter_client``, with
channel affinity over every arbiter process), follows the channels on one multiplexed stream
(``bots.follower.StreamFollower``, which reconnects and resumes), and writes down everything it was told, one JSON
line each, for the test to hold to the invariants:

- ``ack``: a speech the arbiter granted (channel, seq, text, the level it left, how long the answer took);
- ``refused``: a verdict that refused (its reason, how long it took);
- ``unavailable`` / ``rejected``: an error instead of a verdict (its words, and how long it took to come);
- ``frame``: a message or level event the stream delivered (channel, seq or level).

It speaks a new text each time and never retries one: a request that failed may or may not have been committed,
which is what "acknowledged" separates. It falls quiet at SIGUSR1, writing ``quiet`` once its last call has its
answer (then the test checks the streams catch up), and runs until SIGTERM.

    python -m tests.support.lab_persona_host --urls http://a:8340,http://b:8340 --persona hana --token ... \
        --channels c0,c1 --journal hana.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import IO, Any

import aiohttp

from arbiter import contract as wire
from bots.arbiter_client import ArbiterClient
from bots.errors import ArbiterRejected, ArbiterUnavailable
from bots.follower import StreamFollower


class Journal:
    def __init__(self, out: IO[str]) -> None:
        self._out = out

    def write(self, kind: str, **fields: Any) -> None:
        self._out.write(json.dumps({"kind": kind, "at": time.time(), **fields}) + "\n")
        self._out.flush()


class Listener:
    """One channel's frames, written down; resumes after the last message seq it saw."""

    def __init__(self, channel: str, journal: Journal) -> None:
        self.channel = channel
        self._journal = journal
        self._last = 0

    def subscription(self) -> wire.Subscribe:
        return wire.Subscribe(channel=self.channel, after=self._last)

    def on_frame(self, frame: wire.ArbiterEvent) -> None:
        if isinstance(frame, wire.MessageEvent):
            if frame.message.seq <= self._last:
                return  # seen already: the follower replays a channel from where its furthest-behind listener is
            self._last = frame.message.seq
            self._journal.write("frame", channel=self.channel, seq=frame.message.seq, text=frame.message.text)
        elif isinstance(frame, wire.LevelEvent):
            self._journal.write("level", channel=self.channel, level=frame.level, capacity=frame.capacity)

    def on_refused(self, detail: str) -> None:
        self._journal.write("stream_refused", channel=self.channel, detail=detail)


async def speak(
    client: ArbiterClient, persona: str, channels: list[str], journal: Journal, *, pace: float, quiet: asyncio.Event
) -> None:
    """Speak in every channel at once, each at its own pace, as a persona process's workers do: a call that hangs
    (its arbiter cut off) holds up its channel only. Once told to be quiet, says so when its last call is answered."""
    async with asyncio.TaskGroup() as group:
        for channel in channels:
            group.create_task(_speak_in(client, persona, channel, journal, pace=pace, quiet=quiet))
    journal.write("quiet")


async def _speak_in(
    client: ArbiterClient, persona: str, channel: str, journal: Journal, *, pace: float, quiet: asyncio.Event
) -> None:
    count = 0
    while not quiet.is_set():
        count += 1
        text = f"{persona} in {channel}, line {count}"
        started = time.monotonic()
        try:
            result = await client.consume(channel, wire.ConsumeRequest(text=text, tier="remark"))
        except ArbiterUnavailable as error:
            journal.write("unavailable", channel=channel, error=str(error), took=time.monotonic() - started)
        except ArbiterRejected as error:
            journal.write("rejected", channel=channel, error=str(error), took=time.monotonic() - started)
        else:
            took = time.monotonic() - started
            if result.granted and result.message is not None:
                seq, level = result.message.seq, result.level
                journal.write("ack", channel=channel, seq=seq, text=text, level=level, took=took)
            else:
                journal.write("refused", channel=channel, reason=result.reason, level=result.level, took=took)
        await asyncio.sleep(pace)  # a persona's pace, not a wait for anything


async def main(args: argparse.Namespace, journal: Journal) -> None:
    stop, quiet = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, quiet.set)
    channels = args.channels.split(",")
    async with aiohttp.ClientSession() as session:
        client = ArbiterClient(session, args.urls, args.token, timeout_s=args.timeout, own_process=args.own)
        follower = StreamFollower(client, name=args.persona, reconnect_s=0.2)
        for channel in channels:
            follower.follow(channel, args.persona, Listener(channel, journal))
        journal.write("started", persona=args.persona)
        speaking = asyncio.create_task(speak(client, args.persona, channels, journal, pace=args.pace, quiet=quiet))
        await stop.wait()
        speaking.cancel()
        await asyncio.gather(speaking, return_exceptions=True)
        await follower.close()


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", required=True)
    parser.add_argument("--persona", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--channels", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--own", type=int, default=0, help="the arbiter process its stream goes to")
    parser.add_argument("--pace", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=10.0)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _parse()
    with open(arguments.journal, "a") as out:
        asyncio.run(main(arguments, Journal(out)))
