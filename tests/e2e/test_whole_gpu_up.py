"""A whole-GPU twin cluster: ``esg up`` with agents whose (fake) GPUs run without MIG, shared by two batches,
planned with the whole-GPU tables -- every DNN batch placed on the whole GPU's kind, none on a MIG slice."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_a_whole_gpu_twin_cluster_answers_every_app_on_the_whole_gpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "esg_cli.main", "up", "--runner", "twin", "--no-mig", "--gpu-share", "2",
         "--profiles", str(ROOT / "profiles" / "tables" / "a100-whole"), "--nodes", "1", "--requests", "2",
         "--slo", "relaxed", "--logs", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"^(\S+)\s+(\d+)/(\d+)\s", proc.stdout, re.M)}
    assert len(rows) == 4 and all(ok == total == 2 for ok, total in rows.values()), proc.stdout
    placed = dict(re.findall(r"^  guest/(\S+)\s+(.+)$", proc.stdout, re.M))
    for dnn in ("resnet50", "densenet121", "inceptionv3", "deeplabv3", "midas"):
        assert placed[dnn].startswith("A100-40GB:whole "), placed
    assert all(re.fullmatch(r"(A100-40GB:whole|CPU) \d+(, (A100-40GB:whole|CPU) \d+)*", v) for v in placed.values())
    agent_log = (tmp_path / "node0.log").read_text()
    assert "GPU A100-40GB:whole*2" in agent_log
