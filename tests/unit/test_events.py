"""The records the request path builds fast (``_events.ATTEMPT_SLOTS`` and
``REQUEST_SLOTS``) equal those the dataclasses' own constructors build."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest

from hedgeclient._events import ATTEMPT_SLOTS, REQUEST_SLOTS, AttemptRecord, RequestRecord


def _fast(cls: type, slots: tuple[object, ...], values: tuple[object, ...]) -> object:
    record: object = object.__new__(cls)
    for set_field, value in zip(slots, values, strict=True):
        set_field(record, value)  # type: ignore[operator]
    return record


def test_slots_follow_the_fields_in_order() -> None:
    """One setter per field, in the order of the fields (the order values are given)."""
    for cls, slots in ((AttemptRecord, ATTEMPT_SLOTS), (RequestRecord, REQUEST_SLOTS)):
        names = [field.name for field in fields(cls)]
        assert [s.__self__.__name__ for s in slots] == names  # type: ignore[attr-defined]


def test_fast_records_equal_the_constructors() -> None:
    """A record built through the slots is equal to, hashes as and reads as the one its
    constructor builds, and stays frozen."""
    attempt = AttemptRecord(
        "backup", "http://b", 0.03, 0.011, "won", 200, False, "delay", None, "z2", True
    )
    fast_attempt = _fast(AttemptRecord, ATTEMPT_SLOTS, tuple(
        getattr(attempt, field.name) for field in fields(AttemptRecord)
    ))  # fmt: skip
    assert fast_attempt == attempt
    assert hash(fast_attempt) == hash(attempt)
    assert repr(fast_attempt) == repr(attempt)
    request = RequestRecord(
        "catalog", "GET http://svc", "ok", 0.041, 0.03, (attempt,), "budget", False, "GET",
        "http://svc", "a" * 32, "b" * 16, True, "queued", 0.002,
    )  # fmt: skip
    values = tuple(getattr(request, field.name) for field in fields(RequestRecord))
    fast_request = _fast(RequestRecord, REQUEST_SLOTS, values)
    assert fast_request == request
    assert hash(fast_request) == hash(request)
    assert isinstance(fast_request, RequestRecord)
    with pytest.raises(FrozenInstanceError, match=r"^cannot assign to field 'route'$"):
        fast_request.route = "x"  # type: ignore[misc]
