"""The `mindforge` command. Thin: parse, call the library, print.

Each command group lives in its own module; heavy libraries (torch,
transformers, docker, prefect) are imported inside commands so that
`mindforge --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mindforge.cli import cycle as cycle_cmd
from mindforge.cli import discover, engine, expand, hcp, model, sandbox, tasks
from mindforge.cli import eval as eval_cmd
from mindforge.cli import serve as serve_cmd
from mindforge.cli import services as services_cmd
from mindforge.cli import status as status_cmd
from mindforge.cli import update as update_cmd

app = typer.Typer(
    name="mindforge",
    help="Recursive self-improvement cycles for Mixture-of-LoRA agent models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version() -> str:
    """The installed distribution's version; the package's own when run from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mindforge")
    except PackageNotFoundError:
        from mindforge import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"mindforge {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Recursive self-improvement cycles for Mixture-of-LoRA agent models."""


app.add_typer(hcp.app, name="hcp")
app.add_typer(tasks.app, name="tasks")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(model.app, name="model")
app.add_typer(engine.app, name="engine")
app.add_typer(eval_cmd.bench_app, name="bench")
app.command("update")(update_cmd.update)
app.command("discover")(discover.discover)
app.command("expand")(expand.expand)
app.command("cycle")(cycle_cmd.cycle)
app.command("eval")(eval_cmd.eval_)
app.command("status")(status_cmd.status)
app.command("up")(services_cmd.up)
app.command("down")(services_cmd.down)
app.command("serve")(serve_cmd.serve)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    import signal

    # SIGTERM (kill, a Prefect cancellation, systemd) unwinds like Ctrl-C, so
    # every `with` block runs its exit: engines and sandbox containers a
    # command started are stopped, not orphaned.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    app()
