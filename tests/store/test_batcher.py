"""The batcher: a lone item goes at once, concurrent items share a flush, failures stay theirs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from switchboard.errors import StoreUnavailable
from switchboard.store.batcher import Batcher


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_a_lone_item_is_flushed_without_waiting_for_company() -> None:
    flushes: list[list[int]] = []

    async def flush(items: Sequence[int]) -> list[int]:
        flushes.append(list(items))
        return [i * 2 for i in items]

    async def main() -> None:
        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test")
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await b.submit(21) == 42
        # No timer: the flush ran on the next turns of the loop.
        assert loop.time() - start < 0.5
        assert await b.submit(5) == 10

    run(main())
    assert flushes == [[21], [5]]


def _held(
    flushes: list[list[int]],
) -> tuple[asyncio.Event, Callable[[Sequence[int]], Awaitable[list[int]]]]:
    """A flush that records its items and answers (each doubled) once the event is set."""
    release = asyncio.Event()

    async def flush(items: Sequence[int]) -> list[int]:
        flushes.append(list(items))
        await release.wait()
        return [i * 2 for i in items]

    return release, flush


@pytest.mark.parametrize(("flights", "flushed"), [(1, [[1, 2, 3]]), (2, [[1], [2, 3]])])
def test_items_submitted_in_one_turn_of_the_loop(flights: int, flushed: list[list[int]]) -> None:
    """Woken together (a resolve batch answered, a sandbox frame answered): with one flight
    they share the first caller's flush, and the first, now carrying the others' items,
    cannot cancel it; with two, the second starts the other flight and takes the rest, so
    the first caller's flush carries only its own item and cancelling it cancels nothing
    else. Either way the cancelled caller's item is written once, and nothing again."""
    flushes: list[list[int]] = []

    async def main() -> None:
        release, flush = _held(flushes)
        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test", flights=flights)
        tasks = [asyncio.create_task(b.submit(i)) for i in (1, 2, 3)]
        await asyncio.sleep(0.01)
        assert sorted(map(sorted, flushes)) == flushed
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        release.set()
        assert [await t for t in tasks[1:]] == [4, 6]
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]

    run(main())
    assert sorted(map(sorted, flushes)) == flushed


def test_items_arriving_during_a_flush_go_together_up_to_the_cap() -> None:
    flushes: list[list[int]] = []

    async def main() -> None:
        release = asyncio.Event()

        async def flush(items: Sequence[int]) -> list[int]:
            flushes.append(list(items))
            if len(flushes) == 1:
                await release.wait()
            return list(items)

        b: Batcher[int, int] = Batcher(flush, max_size=4, step="test")
        first = asyncio.create_task(b.submit(0))
        await asyncio.sleep(0.01)
        rest = [asyncio.create_task(b.submit(i)) for i in range(1, 10)]
        await asyncio.sleep(0.01)
        release.set()
        assert await first == 0
        assert [await t for t in rest] == list(range(1, 10))

    run(main())
    assert flushes == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9]]


def test_a_per_item_exception_fails_only_its_item_and_a_raising_flush_fails_its_batch() -> None:
    calls = 0

    async def flush(items: Sequence[int]) -> list[int | BaseException]:
        nonlocal calls
        calls += 1
        if 13 in items:
            raise RuntimeError("batch broke")
        return [ValueError(f"bad {i}") if i < 0 else i for i in items]

    async def main() -> None:
        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test")
        good, bad = await asyncio.gather(b.submit(1), b.submit(-1), return_exceptions=True)
        assert good == 1
        assert isinstance(bad, ValueError) and "bad -1" in str(bad)
        with pytest.raises(RuntimeError, match="batch broke"):
            await b.submit(13)
        assert await b.submit(2) == 2  # the batcher survives a failed flush

    run(main())


def test_a_caller_that_gives_up_does_not_cancel_the_flush_of_others() -> None:
    written: list[list[int]] = []

    async def main() -> None:
        first, shared = asyncio.Event(), asyncio.Event()

        async def flush(items: Sequence[int]) -> list[int]:
            await (first if 1 in items else shared).wait()
            written.append(list(items))
            return list(items)

        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test")
        alone = asyncio.create_task(b.submit(1))  # flushed in its own task
        await asyncio.sleep(0.01)
        quitter = asyncio.create_task(b.submit(2))  # these two wait for a shared flush
        stayer = asyncio.create_task(b.submit(3))
        await asyncio.sleep(0.01)
        first.set()
        assert await alone == 1
        await asyncio.sleep(0.01)  # the shared flush has started and waits
        assert written == [[1]]
        quitter.cancel()
        await asyncio.sleep(0.01)
        shared.set()
        assert await stayer == 3
        with pytest.raises(asyncio.CancelledError):
            await quitter

    run(main())
    assert written == [[1], [2, 3]]  # the quitter's item too: it shared the flush


def test_a_lone_caller_that_gives_up_cancels_only_its_own_flush() -> None:
    written: list[list[int]] = []

    async def main() -> None:
        release = asyncio.Event()

        async def flush(items: Sequence[int]) -> list[int]:
            if 1 in items:
                await release.wait()
            written.append(list(items))
            return list(items)

        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test")
        alone = asyncio.create_task(b.submit(1))
        await asyncio.sleep(0.01)
        others = [asyncio.create_task(b.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0.01)
        alone.cancel()
        assert [await t for t in others] == [2, 3]  # flushed by a task once it was gone
        with pytest.raises(asyncio.CancelledError):
            await alone
        assert await b.submit(4) == 4

    run(main())
    assert written == [[2, 3], [4]]


def test_each_event_loop_has_its_own_queue() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        return list(items)

    b: Batcher[int, int] = Batcher(flush, max_size=2, step="test")
    assert run(b.submit(1)) == 1
    assert run(b.submit(2)) == 2  # a new loop: no future of the old one is touched


def test_max_size_must_be_positive() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        return list(items)

    with pytest.raises(ValueError, match="max_size"):
        Batcher(flush, max_size=0, step="test")


def test_flights_must_be_positive() -> None:
    async def flush(items: Sequence[int]) -> list[int]:
        return list(items)

    with pytest.raises(ValueError, match="flights"):
        Batcher(flush, max_size=4, step="test", flights=0)


def test_with_two_flights_the_next_batch_goes_while_the_first_is_in_the_database() -> None:
    """One flight: what arrives during a flush waits for it (the test above). Two: it goes
    at once, and a third batch waits for either to finish."""
    flushes: list[list[int]] = []

    async def main() -> None:
        release, flush = _held(flushes)
        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test", flights=2)
        first = asyncio.create_task(b.submit(0))
        await asyncio.sleep(0.01)
        second = [asyncio.create_task(b.submit(i)) for i in (1, 2)]
        await asyncio.sleep(0.01)
        assert flushes == [[0], [1, 2]]  # both in the database at once
        third = [asyncio.create_task(b.submit(i)) for i in (3, 4, 5)]
        await asyncio.sleep(0.01)
        assert flushes == [[0], [1, 2]]  # no third flight
        release.set()
        assert await first == 0
        assert [await t for t in second + third] == [2, 4, 6, 8, 10]

    run(main())
    assert sorted(map(sorted, flushes)) == [[0], [1, 2], [3, 4, 5]]


def test_flights_bound_the_flushes_under_way_and_every_item_gets_its_answer() -> None:
    under_way = [0, 0]  # now, most

    async def main() -> None:
        async def flush(items: Sequence[int]) -> list[int]:
            under_way[0] += 1
            under_way[1] = max(under_way[1], under_way[0])
            await asyncio.sleep(0.002)
            under_way[0] -= 1
            return [i + 1000 for i in items]

        b: Batcher[int, int] = Batcher(flush, max_size=4, step="test", flights=3)

        async def client(c: int) -> list[int]:
            got = []
            for n in range(20):
                got.append(await b.submit(c * 100 + n))
                await asyncio.sleep(0.0005 * (c % 3))
            return got

        answers = await asyncio.gather(*(client(c) for c in range(12)))
        for c, got in enumerate(answers):
            assert got == [c * 100 + n + 1000 for n in range(20)]
        assert not b._here().flushers and not b._here().waiting

    run(main())
    assert under_way[1] == 3


def test_a_lost_database_fails_what_waits_but_not_the_other_flight() -> None:
    """A flush failing with StoreUnavailable fails the items waiting for a next flush (they
    would wait a whole deadline for the same answer); the batch already in the database
    in the other flight gets its own answer."""

    async def main() -> None:
        fail, release = asyncio.Event(), asyncio.Event()

        async def flush(items: Sequence[int]) -> list[int]:
            if items[0] == 0:
                await fail.wait()
                raise StoreUnavailable("gone")
            await release.wait()
            return list(items)

        b: Batcher[int, int] = Batcher(flush, max_size=8, step="test", flights=2)
        lone = asyncio.create_task(b.submit(0))
        await asyncio.sleep(0.01)
        other = asyncio.create_task(b.submit(1))
        await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(b.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0.01)
        fail.set()
        with pytest.raises(StoreUnavailable):
            await lone
        for t in waiting:
            with pytest.raises(StoreUnavailable):
                await t
        release.set()
        assert await other == 1

    run(main())
