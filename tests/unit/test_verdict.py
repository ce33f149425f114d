"""The race's verdicts (``_race.verdict``): pure functions over attempts, no loop."""

from __future__ import annotations

import httpx
import pytest

from hedgeclient._attempt import FAILED, HEADERS, Attempt, new_attempt
from hedgeclient._race.verdict import calls_for_backup, failure, last_failed, no_answer, pushback

A, B = "http://a", "http://b"


def ended(
    number: int,
    replica: str,
    at: float,
    state: int,
    *,
    status: int | None = None,
    error: Exception | None = None,
) -> Attempt:
    """An attempt sent at 0, ended at ``at`` in ``state``, with a response or an error."""
    attempt = new_attempt(number, "primary" if number == 1 else "backup", replica, 0.0)
    attempt.ended, attempt.state, attempt.error = at, state, error
    if status is not None:
        attempt.response = httpx.Response(status)
    return attempt


def test_a_failure_calls_for_a_backup_a_dropped_copy_only_alone() -> None:
    """A failed attempt calls for a backup at once; a dropped copy only when nothing else
    is in flight (else its twin answers)."""
    failed = ended(1, A, 0.010, HEADERS, status=503)
    assert calls_for_backup(failed, in_flight=1)
    copy = ended(2, B, 0.010, HEADERS, status=409)
    copy.dropped = True
    assert not calls_for_backup(copy, in_flight=1)
    assert calls_for_backup(copy, in_flight=0)


@pytest.mark.parametrize(
    ("status", "headers", "backs_off"),
    [(429, {}, True), (503, {"Retry-After": "1"}, True), (503, {}, False)],
)
def test_pushback_is_a_429_or_any_retry_after(
    status: int, headers: dict[str, str], backs_off: bool
) -> None:
    """A 429, or a Retry-After on any status, asks the client to back off."""
    assert pushback(httpx.Response(status, headers=headers)) is backs_off


def test_the_failed_response_judged_last_is_kept() -> None:
    """With no winner the caller gets the failed response that ended last (later-sent
    first at the same instant); errors, unjudged and dropped responses are not kept."""
    first = ended(1, A, 0.050, HEADERS, status=503)
    second = ended(2, B, 0.050, HEADERS, status=502)
    refused = ended(3, A, 0.060, FAILED, error=httpx.ConnectError("refused"))
    for attempt in (first, second, refused):
        attempt.processed = True
    assert last_failed([first, second, refused]) is second
    second.processed = False  # ended, never judged
    assert last_failed([first, second, refused]) is first
    first.dropped = True
    assert last_failed([first, second, refused]) is None


def test_failure_is_the_last_error_with_a_note_naming_every_replica() -> None:
    """The caller gets the last attempt's own error, its type and message unchanged, with
    a note naming each failed attempt's replica and error."""
    refused = ended(1, A, 0.010, FAILED, error=httpx.ConnectError("refused"))
    reset = ended(2, B, 0.020, FAILED, error=httpx.ReadError(""))
    error = failure([refused, reset])
    assert error is reset.error
    assert type(error) is httpx.ReadError
    assert error.__notes__ == [
        "hedgeclient: no replica answered: attempt 1 to http://a failed (ConnectError: "
        "refused); attempt 2 to http://b failed (ReadError)"
    ]
    assert no_answer([refused]) == (
        "hedgeclient: no replica answered: attempt 1 to http://a failed (ConnectError: refused)"
    )


def test_only_dropped_copies_fail_as_a_protocol_error() -> None:
    """Every copy of a tied request dropped, none answered: replicas broke the protocol."""
    copy = ended(1, A, 0.010, HEADERS, status=409)
    copy.dropped = True
    error = failure([copy])
    assert isinstance(error, httpx.RemoteProtocolError)
    assert str(error) == "every copy of the tied request was dropped, none answered"
