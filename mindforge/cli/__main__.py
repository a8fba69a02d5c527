"""`python -m mindforge.cli` runs the `mindforge` command."""

from mindforge.cli import main

main()
