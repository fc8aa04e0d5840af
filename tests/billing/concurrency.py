"""Run the same work in several threads at once, as concurrent invoice runs would (`transaction=True`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def at_once(work: Callable[[], T], threads: int) -> list[T]:
    """`work` in `threads` threads released together, each on its own database connection (closed
    after); the results in the order the threads finished. The first error any thread raised is raised."""
    barrier = threading.Barrier(threads)
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(work())
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    if errors:
        raise errors[0]
    return results
