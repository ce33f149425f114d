"""What a race's attempts mean: pure judgements over :class:`~hedgeclient._attempt.Attempt`.

The race (``_race.race``) runs the attempts and keeps its state; these functions only
read attempts and say what they mean, so they are tested without a loop. (Who wins is
the race's own rule, on its hot path: the first attempt judged with response headers
whose status is outside the non-fatal set, ``Attempt.ok``. What an ended attempt says of
its replica's health is ``_replicas.choice``'s, which books it with the selector.)

- :func:`calls_for_backup`: whether an attempt that did not win calls for a backup at once;
- :func:`pushback`: whether a response asks the client to back off;
- :func:`last_failed`: with no winner, the attempt whose response the caller gets;
- :func:`failure`: the exception the caller gets when no attempt has a response to give,
  with a note naming where each attempt went;
- :func:`as_raised`: what a race cut short by its caller raises.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from hedgeclient._attempt import Attempt, ended_last
from hedgeclient._timer import cancelled_class

__all__ = ["as_raised", "calls_for_backup", "failure", "last_failed", "no_answer", "pushback"]


def calls_for_backup(attempt: Attempt, in_flight: int) -> bool:
    """Whether ``attempt``, judged and not the winner, calls for a backup at once.

    A failure does (an error, or a non-fatal status such as 503 that another replica
    may not give). A dropped copy of a tied request (its twin has the request) does only
    when nothing else is in flight (``in_flight``, attempts still running): else the
    twin answers.
    """
    return not attempt.dropped or in_flight == 0


def pushback(response: httpx.Response) -> bool:
    """Whether ``response`` (a non-fatal status) asks the client to back off: a 429, or
    any ``Retry-After``. The race then sends no more backups (reason ``pushback``)."""
    return response.status_code == 429 or "retry-after" in response.headers


def last_failed(attempts: Sequence[Attempt]) -> Attempt | None:
    """With no winner, the attempt whose response the caller gets: the failed response
    judged last (a 503 from every replica is a 503); ``None`` when no attempt has one to
    give (every one failed with an error, or only dropped copies answered)."""
    failed = [a for a in attempts if a.response is not None and a.processed and not a.dropped]
    return max(failed, key=ended_last) if failed else None


def failure(attempts: Sequence[Attempt]) -> Exception:
    """The exception the caller gets when :func:`last_failed` gives none: the last attempt's
    own error (its type and message unchanged), with a note (PEP 678) naming each failed
    attempt's replica and error (:func:`no_answer`); ``httpx.RemoteProtocolError`` when
    only dropped copies of a tied request answered (replicas that broke the protocol)."""
    errors = [a for a in attempts if a.error is not None]
    if not errors:
        msg = "every copy of the tied request was dropped, none answered"
        return httpx.RemoteProtocolError(msg)
    error = max(errors, key=ended_last).error
    assert error is not None
    # The error's own message names no replica (httpx's "All connection attempts
    # failed"): the note says where each attempt went (issue 23, item 18).
    error.add_note(no_answer(errors))
    return error


def no_answer(failed: Sequence[Attempt]) -> str:
    """A note naming each failed attempt's replica and error, in the order sent."""

    def one(attempt: Attempt) -> str:
        error = attempt.error
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return f"attempt {attempt.number} to {attempt.replica} failed ({text})"

    return "hedgeclient: no replica answered: " + "; ".join(map(one, failed))


def as_raised(exc: BaseException) -> BaseException:
    """What a race cut short by ``exc`` raises to its caller: ``exc``, but a group made of
    cancellations only (trio's ``open_tcp_stream`` connects in a nursery: cancelled
    there, plain httpx raises ``BaseExceptionGroup([Cancelled, ...])``) as its first
    one, so that the caller gets its cancellation, never a group (``docs/safety.md``).
    Its own cancel scope catches either."""
    if isinstance(exc, BaseExceptionGroup):
        cancelled = cancelled_class()
        leaves = exc.exceptions
        if leaves and all(isinstance(leaf, cancelled) for leaf in leaves):
            return leaves[0]
    return exc
