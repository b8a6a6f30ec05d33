"""Background work rests while live deliveries are coming, and only then."""

from __future__ import annotations

import time

from switchboard.service import liveload


def test_background_work_rests_only_while_deliveries_are_coming() -> None:
    liveload.delivered(time.monotonic() - 10 * liveload.BUSY_WITHIN_S)
    assert not liveload.busy()
    assert liveload.rest_for(0.2) == 0.0
    liveload.delivered(time.monotonic())
    assert liveload.busy()
    assert liveload.rest_for(0.2) == liveload.PACE * 0.2
