"""Headless Chromium (Debian's package) opens a run's artifacts in the Prefect UI.

The rendered pages must show the HCP diff and the trajectory rows, and a
row's ``detail`` link must open that trajectory's page. The first test uses
the real deployed cycle (tests/e2e_cycle.py); the second renders the same
flows' artifacts around stand-in stages, so the UI side is checked even
where the stages cannot run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cdp_browser import Browser, chromium
from helpers import REPO, require
from prefect_stack import PrefectStack

pytestmark = pytest.mark.slow


def artifact(api_url: str, key: str) -> dict:
    found = httpx.post(f"{api_url}/artifacts/filter", json={"artifacts": {"key": {"any_": [key]}}}, timeout=30)
    found.raise_for_status()
    assert found.json(), f"no artifact {key}"
    return found.json()[0]


def js_number(x: float) -> str:
    """``x`` as the UI prints a JSON number: 0.0 shows as ``0`` (a cycle that passed nothing did)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


_CHART_SHOWN = """(() => {
  const img = [...document.images].find(i => i.src.startsWith("data:image/svg+xml"));
  return img ? {complete: img.complete, width: img.naturalWidth, height: img.naturalHeight} : null;
})()"""


def check_efficacy(api_url: str, cycle: int, shot: Path | None = None) -> None:
    """The efficacy table lists every cycle; the pass@1 chart is an image the UI loads and draws."""
    ui = api_url.removesuffix("/api")
    browser = Browser()
    try:
        table = artifact(api_url, f"cycle-{cycle}-efficacy")
        rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
        text = browser.open(f"{ui}/artifacts/artifact/{table['id']}", ["vs cycle 0", "routing"])
        assert "vs cycle 0" in text and js_number(rows[-1]["pass@1"]) in text, text[:2000]
        chart = artifact(api_url, f"cycle-{cycle}-efficacy-chart")
        browser.open(f"{ui}/artifacts/artifact/{chart['id']}", [])
        deadline, shown = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            shown = browser.evaluate(_CHART_SHOWN)
            if shown and shown["complete"] and shown["width"] > 0:
                break
            time.sleep(0.5)
        assert shown and shown["width"] == 560 and shown["height"] == 300, shown
        if shot is not None:
            browser.screenshot(shot)
    finally:
        browser.close()


def check_ui(api_url: str, diff_words: list[str]) -> None:
    """The diff page shows the diff; the table shows rows; a row's detail link shows the trajectory."""
    ui = api_url.removesuffix("/api")
    browser = Browser()
    try:
        diff = artifact(api_url, "cycle-1-hcp-diff")
        text = browser.open(f"{ui}/artifacts/artifact/{diff['id']}", ["HCP change in cycle 1", *diff_words])
        assert "HCP change in cycle 1" in text and all(w in text for w in diff_words), text[:2000]

        table = artifact(api_url, "cycle-1-expansion-trajectories")
        rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
        first = next(r for r in rows if r["detail"] != "-")
        text = browser.open(f"{ui}/artifacts/artifact/{table['id']}", [r["trajectory"] for r in rows[:3]])
        assert all(r["trajectory"] in text for r in rows[:3]), text[:2000]
        assert first["verdict"] in text and first["route"] in text

        text = browser.open(f"{ui}{first['detail']}", [f"Trajectory {first['trajectory']}", "Answer"])
        assert f"Trajectory {first['trajectory']}" in text and "Hop" in text, text[:2000]

        summary = artifact(api_url, "cycle-1-summary")
        text = browser.open(f"{ui}/artifacts/artifact/{summary['id']}", ["RSI cycle 1", "adapter"])
        assert "RSI cycle 1" in text and "validation before" in text, text[:2000]
    finally:
        browser.close()




@pytest.mark.docker
@pytest.mark.model
@pytest.mark.timeout(3600)  # runs the cycle when the e2e test did not in this session
def test_the_deployed_cycle_reads_well_in_the_ui(cycle_run) -> None:
    require(chromium() is not None, "Debian's chromium is not installed (scripts/setup.sh installs it)")
    diff = artifact(cycle_run.stack.api_url, "cycle-1-hcp-diff")["data"]
    words = ["@@"] if "```diff" in diff else ["No change"]
    check_ui(cycle_run.stack.api_url, words)
    check_efficacy(cycle_run.stack.api_url, 1)  # the deployment evaluates after the cycle, and cycle 0 before


_STAND_IN_RUN = """
import sys
from contextlib import contextmanager
from pathlib import Path
sys.path.insert(0, {tests!r})
import cycle_standins as s
import mindforge.flows.rsi_cycle as rsi
from mindforge.cycle import CycleConfig, runtime
runtime.expansion_runner = lambda run, log, mapper=None: s.expansion_full
runtime.update_runner = lambda run, progress=None, log=None: s.update_full
runtime.eval_runner = lambda run, log, mapper=None: s.eval_full
rsi.prepare = lambda settings: None
from mindforge.run_services import RunServices
@contextmanager
def no_engine(settings, run_dir, cycle, stage="discovery", **kw):
    yield RunServices(run_dir=run_dir, settings=settings, model_path=None, engine_url="http://127.0.0.1:9")
rsi.open_run_services = no_engine
rsi.rsi_cycle(CycleConfig(run_dir=Path({run!r}), stages=("expansion", "update", "eval")))
"""


def test_the_flows_artifacts_read_well_in_the_ui(tmp_path: Path) -> None:
    require(chromium() is not None, "Debian's chromium is not installed (scripts/setup.sh installs it)")
    stack = PrefectStack(tmp_path / "prefect")
    try:
        stack.start_server()
        script = _STAND_IN_RUN.format(tests=str(REPO / "tests"), run=str(tmp_path / "run"))
        done = subprocess.run([sys.executable, "-c", script], env=stack.env, cwd=REPO, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        check_ui(stack.api_url, ["Cycle 1: check edge cases.", "/agents_md"])
        check_efficacy(stack.api_url, 1, shot=tmp_path / "efficacy-chart.png")
    finally:
        stack.stop()
