"""`agentrunner-host config init`: writes the bundled example configuration into a directory.

The wheel carries the repository's `examples/` as `agentrunner_host/examples` (host/hatch_build.py), so
a host installed with pip starts the way the README's does: `config init`, then
`agentrunner-host serve --config examples/host.yaml` from the same directory.
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Annotated

import typer

from agentrunner_host.cli.common import console, fail

_HERE = pathlib.Path(__file__).resolve()
#: where the examples are: inside the installed package, or (an editable install) in the checkout
#: (host/src/agentrunner_host/cli/ -> the repository's root)
_CANDIDATES = [_HERE.parent.parent / "examples", *[p / "examples" for p in _HERE.parents[4:5]]]


def bundled() -> pathlib.Path:
    """The directory holding host.yaml and the other examples."""
    for candidate in _CANDIDATES:
        if (candidate / "host.yaml").is_file():
            return candidate
    raise FileNotFoundError("this installation carries no examples/ (reinstall langbot-agentrunner-host)")


def write_examples(directory: pathlib.Path) -> list[pathlib.Path]:
    """Copies every example file to `directory/examples`, refusing to overwrite any existing file."""
    source = bundled()
    target = directory / "examples"
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    clashes = [target / f.relative_to(source) for f in files if (target / f.relative_to(source)).exists()]
    if clashes:
        raise FileExistsError(f"{clashes[0]} exists (remove it or pick another --dir)")
    written = []
    for f in files:
        dest = target / f.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest)
        written.append(dest)
    return written


def register(config_app: typer.Typer) -> None:
    @config_app.command("init")
    def config_init(
        directory: Annotated[
            pathlib.Path, typer.Option("--dir", help="Where to write examples/ (default: here).")
        ] = pathlib.Path("."),
    ) -> None:
        """Write the example configuration (examples/host.yaml, examples/compose/host.yaml, a knowledge
        base's documents) into DIR/examples; then `agentrunner-host serve --config examples/host.yaml`
        runs from DIR. Refuses to overwrite existing files."""
        try:
            written = write_examples(directory)
        except (FileExistsError, FileNotFoundError, OSError) as exc:
            fail(str(exc))
        for path in written:
            console().print(f"wrote {path}", highlight=False)
        console().print(
            "next: agentrunner-host db upgrade --config examples/host.yaml, then "
            "agentrunner-host serve --config examples/host.yaml",
            highlight=False,
        )
