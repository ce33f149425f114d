"""``FakeNameserver``: a small DNS server on 127.0.0.1 whose A/AAAA records a test sets.

It lets :class:`~hedgeclient.DnsReplicas` discover the replicas of a
:class:`~hedgeclient.testing.FakeService` started with ``own_address=True`` on a
machine with nothing but Python: no dnsmasq, no root. It answers UDP queries in a
thread of its own, outside the caller's event loop, with dnspython's message parsing
(``dns.message.from_wire``, ``dns.message.make_response``); the record set can be
changed at any time (a replica that joins or leaves). The project's own integration
tests use a real dnsmasq instead (``tests/discovery``).

Prior art: dnsmasq's ``--addn-hosts`` (a hosts table re-read on SIGHUP); dnspython's
message API.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, final

from hedgeclient._checks import check_int

__all__ = ["FakeNameserver"]

_MAX_TTL = 86_400
_POLL = 0.05
"""Seconds the server thread waits for a query before it checks whether to stop."""


def _import_dns() -> Any:
    try:
        import dns.exception
        import dns.flags
        import dns.message
        import dns.name
        import dns.rcode
        import dns.rdataclass
        import dns.rdatatype
        import dns.rrset
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        msg = "FakeNameserver needs dnspython: install the extra 'hedgeclient[testing]'"
        raise ImportError(msg, name="dns") from exc
    return dns


@final
class FakeNameserver:
    """A DNS server on 127.0.0.1 that answers A and AAAA queries from a table you set.

    Use it as a context manager, plain or async (asyncio or trio): it binds a UDP port
    (``port=0``: a free one), answers in a background thread, and stops on exit. A
    name in the table answers its addresses of the asked family (none of that family:
    an empty answer, NOERROR); any other name answers NXDOMAIN; a query of a type in
    ``refuse`` answers REFUSED; a query that is not a DNS message is ignored. Names
    match without regard to case or a final dot. Only UDP is served: an answer of a
    few dozen addresses fits in one datagram.

    Args:
        records: DNS name -> its IP addresses (IPv4 and IPv6 strings); default empty.
        ttl: the TTL of every answer, whole seconds in [0, 86400]; default 1.
        port: the UDP port on 127.0.0.1, in [0, 65535]; default 0 (a free one).
        refuse: record types, among ``"A"`` and ``"AAAA"``, whose queries it answers
            REFUSED, for every name: ``refuse=("AAAA",)`` is a nameserver such as
            dnsmasq without ``--local``, which refuses what its hosts table does not
            hold; default none.

            .. versionadded:: 0.1.0

    Raises:
        TypeError: ``records`` is not a mapping of str to a sequence of str,
            ``ttl`` or ``port`` is not an int, or ``refuse`` is not a collection
            of str.
        ValueError: a name that is not a DNS name, an address that is not an IP
            address, ``ttl`` or ``port`` out of range, or a ``refuse`` entry other
            than ``"A"`` and ``"AAAA"``.
        ImportError: dnspython is not installed (``pip install 'hedgeclient[testing]'``).
        OSError: on start, the port cannot be bound.

    Example usage::

        async with FakeService(replicas=3, own_address=True) as svc:
            with FakeNameserver({"api.test": svc.addresses}) as dns_server:
                source = DnsReplicas(nameserver=dns_server.nameserver)
                transport = HedgedTransport(replicas={f"http://api.test:{svc.port}": source})
                ...
                dns_server.set_records({"api.test": svc.addresses[1:]})  # one leaves

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        records: Mapping[str, Sequence[str]] | None = None,
        *,
        ttl: int = 1,
        port: int = 0,
        refuse: Collection[str] = (),
    ) -> None:
        self._dns = _import_dns()
        self._ttl = check_int("ttl", ttl, 0, _MAX_TTL, unit="seconds")
        self._port = check_int("port", port, 0, 65535)
        self._refuse = self._refused_types(refuse)
        self._lock = threading.Lock()
        self._table = self._parse({} if records is None else records)
        self._queries = 0
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __repr__(self) -> str:
        state = f"on {self.nameserver}" if self._socket is not None else "stopped"
        return f"<FakeNameserver {state}, {len(self._table)} names>"

    def _refused_types(self, refuse: object) -> frozenset[int]:
        """Check ``refuse``; return the dnspython record types it names."""
        if isinstance(refuse, (str, bytes)) or not isinstance(refuse, Collection):
            msg = f"`refuse` must be a collection of 'A' and 'AAAA', got {refuse!r}"
            raise TypeError(msg)
        types = {"A": self._dns.rdatatype.A, "AAAA": self._dns.rdatatype.AAAA}
        for rdtype in refuse:
            if rdtype not in types:
                msg = f"`refuse` entries must be 'A' or 'AAAA', got {rdtype!r}"
                raise (ValueError if isinstance(rdtype, str) else TypeError)(msg)
        return frozenset(types[rdtype] for rdtype in refuse)

    def _parse(self, records: object) -> dict[str, list[str]]:
        """Check ``records``; key them by lowercase absolute name."""
        if not isinstance(records, Mapping):
            msg = f"`records` must be a mapping of DNS name to IP addresses, got {records!r}"
            raise TypeError(msg)
        table: dict[str, list[str]] = {}
        for name, addresses in records.items():
            if not isinstance(name, str):
                msg = f"`records` keys must be DNS names (str), got {name!r}"
                raise TypeError(msg)
            try:
                key = self._dns.name.from_text(name).to_text().lower()
            except self._dns.exception.DNSException:
                msg = f"`records` key must be a DNS name, got {name!r}"
                raise ValueError(msg) from None
            if isinstance(addresses, (str, bytes)) or not isinstance(addresses, Sequence):
                msg = f"`records[{name!r}]` must be a sequence of IP addresses, got {addresses!r}"
                raise TypeError(msg)
            checked = []
            for address in addresses:
                try:
                    checked.append(str(ipaddress.ip_address(address)))
                except ValueError:
                    msg = f"`records[{name!r}]` must hold IP addresses, got {address!r}"
                    raise ValueError(msg) from None
            table[key] = checked
        return table

    @property
    def port(self) -> int:
        """The UDP port it answers on.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._socket is None:
            msg = "the FakeNameserver is not running: use it as a context manager"
            raise RuntimeError(msg)
        return int(self._socket.getsockname()[1])

    @property
    def nameserver(self) -> str:
        """``"127.0.0.1:<port>"``: what :class:`~hedgeclient.DnsReplicas` takes.

        Raises:
            RuntimeError: the server is not running.
        """
        return f"127.0.0.1:{self.port}"

    @property
    def queries(self) -> int:
        """Queries answered since the start."""
        with self._lock:
            return self._queries

    def records(self) -> dict[str, list[str]]:
        """The table now: lowercase absolute name (``"api.test."``) -> addresses."""
        with self._lock:
            return {name: list(addresses) for name, addresses in self._table.items()}

    def set_records(self, records: Mapping[str, Sequence[str]]) -> None:
        """Replace the whole table; the next query sees the new one (thread-safe).

        Raises:
            TypeError, ValueError: as for the constructor's ``records``; the table is
                then unchanged.
        """
        table = self._parse(records)
        with self._lock:
            self._table = table

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Bind the port and start answering (``with`` does it).

        Raises:
            RuntimeError: it is already running.
            OSError: the port cannot be bound.
        """
        if self._socket is not None:
            msg = "the FakeNameserver is already running"
            raise RuntimeError(msg)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind(("127.0.0.1", self._port))
        except OSError:
            sock.close()
            raise
        sock.settimeout(_POLL)
        self._socket = sock
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="FakeNameserver", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering and release the port; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> FakeNameserver:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> FakeNameserver:
        self.start()  # binding a UDP port does not block
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()  # at most _POLL seconds: the thread's next wake-up

    # -- the server thread --------------------------------------------------------------

    def _serve(self) -> None:
        sock = self._socket
        assert sock is not None
        while not self._stop.is_set():
            try:
                wire, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:  # pragma: no cover - the socket closed under us
                return
            answer = self._answer(wire)
            if answer is not None:
                try:
                    sock.sendto(answer, peer)
                except OSError:  # pragma: no cover - the client went away
                    continue

    def _answer(self, wire: bytes) -> bytes | None:
        """The response to one query, or None for something that is not a query."""
        dns = self._dns
        try:
            query = dns.message.from_wire(wire)
        except Exception:  # any malformed datagram is dropped, as servers do
            return None
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        with self._lock:
            self._queries += 1
            table = self._table
        for question in query.question:
            if question.rdtype in self._refuse:
                response.set_rcode(dns.rcode.REFUSED)
                continue
            addresses = table.get(question.name.to_text().lower())
            if addresses is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
                continue
            version = {dns.rdatatype.A: 4, dns.rdatatype.AAAA: 6}.get(question.rdtype)
            chosen = [a for a in addresses if ipaddress.ip_address(a).version == version]
            if chosen:
                rdtype = dns.rdatatype.to_text(question.rdtype)
                rrset = dns.rrset.from_text_list(question.name, self._ttl, "IN", rdtype, chosen)
                response.answer.append(rrset)
        wire_out: bytes = response.to_wire()
        return wire_out
