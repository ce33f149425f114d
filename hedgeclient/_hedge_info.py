"""``hedge_info(response)``: the typed way to read ``response.extensions["hedge"]``.

httpx types ``Response.extensions`` as ``dict[str, Any]``, so the
:class:`~hedgeclient.HedgeInfo` there reaches a type checker as ``Any``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import httpx

from hedgeclient._checks import shown
from hedgeclient._events import HedgeInfo

__all__ = ["hedge_info"]


def hedge_info(response: httpx.Response) -> HedgeInfo | None:
    """Return how ``response`` was obtained, or ``None`` if hedgeclient did not race it.

    ``None`` for a response to an origin passed through unchanged
    (``other_origins="pass"``), or from a client without a
    :class:`~hedgeclient.HedgedTransport`.

    Example usage::

        response = await client.get("/items/42")
        info = hedge_info(response)
        if info is not None and info.attempt > 1:
            ...  # a backup request won

    Args:
        response: an ``httpx.Response`` from a client.

    Returns:
        The :class:`~hedgeclient.HedgeInfo` in ``response.extensions["hedge"]``, or
        ``None`` when there is none.

    Raises:
        TypeError: ``response`` is not an ``httpx.Response``, or something other than
            a ``HedgeInfo`` (another library's) is under ``extensions["hedge"]``.

    .. versionadded:: 0.1.0
    """
    if not isinstance(response, httpx.Response):
        msg = f"`response` must be an httpx.Response, got {shown(response)}"
        raise TypeError(msg)
    info = response.extensions.get("hedge")
    if info is None or isinstance(info, HedgeInfo):
        return info
    msg = f"`response.extensions['hedge']` must be a HedgeInfo or absent, got {shown(info)}"
    raise TypeError(msg)
