"""The files reproduced from other projects are byte for byte what deploy/SOURCES.md says they are."""

from __future__ import annotations

import hashlib
import re

from tests.deploy.deploy_files import ROOT

DEPLOY = ROOT / "deploy"
LISTED = re.compile(r"`([\w./-]+\.(?:json|yaml|tpl|guest|system))`[^`\n]*`([0-9a-f]{64})`")


def listed() -> dict[str, str]:
    return {path: digest for path, digest in LISTED.findall((DEPLOY / "SOURCES.md").read_text())}


def test_every_reproduced_file_has_the_listed_sha256():
    files = listed()
    assert len(files) == 24
    for path, digest in files.items():
        assert hashlib.sha256((DEPLOY / path).read_bytes()).hexdigest() == digest, path


def test_no_reproduced_file_goes_unlisted():
    files = set(listed())
    for folder in ("couchdb/design", "couchdb/auth", "kubernetes/upstream", "schemas"):
        for f in (DEPLOY / folder).rglob("*"):
            if f.is_file():
                name = f.relative_to(DEPLOY).as_posix()
                assert name in files, f"{name} is not in deploy/SOURCES.md"
