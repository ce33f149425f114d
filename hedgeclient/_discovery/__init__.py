"""Replica discovery: static lists, DNS names (A/AAAA, SRV) and sources of your own.

Strictly private; the public names are re-exported by ``hedgeclient``.
"""

from hedgeclient._discovery._config import Config, parse_config
from hedgeclient._discovery._dns import DnsReplicas, SrvReplicas
from hedgeclient._discovery._errors import DiscoveryError
from hedgeclient._discovery._runtime import Discovery
from hedgeclient._discovery._sources import PolledReplicas, WatchedReplicas
from hedgeclient._discovery._state import DiscoveryStatistics

__all__ = [
    "Config",
    "Discovery",
    "DiscoveryError",
    "DiscoveryStatistics",
    "DnsReplicas",
    "PolledReplicas",
    "SrvReplicas",
    "WatchedReplicas",
    "parse_config",
]
