"""Print the pinned requirements of pyproject.toml, one per line, for `pip install -r`.

    python tools/pyproject_requirements.py [pyproject.toml] [--extra NAME]… [--no-base]
                                           [--only NAME]… [--exclude NAME]…

The project installs no package of its own (`packages = []`: the code runs from the source tree on
PYTHONPATH), so images install the dependency lists directly. Standard library only: it runs on a bare
python image before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

DEFAULT_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def project_name(requirement: str) -> str:
    """The normalized (PEP 503) name of a requirement string: 'Foo_Bar[x]==1' -> 'foo-bar'."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(
    pyproject: dict[str, object],
    *,
    extras: Iterable[str] = (),
    base: bool = True,
    only: Iterable[str] = (),
    exclude: Iterable[str] = (),
) -> list[str]:
    project = pyproject.get("project")
    if not isinstance(project, dict):
        raise ValueError("pyproject.toml has no [project] table")
    optional = project.get("optional-dependencies", {})
    selected: list[str] = list(project.get("dependencies", [])) if base else []
    for extra in extras:
        if extra not in optional:
            raise ValueError(
                f"no extra {extra!r} in pyproject.toml (there are: {', '.join(sorted(optional))})"
            )
        selected.extend(optional[extra])
    wanted = {project_name(name) for name in only}
    unwanted = {project_name(name) for name in exclude}
    result: list[str] = []
    for requirement in selected:
        name = project_name(requirement)
        if (wanted and name not in wanted) or name in unwanted or requirement in result:
            continue
        result.append(requirement)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pyproject", nargs="?", type=Path, default=DEFAULT_PYPROJECT)
    parser.add_argument("--extra", action="append", default=[], help="add an optional-dependencies group")
    parser.add_argument("--no-base", action="store_true", help="leave out [project].dependencies")
    parser.add_argument("--only", action="append", default=[], help="keep only these projects")
    parser.add_argument("--exclude", action="append", default=[], help="leave out these projects")
    options = parser.parse_args(argv)
    with options.pyproject.open("rb") as handle:
        data = tomllib.load(handle)
    try:
        lines = requirements(
            data, extras=options.extra, base=not options.no_base, only=options.only, exclude=options.exclude
        )
    except ValueError as error:
        parser.error(str(error))
    if not lines:
        parser.error("that selects no requirement")
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
