"""``commons-arena serve-check``: OpenEnv's proposed semantic checks (RFC 008) over HTTP, against a real server."""

from __future__ import annotations

import pytest

from commands.cli import main
from serving.app import running_server
from serving.check import check_server, report
from serving.session import ServeSettings

pytestmark = [pytest.mark.slow, pytest.mark.server]  # semantic checks over HTTP against a real server


@pytest.fixture(scope="module")
def url():
    with running_server(ServeSettings(scenarios=("standard", "crisis", "deadline_crunch"))) as base:
        yield base


def test_every_check_passes_and_the_oracle_tops_the_references(url):
    results = check_server(url, ["standard", "deadline_crunch"], seed=7)
    for r in results:
        assert r.passed, report(results)
        assert r.references["oracle"] == max(r.references.values())
        assert max(r.floors.values()) < r.references["oracle"]
    standard = results[0]
    assert standard.references["oracle"] == pytest.approx(277.8, abs=0.1) and standard.seed_matters
    assert not results[1].seed_matters  # fixed jobs, no random shock: the same episode on every seed
    text = report(results)
    assert "2/2 scenarios pass every check" in text and "sessions_isolated" in text


def test_the_command_prints_the_table_and_refuses_what_it_cannot_check(url, capsys):
    main(["serve-check", "--url", url, "--scenarios", "crisis"])
    out = capsys.readouterr().out
    assert "crisis" in out and "1/1 scenarios pass every check" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["serve-check", "--url", url, "--scenarios", "nowhere"])
    assert exit_info.value.code == 2 and "does not host ['nowhere']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["serve-check", "--url", "ftp://x"])
    assert exit_info.value.code == 2


def test_openenv_validate_passes_on_the_deployment_folder():
    """openenv-core's local checks: openenv.yaml, a pyproject with a server entry point, uv.lock, server/app.py."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "deploy" / "commons_arena_env"
    result = subprocess.run([sys.executable, "-m", "openenv.cli", "validate", str(folder), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["passed"] is True
