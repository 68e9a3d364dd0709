"""The launcher's spawn path: spawns/s of `/bin/true`, before and after the pidfd watch.

Figures, each the median of ROUNDS interleaved rounds with min–max beside it, at concurrency
1 and 16, with the parent's CPU time per spawn (all its threads: asyncio's waiter threads
count):
  - before: the launcher's previous spawn path (asyncio `create_subprocess_exec` with its
    child watcher thread, the same stderr pipe reader), copied here so both run side by side;
  - after: `spawn_and_wait` as it is now (Popen + pidfd, no thread);
  - after with `kill_descendants=True` (the subreaper sweep at completion) and with a run log;
  - the limit: bare `subprocess.Popen` + pidfd wait, no stderr pipe (what any spawn costs).

    python bench/spawn.py [--rounds 5] [--spawns 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from studio_launcher import spawn_and_wait

TRUE = ["/bin/true"]
Spawn = Callable[[int], Awaitable[object]]


async def before(n: int) -> None:
    """The previous spawn path: create_subprocess_exec + a stderr pipe read on the loop."""
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)

    def on_readable() -> None:
        with contextlib.suppress(BlockingIOError):
            if not os.read(read_fd, 65536):
                loop.remove_reader(read_fd)

    loop.add_reader(read_fd, on_readable)
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *TRUE,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=write_fd,
                env=dict(os.environ, LIONAGI_INVOCATION_ID=f"bench{n}"),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        await proc.wait()
    finally:
        loop.remove_reader(read_fd)
        os.close(read_fd)


async def after(n: int) -> None:
    await spawn_and_wait(TRUE, f"bench{n}")


async def after_kill_descendants(n: int) -> None:
    await spawn_and_wait(TRUE, f"bench{n}", kill_descendants=True)


LOG_DIR = tempfile.mkdtemp(prefix="studio-bench-spawn-")


async def after_with_log(n: int) -> None:
    await spawn_and_wait(TRUE, f"bench{n}", log_path=os.path.join(LOG_DIR, f"{n % 64}.log"))


async def limit(n: int) -> None:
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(TRUE, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    fd = os.pidfd_open(proc.pid)
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, done.set_result, None)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    proc.wait()


VARIANTS: list[tuple[str, str, Spawn]] = [
    ("before", "before: create_subprocess_exec (asyncio watcher thread)", before),
    ("after", "after: spawn_and_wait (Popen + pidfd)", after),
    ("after_kd", "after, kill_descendants=True", after_kill_descendants),
    ("after_log", "after, with a run log", after_with_log),
    ("limit", "limit: bare Popen + pidfd, no pipe", limit),
]


async def measure(spawn: Spawn, spawns: int, concurrency: int) -> tuple[float, float]:
    """(spawns per second, parent CPU ms per spawn)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with gate:
            await spawn(n)

    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(spawns)))
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    return spawns / wall, cpu * 1000 / spawns


def fmt(values: list[float], digits: int = 0) -> str:
    med = statistics.median(values)
    return f"{med:,.{digits}f} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--spawns", type=int, default=300)
    args = parser.parse_args()
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"{args.rounds} rounds x {args.spawns} spawns of {TRUE[0]}, interleaved\n")
    for concurrency in (1, 16):
        rates: dict[str, list[float]] = {key: [] for key, _, _ in VARIANTS}
        cpus: dict[str, list[float]] = {key: [] for key, _, _ in VARIANTS}
        for _key, _, spawn in VARIANTS:  # warm-up
            await measure(spawn, 20, concurrency)
        for _ in range(args.rounds):
            for key, _, spawn in VARIANTS:
                rate, cpu = await measure(spawn, args.spawns, concurrency)
                rates[key].append(rate)
                cpus[key].append(cpu)
        print(f"concurrency {concurrency}:")
        base = statistics.median(rates["before"])
        for key, label, _ in VARIANTS:
            ratio = statistics.median(rates[key]) / base
            print(
                f"  {label:<56} {fmt(rates[key]):>24} /s  x{ratio:.2f} of before  "
                f"CPU {fmt(cpus[key], 2)} ms/spawn"
            )
        print()


if __name__ == "__main__":
    if sys.platform != "linux":
        raise SystemExit("bench/spawn.py needs Linux (pidfds)")
    asyncio.run(main())
