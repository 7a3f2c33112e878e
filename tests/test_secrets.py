"""Secrets reach the services without a command line: every setting has a ``_FILE`` form."""

from __future__ import annotations

import base64

import pytest

from esg_cli.checks import from_env, redis_url
from esg_cli.errors import CliError
from esg_cli.main import build_parser
from esg_cli.scheduler import settings_from

KEY = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:file-secret-0123456789"
AES = base64.b64encode(b"k" * 16).decode()


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("ESG_KAFKA", "ESG_REDIS", "ESG_OPENWHISK_AUTH", "ESG_ACTIVATION_STORE", "ESG_METRICS_HOST",
                 "ESG_PARAMETER_STORAGE_AES128", "ESG_PARAMETER_STORAGE_AES256"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    return monkeypatch


def test_every_secret_of_the_scheduler_can_come_from_a_file(clean_env, tmp_path):
    files = {"ESG_REDIS": "redis://:redis-pw@127.0.0.1:1/0", "ESG_OPENWHISK_AUTH": KEY,
             "ESG_ACTIVATION_STORE": "http://admin:couch-pw@127.0.0.1:1/whisk_local_activations",
             "ESG_PARAMETER_STORAGE_AES128": AES}
    for name, value in files.items():
        (tmp_path / name).write_text(value + "\n")              # as a mounted secret: a trailing newline
        clean_env.setenv(f"{name}_FILE", str(tmp_path / name))
    s = settings_from(build_parser().parse_args(["scheduler", "--kafka", "127.0.0.1:1"]))
    assert (s.redis_url, s.openwhisk_auth, s.activation_store) == (
        files["ESG_REDIS"], KEY, files["ESG_ACTIVATION_STORE"])
    assert s.parameter_keys.keys["aes-128"] == b"k" * 16


def test_a_bad_secret_file_is_named_never_shown(clean_env, tmp_path):
    path = tmp_path / "redis"
    clean_env.setenv("ESG_REDIS_FILE", str(path))
    with pytest.raises(CliError, match=f"ESG_REDIS_FILE {path}: cannot read it"):
        from_env(None, "ESG_REDIS", redis_url)
    path.write_text("")
    with pytest.raises(CliError, match="the file is empty"):
        from_env(None, "ESG_REDIS", redis_url)
    path.write_text("http://:hunter2@host:6379/0")
    with pytest.raises(CliError, match="ESG_REDIS_FILE") as err:
        from_env(None, "ESG_REDIS", redis_url)
    assert "hunter2" not in str(err.value)
    clean_env.setenv("ESG_REDIS", "redis://127.0.0.1:2/0")     # the variable itself wins over the file
    assert from_env(None, "ESG_REDIS", redis_url) == "redis://127.0.0.1:2/0"
    assert from_env("redis://127.0.0.1:3/0", "ESG_REDIS", redis_url) == "redis://127.0.0.1:3/0"
