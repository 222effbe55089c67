"""Running the statistics' steps on the machine's cores: structures (and a structure's metrics once its resamples are
drawn) are independent, so :func:`run_steps` runs them side by side on threads (the heavy parts, products, sorts and
compiled loops, release the GIL), with BLAS on one thread (:func:`single_threaded_blas`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from threadpoolctl import threadpool_limits


def single_threaded_blas() -> threadpool_limits:
    """BLAS on one thread while the statistics run.

    The products here are small (chunk x n by n x K); threaded OpenBLAS is slower on them on a shared
    2-core machine (timed: benchmarks/README.md), and one thread makes the summation order, hence the output bytes,
    independent of the machine's core count.
    """
    return threadpool_limits(limits=1, user_api="blas")


def step_threads(n_tasks: int) -> int:
    """Threads for the structures' steps: the cores this process may use, at most one per step that can run at once."""
    return max(1, min(len(os.sched_getaffinity(0)), n_tasks))


def run_steps(steps: Mapping[Hashable, tuple[Callable[[], None], Sequence[Hashable]]], threads: int) -> None:
    """Run every step (key -> (function, the keys of the steps it waits for)) once those have run, on ``threads`` threads.

    A free thread takes the first ready step in the mapping's order (which lists every step after the ones it waits for):
    with each structure's steps listed together, the threads finish the structures they began (and free their resamples)
    before they begin another, and the steps, smaller than a structure, keep the cores busy to the end (nine whole
    structures on two threads left one thread idle while the ninth ran).
    """
    if threads == 1:
        for run, _ in steps.values():
            run()
        return
    waiting, done = dict(steps), set[Hashable]()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        running: dict[Future, Hashable] = {}
        while waiting or running:
            for key in [k for k, (_, after) in waiting.items() if done.issuperset(after)][: threads - len(running)]:
                running[pool.submit(waiting.pop(key)[0])] = key
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                future.result()  # a step's error stops the run
                done.add(running.pop(future))
