"""`make bench`: every benchmark that exists, one after another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for script in sorted(HERE.glob("*.py")):
    if script.name != "run_all.py":
        print(f"== {script.name}", flush=True)
        subprocess.run([sys.executable, str(script)], check=False)
