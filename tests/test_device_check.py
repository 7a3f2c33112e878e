"""``scripts/device-check`` without a GPU: its plan (``--dry-run``) names every step the issue asks for, and
nothing in it can change MIG state or reset a GPU. Its full rehearsal on the fake NVML
(``--rehearse``, about a minute) is left to a person: ``docs/deployment.md`` says so."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device-check"


def test_the_dry_run_lists_every_step_and_runs_none(tmp_path):
    r = subprocess.run([str(SCRIPT), "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for needle in ("pip install --quiet -e .[gpu]", "device_check gpu", "device_check cuda", "-m gpu",
                   "profile resnet50 densenet121 inceptionv3 deeplabv3 midas --gpu <MODEL>:whole",
                   "--batch 1,2,4,8,16", "--out profiles/tables/<model>-whole",
                   "up --nodes 1 --real-gpu --no-mig"):
        assert needle in out, needle
    assert "ESG_NVML_READ_ONLY=1" in SCRIPT.read_text()


def test_nothing_in_the_script_changes_mig_or_resets_a_gpu():
    text = SCRIPT.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"nvidia-smi|(^|\s)-mig\b|--gpu-reset|ESG_ALLOW_MIG_CHANGES=1", code)
    assert "unset ESG_ALLOW_MIG_CHANGES" in code


def test_bad_arguments_are_one_line_and_exit_2():
    r = subprocess.run([str(SCRIPT), "--now"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--now" in r.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_scripts_pass_shellcheck():
    r = subprocess.run(["shellcheck", str(SCRIPT), str(ROOT / "scripts" / "lock-images")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
