"""A real DNS server for the discovery tests: dnsmasq on 127.0.0.1 and a free port.

It answers the names of a hosts file (A/AAAA) that it re-reads on SIGHUP, and SRV
records given on its command line (changing those restarts it on the same port), all
with a short TTL; names under ``hedge.test`` that it does not know are NXDOMAIN, and
nothing is forwarded anywhere. Tests that use it are marked ``dnsmasq``.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import dns.resolver
import pytest

from hedgeclient import DnsReplicas, Replica

DOMAIN = "hedge.test"
TTL = 1  # seconds: the shortest a test waits for a change to be seen


def find_dnsmasq() -> str | None:
    """The dnsmasq binary: on PATH, or in /usr/sbin or /sbin (as tests/conftest.py)."""
    sbin = os.environ.get("HEDGECLIENT_TEST_SBIN", "/usr/sbin:/sbin")
    path = os.pathsep.join([os.environ.get("PATH", ""), sbin])
    return shutil.which("dnsmasq", path=path)


def _free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1, now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return int(port)
    msg = "no free port for dnsmasq"
    raise RuntimeError(msg)


class DnsServer:
    """dnsmasq serving ``hedge.test``. ``nameserver`` is what DnsReplicas takes."""

    def __init__(self, directory: Path, ttl: int = TTL, *, local: bool = True) -> None:
        self.binary = find_dnsmasq()
        assert self.binary is not None  # the marker skipped the test otherwise
        self.directory = directory
        self.hosts = directory / "hosts"
        self.hosts.write_text("", encoding="utf-8")
        self.hosts.chmod(0o644)
        directory.chmod(0o755)  # dnsmasq may drop to another user that reads it
        self.ttl = ttl
        # Without --local, dnsmasq forwards what its hosts file does not answer, and with
        # no upstream (--no-resolv) it answers REFUSED: an AAAA query for a name that
        # has only A records, say.
        self.local = local
        self.port = _free_port()
        self.nameserver = f"127.0.0.1:{self.port}"
        self.srv: list[tuple[str, str, int, int, int]] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._log = directory / "dnsmasq.log"

    def _command(self) -> list[str]:
        assert self.binary is not None
        command = [
            self.binary,
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--no-negcache",
            f"--addn-hosts={self.hosts}",
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            f"--port={self.port}",
            f"--local-ttl={self.ttl}",
            f"--auth-ttl={self.ttl}",
            *([f"--local=/{DOMAIN}/"] if self.local else []),
            f"--user={getpass.getuser()}",
            "--pid-file=",
            f"--log-facility={self._log}",
        ]
        command += [
            f"--srv-host={name},{target},{port},{priority},{weight}"
            for name, target, port, priority, weight in self.srv
        ]
        return command

    def start(self) -> None:
        """Start dnsmasq and wait until it answers."""
        self._process = subprocess.Popen(
            self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                error = self._process.stderr.read().decode() if self._process.stderr else ""
                msg = f"dnsmasq exited with {self._process.returncode}: {error}"
                raise RuntimeError(msg)
            try:
                self.query(f"probe.{DOMAIN}", "A")
            except dns.resolver.NXDOMAIN:
                return  # it answers
            except dns.resolver.NoNameservers:
                if not self.local:
                    return  # it answers: REFUSED, as it does without --local
            except dns.exception.DNSException:
                time.sleep(0.02)
        msg = "dnsmasq did not answer within 10 s"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Stop dnsmasq (it answers nothing until started again)."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck dnsmasq
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()

    def query(self, name: str, rdtype: str) -> list[str]:
        """Ask this server once (blocking), for the tests' own checks."""
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = ["127.0.0.1"]
        resolver.port = self.port
        resolver.lifetime = 1.0
        resolver.cache = None
        return [r.to_text() for r in resolver.resolve(name, rdtype)]

    def set_hosts(self, names: Mapping[str, Sequence[str]]) -> None:
        """Serve ``names`` (name -> addresses) from now on: rewrite the hosts file, send
        SIGHUP, and wait until the server answers the new set."""
        lines = [f"{address} {name}" for name, addresses in names.items() for address in addresses]
        self.hosts.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert self._process is not None
        self._process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5.0
        for name, addresses in names.items():
            want = sorted(a for a in addresses if ":" not in a)
            while want and time.monotonic() < deadline:
                try:
                    if sorted(self.query(name, "A")) == want:
                        break
                except dns.exception.DNSException:
                    pass
                time.sleep(0.01)

    def set_srv(self, records: Sequence[tuple[str, str, int, int, int]]) -> None:
        """Serve these SRV records (name, target, port, priority, weight) from now on:
        dnsmasq reads them from its command line, so it restarts on the same port."""
        self.srv = list(records)
        self.stop()
        self.start()


@pytest.fixture
def dns_server(tmp_path: Path) -> Iterator[DnsServer]:
    """A running dnsmasq for ``hedge.test`` with a 1 s TTL; stopped after the test."""
    server = DnsServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def dns_server_without_local(tmp_path: Path) -> Iterator[DnsServer]:
    """A running dnsmasq without ``--local``: it answers the hosts file's records and
    REFUSED for anything else (an AAAA query for a name with only A records)."""
    server = DnsServer(tmp_path, local=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def loopback_ok() -> bool:
    """Whether 127.0.0.2 can be bound here (Linux routes all of 127/8 to loopback)."""
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.2", 0))
    except OSError:
        return False
    return True


class CountedDns(DnsReplicas):  # final for users (typing only); a test probe here
    """DnsReplicas noting each resolution: when it started and ended, and the origins
    it gave. On a loaded machine the instants move, their order does not: a change is
    applied by the first resolution that started after the server answered it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resolutions: list[tuple[float, float, frozenset[str]]] = []

    async def _lookup(self, logical: Any, failed: list[Any]) -> tuple[list[Replica], float]:
        # What the transport's refresh calls (``resolve`` is this, for other callers).
        started = anyio.current_time()
        replicas, ttl = await super()._lookup(logical, failed)
        origins = frozenset(r.origin for r in replicas)
        self.resolutions.append((started, anyio.current_time(), origins))
        return replicas, ttl

    def after(self, instant: float) -> list[tuple[float, float, frozenset[str]]]:
        """The resolutions started at or after ``instant``, in order."""
        return [r for r in self.resolutions if r[0] >= instant]


@pytest.fixture
def counted_dns() -> type[CountedDns]:
    """:class:`CountedDns`, to build a DNS source whose resolutions a test checks."""
    return CountedDns
