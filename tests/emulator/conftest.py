import glob
from pathlib import Path

import pytest

from esg_files import load_app, load_profiles

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def apps():
    return {a.name: a for a in (load_app(p) for p in sorted(glob.glob(str(REPO / "apps" / "*.json"))))}


@pytest.fixture(scope="session")
def profiles(apps):
    fs = sorted({f for a in apps.values() for f in a.functions})
    return load_profiles(REPO / "profiles" / "tables" / "a100", fs)
