"""The project's own files agree: pyproject vs environment.yml, README vs Makefile vs CI, lint."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
from helpers import REPO

# conda-forge package names that differ from the PyPI distribution names.
CONDA_TO_PIP = {"pytorch": "torch"}
NOT_PYTHON_DEPS = {"python", "pip"}


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    assert m, req
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def _conda_deps() -> dict[str, str]:
    deps = {}
    in_deps = False
    for line in (REPO / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            in_deps = True
            continue
        m = re.match(r"^  - ([^:]+)$", line)
        if in_deps and m:
            name, spec = _split(m.group(1))
            if name not in NOT_PYTHON_DEPS:
                deps[CONDA_TO_PIP.get(name, name)] = spec
    return deps


def test_environment_yml_and_pyproject_list_the_same_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pip = dict(_split(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"])
    conda = _conda_deps()
    assert conda == pip


def test_readme_commands_match_the_makefile_and_ci():
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", make, re.M) and re.search(r"^test:", make, re.M)
    ci = [
        line
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert ci[-1] == "make test"


def test_the_readme_names_every_field_a_resume_may_change():
    from distcgan.config import RESUMABLE_FIELDS

    readme = " ".join((REPO / "README.md").read_text().split())
    said = re.search(
        r"On `--resume` the run's own `config.json` is the base and only (.*?) may", readme
    )
    assert said, "README: the sentence on what a resume may change is gone"
    assert set(re.findall(r"`(\w+)`", said.group(1))) == set(RESUMABLE_FIELDS)


def test_ruff_is_clean():
    local = Path(sys.executable).parent / "ruff"  # installed by the dev extra
    ruff = str(local) if local.exists() else shutil.which("ruff")
    assert ruff, "ruff is not installed: pip install -e '.[dev]'"
    result = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_make_refuses_to_build_the_venv_on_a_full_disk_in_one_line(tmp_path):
    """Less free space than the venv needs: one line naming the free space and the fix, before any
    venv is made (a CI run once died half-way through pip with "No space left on device")."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    result = subprocess.run(
        ["make", "-s", "venv", "VENV_NEED_GB=1e9", f"PYTHON={sys.executable}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    ours = [  # make's own closing line is "make: ***", or "make[N]: ***" under another make
        line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)
    ]
    assert len(ours) == 1, result.stderr
    assert re.fullmatch(
        r"make: \d+\.\d GB free on this disk, and \.venv .* need 1e\+09: free some space "
        r"\(df -h \.\), then run make again",
        ours[0],
    ), ours[0]
    assert not (tmp_path / ".venv").exists()
