"""The serve command in its own process, started with a bound on every wait: :func:`serve_command`."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

START_SECONDS = 60.0  # the first line, then an answer from /health: a loaded 2-core machine takes ~10 s


@contextlib.contextmanager
def started_serve(*flags: str, seconds: float = START_SECONDS) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``commons-arena serve --port 0 <flags>``: its base URL once ``/health`` answers, and the process
    (terminated on exit). Fails within ``seconds`` if it prints no URL or never answers, never waits forever."""
    process = subprocess.Popen([sys.executable, "-m", "commands", "serve", "--port", "0", "--log-level", "warning",
                                *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + seconds
        first: queue.Queue[str] = queue.Queue()  # a pipe's readline cannot time out: a thread reads it
        threading.Thread(target=lambda: first.put(process.stdout.readline() if process.stdout else ""),
                         daemon=True).start()
        try:
            line = first.get(timeout=seconds)
        except queue.Empty:
            pytest.fail(f"commons-arena serve printed no line in {seconds:.0f} s")
        assert "commons-arena serve: http://127.0.0.1:" in line, line
        base = line.split()[2]
        while True:
            try:
                httpx.get(base + "/health", timeout=5).raise_for_status()
                break
            except httpx.TransportError:
                assert process.poll() is None, f"the server exited with {process.returncode}"
                assert time.monotonic() < deadline, f"the server did not answer /health in {seconds:.0f} s"
                time.sleep(0.1)
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def serve_command() -> Callable[..., Any]:
    """:func:`started_serve`, the one way a test starts the serve command."""
    return started_serve
