"""ModelWorker: each local model's own thread, in order of urgency, skipping work nobody
waits for any more. Real threads (what it is for), every wait bounded."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rejoinder.providers.local.model_worker import ModelWorker, Urgency

pytestmark = pytest.mark.looptime(False)

WAIT = 5.0  # seconds: a bound, never reached when it works


async def blocked(worker: ModelWorker) -> tuple[threading.Event, asyncio.Task[str]]:
    """A job that holds the worker's thread until the event is set."""
    started, release = threading.Event(), threading.Event()

    def hold() -> str:
        started.set()
        release.wait(WAIT)
        return "held"

    task = asyncio.ensure_future(worker.run(hold))
    assert await asyncio.to_thread(started.wait, WAIT)
    return release, task


async def test_results_and_errors_reach_the_caller_on_its_loop() -> None:
    worker = ModelWorker("test")
    assert await worker.run(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        await worker.run(lambda: 1 / 0)
    assert await worker.run(str.upper, "still running") == "STILL RUNNING"
    assert worker.started_threads == 1


async def test_urgent_work_goes_first_then_in_order_of_arrival() -> None:
    worker = ModelWorker("test")
    release, held = await blocked(worker)
    ran: list[str] = []
    jobs = [
        ("so far 1", Urgency.BACKGROUND),
        ("utterance 1", Urgency.URGENT),
        ("so far 2", Urgency.BACKGROUND),
        ("utterance 2", Urgency.URGENT),
    ]
    tasks = [asyncio.ensure_future(worker.run(ran.append, name, urgency=u)) for name, u in jobs]
    await asyncio.sleep(0)  # every job queued behind the one that holds the thread
    assert worker.pending == 4
    release.set()
    await asyncio.wait_for(asyncio.gather(held, *tasks), WAIT)
    assert ran == ["utterance 1", "utterance 2", "so far 1", "so far 2"]


async def test_work_nobody_waits_for_is_skipped() -> None:
    worker = ModelWorker("test")
    release, held = await blocked(worker)
    ran: list[str] = []
    stale = asyncio.ensure_future(worker.run(ran.append, "stale", urgency=Urgency.BACKGROUND))
    wanted = asyncio.ensure_future(worker.run(ran.append, "wanted"))
    await asyncio.sleep(0)
    stale.cancel()
    await asyncio.wait([stale])
    # The cancel reaches the worker's queue on the loop's next turn (the executor future's
    # callback); work cancelled later than its start runs to its end.
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(held, wanted), WAIT)
    assert ran == ["wanted"]
    assert stale.cancelled()


async def test_an_idle_worker_lets_its_thread_go_and_starts_another_when_needed() -> None:
    worker = ModelWorker("test", idle_seconds=0.05)
    thread = await worker.run(threading.current_thread)
    assert thread.name == "rejoinder-test" and thread.daemon
    await asyncio.to_thread(thread.join, WAIT)
    assert not thread.is_alive()
    again = await worker.run(threading.current_thread)
    assert again is not thread and worker.started_threads == 2


def test_a_result_for_a_closed_loop_does_not_stop_the_worker() -> None:
    worker = ModelWorker("test")
    release = threading.Event()
    first = asyncio.new_event_loop()
    left: list[asyncio.Future[bool]] = []

    async def start_and_leave() -> None:
        left.append(asyncio.ensure_future(worker.run(release.wait, WAIT)))
        await asyncio.sleep(0)

    first.run_until_complete(start_and_leave())
    first.close()  # its job is still running
    release.set()
    second = asyncio.new_event_loop()
    try:
        assert second.run_until_complete(asyncio.wait_for(worker.run(int, "7"), WAIT)) == 7
    finally:
        second.close()


def test_idle_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_seconds"):
        ModelWorker("test", idle_seconds=0)


def test_shutdown_lets_the_running_job_finish_cancels_the_queued_and_ends_the_thread() -> None:
    """What the interpreter's exit does to every live worker (an atexit hook): a daemon
    thread left waiting would be killed during finalization, where a native library's
    thread state aborted the process (CTranslate2: status 134)."""
    worker = ModelWorker("exit-test", idle_seconds=60)
    release = threading.Event()
    running = worker.submit(lambda: release.wait(5) and "done")
    queued = worker.submit(lambda: "never")
    while not running.running():
        threading.Event().wait(0.001)
    stopper = threading.Thread(target=worker.shutdown)
    stopper.start()
    while worker.pending < 2:  # the queued job and the stop, behind the running one
        threading.Event().wait(0.001)
    release.set()
    stopper.join(5)
    assert not stopper.is_alive()
    assert running.result(1) == "done"
    assert queued.cancelled()
    assert not any(t.name == "rejoinder-exit-test" for t in threading.enumerate())
    assert worker.submit(lambda: "again").result(5) == "again"  # a new thread serves it
    assert worker.started_threads == 2
    worker.shutdown()
    worker.shutdown()  # no thread: nothing to do
