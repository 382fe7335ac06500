"""The package is the folder ``cogym/``, and a wheel (``pip install .``, not editable) carries all of it.

setuptools finds the packages under ``cogym/`` that have an ``__init__.py``: an editable install finds a
folder without one through the source tree anyway, a wheel does not, and then ``import cogym.x.y`` fails
on the machine the wheel was carried to. So every folder of Python files has its ``__init__.py``, the
package-data patterns match files, and a wheel built from this tree holds every module and data file.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cogym"


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_of_python_files_under_cogym_is_a_package():
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert PACKAGE / "learners" / "algorithms" in folders  # the walk sees nested packages
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert missing == [], "add an __init__.py to these folders, or a wheel leaves them out"
    assert _setuptools()["packages"]["find"]["include"] == ["cogym", "cogym.*"]


def test_the_package_data_patterns_match_files():
    for package, patterns in _setuptools()["package-data"].items():
        folder = ROOT / Path(*package.split("."))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing in {folder}"


@pytest.mark.slow
def test_a_wheel_holds_every_module_and_data_file(tmp_path):
    source = tmp_path / "src"  # a copy: setuptools leaves a build/ folder in the tree it builds
    shutil.copytree(PACKAGE, source / "cogym", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(source)], check=True, timeout=300, capture_output=True)
    wheel = next(tmp_path.glob("cogym-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    for package, patterns in _setuptools()["package-data"].items():
        folder = ROOT / Path(*package.split("."))
        wanted |= {str(p.relative_to(ROOT)) for pattern in patterns for p in folder.glob(pattern)}
    assert wanted - names == set(), "missing from the wheel"
    assert not any(n.startswith(("tests/", "benchmarks/", "scripts/")) for n in names)
