"""`mindforge hcp ...`: validate, hash, diff, patch and import HCP documents.

Exit codes: 0 success, 1 `diff` found differences (like diff(1)), 2 bad input
(invalid document, refused or invalid patch, unreadable file). Problems are
printed one a line as ``file: /json/pointer: message`` on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mindforge.cli._common import choices, user_errors
from mindforge.errors import InputError

app = typer.Typer(
    help="Validate, hash, diff, patch and import HCP documents.", no_args_is_help=True
)


def _print_errors(errors: list[InputError]) -> None:
    for e in errors:
        print(f"{e.source}: {e.where or '/'}: {e.problem}", file=sys.stderr)


def _fail(exc: InputError) -> typer.Exit:
    from mindforge.hcp import DocumentErrors

    _print_errors(exc.errors if isinstance(exc, DocumentErrors) else [exc])
    return typer.Exit(2)


@app.command()
def validate(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="HCP JSON files (default: the example documents shipped with MindForge).",
                       show_default=False),
    ] = None,
) -> None:
    """Validate HCP files; exit 0 when all are valid, 2 otherwise."""
    from mindforge.hcp import read_json, validate_document
    from mindforge.paths import hcp_examples_dir

    bad = 0
    for path in files or sorted(hcp_examples_dir().glob("*.json")):
        try:
            errors = validate_document(read_json(path), str(path))
        except InputError as exc:
            errors = [exc]
        _print_errors(errors)
        bad += bool(errors)
        if not errors:
            print(f"{path}: ok")
    if bad:
        raise typer.Exit(2)


@app.command("hash")
@user_errors()
def hash_(
    file: Annotated[Path, typer.Argument(help="An HCP JSON file.")],
) -> None:
    """Print the version hash of a valid HCP file (hash of its canonical JSON)."""
    from mindforge.hcp import hcp_hash, load_hcp, read_json

    try:
        load_hcp(file)
    except InputError as exc:
        raise _fail(exc) from None
    print(hcp_hash(read_json(file)))


@app.command()
@user_errors()
def diff(
    a: Annotated[Path, typer.Argument(help="Old HCP file.")],
    b: Annotated[Path, typer.Argument(help="New HCP file.")],
    paths_only: Annotated[
        bool, typer.Option("--paths", help="Print only the changed JSON pointers.")
    ] = False,
) -> None:
    """Show changed JSON pointers and a unified diff; exit 1 when they differ."""
    from mindforge.hcp import read_json
    from mindforge.hcp.diff import diff_documents

    d = diff_documents(read_json(a), read_json(b), str(a), str(b))
    print(f"{d.old_hash} -> {d.new_hash}")
    for p in d.paths:
        print(f"changed: {p}")
    if d.paths and not paths_only:
        sys.stdout.write(d.unified)
    if d.changed:
        raise typer.Exit(1)


@app.command()
@user_errors()
def patch(
    file: Annotated[Path, typer.Argument(help="HCP file to patch.")],
    patch_file: Annotated[Path, typer.Argument(metavar="PATCH", help="RFC 6902 JSON Patch file.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where to write the patched document.")],
) -> None:
    """Apply a JSON Patch; refuse edits under /guarded; write only a valid result."""
    from mindforge.hcp import hcp_hash, pretty_json, read_json
    from mindforge.hcp.patch import apply_patch
    from mindforge.store import atomic_write_text

    doc, ops = read_json(file), read_json(patch_file)
    try:
        result = apply_patch(doc, ops, str(patch_file))
    except InputError as exc:
        raise _fail(exc) from None
    atomic_write_text(out, pretty_json(result))
    print(f"{hcp_hash(doc)} -> {hcp_hash(result)}: wrote {out}")


@app.command("import-mol")
@user_errors()
def import_mol(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="MoL profile folder (lora.md, route.md, intro.md, summary.md)."
        ),
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where to write the HCP document.")],
    model_name: Annotated[
        str | None, typer.Option(help="Value of {{MODEL_NAME}} (default: the folder's name).")
    ] = None,
    base_model: Annotated[str | None, typer.Option(help="Value of {{BASE_MODEL}}.")] = None,
    template: Annotated[
        Path | None,
        typer.Option(
            help="HCP file giving everything but the router (default: the packaged default.hcp.json)."
        ),
    ] = None,
    default_route: Annotated[
        str, typer.Option(help="Route taken when the router's answer cannot be parsed.", **choices("L0", "L1", "L2", "L3"))
    ] = "L0",
) -> None:
    """Convert a MoL Harness profile folder into an HCP document."""
    from mindforge.hcp import hcp_hash, pretty_json, read_json
    from mindforge.hcp.mol import import_mol_profile
    from mindforge.store import atomic_write_text

    base = read_json(template) if template else None
    try:
        doc = import_mol_profile(
            directory,
            model_name=model_name,
            base_model=base_model,
            template=base,
            default_route=default_route,
        )
    except InputError as exc:
        raise _fail(exc) from None
    atomic_write_text(out, pretty_json(doc))
    print(f"{hcp_hash(doc)}: wrote {out}")
