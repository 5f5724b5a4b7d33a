"""The server's own work per step, in-process: what a WebSocket step message costs beside the env's step.

``experiments.bench.serve`` measures a real server (uvicorn, the WebSocket, the event loop)
from /proc; this script takes the network away and times, in one process with
``time.process_time``, the same two loops:

* **env**: ``FocalEnv.step`` of the remote seat's action with the background policies (what
  ``bench.serve`` calls in-process);
* **server**: the app's per-message work on a session: parse the JSON message, decode the action,
  step, build the frame (observation by name, every seat's info, the shocks and credibility
  causes), encode the reply as the WebSocket route does.

Their ratio is the serving layer's share, free of the transport; ``bench.serve``'s server CPU
minus this script's server figure is uvicorn's and the event loop's. ``--profile`` prints
cProfile's top entries of the server loop (cumulative), the serving modules first.

    python -m experiments.bench.serve_profile --steps 3000 [--profile]
"""

from __future__ import annotations

import cProfile
import json
import pstats
import time
from dataclasses import dataclass

import tyro

import commons_arena
from policies.focal import FocalEnv
from serving.app import _handle_message
from serving.session import ServeSettings, SessionStore
from serving.wire import decode_action, seat_spec


@dataclass
class Args:
    scenario: str = "standard"
    """scenario the session plays (its own background)"""
    steps: int = 3000
    """steps per timed loop (episodes restart on the same seed)"""
    rounds: int = 2
    """alternating rounds of the two loops"""
    profile: bool = False
    """then print cProfile's top entries of the server loop"""


ACTION = {"grant": {"search": {"small": 1}}}
LIMIT = 65536


def server_loop(scenario: str, steps: int) -> None:
    store = SessionStore(ServeSettings(scenario=scenario))
    session = store.open("ws")
    reset = json.dumps({"type": "reset", "data": {"seed": 1}})
    step = json.dumps({"type": "step", "data": ACTION})
    _handle_message(reset, session, LIMIT)
    for _ in range(steps):
        reply = _handle_message(step, session, LIMIT)
        assert reply is not None
        json.dumps(reply, allow_nan=False, separators=(",", ":"))  # as the WebSocket route sends it
        if reply["data"]["done"]:
            _handle_message(reset, session, LIMIT)


def env_loop(scenario: str, steps: int) -> None:
    config = commons_arena.load_scenario(scenario)
    env = FocalEnv.from_scenario(config, ["allocator"])
    action = decode_action(seat_spec(config, "allocator"), ACTION)
    env.reset(seed=1)
    for _ in range(steps):
        env.step({"allocator": action})
        if env.episode_over:
            env.reset(seed=1)


def cpu_us_per_step(loop, scenario: str, steps: int) -> float:
    start = time.process_time()
    loop(scenario, steps)
    return (time.process_time() - start) / steps * 1e6


def main(args: Args) -> dict[str, float]:
    server_loop(args.scenario, 200)  # warm: imports, caches, the table pool
    env_loop(args.scenario, 200)
    env, server = [], []
    for _ in range(args.rounds):
        env.append(cpu_us_per_step(env_loop, args.scenario, args.steps))
        server.append(cpu_us_per_step(server_loop, args.scenario, args.steps))
    out = {"env_us": min(env), "server_us": min(server), "ratio": min(server) / min(env)}
    print(f"env {out['env_us']:.0f} µs CPU per step, server (no transport) {out['server_us']:.0f} µs: "
          f"{out['ratio']:.2f}x (best of {args.rounds} rounds of {args.steps} steps)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(server_loop, args.scenario, args.steps)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(r"serving|json", 25)
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
