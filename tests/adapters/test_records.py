"""``adapters.records``: the records round-trip through their dicts unchanged, a record written by a newer
gateway (with fields this one does not know) still reads, one from an older gateway gets the defaults, and an
optional field left None is not stored at all."""

from __future__ import annotations

from adapters.records import PendingRound, SessionRecord


def _session(**extra):
    return SessionRecord("s1", "anonymous", "2025-11-25", {"sampling": {}}, {"name": "c", "version": "1"}, 1, 2,
                         subscriptions=["file:///a"], **extra)


def test_records_round_trip_through_their_dicts() -> None:
    record = _session(log_level="info", pins={"name": "p"})
    assert SessionRecord.from_dict(record.to_dict()) == record
    pending = PendingRound("b1", "s1", 7, "tools/call", {"name": "t", "arguments": {"n": 2 ** 70}}, round=2,
                           request_state="opaque", answers={"a": {"x": 1}})
    assert PendingRound.from_dict(pending.to_dict()) == pending


def test_a_newer_writers_extra_fields_are_ignored_and_an_older_ones_missing_fields_default() -> None:
    data = {**_session().to_dict(), "added_by_a_newer_gateway": {"x": 1}}
    assert SessionRecord.from_dict(data) == _session()
    older = {k: v for k, v in _session().to_dict().items() if k not in ("upstream", "pins", "cached_roots")}
    read = SessionRecord.from_dict(older)
    assert read.upstream == "default" and read.pins == {} and read.cached_roots is None


def test_an_optional_field_left_none_is_not_stored_and_reads_back_as_none() -> None:
    stored = _session().to_dict()
    assert not {"log_level", "cached_roots", "header_maps"} & stored.keys()  # every request parses the record
    assert stored["subscriptions"] == ["file:///a"] and stored["initialized"] is False  # other defaults stay
    assert SessionRecord.from_dict(stored) == _session()
    maps = {"geo": [[["region"], "Region"]]}
    assert SessionRecord.from_dict(_session(header_maps=maps).to_dict()).header_maps == maps
    pending = PendingRound("b1", "s1", 7, "tools/call", {})
    assert "request_state" not in pending.to_dict() and PendingRound.from_dict(pending.to_dict()) == pending
