"""A call's progress passed on at a pace (edgeclaw.tools.progress)."""

from __future__ import annotations

import asyncio

from edgeclaw.tools.progress import MAX_MESSAGE_CHARS, PacedProgress


async def test_the_newest_figure_of_a_burst_follows_after_the_interval_and_nothing_goes_back() -> None:
    seen: list[tuple[float, float | None, str]] = []
    paced = PacedProgress(lambda *update: seen.append(update), min_interval_s=0.1)
    for figure in (1, 2, 3, 2.5):  # a burst, and a figure going back
        paced(figure, 10, f"at {figure}")
    assert seen == [(1, 10, "at 1")]  # the first at once, the rest held
    for _ in range(100):  # the held figure follows after the interval (later on a busy machine)
        await asyncio.sleep(0.02)
        if len(seen) > 1:
            break
    await asyncio.sleep(0.15)  # nothing else follows
    assert seen == [(1, 10, "at 1"), (3, 10, "at 3")]  # only the newest of the burst; 2.5 dropped
    paced(4, float("inf"), "x" * 1000)  # an interval after the last one sent: at once
    assert seen[-1] == (4, None, "x" * MAX_MESSAGE_CHARS)


async def test_what_is_held_when_the_call_ends_is_dropped_and_a_failing_sink_fails_no_call() -> None:
    seen: list[float] = []
    paced = PacedProgress(lambda done, total, message: seen.append(done), min_interval_s=0.1)
    paced(1, None, "")
    paced(2, None, "")
    paced.close()
    await asyncio.sleep(0.2)
    paced(3, None, "")
    assert seen == [1]

    def broken(done: float, total: float | None, message: str) -> None:
        raise RuntimeError("the client went away")

    PacedProgress(broken)(1, None, "")  # logged, not raised
