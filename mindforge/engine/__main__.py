"""`python -m mindforge.engine serve ...` (the same command as `mindforge engine serve`)."""

from mindforge.cli.engine import app

app(prog_name="python -m mindforge.engine")
