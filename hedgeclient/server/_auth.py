"""Who may tell this replica to drop a tied copy: a shared secret, allowed networks.

With a secret, every tie message carries a timestamp, a nonce and an HMAC-SHA256
signature over the method, path, tie id, timestamp and nonce
(``hedge-tie-v1\\nPOST <path>\\n<tie>\\n<time>\\n<nonce>``). A message is refused
when its signature does not verify, its timestamp is more than ``max_skew`` seconds
from this machine's wall clock, or its nonce was seen within the last
``2 * max_skew`` seconds (a replay). With networks, the caller's address
(``scope["client"]``) must be in one of them. With both, both must hold.

HMAC: RFC 2104; signatures are compared in constant time (``hmac.compare_digest``).

Strictly private.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

__all__ = ["NONCE_HEADER", "SIGNATURE_HEADER", "TIME_HEADER", "TieAuth"]

TIME_HEADER = "hedge-tie-time"
NONCE_HEADER = "hedge-tie-nonce"
SIGNATURE_HEADER = "hedge-tie-signature"
MAX_NONCES = 100_000  # nonces remembered at most; beyond, messages are refused as busy

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@final
class TieAuth:
    """Signs tie messages and checks the ones received. Strictly private.

    Args:
        secret: the shared secret, or ``None`` for none.
        networks: allowed networks (empty: any address).
        max_skew: seconds a message's timestamp may differ from this wall clock.
        path: the endpoint's path, signed with each message.
        wall: the wall clock (seconds since the epoch); monotonic: for expiries.
    """

    __slots__ = ("_max_skew", "_monotonic", "_networks", "_nonces", "_path", "_secret", "_wall")

    def __init__(
        self,
        secret: bytes | None,
        networks: Sequence[Network],
        max_skew: float,
        path: str,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = secret
        self._networks = tuple(networks)
        self._max_skew = max_skew
        self._path = path
        self._wall = wall
        self._monotonic = monotonic
        self._nonces: OrderedDict[str, float] = OrderedDict()  # nonce -> expiry (monotonic)

    def _mac(self, tie: str, stamp: str, nonce: str) -> str:
        assert self._secret is not None
        text = f"hedge-tie-v1\nPOST {self._path}\n{tie}\n{stamp}\n{nonce}".encode()
        return hmac.new(self._secret, text, hashlib.sha256).hexdigest()

    def sign(self, tie: str) -> dict[str, str]:
        """The headers that authenticate a tie message for ``tie`` (none without a
        secret)."""
        if self._secret is None:
            return {}
        stamp = f"{self._wall():.3f}"
        nonce = secrets.token_hex(16)
        return {
            TIME_HEADER: stamp,
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: self._mac(tie, stamp, nonce),
        }

    def refusal(self, scope: Mapping[str, Any], tie: str, headers: Mapping[str, str]) -> str | None:
        """Why the message for ``tie`` is refused, or ``None`` when it is accepted.

        Accepting records the message's nonce: the same message again is a replay.
        """
        if self._networks and not self._allowed(scope.get("client")):
            return "address not allowed"
        if self._secret is None:
            return None
        stamp = headers.get(TIME_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        signature = headers.get(SIGNATURE_HEADER, "")
        if not (stamp and nonce and signature):
            return "not signed"
        if not hmac.compare_digest(self._mac(tie, stamp, nonce), signature):
            return "bad signature"
        try:
            sent = float(stamp)
        except ValueError:
            return "bad timestamp"
        if not abs(self._wall() - sent) <= self._max_skew:  # NaN is refused too
            return "stale timestamp"
        now = self._monotonic()
        nonces = self._nonces
        while nonces:
            oldest, expiry = next(iter(nonces.items()))
            if expiry > now:
                break
            del nonces[oldest]
        if nonce in nonces:
            return "replayed"
        if len(nonces) >= MAX_NONCES:
            return "too many messages"
        nonces[nonce] = now + 2.0 * self._max_skew + 1.0  # past it, the stamp is stale
        return None

    def _allowed(self, client: object) -> bool:
        if not isinstance(client, (tuple, list)) or not client:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self._networks)
