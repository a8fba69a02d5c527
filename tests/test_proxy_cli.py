"""`mindforge serve` refuses to start on bad configuration: exit 2, one line naming what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mindforge.paths import default_hcp_path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_HCP = default_hcp_path()


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    base = {k: v for k, v in os.environ.items() if k != "MINDFORGE_API_KEY"}
    return subprocess.run([sys.executable, "-m", "mindforge.cli", "serve", *args], check=False, capture_output=True,
                          text=True, timeout=120, env={**base, **(env or {})}, cwd=REPO)


def test_an_hcp_failing_validation_exits_2_naming_the_file_and_pointer(tmp_path) -> None:
    doc = json.loads(DEFAULT_HCP.read_text())
    doc["router"]["default_route"] = "L9"
    bad = tmp_path / "bad.hcp.json"
    bad.write_text(json.dumps(doc))
    out = serve("--hcp", str(bad), "--upstream", "http://127.0.0.1:9", "--allow-unauthenticated", "--port", "0")
    assert out.returncode == 2, out.stderr
    assert str(bad) in out.stderr and "/router/default_route" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_no_key_is_refused_and_no_key_off_loopback_too(tmp_path) -> None:
    out = serve("--hcp", str(DEFAULT_HCP), "--upstream", "http://127.0.0.1:9", "--host", "127.0.0.1")
    assert out.returncode == 2 and "API key is required" in out.stderr, out.stderr
    out = serve("--hcp", str(DEFAULT_HCP), "--host", "0.0.0.0", "--allow-unauthenticated")
    assert out.returncode == 2 and "loopback" in out.stderr and "0.0.0.0" in out.stderr, out.stderr
    empty = tmp_path / "key"
    empty.write_text("")
    out = serve("--hcp", str(DEFAULT_HCP), "--api-key-file", str(empty))
    assert out.returncode == 2 and str(empty) in out.stderr and "empty" in out.stderr, out.stderr
