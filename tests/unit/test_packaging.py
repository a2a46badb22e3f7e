"""What a user gets from PyPI: the licence, the description page, the dependencies."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def metadata() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["metadata"]


def test_the_wheel_ships_the_mit_licence():
    assert metadata()["license_files"].split() == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_pypi_description_stands_on_its_own():
    source = metadata()["long_description"].removeprefix("file:").strip()
    text = (ROOT / source).read_text()
    assert "dev.py" not in text  # not in the wheel, means nothing to a pip user
    relative = [link for link in re.findall(r"\]\(([^)]+)\)", text) if not link.startswith("https://")]
    assert relative == [], f"relative links break on PyPI: {relative}"


def test_django_environ_is_for_the_example_project_only():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert "environ" not in config["options"]["install_requires"]
    extras = config["options.extras_require"]
    assert "django-environ" in extras["dev"] and "django-environ" in extras["demo"]
    library = [
        path
        for folder in ("pgflow", "pgflow_dashboard")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"^\s*(import|from) environ\b", path.read_text(), re.M)
    ]
    assert library == []


def test_nothing_shipped_points_at_files_outside_the_repository():
    shipped = [
        *ROOT.glob("*.md"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "pgflow").rglob("*.py"),
        *(ROOT / "pgflow_dashboard").rglob("*.py"),
    ]
    offenders = [
        str(path.relative_to(ROOT)) for path in shipped if re.search(r"\b(API|DESIGN)\.md\b", path.read_text())
    ]
    assert offenders == []
