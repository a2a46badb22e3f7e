"""The Django releases pgflow supports are one list, said alike by the pin, the classifiers,
the test command's legs and the docs, and the Django this runs on is among them."""

from __future__ import annotations

import configparser
import importlib.util
import re
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def classified() -> list[str]:
    """The `Framework :: Django :: X.Y` classifiers, in order."""
    return re.findall(r"Framework :: Django :: (\d+\.\d+)", setup_cfg()["metadata"]["classifiers"])


def pin() -> tuple[tuple[int, int], tuple[int, int]]:
    found = re.search(r"^\s*Django>=(\d+)\.(\d+),<(\d+)\.(\d+)\s*$", setup_cfg()["options"]["install_requires"], re.M)
    assert found, "install_requires must pin Django as >=X.Y,<X.Y"
    low_major, low_minor, high_major, high_minor = map(int, found.groups())
    return (low_major, low_minor), (high_major, high_minor)


def as_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def test_the_pin_runs_from_the_oldest_classified_release_to_the_newest():
    # Django's policy: the oldest LTS still supported through the current feature release,
    # capped just below the next, untested one.
    low, high = pin()
    versions = [as_tuple(v) for v in classified()]
    assert low == versions[0]
    newest = versions[-1]
    assert high in ((newest[0], newest[1] + 1), (newest[0] + 1, 0)), f"cap {high} is not the release after {newest}"


def test_every_classified_release_has_a_test_leg():
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec and spec.loader
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    legs = [re.search(r">=(\d+\.\d+),", django).group(1) for _, _, django, _ in dev.NEWER_DJANGOS]
    # 5.2 is the whole suite on dev.py's own Python; each later release has a leg of its own.
    assert ["5.2", *legs] == classified()


def test_the_docs_name_every_supported_release():
    # "Django 5.2 LTS, 6.0 and 6.1": the sentence a user reads before installing.
    listing = re.compile(r"Django (\d+\.\d+(?: LTS)?(?:(?:, | and )\d+\.\d+)+)")
    for doc in ("README.md", "PYPI.md"):
        said = [re.findall(r"\d+\.\d+", found) for found in listing.findall((ROOT / doc).read_text())]
        assert said, f"{doc} does not say which Django releases are supported"
        assert all(versions == classified() for versions in said), f"{doc} says {said}, setup.cfg {classified()}"


def test_the_django_running_the_tests_is_inside_the_pin():
    low, high = pin()
    assert low <= django.VERSION[:2] < high, f"Django {django.get_version()} is outside the pin {low}..<{high}"
