"""What `mindforge --help` and `--version` say: choices as choices, defaults shown, nothing eaten."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from helpers import REPO
from typer.main import get_command

from mindforge.cli import app


def _commands(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _option(path: tuple[str, ...], flag: str) -> click.Option:
    command = dict(_commands(get_command(app)))[path]
    return next(p for p in command.params if flag in p.opts)


def test_version_is_the_package_version():
    from importlib.metadata import version

    run = subprocess.run([sys.executable, "-m", "mindforge.cli", "--version"], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"mindforge {version('mindforge')}"


def test_no_help_text_carries_brackets_that_rich_would_eat():
    # Help is rendered as rich markup: "[default 1]" vanishes and leaves "Cycles to run ."
    eaten = re.compile(r"\[[A-Za-z#/@]")
    bad = [(" ".join(path) or "mindforge", p.opts[0], p.help)
           for path, command in _commands(get_command(app)) for p in command.params
           if isinstance(getattr(p, "help", None), str) and eaten.search(p.help)]
    assert not bad


def test_choices_are_the_library_ones_and_others_are_refused():
    from mindforge.cycle.local import SERVICES
    from mindforge.discovery.config import PROPOSERS as DISCOVERY_PROPOSERS
    from mindforge.expansion.config import PROPOSERS as EXPANSION_PROPOSERS
    from mindforge.rollouts import HCP_REWARDS
    from mindforge.settings import ENGINE_BACKENDS
    from mindforge.store import STAGES
    from mindforge.tasks.models import ROUTES
    from mindforge.update.loss import LOSS_TYPES

    expected = {
        (("cycle",), "--stage"): STAGES,
        (("discover",), "--proposer"): DISCOVERY_PROPOSERS,
        (("discover",), "--family"): ROUTES,
        (("expand",), "--proposer"): EXPANSION_PROPOSERS,
        (("expand",), "--family"): ROUTES,
        (("update",), "--route"): ROUTES,
        (("update",), "--reward"): tuple(dict.fromkeys(HCP_REWARDS.values())),
        (("update",), "--loss-type"): LOSS_TYPES,
        (("update",), "--routing"): ("pinned", "routed"),
        (("up",), "--only"): SERVICES,
        (("down",), "--only"): SERVICES,
        (("hcp", "import-mol"), "--default-route"): ROUTES,
        (("engine", "serve"), "--backend"): ENGINE_BACKENDS,
        **{((command,), "--engine"): ENGINE_BACKENDS for command in ("up", "cycle", "discover", "expand", "update",
                                                                     "eval")},
    }
    for (path, flag), allowed in expected.items():
        assert _option(path, flag).metavar == "<" + "|".join(allowed) + ">", (path, flag)


@pytest.mark.parametrize("argv", [["update", "--run-dir", "x", "--loss-type", "ppo"],
                                  ["discover", "--run-dir", "x", "--proposer", "model", "--proposer", "oracle"]])
def test_a_value_outside_the_choices_is_a_usage_error(argv):
    run = subprocess.run([sys.executable, "-m", "mindforge.cli", *argv], capture_output=True, text=True,
                         cwd=REPO, check=False)
    assert run.returncode == 2
    assert "is not one of" in run.stderr


def test_defaults_are_shown():
    run = subprocess.run([sys.executable, "-m", "mindforge.cli", "cycle", "--help"], capture_output=True,
                         text=True, cwd=REPO, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin",
                                                   "PYTHONPATH": str(REPO)}, check=False)
    assert run.returncode == 0, run.stderr
    assert "Cycles to run. [default: (1)]" in run.stdout
    assert "<discovery|expansion|update|eval>" in run.stdout
