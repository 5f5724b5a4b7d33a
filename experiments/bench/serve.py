"""Load test of ``commons-arena serve``: steps/s and latency over WebSocket sessions, memory over many sessions.

Wall-clock figures move with the machine's load; the CPU time per step (server process and
this client, from /proc and ``process_time``) does much less, and says what one free core
would sustain (1e6 / µs per step).

Starts a real server (``commons-arena serve --port 0``) in its own process on 127.0.0.1,
then, from this process:

1. for each concurrency in ``--sessions`` (default 1, 8, 32): that many WebSocket
   sessions at once, each playing ``--steps`` steps (a new episode whenever one ends);
   reports aggregate steps/s and the p50/p95/p99 latency of one step (send → reply);
2. opens and closes ``--churn`` sessions over HTTP (reset + close) and reports the
   server's resident memory before, after the first tenth, and at the end;
3. steps the environment in-process the way a session does (the remote seat's action
   plus the background policies) for the same scenario, for comparison.

Every loop is bounded by its count and by ``--timeout`` seconds; the server is stopped at
the end. Traffic goes only to the server this script started, on the loopback address.

    python -m experiments.bench.serve                      # 1, 8, 32 sessions x 2000 steps; 10,000 sessions
    python -m experiments.bench.serve --sessions 8 --steps 500 --churn 1000
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from commons_arena.files import make_folder, write_file
from policies.focal import FocalEnv


@dataclass
class Args:
    scenario: str = "standard"
    """scenario the sessions play"""
    seat: str = "allocator"
    """the remote seat (the others are the scenario's background population)"""
    sessions: tuple[int, ...] = (1, 8, 32)
    """concurrent WebSocket sessions, one run each"""
    steps: int = 2000
    """steps per session"""
    churn: int = 10_000
    """sessions opened and closed for the memory check (0: skip)"""
    in_process_steps: int = 5000
    """in-process steps for the comparison"""
    timeout: float = 600.0
    """seconds after which any one phase stops, finished or not"""
    out: Path | None = None
    """also write the figures here as JSON"""


ACTION = {"grant": {"search": {"small": 1, "medium": 1}, "robotics": {"medium": 1}, "safety": {"large": 1}}}


def start_server(args: Args, max_sessions: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "commands", "serve", "--port", "0", "--scenario", args.scenario,
         "--seats", args.seat, "--max-sessions", str(max_sessions), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "http://" not in line:
        process.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    # keep reading what it prints: a full pipe would block the server mid-request
    threading.Thread(target=lambda: process.stdout.read() if process.stdout else None, daemon=True).start()
    return process, line.split()[2]


def wait_healthy(base: str, deadline: float) -> None:
    import httpx

    while True:
        try:
            httpx.get(base + "/health", timeout=2).raise_for_status()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far: what a step costs whatever the machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_session(url: str, index: int, steps: int, action: dict, deadline: float, latencies: list[float]) -> int:
    from websockets.asyncio.client import connect

    done = 0
    async with connect(url, max_size=None, compression=None) as ws:
        episode = 0
        await ws.send(json.dumps({"type": "reset", "data": {"seed": index * 1000}}))
        json.loads(await ws.recv())
        message = json.dumps({"type": "step", "data": action})
        while done < steps and time.monotonic() < deadline:
            start = time.perf_counter()
            await ws.send(message)
            reply = json.loads(await ws.recv())
            latencies.append(time.perf_counter() - start)
            if reply["type"] != "observation":
                raise RuntimeError(f"step refused: {reply['data']}")
            done += 1
            if reply["data"]["done"]:
                episode += 1
                await ws.send(json.dumps({"type": "reset", "data": {"seed": index * 1000 + episode}}))
                json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "close"}))
    return done


async def load(base: str, sessions: int, steps: int, timeout: float) -> dict[str, float]:
    url = "ws" + base.removeprefix("http") + "/ws"
    latencies: list[float] = []
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    counts = await asyncio.gather(*[one_session(url, i, steps, ACTION, deadline, latencies) for i in range(sessions)])
    seconds = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"sessions": sessions, "steps": int(sum(counts)), "seconds": seconds, "steps_per_s": sum(counts) / seconds,
            "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "p99_ms": float(np.percentile(ms, 99))}


def churn(base: str, pid: int, count: int, timeout: float) -> dict[str, float]:
    """Open (reset) and close ``count`` sessions one after another; the server's RSS along the way."""
    import httpx

    marks = {"rss_start_mb": rss_mb(pid)}
    samples: list[tuple[int, float]] = []
    deadline = time.monotonic() + timeout
    opened, stopped = 0, ""
    start = time.perf_counter()
    with httpx.Client(base_url=base, timeout=60) as http:
        try:
            for i in range(count):
                if time.monotonic() > deadline:
                    stopped = f"time limit of {timeout:g} s"
                    break
                sid = http.post("/reset", json={"seed": i}).json()["observation"]["metadata"]["session_id"]
                http.post("/close", json={"session_id": sid}).raise_for_status()
                opened += 1
                if opened % max(1, count // 10) == 0:
                    samples.append((opened, rss_mb(pid)))
        except httpx.HTTPError as err:
            stopped = f"{type(err).__name__} after {opened} sessions"
        sessions_left = http.get("/info").json()["sessions"]
    return {"sessions_opened_and_closed": opened, "seconds": time.perf_counter() - start, **marks,
            "rss_samples_mb": samples, "rss_end_mb": rss_mb(pid), "sessions_left": sessions_left, "stopped": stopped}


def in_process(args: Args) -> dict[str, float]:
    """Steps/s of what one session does per step, without the wire: the seat's action + the background."""
    from serving.wire import decode_action, seat_spec

    env = FocalEnv.from_scenario(args.scenario, focal=[args.seat])
    action = decode_action(seat_spec(env.config, args.seat), ACTION)
    steps, episode = 0, 0
    env.reset(seed=0)
    start, cpu = time.perf_counter(), time.process_time()
    while steps < args.in_process_steps:
        if env.episode_over:
            episode += 1
            env.reset(seed=episode)
        env.step({args.seat: action})
        steps += 1
    seconds = time.perf_counter() - start
    return {"steps": steps, "steps_per_s": steps / seconds, "cpu_us_per_step": (time.process_time() - cpu) / steps * 1e6}


def main(args: Args) -> dict:
    results: dict = {"scenario": args.scenario, "seat": args.seat}
    results["in_process"] = in_process(args)
    print(f"in-process (env.step + background policies): {results['in_process']['steps_per_s']:,.0f} steps/s, "
          f"{results['in_process']['cpu_us_per_step']:.0f} µs CPU per step")
    process, base = start_server(args, max_sessions=max([*args.sessions, 1]) + 1)
    try:
        wait_healthy(base, time.monotonic() + 60)
        results["websocket"] = []
        print("| sessions | steps | steps/s | p50 ms | p95 ms | p99 ms | server CPU µs/step | client CPU µs/step |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.sessions:
            server_cpu, client_cpu = cpu_seconds(process.pid), time.process_time()
            row = asyncio.run(load(base, n, args.steps, args.timeout))
            row["server_cpu_us_per_step"] = (cpu_seconds(process.pid) - server_cpu) / row["steps"] * 1e6
            row["client_cpu_us_per_step"] = (time.process_time() - client_cpu) / row["steps"] * 1e6
            results["websocket"].append(row)
            print(f"| {n} | {row['steps']} | {row['steps_per_s']:,.0f} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} "
                  f"| {row['p99_ms']:.2f} | {row['server_cpu_us_per_step']:.0f} | {row['client_cpu_us_per_step']:.0f} |")
        if args.churn:
            results["memory"] = churn(base, process.pid, args.churn, args.timeout)
            m = results["memory"]
            trail = ", ".join(f"{n:,}: {mb:.1f}" for n, mb in m["rss_samples_mb"])
            print(f"memory: {m['sessions_opened_and_closed']:,} sessions opened and closed in {m['seconds']:.0f} s; "
                  f"server RSS {m['rss_start_mb']:.1f} MB at start, then (sessions: MB) {trail}; "
                  f"{m['sessions_left']} left open" + (f"; stopped early: {m['stopped']}" if m["stopped"] else ""))
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if args.out is not None:
        make_folder(args.out.parent)
        write_file(args.out, json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(tyro.cli(Args))
