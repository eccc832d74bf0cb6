"""Measuring helpers: percentiles, RSS, CPU interference windows, quiet-machine retries, phase timers, machine info."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from autogen_shared_memory.embedding import Embedder
from autogen_shared_memory.store import SharedMemoryStore

T = TypeVar("T")


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": pct(ms, 50),
        "p95_ms": pct(ms, 95),
        "mean_ms": float(np.mean(ms)),
        "min_ms": min(ms),
        "max_ms": max(ms),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def current_rss_mb() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (from /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    return total


@dataclass
class CpuWindow:
    """Wall time, this process's CPU time and everybody else's CPU time over a phase (interference)."""

    wall: float = 0.0
    own_cpu: float = 0.0
    other_cpu: float = 0.0

    @property
    def other_cores(self) -> float:
        """Average number of cores used by OTHER processes during the phase."""
        return self.other_cpu / self.wall if self.wall > 0 else 0.0


@contextlib.contextmanager
def cpu_window() -> Iterator[CpuWindow]:
    w = CpuWindow()
    t0, busy0, own0 = time.perf_counter(), busy_cpu_seconds(), own_cpu_seconds()
    try:
        yield w
    finally:
        w.wall = time.perf_counter() - t0
        w.own_cpu = own_cpu_seconds() - own0
        w.other_cpu = max(0.0, busy_cpu_seconds() - busy0 - w.own_cpu)


class Quiet:
    """Keeps other processes' CPU use out of the numbers, as far as a shared machine allows.

    Before a timed phase it waits (bounded) until other processes leave the CPU mostly idle; a phase during
    which they still used >= ``threshold`` cores is measured again (up to ``retries`` times) and the attempt
    with the least interference is kept. Every phase records its attempts and the interference it kept.
    """

    def __init__(
        self, per_phase: float, budget: float, retries: int, threshold: float = 0.3, window: float = 3.0
    ) -> None:
        self.per_phase, self.budget, self.retries = per_phase, budget, retries
        self.threshold, self.window = threshold, window
        self.waited = 0.0
        self.waits: list[dict[str, Any]] = []
        self.phases: list[dict[str, Any]] = []

    def wait(self, phase: str) -> None:
        t0 = time.perf_counter()
        other = 0.0
        while self.per_phase > 0 and self.waited < self.budget:
            with cpu_window() as w:
                time.sleep(self.window)
            other = w.other_cores
            spent = time.perf_counter() - t0
            if other < self.threshold or spent >= self.per_phase or self.waited + spent >= self.budget:
                break
        spent = time.perf_counter() - t0
        self.waited += spent
        self.waits.append({"phase": phase, "waited_s": spent, "other_cores_before": other})

    def measure(self, phase: str, fn: Callable[[Monitor], tuple[T, float]]) -> T:
        """Run ``fn(monitor) -> (result, other_cores)`` until an attempt is quiet; keep the quietest.

        Every attempt but the last may be aborted early by its monitor (``Disturbed``), so a disturbed
        attempt costs seconds, not a whole series.
        """
        best: tuple[T, float] | None = None
        attempts = aborted = 0
        for attempt in range(self.retries + 1):
            attempts += 1
            self.wait(phase if attempt == 0 else f"{phase} (retry {attempt})")
            monitor = Monitor(attempt, self.threshold, may_abort=attempt < self.retries)
            try:
                result, other = fn(monitor)
            except Disturbed as exc:
                aborted += 1
                log(f"{phase}: other processes used {exc.other_cores:.2f} cores; attempt {attempt + 1} aborted")
                continue
            if best is None or other < best[1]:
                best = (result, other)
            if other < self.threshold:
                break
            log(
                f"{phase}: other processes used {other:.2f} cores during the measurement"
                + ("; measuring again" if attempt < self.retries else "; keeping the quietest attempt")
            )
        assert best is not None
        self.phases.append({"phase": phase, "attempts": attempts, "aborted": aborted, "other_cores": best[1]})
        return best[0]


class Disturbed(Exception):
    """Other processes used the CPU during a measurement attempt that may be retried."""

    def __init__(self, other_cores: float) -> None:
        super().__init__(f"{other_cores:.2f} cores busy elsewhere")
        self.other_cores = other_cores


class Monitor:
    """Watches other processes' CPU use during one attempt, in windows of ``interval`` seconds."""

    def __init__(self, attempt: int, threshold: float, may_abort: bool, interval: float = 2.0) -> None:
        self.attempt, self.threshold, self.may_abort, self.interval = attempt, threshold, may_abort, interval
        self._t, self._busy, self._own = time.perf_counter(), busy_cpu_seconds(), own_cpu_seconds()

    def check(self) -> None:
        """Raise ``Disturbed`` if the last window was busy elsewhere and this attempt may be aborted."""
        if not self.may_abort:
            return
        now = time.perf_counter()
        if now - self._t < self.interval:
            return
        busy, own = busy_cpu_seconds(), own_cpu_seconds()
        other = max(0.0, (busy - self._busy) - (own - self._own)) / (now - self._t)
        self._t, self._busy, self._own = now, busy, own
        if other >= self.threshold:
            raise Disturbed(other)


class Supply:
    """Hands out fresh items (distinct queries or facts) so that no text is ever embedded twice."""

    def __init__(self, items: list[str]) -> None:
        self.items, self.pos = items, 0

    def take(self, n: int) -> list[str]:
        if self.pos + n > len(self.items):
            raise RuntimeError("benchmark ran out of distinct texts; raise the pool sizes")
        out = self.items[self.pos : self.pos + n]
        self.pos += n
        return out


class PhaseTimer:
    """Wraps ``backend.lexical/semantic/get`` and ``embedder.embed`` of one store to time each phase."""

    PHASES = ("embed", "lexical", "semantic", "get")

    def __init__(self) -> None:
        self.acc: dict[str, float] = dict.fromkeys(self.PHASES, 0.0)

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.acc[name] += time.perf_counter() - t0

        return timed

    @contextlib.contextmanager
    def attached(self, store: SharedMemoryStore) -> Iterator[PhaseTimer]:
        targets: list[tuple[Any, str, str]] = [
            (store.embedder, "embed", "embed"),
            (store.backend, "lexical", "lexical"),
            (store.backend, "semantic", "semantic"),
            (store.backend, "get", "get"),
        ]
        for obj, attr, phase in targets:
            setattr(obj, attr, self._wrap(phase, getattr(obj, attr)))
        try:
            yield self
        finally:
            for obj, attr, _ in targets:
                with contextlib.suppress(AttributeError):
                    delattr(obj, attr)

    def take(self) -> dict[str, float]:
        out, self.acc = self.acc, dict.fromkeys(self.PHASES, 0.0)
        return out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine_info(kind: str, embedder: Embedder) -> dict[str, Any]:
    """The machine and the software measured; torch and sentence-transformers are imported only for ``st``."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = float("nan")
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = int(line.split()[1]) / 1024 / 1024
    blas = "unknown"
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

        pools = {
            f"{i.get('internal_api')} {i.get('version') or ''}".strip() + f" ({i.get('num_threads')} threads)"
            for i in threadpool_info()
        }
        blas = ", ".join(sorted(pools))
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "ram_gb": round(mem_gb, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "thread_pools": blas,
        "sqlite": sqlite3.sqlite_version,
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
        "library": library_revision(),
        "embedder": kind,
        "embedder_class": type(embedder).__name__,
    }
    if kind == "st":
        import sentence_transformers
        import torch

        info.update(
            torch=torch.__version__,
            torch_threads=torch.get_num_threads(),
            sentence_transformers=sentence_transformers.__version__,
        )
    else:
        import onnxruntime  # type: ignore[import-untyped]

        info.update(onnxruntime=onnxruntime.__version__, onnx_threads=getattr(embedder, "threads", None))
    return info


def library_revision() -> str:
    """The git commit the measured library comes from, flagging uncommitted changes under src/."""
    repo = Path(__file__).resolve().parents[2]  # bench/common/measure.py -> the repository

    def git(*cmd: str) -> str:
        try:
            out = subprocess.run(["git", *cmd], cwd=repo, capture_output=True, text=True, check=False)
        except OSError:
            return ""
        return out.stdout.strip()

    rev = git("rev-parse", "--short", "HEAD")
    if not rev:
        return "unknown (not a git checkout)"
    return rev + (" + uncommitted changes in src/" if git("status", "--porcelain", "--", "src") else "")
