"""TaskSet: background tasks kept until done, and stopped together."""

from __future__ import annotations

import asyncio
import gc

from edgeclaw.tasks import TaskSet


async def test_a_spawned_task_is_kept_until_done_even_when_nobody_else_holds_it():
    tasks = TaskSet()
    done = asyncio.Event()

    async def work() -> None:
        await asyncio.sleep(0.01)
        done.set()

    tasks.spawn(work(), name="w")
    gc.collect()
    assert len(tasks) == 1
    await asyncio.wait_for(done.wait(), 1)
    await asyncio.sleep(0)
    assert len(tasks) == 0 and not tasks


async def test_close_cancels_and_awaits_every_task_including_ones_started_meanwhile():
    tasks = TaskSet()
    ended: list[str] = []

    async def forever(tag: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(tag)

    tasks.spawn(forever("a"))
    tasks.spawn(forever("b"))
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(ended) == ["a", "b"]
    assert len(tasks) == 0


async def test_wait_with_a_timeout_returns_the_tasks_still_running():
    tasks = TaskSet()
    slow = tasks.spawn(asyncio.sleep(3600))
    tasks.spawn(asyncio.sleep(0))
    left = await tasks.wait(grace_s=0.05)
    assert left == {slow}
    await tasks.close()
    assert slow.cancelled()
