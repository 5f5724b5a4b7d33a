"""``serve``: the arena over HTTP/WebSocket and MCP (the server itself is ``serving/``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import commons_arena
from commands.common import UsageError, check_number


@dataclass
class Serve:
    """Serve the arena over HTTP/WebSocket (openenv's /reset, /step, /state, /ws), MCP tools at /mcp, a page at /play.

    Clients play the chosen seats; every other seat is played by the population. Needs the
    ``serve`` extra (pip install 'commons-arena[serve]')."""

    scenario: str = "standard"
    """default scenario (name or TOML path); clients may pick any shipped scenario by name"""
    seats: tuple[str, ...] = ("allocator",)
    """seats a client plays unless its reset names others"""
    population: str | None = None
    """population file (TOML: [roles] / [agents]) for the other seats (may name learned checkpoints); default: each
    scenario's own"""
    host: str = "127.0.0.1"
    """address to listen on (0.0.0.0 exposes the server to the network)"""
    port: int = 8000
    """port (0: any free port, printed at start)"""
    max_sessions: int = 64
    """sessions open at once"""
    idle_seconds: float = 300.0
    """close a session after this long without a request"""
    max_body_bytes: int = 65536
    """largest request body or WebSocket message"""
    log_level: str = "info"
    """uvicorn's log level ('warning' drops the access log)"""

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port must be in [0, 65535], got {self.port}")
        check_number("--max-sessions", self.max_sessions, 1, 10_000)
        check_number("--idle-seconds", self.idle_seconds, 0.1, 7 * 86_400)
        check_number("--max-body-bytes", self.max_body_bytes, 1024, 16 * 2**20)
        if self.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise UsageError(f"--log-level must be one of critical, error, warning, info, debug, trace; got {self.log_level}")
        config = commons_arena.load_scenario(self.scenario)
        unknown = [s for s in self.seats if s not in config.agents]
        if unknown or not self.seats:
            raise UsageError(f"--seats must name seats of scenario {config.name!r}: {list(config.agents)}; got {list(self.seats)}")
        if self.population is not None:
            from commons_arena.arena import ArenaEnv
            from policies.population import Population
            from serving.session import ServeSettings

            population = Population.from_toml(self.population, config)
            settings = ServeSettings(scenario=self.scenario, seats=self.seats, population=population)
            for name in settings.allowed_scenarios():  # every table a client may open, built once now: a population
                hosted = settings.config(name)  # the server cannot play (a parameter its policy refuses, a
                try:  # checkpoint of another shape) is refused at start, not at every reset
                    population.build(hosted, env=ArenaEnv(hosted), strict=False)
                except (ValueError, KeyError, TypeError) as err:
                    raise UsageError(f"--population {self.population} cannot play scenario {name!r}: {err}") from None

    def run(self) -> None:
        from policies.population import Population
        from serving.app import bind, make_server
        from serving.session import ServerLimits, ServeSettings

        population = Population.from_toml(self.population, self.scenario) if self.population else None
        settings = ServeSettings(scenario=self.scenario, seats=self.seats, population=population,
                                 limits=ServerLimits(self.max_sessions, self.idle_seconds, self.max_body_bytes))
        sock = bind(self.host, self.port)
        print(f"commons-arena serve: http://{self.host}:{sock.getsockname()[1]} (play page: /play, MCP: /mcp)", flush=True)
        make_server(settings, host=self.host, port=self.port, log_level=self.log_level).run(sockets=[sock])


@dataclass
class ServeCheck:
    """Check a running server over HTTP, per scenario: the oracle scores the maximum of the allocator seat's
    references, do-nothing and random sit well below it, the same seed gives the same episode, two sessions never
    see each other's state, /state keeps its contract (serving/check.py). Exit 1 if a check fails."""

    url: str = "http://127.0.0.1:8000"
    """the server (commons-arena serve, or its OpenEnv deployment)"""
    scenarios: tuple[str, ...] = ()
    """scenarios to check (default: every scenario the server hosts)"""
    seed: int = 7
    """episode seed (seed + 1 is played too, to report whether the seed matters)"""
    timeout: float = 120.0
    """seconds per request (the references play whole episodes on the server, the oracle a MILP per tick)"""

    def validate(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--url must start with http:// or https://, got {self.url!r}")
        check_number("--seed", self.seed, 0, 2**31 - 2)
        check_number("--timeout", self.timeout, 1, 3600)

    def run(self) -> None:
        from serving.check import CheckError, check_server, report

        try:
            results = check_server(self.url, list(self.scenarios) or None, self.seed, self.timeout)
        except CheckError as err:
            raise UsageError(f"serve-check: {err}") from None
        print(report(results), flush=True)
        if not all(r.passed for r in results):
            sys.exit(1)
