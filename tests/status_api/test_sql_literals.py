"""The ingest request's literals are the driver's own text: a timestamp rendered from
``isoformat`` (``driver_sql._datetime_literal``) is byte for byte asyncmy's ``escape_datetime``
for any naive or aware value, and ``Request.literal`` renders every value type a row carries as
the driver does. ``utc_now`` is the system clock as stored (naive UTC, whole milliseconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from asyncmy.converters import escape_datetime, escape_item
from hypothesis import given
from hypothesis import strategies as st

from status_api.domain.model import Lifecycle
from status_api.storage import driver_sql
from status_api.storage.database import utc_now
from status_api.storage.outbox import Priority

OFFSETS = st.one_of(st.none(), st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m))))


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)), OFFSETS)
def test_timestamps_render_as_the_driver_renders_them(value: datetime, tz: timezone | None) -> None:
    value = value.replace(tzinfo=tz)
    assert driver_sql._datetime_literal(value) == escape_datetime(value)


class _Driver:
    """The asyncmy connection's ``literal`` (its ``escape`` with the default encoders), for a
    ``Request`` built without a server."""

    server_status = 0

    def literal(self, value: Any) -> str:
        if isinstance(value, str):
            return "'" + driver_sql.escape_string(value) + "'"
        return str(escape_item(value, "utf8mb4"))


def _request() -> driver_sql.Request:
    req = object.__new__(driver_sql.Request)
    req._driver = _Driver()
    req._times = {}
    req._quote = driver_sql._quote_escaped
    req._quote_json = driver_sql._quote_json
    return req


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(),
    st.sampled_from(list(Lifecycle)),
    st.sampled_from(list(Priority)),
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)),
)


@given(st.lists(VALUES, max_size=20))
def test_every_row_value_renders_as_the_driver_renders_it(values: list[Any]) -> None:
    req, driver = _request(), _Driver()
    for value in values:
        assert req.literal(value) == driver.literal(value)


def test_utc_now_is_the_clock_in_whole_milliseconds() -> None:
    before = datetime.now(UTC).replace(tzinfo=None) - timedelta(milliseconds=1)
    now = utc_now()
    after = datetime.now(UTC).replace(tzinfo=None)
    assert now.tzinfo is None and now.microsecond % 1000 == 0
    assert before <= now <= after
