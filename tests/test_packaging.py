"""The package list in pyproject.toml names every Python package under the mapped source folders.

setuptools installs only the packages it is told about: an editable install (``pip install -e .``)
finds a missing subpackage through the source folder anyway, a wheel (``pip install .``, or a copy
carried to another machine) does not, and then ``import cogym.runners.config.schema`` fails there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_under_the_source_folders_is_listed():
    conf = _setuptools()
    listed = set(conf["packages"])
    found = set()
    for name, folder in conf["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert "cogym.learners.algorithms" in found  # the walk sees nested packages
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed packages that have no __init__.py"


def test_the_package_data_patterns_match_files():
    conf = _setuptools()
    dirs = conf["package-dir"]
    for package, patterns in conf["package-data"].items():
        top = ".".join(package.split(".")[:2])
        folder = ROOT / dirs[top] / Path(*package.split(".")[2:])
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing in {folder}"
