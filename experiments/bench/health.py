"""``/health`` latency while clients load ``commons-arena serve`` with slow and hostile work (issue 44's target:
p99 < 100 ms).

Starts a real server (``commons-arena serve --port 0``) in its own process on 127.0.0.1 whose background
allocator is the oracle (a MILP per tick), then, from this process, for ``--seconds``:

* ``--players`` HTTP clients play team-seat episodes (every step makes the server solve the oracle's MILP);
* ``--hostile`` MCP clients send ``act`` and ``preview`` with hostile actions: JSON objects sent as strings nested
  1,200 deep, over-long strings, and brace soup;
* one client asks ``GET /health`` every ``--interval`` seconds and records how long each answer took.

Reports p50 / p99 / max of ``/health``, the steps played and the hostile calls answered (each must be a named
tool error, counted as ``bare`` otherwise). Traffic goes only to the server this script started; the server is
stopped at the end. Wall-clock figures move with the machine's load: run it on a quiet machine.

    python -m experiments.bench.health                         # 2 players, 2 hostile clients, 30 s
    python -m experiments.bench.health --seconds 5 --players 1 --hostile 1   # a smoke run
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from commons_arena.files import make_folder, toml_text, write_file
from experiments.bench.serve import wait_healthy


@dataclass
class Args:
    scenario: str = "crisis"
    """scenario the players play (crisis: the oracle's MILP is slowest there, ~180 ms a tick)"""
    seat: str = "search"
    """the players' seat; the allocator is the oracle"""
    players: int = 2
    """HTTP clients playing episodes"""
    hostile: int = 2
    """MCP clients sending hostile actions"""
    seconds: float = 30.0
    """how long the load runs"""
    interval: float = 0.02
    """seconds between two /health requests"""
    out: Path | None = None
    """also write the figures here as JSON"""


HOSTILE = ['{"request": ' + "[" * 1200 + "]" * 1200 + "}", "{" + "x" * 9000, "{" * 3000, '{"request": 1e999}']


def start_oracle_server(args: Args, population: Path) -> tuple[object, str]:
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "commands", "serve", "--port", "0", "--scenario", args.scenario, "--seats", args.seat,
         "--population", str(population), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "http://" not in line:
        process.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    threading.Thread(target=lambda: process.stdout.read() if process.stdout else None, daemon=True).start()
    return process, line.split()[2]


def player(base: str, args: Args, until: float, counts: dict[str, int]) -> None:
    import httpx

    with httpx.Client(base_url=base, timeout=60) as client:
        while time.monotonic() < until:
            frame = client.post("/reset", json={"seats": [args.seat]}).json()
            sid, done = frame["observation"]["metadata"]["session_id"], False
            while not done and time.monotonic() < until:
                done = client.post("/step", json={"session_id": sid, "action": {}}).json().get("done", True)
                counts["steps"] += 1
            client.post("/close", json={"session_id": sid})


async def hostile_client(base: str, args: Args, until: float, counts: dict[str, int]) -> None:
    from mcp import Client

    async with Client(base + "/mcp") as client:
        started = await client.call_tool("start_episode", {"seat": args.seat})
        sid = json.loads(getattr(started.content[0], "text", "{}"))["session_id"]
        i = 0
        while time.monotonic() < until:
            tool = ("act", "preview")[i % 2]
            result = await client.call_tool(tool, {"session_id": sid, "action": HOSTILE[i % len(HOSTILE)]})
            text = re.sub(r"^Error executing tool \w+: ", "", getattr(result.content[0], "text", ""))
            counts["hostile"] += 1
            counts["bare"] += int(result.is_error and not re.match(r"^[A-Z][A-Z_]+: ", text))
            i += 1


def main(args: Args) -> dict[str, float]:
    import httpx

    with tempfile.TemporaryDirectory(prefix="health-bench-") as tmp:
        population = write_file(Path(tmp) / "oracle.toml", toml_text({"roles": {"allocator": "oracle"}}))
        process, base = start_oracle_server(args, population)
        try:
            wait_healthy(base, time.monotonic() + 60)
            counts = {"steps": 0, "hostile": 0, "bare": 0}
            until = time.monotonic() + args.seconds
            threads = [threading.Thread(target=player, args=(base, args, until, counts), daemon=True)
                       for _ in range(args.players)]
            threads += [threading.Thread(target=lambda: asyncio.run(hostile_client(base, args, until, counts)),
                                         daemon=True) for _ in range(args.hostile)]
            for thread in threads:
                thread.start()
            latencies = []
            with httpx.Client(base_url=base, timeout=30) as client:
                while time.monotonic() < until:
                    t0 = time.perf_counter()
                    client.get("/health").raise_for_status()
                    latencies.append(1000 * (time.perf_counter() - t0))
                    time.sleep(args.interval)
            for thread in threads:
                thread.join(timeout=120)
        finally:
            process.kill()  # type: ignore[attr-defined]
    ms = np.asarray(latencies)
    figures = {"health_p50_ms": float(np.percentile(ms, 50)), "health_p99_ms": float(np.percentile(ms, 99)),
               "health_max_ms": float(ms.max()), "health_requests": len(ms), **{k: float(v) for k, v in counts.items()}}
    print(f"/health over {len(ms)} requests: p50 {figures['health_p50_ms']:.1f} ms, p99 {figures['health_p99_ms']:.1f} "
          f"ms, max {figures['health_max_ms']:.1f} ms; {counts['steps']} oracle-background steps, "
          f"{counts['hostile']} hostile MCP calls ({counts['bare']} bare errors)")
    if args.out is not None:
        make_folder(args.out.parent)
        write_file(args.out, json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main(tyro.cli(Args))
