"""``esg scheduler``'s settings: the controller's deadline from OpenWhisk's flags, the activation store's URL."""

from __future__ import annotations

import pytest

from controller_plugin.settings import Deadline
from esg_cli.errors import CliError
from esg_cli.main import build_parser
from esg_cli.scheduler import settings_from

BASE = ["scheduler", "--kafka", "127.0.0.1:1", "--redis", "redis://127.0.0.1:1/0"]


def test_openwhisks_defaults_force_completion_after_max_timeout_std_times_2_plus_a_minute():
    assert Deadline().at_ms(1_000, 100_000) == 1_000 + 100_000 * 2 + 60_000
    assert Deadline().at_ms(0, 5_000) == 60_000 * 2 + 60_000           # below time-limit.std: std counts


def test_deadline_flags_reach_the_service(monkeypatch):
    monkeypatch.delenv("ESG_ACTIVATION_STORE", raising=False)
    s = settings_from(build_parser().parse_args([*BASE, "--timeout-factor", "3", "--timeout-addon-s", "5",
                                                 "--std-time-limit-s", "10"]))
    assert s.deadline == Deadline(3, 5.0, 10.0)
    assert s.deadline.at_ms(0, 20_000) == 20_000 * 3 + 5_000 and s.deadline.at_ms(0, 1_000) == 10_000 * 3 + 5_000
    assert s.activation_store is None


def test_activation_store_from_the_environment_is_checked_and_never_shown(monkeypatch):
    monkeypatch.setenv("ESG_ACTIVATION_STORE", "http://admin:pw9secret@db:5984/local_activations")
    s = settings_from(build_parser().parse_args(BASE))
    assert s.activation_store == "http://admin:pw9secret@db:5984/local_activations"
    assert "pw9secret" not in s.describe() and "http://***@db:5984/local_activations" in s.describe()
    assert "pw9secret" not in repr(s)
    monkeypatch.setenv("ESG_ACTIVATION_STORE", "http://admin:pw9secret@db:5984/BAD")
    with pytest.raises(CliError, match="ESG_ACTIVATION_STORE") as err:
        settings_from(build_parser().parse_args(BASE))
    assert "pw9secret" not in str(err.value)


def test_admission_control_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("ESG_ACTIVATION_STORE", raising=False)
    assert settings_from(build_parser().parse_args(BASE)).admission_control is False
    s = settings_from(build_parser().parse_args([*BASE, "--admission-control"]))
    assert s.admission_control is True and "admission_control=True" in s.describe()
