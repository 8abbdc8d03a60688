"""The controller's work queue: dirty job ids handled once, and a wake that ends the loop's wait."""

from __future__ import annotations

import threading

from broker.controller.work_queue import WorkQueue


def test_a_job_marked_dirty_many_times_is_taken_once() -> None:
    queue = WorkQueue()
    for _ in range(3):
        queue.add_job("j1")
    queue.add_jobs(["j2", "j1"])

    assert queue.take_jobs() == {"j1", "j2"}
    assert queue.take_jobs() == set()


def test_a_wait_ends_at_once_when_something_was_added_and_the_wake_is_consumed() -> None:
    queue = WorkQueue()
    queue.add_job("j1")

    assert queue.wait(timeout=60) is True  # no wait: something is there
    assert queue.wait(timeout=0) is False  # the wake was consumed; the job is still to be taken
    assert queue.pending() == 1


def test_a_wait_without_news_returns_after_its_timeout_unwoken() -> None:
    assert WorkQueue().wait(timeout=0.01) is False


def test_a_wake_from_another_thread_ends_a_long_wait() -> None:
    queue = WorkQueue()
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(queue.wait(timeout=60)))
    waiter.start()
    queue.wake()
    waiter.join(timeout=30)

    assert woken == [True]
    assert queue.take_jobs() == set()  # a wake alone marks no job
