"""A small network of hosts on this one machine: each host a Linux network namespace, all on one bridge, the links
between them cut or made lossy while processes run on them.

    with Lab.open(["pg", "arbiter1", "persona1"]) as lab:
        lab.spawn("arbiter1", [...])          # runs inside the host's namespace
        lab.cut("arbiter1", "pg")             # every packet between the two dropped, silently, both ways
        lab.heal("arbiter1", "pg")
        lab.lossy("persona1", 10)             # 10 % of its packets dropped, both ways
        lab.delay("persona1", "arbiter1", 60) # 60 ms more each way between the two (lab_delayer.py)

The bridge lives in a namespace of its own; the test's own namespace (the root one) joins it too, as the host
``CONTROL``, so the test can reach every host (to set a channel up, to read the database) over a link no cut
touches. Addresses are in 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking networks: neither private
nor public, and here never routed off the bridge.

A cut drops packets with nftables in both hosts' namespaces (a cable pulled: no reset, no error, the peer just
stops answering), which is the failure a process can least tell from a slow peer. Loss is made with nftables'
random numbers, not ``tc netem``: the kernels these tests run on are built without netem (CONFIG_NET_SCH_NETEM is
unset; ``tc qdisc add ... netem`` answers "Specified qdisc kind is unknown").

Latency is made without netem too: ``lab.delay("persona1", "arbiter1", 60)`` has an iptables NFQUEUE rule in each
host hand the packets arriving from the other to a small process (tests/support/lab_delayer.py, NetfilterQueue on
libnetfilter_queue) that gives each its verdict 60 ms later, so a round trip between the two takes 120 ms longer;
it can add jitter (order kept) and random loss. iptables-nft, not nft: its NFQUEUE target goes through the
kernel's xtables compatibility (CONFIG_NFT_COMPAT, CONFIG_NETFILTER_XT_TARGET_NFQUEUE), where nft's own ``queue``
needs CONFIG_NFT_QUEUE, which these kernels lack.

Everything the lab made is removed when it closes, also when the test failed: its processes killed, its
namespaces deleted (which deletes their veths and the bridge); a lab left behind by a killed test run is removed
by the next one (its namespaces are named for the pid that made them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ("CONTROL", "Lab", "delay_unavailable", "lab_unavailable", "require_delay", "require_lab")

CONTROL = "control"
_PREFIX = "aizuchi-lab"
_TABLE = "aizuchi_lab"
_ROOT = str(Path(__file__).resolve().parents[2])


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


def _probe() -> str | None:
    """Why no lab can be made here, or None: root, iproute2 and nftables, and the kernel letting us make a
    namespace with a veth in it and an nftables table."""
    if os.geteuid() != 0:
        return "network namespaces need root (the tests run as a user)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2 and nftables: apt-get install iproute2 nftables)"
    return _fails_in_a_namespace(
        lambda name: [
            ("ip", "-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1"),
            ("ip", "netns", "exec", name, "nft", "add", "table", "inet", _TABLE),
        ]
    )


def _fails_in_a_namespace(commands: Callable[[str], list[tuple[str, ...]]]) -> str | None:
    """Why ``commands`` (given the name of a namespace made for them, and deleted after) cannot run, or None."""
    name = f"{_PREFIX}-probe-{uuid.uuid4().hex[:8]}"
    try:
        made = _run("ip", "netns", "add", name, check=False)
        if made.returncode != 0:
            return f"cannot make a network namespace: {made.stderr.strip()}"
        for argv in commands(name):
            done = _run(*argv, check=False)
            if done.returncode != 0:
                return f"{' '.join(argv[:8])}... failed: {done.stderr.strip()[-300:]}"
    finally:
        _run("ip", "netns", "delete", name, check=False)
    return None


_PROBED: list[str | None] = []


def lab_unavailable() -> str | None:
    if not _PROBED:
        _PROBED.append(_probe())
    return _PROBED[0]


def require_lab() -> None:
    """Skip the test with the reason when this machine cannot make a lab; under AIZUCHI_REQUIRE_SERVICES=1 (CI)
    fail instead, as the PostgreSQL tests do (tests/support/postgres.py)."""
    reason = lab_unavailable()
    if reason is None:
        return
    if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
        pytest.fail(f"network namespaces are required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"network namespaces not available: {reason}")


def _probe_delay() -> str | None:
    """Why no link can be delayed here, or None: iptables-nft, the NetfilterQueue package, and the kernel taking an
    NFQUEUE rule and binding a queue in a namespace."""
    if shutil.which("iptables-nft") is None:
        return "iptables-nft is not installed (apt-get install iptables)"
    if importlib.util.find_spec("netfilterqueue") is None:
        return "the NetfilterQueue package is not installed (make test installs it: libnetfilter-queue-dev, gcc)"
    bind = "from netfilterqueue import NetfilterQueue as Q; q = Q(); q.bind(1, print); q.unbind()"
    return _fails_in_a_namespace(
        lambda name: [
            (
                "ip",
                "netns",
                "exec",
                name,
                "iptables-nft",
                "-A",
                "INPUT",
                "-j",
                "NFQUEUE",
                "--queue-num",
                "1",
                "--queue-bypass",
            ),
            ("ip", "netns", "exec", name, sys.executable, "-c", bind),
        ]
    )


_PROBED_DELAY: list[str | None] = []


def delay_unavailable() -> str | None:
    if not _PROBED_DELAY:
        _PROBED_DELAY.append(lab_unavailable() or _probe_delay())
    return _PROBED_DELAY[0]


def require_delay() -> None:
    """``require_lab`` for the links' latency (``Lab.delay``)."""
    reason = delay_unavailable()
    if reason is None:
        return
    if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
        pytest.fail(f"delayed links are required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"delayed links not available: {reason}")


def _remove_abandoned() -> None:
    """Namespaces of labs whose test run was killed before it could clean up (its pid is gone)."""
    listing = _run("ip", "netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if not name.startswith(_PREFIX + "-") or len(parts) < 4 or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _run("ip", "netns", "delete", name, check=False)
        except PermissionError:
            pass


@dataclass
class Host:
    name: str
    namespace: str
    address: str


@dataclass
class Lab:
    """Use :meth:`open`."""

    tag: str
    subnet: ipaddress.IPv4Network
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)
    _switch: str = ""
    _root_link: str = ""
    _cuts: set[tuple[str, str]] = field(default_factory=set)
    _delayers: dict[tuple[str, str], subprocess.Popen[str]] = field(default_factory=dict)

    @classmethod
    @contextlib.contextmanager
    def open(cls, names: Sequence[str]) -> Iterator[Lab]:
        require_lab()
        _remove_abandoned()
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # One /24 of 198.18.0.0/15 per lab, so two labs at once (two test workers) do not share routes in the
        # root namespace.
        index = int(uuid.uuid4().hex[:4], 16) % 512
        subnet = ipaddress.IPv4Network(f"198.{18 + index // 256}.{index % 256}.0/24")
        lab = cls(tag, subnet)
        try:
            lab._build(names)
            yield lab
        finally:
            lab.close()

    def _namespace(self, name: str) -> str:
        return f"{_PREFIX}-{self.tag}-{name}"

    def _build(self, names: Sequence[str]) -> None:
        addresses = list(self.subnet.hosts())
        self._switch = self._namespace("switch")
        _run("ip", "netns", "add", self._switch)
        sw = ("ip", "-n", self._switch)
        _run(*sw, "link", "add", "br0", "type", "bridge")
        _run(*sw, "link", "set", "br0", "up")
        # The test's own namespace on the bridge: its side named for the lab (interface names are per namespace,
        # and the root one is shared with everything else on the machine; at most 15 characters).
        self._root_link = f"al{uuid.uuid4().hex[:10]}"
        _run("ip", "link", "add", self._root_link, "type", "veth", "peer", "name", "ctl", "netns", self._switch)
        _run("ip", "addr", "add", f"{addresses[0]}/{self.subnet.prefixlen}", "dev", self._root_link)
        _run("ip", "link", "set", self._root_link, "up")
        _run(*sw, "link", "set", "ctl", "master", "br0")
        _run(*sw, "link", "set", "ctl", "up")
        self.hosts[CONTROL] = Host(CONTROL, "", str(addresses[0]))
        for number, name in enumerate(names, start=1):
            namespace = self._namespace(name)
            _run("ip", "netns", "add", namespace)
            port = f"h{number}"
            _run(*sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _run(*sw, "link", "set", port, "master", "br0")
            _run(*sw, "link", "set", port, "up")
            address = str(addresses[number])
            host = ("ip", "-n", namespace)
            _run(*host, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
            _run(*host, "link", "set", "eth0", "up")
            _run(*host, "link", "set", "lo", "up")
            self._nft(namespace, _RULES)
            self.hosts[name] = Host(name, namespace, address)

    def _nft(self, namespace: str, script: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", namespace, "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )

    def address(self, name: str) -> str:
        return self.hosts[name].address

    # --- processes ------------------------------------------------------------------------------------------

    def spawn(
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        user: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """``argv`` on ``host`` (as ``user``, if given), its output in ``log``; killed with its process group when
        the lab closes."""
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*self._prefix(host, user), *argv],
                env=dict(env),
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def run(self, host: str, argv: Sequence[str], *, user: str | None = None) -> str:
        return _run(*self._prefix(host, user), *argv).stdout

    def _prefix(self, host: str, user: str | None) -> list[str]:
        """``ip netns exec`` execs the command in the namespace, and ``setpriv`` as ``user`` (not ``runuser``, which
        forks and waits: killing it would leave the command running), so a process's pid is its command's own."""
        prefix = ["ip", "netns", "exec", self.hosts[host].namespace]
        if user is not None:
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        return prefix

    # --- the links --------------------------------------------------------------------------------------------

    def cut(self, a: str, b: str) -> None:
        """Every packet between ``a`` and ``b`` dropped from now on, both ways, without a word to either."""
        for here, there in ((a, b), (b, a)):
            if here != CONTROL:
                self._element("add", here, "cut", self.address(there))
        self._cuts.add((a, b))

    def heal(self, a: str, b: str) -> None:
        for here, there in ((a, b), (b, a)):
            if here != CONTROL:
                self._element("delete", here, "cut", self.address(there))
        self._cuts.discard((a, b))

    def cut_port(self, host: str, port: int) -> None:
        """Every packet of ``host``'s connections on its local TCP ``port`` dropped: one connection among the
        others to the same peer (say, a process's LISTEN connection to PostgreSQL, by its client port)."""
        self._element("add", host, "cut_ports", str(port))

    def heal_port(self, host: str, port: int) -> None:
        self._element("delete", host, "cut_ports", str(port))

    def lossy(self, host: str, percent: int) -> None:
        """``percent`` of ``host``'s packets to and from the other hosts dropped at random, both ways (0 stops
        it)."""
        namespace = self.hosts[host].namespace
        script = f"flush chain inet {_TABLE} loss\n"
        if percent:
            # Not on the host's own loopback, nor the test's control link: only the links between hosts.
            control = self.address(CONTROL)
            for rule in ('meta iifname "lo" return', 'meta oifname "lo" return', f"ip saddr {control} return"):
                script += f"add rule inet {_TABLE} loss {rule}\n"
            script += f"add rule inet {_TABLE} loss ip daddr {control} return\n"
            script += f"add rule inet {_TABLE} loss numgen random mod 100 < {int(percent)} drop\n"
        self._nft(namespace, script)

    def delay(self, a: str, b: str, ms: float, *, jitter_ms: float = 0, loss_percent: float = 0, seed: int = 0) -> None:
        """Every packet between ``a`` and ``b`` arrives ``ms`` later, each way (a round trip between them takes
        ``2 * ms`` longer), plus a random part of up to ``jitter_ms`` that never reorders them; ``loss_percent`` of
        them dropped at random besides. Held on arrival, in each host, by a delayer bound to a queue numbered for
        the peer (tests/support/lab_delayer.py). Replaces a delay already on the link."""
        require_delay()
        if CONTROL in (a, b):
            raise ValueError("the control link is never delayed")
        self.undelay(a, b)
        for here, there in ((a, b), (b, a)):
            argv = [sys.executable, "-m", "tests.support.lab_delayer", "--queue", str(self._queue(there))]
            argv += ["--delay-ms", str(ms), "--jitter-ms", str(jitter_ms), "--loss", str(loss_percent)]
            argv += ["--seed", str(seed + self._queue(here))]
            delayer = subprocess.Popen(
                [*self._prefix(here, None), *argv],
                env={**os.environ, "PYTHONPATH": _ROOT},
                cwd=_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self.processes.append(delayer)
            self._delayers[(here, there)] = delayer
            # Bound before the rule is there, so that every packet the rule takes is delayed: with --queue-bypass
            # (a delayer gone leaves the link up, not cut), one handed to a queue nobody reads passes at once.
            assert delayer.stdout is not None
            ready, _, _ = select.select([delayer.stdout], [], [], 30)
            line = delayer.stdout.readline() if ready else ""
            if line.strip() != "bound":
                raise AssertionError(f"the delayer on {here} did not start: {line}{delayer.stdout.read()[-2000:]}")
            self.run(here, ["iptables-nft", "-I", "INPUT", *self._queue_rule(there)])

    def undelay(self, a: str, b: str) -> dict[str, dict[str, Any]]:
        """The delay between ``a`` and ``b`` gone (the packets held let go at once); what each side's delayer did,
        by host: ``{"passed": n, "dropped": m, "held_max": k}``."""
        done: dict[str, dict[str, Any]] = {}
        for here, there in ((a, b), (b, a)):
            delayer = self._delayers.pop((here, there), None)
            if delayer is None:
                continue
            self.run(here, ["iptables-nft", "-D", "INPUT", *self._queue_rule(there)])
            delayer.terminate()
            out, _ = delayer.communicate(timeout=10)
            if delayer.returncode != 0:
                raise AssertionError(f"the delayer on {here} exited with {delayer.returncode}: {out[-2000:]}")
            done[here] = json.loads(out.strip().splitlines()[-1])
        return done

    def _queue(self, host: str) -> int:
        """The queue a host's packets are handed to in its peers: one per peer in each namespace."""
        return list(self.hosts).index(host) + 1

    def _queue_rule(self, peer: str) -> list[str]:
        return ["-s", self.address(peer), "-j", "NFQUEUE", "--queue-num", str(self._queue(peer)), "--queue-bypass"]

    def _element(self, verb: str, host: str, set_name: str, value: str) -> None:
        self._nft(self.hosts[host].namespace, f"{verb} element inet {_TABLE} {set_name} {{ {value} }}\n")

    # --- the end ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        for process in self.processes:
            # The whole group, even when its first process has ended: what it started may not have.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for host in self.hosts.values():
            if host.namespace:
                _run("ip", "netns", "delete", host.namespace, check=False)
        if self._switch:
            # Deleting the switch deletes the root namespace's end of the control link too (a veth goes with its
            # peer).
            _run("ip", "netns", "delete", self._switch, check=False)
        if self._root_link:
            _run("ip", "link", "delete", self._root_link, check=False)


# In every host: the cut addresses and ports dropped both ways, then the random loss. Output and input both, so a
# cut holds whichever side sends. The control link's address is never in a set.
_RULES = f"""
table inet {_TABLE} {{
    set cut {{ type ipv4_addr; }}
    set cut_ports {{ type inet_service; }}
    chain loss {{ }}
    chain out {{
        type filter hook output priority 0; policy accept;
        ip daddr @cut drop
        tcp sport @cut_ports drop
        jump loss
    }}
    chain in {{
        type filter hook input priority 0; policy accept;
        ip saddr @cut drop
        tcp dport @cut_ports drop
        jump loss
    }}
}}
"""
