"""Where a sweep's points run: one ``concurrent.futures.Executor`` interface, three backends.

* ``local`` (the default): threads of this process (the engine releases the GIL), ``jobs`` at
  a time.
* ``dask``: ``dask.distributed``. With ``address`` a running scheduler (``tcp://host:8786``;
  with ``dask-jobqueue`` a Slurm or PBS cluster's), else a ``LocalCluster`` of ``workers``
  single-threaded worker processes. ``pip install 'secmem[dask]'``.
* ``ray``: ``ray.init(address=...)`` (``auto`` for a running cluster), else a local instance
  with ``workers`` CPUs. ``pip install 'secmem[ray]'``.

A point's trace and config file are shipped to the workers once, by content (Dask's
``scatter``, Ray's object store), and written to each worker's temporary folder under their
SHA-256 the first time a point there needs them: workers need no shared file system.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Dict, Optional

from .api import SecmemError

BACKENDS = ("local", "dask", "ray")


def _missing(extra: str, module: str) -> SecmemError:
    return SecmemError(f"--backend {extra} needs {module}: pip install 'secmem[{extra}]' (or pip install {module})")


class Backend:
    """An executor, how to ship a file's bytes to its workers, and how to close it."""

    def __init__(self, name: str, executor: Executor, workers: int, ship: Callable[[bytes], Any], close: Callable[[], None]):
        self.name, self.executor, self.workers, self._ship, self._close = name, executor, workers, ship, close

    def ship(self, data: bytes) -> Any:
        """A handle the workers resolve to ``data``, sent once however many points use it."""
        return self._ship(data)

    def close(self) -> None:
        self._close()

    def drain(self, futures: Dict[Future, Any], on_done: Callable[[Any, Future], None], tick: Optional[Callable[[], None]] = None) -> None:
        """Calls ``on_done(key, future)`` as each of ``futures`` (future -> key) finishes, and
        ``tick()`` at least once a second; ``on_done`` may submit more into ``futures``. An
        exception, Ctrl-C included, stops the backend and cancels what has not started."""
        try:
            while futures:
                done, _ = wait(list(futures), timeout=1.0, return_when=FIRST_COMPLETED)
                for f in done:
                    on_done(futures.pop(f), f)
                if tick is not None:
                    tick()
        except BaseException:
            self.stop()
            for f in futures:
                f.cancel()
            raise

    def stop(self) -> None:
        """After an interrupt: points not yet started never start (local threads; the remote
        backends' queued tasks are cancelled with their futures)."""
        stop = getattr(self.executor, "stopping", None)
        if stop is not None:
            stop.set()


def open_backend(name: str, workers: int, address: Optional[str] = None) -> Backend:
    if name == "local":
        if address is not None:
            raise SecmemError("--address names a Dask scheduler or a Ray cluster; the local backend runs here")
        pool = _Threads(max_workers=workers)
        return Backend("local", pool, workers, lambda data: data, lambda: pool.shutdown(wait=True, cancel_futures=True))
    if name == "dask":
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise _missing("dask", "dask[distributed]") from None
        if address is not None:
            client = Client(address)
            cluster = None
            n = max(1, len(client.scheduler_info().get("workers", {}))) or workers
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40)
            client = Client(cluster)
            n = workers

        def close() -> None:
            client.close()
            if cluster is not None:
                cluster.close()

        return Backend("dask", client.get_executor(pure=False), n, lambda data: client.scatter(data, broadcast=False), close)
    if name == "ray":
        try:
            import ray
        except ImportError:
            raise _missing("ray", "ray") from None
        started = not ray.is_initialized()
        if started:
            if address is not None:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        n = int(ray.cluster_resources().get("CPU", workers))
        executor = _RayExecutor(ray)
        return Backend("ray", executor, n, ray.put, (lambda: ray.shutdown()) if started else (lambda: None))
    raise SecmemError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


class _Threads(ThreadPoolExecutor):
    """Threads that start no new point once ``stopping`` is set (a queued point could
    otherwise start between an interrupt and the cancellation of the queue)."""

    def __init__(self, max_workers: int):
        super().__init__(max_workers=max_workers)
        self.stopping = threading.Event()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return super().submit(self._unless_stopping, fn, *args, **kwargs)

    def _unless_stopping(self, fn, *args, **kwargs):
        if self.stopping.is_set():
            raise KeyboardInterrupt
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            # Set here, before this thread takes the next point: the main thread learns of
            # the interrupt only later, and a point started meanwhile would clear the
            # engine's stop flag and run whole.
            self.stopping.set()
            raise


class _RayExecutor(Executor):
    """``submit`` as a Ray task of one CPU, its ``ObjectRef`` as a ``concurrent.futures.Future``."""

    def __init__(self, ray):
        self._ray = ray
        self._remote = {}

    def submit(self, fn, /, *args, **kwargs) -> Future:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(num_cpus=1, max_retries=2)(fn)
        return remote.remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def local_copy(data: Any, suffix: str = "") -> str:
    """On a worker: the path of a shipped file's bytes (``data``, or a path already local),
    written once per worker under their hash."""
    if isinstance(data, str):
        return data
    digest = hashlib.sha256(data).hexdigest()
    folder = os.path.join(tempfile.gettempdir(), "secmem-shipped")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, digest + suffix)
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: a worker never reads half a file
    return path
