"""Every entry point x every class of bad input: exit 2, one line naming the problem, no traceback, nothing
written.

The table below lists, for each subcommand of ``esg``, one case per
class of bad input -- or says why the class cannot occur for that command (``NA``). A test checks the
table is complete, so a new command or class cannot be left out silently.

Each case runs in a fresh directory; placeholders in its arguments are filled in per test:
``{tmp}`` that directory, ``{file}`` a regular file in it (a path *under* it cannot be created: the
"unwritable output" class, which works even for root), ``{busy}`` a port something listens on, and the
bad input files named in :func:`_files`. Cases run in-process (fast); the first case of every command
also runs as a real process, to pin what a user sees.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from esg_cli.main import main as esg_main

ROOT = Path(__file__).resolve().parent.parent
CLASSES = ("missing", "malformed", "out of range", "wrong type", "conflicting flags", "port in use",
           "unwritable output")
COMMANDS = ("plan", "emulate", "profile", "profile-export", "profile-import", "scheduler", "agent", "mig", "up", "bench", "replay", "status",
            "redis-users", "deploy")
REPLAY = ["--api", "http://127.0.0.1:1", "--auth", "u:k"]
SERVICE = ["--kafka", "127.0.0.1:1", "--redis", "redis://127.0.0.1:1/0"]
AGENT = ["--redis", "redis://127.0.0.1:1/0", "--openwhisk-api", "http://127.0.0.1:1", "--openwhisk-auth", "u:k",
         "--fake-gpu", "A30"]
APP = str(ROOT / "apps" / "image-classification.json")
A100 = str(ROOT / "profiles" / "tables" / "a100")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    needle: str                   # what the one line must name (the flag, the file, the field)


@dataclass(frozen=True)
class NA:
    why: str


def case(*argv: str, needle: str) -> Case:
    return Case(argv, needle)


TABLE: dict[str, dict[str, Case | NA]] = {
    "plan": {
        "missing": case("plan", "--app", "{tmp}/none.json", "--profiles", A100, needle="none.json"),
        "malformed": case("plan", "--app", "{cyclic_app}", "--profiles", A100, needle="cycle"),
        "out of range": case("plan", "--app", APP, "--profiles", A100, "--top-k", "0", needle="--top-k"),
        "wrong type": case("plan", "--app", APP, "--profiles", A100, "--slo-ms", "fast", needle="--slo-ms"),
        "conflicting flags": case("plan", "--app", APP, "--profiles", A100, "--exact", "--max-group", "2",
                                  needle="--max-group"),
        "port in use": NA("opens no port"),
        "unwritable output": NA("writes to stdout only"),
    },
    "emulate": {
        "missing": case("emulate", "--duration-s", "5", "--warmup-s", "0", needle="--out"),
        "malformed": case("emulate", "--trace", "{bad_trace}", "--out", "{tmp}/out", needle="--trace"),
        "out of range": case("emulate", "--cold-start-scale", "-1", "--out", "{tmp}/out",
                             needle="--cold-start-scale"),
        "wrong type": case("emulate", "--nodes", "two", "--out", "{tmp}/out", needle="--nodes"),
        "conflicting flags": case("emulate", "--duration-s", "20", "--out", "{tmp}/out", needle="--warmup-s"),
        "port in use": NA("opens no port"),
        "unwritable output": case("emulate", "--out", "{file}", needle="--out"),
    },
    "profile": {
        "missing": case("profile", "--out", "{tmp}/out", needle="ACTION_OR_APP"),
        "malformed": case("profile", "vote", "--params", "{{bad", "--out", "{tmp}/out", needle="--params"),
        "out of range": case("profile", "vote", "--runs", "0", "--out", "{tmp}/out", needle="--runs"),
        "wrong type": case("profile", "vote", "--vcpus", "x", "--out", "{tmp}/out", needle="--vcpus"),
        "conflicting flags": case("profile", "vote", "--gpu", "1g.5gb", "--gpu-model", "A30", "--out",
                                  "{tmp}/out", needle="1g.5gb"),
        "port in use": NA("opens no port (its workers bind free loopback ports)"),
        "unwritable output": case("profile", "vote", "--out", "{file}/tables", needle="--out"),
    },
    "profile-export": {
        "missing": case("profile", "export", "--out", "{tmp}/out", needle="--redis"),
        "malformed": case("profile", "export", "--redis", "http://127.0.0.1:1", "--out", "{tmp}/out",
                          needle="--redis"),
        "out of range": case("profile", "export", "--redis", "redis://127.0.0.1:1/0", "--out", "{tmp}/out",
                             "--gpu-model", "T4", needle="T4"),
        "wrong type": case("profile", "export", "--redis", "redis://127.0.0.1:1/x", "--out", "{tmp}/out",
                           needle="--redis"),
        "conflicting flags": NA("its flags combine freely"),
        "port in use": NA("opens no port (it connects to Redis)"),
        "unwritable output": case("profile", "export", "--redis", "redis://127.0.0.1:1/0", "--out",
                                  "{file}/tables", needle="--out"),
    },
    "profile-import": {
        "missing": case("profile", "import", "--redis", "redis://127.0.0.1:1/0", "{tmp}/none", needle="none"),
        "malformed": case("profile", "import", "--redis", "redis://127.0.0.1:1/0", "{bad_profiles}",
                          needle="pre.json"),
        "out of range": case("profile", "import", "--redis", "redis://127.0.0.1:1/0", "{empty_dir}",
                             needle="no *.json"),
        "wrong type": case("profile", "import", "--redis", "redis://127.0.0.1:1/0", "{file}", needle="DIR"),
        "conflicting flags": NA("its flags combine freely"),
        "port in use": NA("opens no port"),
        "unwritable output": NA("writes to Redis only"),
    },
    "scheduler": {
        "missing": case("scheduler", "--redis", "redis://127.0.0.1:1/0", needle="Kafka"),
        "malformed": case("scheduler", *SERVICE, "--profiles", "{bad_profiles}", needle="pre.json"),
        "out of range": case("scheduler", *SERVICE, "--metrics-port", "70000", needle="--metrics-port"),
        "wrong type": case("scheduler", *SERVICE, "--agent-timeout-s", "soon", needle="--agent-timeout-s"),
        "conflicting flags": NA("no two of its flags constrain each other"),
        "port in use": case("scheduler", *SERVICE, "--metrics-port", "{busy}", needle="--metrics-port"),
        "unwritable output": NA("writes no file (it logs to stderr)"),
    },
    "agent": {
        "missing": case("agent", "--openwhisk-api", "http://127.0.0.1:1", needle="Redis"),
        "malformed": case("agent", *AGENT, "--openwhisk-auth", "nocolon", needle="--openwhisk-auth"),
        "out of range": case("agent", *AGENT, "--vcpus", "0", needle="--vcpus"),
        "wrong type": case("agent", *AGENT, "--heartbeat-s", "often", needle="--heartbeat-s"),
        "conflicting flags": case("agent", *AGENT, "--runner", "twin", needle="--profiles"),
        "port in use": NA("listens on no port (its workers bind free loopback ports)"),
        "unwritable output": case("agent", *AGENT, "--journal", "{file}/journal", needle="--journal"),
    },
    "mig": {
        "missing": case("mig", "layouts", needle="--gpu"),
        "malformed": NA("reads no file"),
        "out of range": case("mig", "layouts", "--gpu", "T4", needle="T4"),
        "wrong type": NA("its one value is a model name, checked as out of range"),
        "conflicting flags": NA("its flags combine freely"),
        "port in use": NA("opens no port"),
        "unwritable output": NA("writes to stdout only"),
    },
    "up": {
        "missing": case("up", "--apps", "{empty_dir}", needle="no app files"),
        "malformed": case("up", "--apps", "{cyclic_dir}", needle="cycle"),
        "out of range": case("up", "--nodes", "0", needle="--nodes"),
        "wrong type": case("up", "--timeout-s", "x", needle="--timeout-s"),
        "conflicting flags": case("up", "--gpu-share", "2", needle="--no-mig"),
        "port in use": case("up", "--port", "{busy}", needle="--port"),
        "unwritable output": case("up", "--logs", "{file}/logs", needle="--logs"),
    },
    "bench": {
        "missing": case("bench", needle="BENCH_COMMAND"),
        "malformed": NA("reads no file"),
        "out of range": case("bench", "search", "--slos", "1", needle="--slos"),
        "wrong type": case("bench", "search", "--seed", "x", needle="--seed"),
        "conflicting flags": case("bench", "search", "--slos", "3", "--brute-slos", "5", needle="--brute-slos"),
        "port in use": NA("opens no port"),
        "unwritable output": NA("writes to stdout only"),
    },
    "replay": {
        "missing": case("replay", *REPLAY, "--arrivals", "{tmp}/none.csv", "--out", "{tmp}/out", needle="--arrivals"),
        "malformed": case("replay", *REPLAY, "--arrivals", "{bad_trace}", "--out", "{tmp}/out", needle="line 1"),
        "out of range": case("replay", *REPLAY, "--arrivals", "{arrivals}", "--concurrency", "0", "--out",
                             "{tmp}/out", needle="--concurrency"),
        "wrong type": case("replay", *REPLAY, "--arrivals", "{arrivals}", "--warmup-s", "x", "--out", "{tmp}/out",
                           needle="--warmup-s"),
        "conflicting flags": case("replay", *REPLAY, "--arrivals", "{arrivals}", "--warmup-s", "5", "--out",
                                  "{tmp}/out", needle="--warmup-s"),
        "port in use": NA("opens no port"),
        "unwritable output": case("replay", *REPLAY, "--arrivals", "{arrivals}", "--warmup-s", "0", "--out",
                                  "{file}/out", needle="--out"),
    },
    "status": {
        "missing": case("status", needle="Redis"),
        "malformed": case("status", "--redis", "http://x", needle="--redis"),
        "out of range": case("status", "--redis", "redis://127.0.0.1:1/0", "--controller-id", "a b",
                             needle="--controller-id"),
        "wrong type": NA("its flags are URLs and names, checked as malformed or out of range"),
        "conflicting flags": NA("its flags combine freely"),
        "port in use": NA("opens no port"),
        "unwritable output": NA("writes to stdout only"),
    },
    "redis-users": {
        "missing": case("redis-users", "--out", "{tmp}/secrets", needle="--nodes"),
        "malformed": case("redis-users", "--out", "{tmp}/secrets", "--nodes", "a b", needle="--nodes"),
        "out of range": case("redis-users", "--out", "{tmp}/secrets", "--nodes", "n0", "--db", "-1", needle="--db"),
        "wrong type": case("redis-users", "--out", "{tmp}/secrets", "--nodes", "n0", "--db", "many", needle="--db"),
        "conflicting flags": NA("its flags combine freely"),
        "port in use": NA("opens no port"),
        "unwritable output": case("redis-users", "--out", "{file}/secrets", "--nodes", "n0", needle="--out"),
    },
    "deploy": {
        "missing": case("deploy", "{tmp}/none.json", "--dry-run", needle="none.json"),
        "malformed": case("deploy", "{negative_slo_app}", "--dry-run", needle="slo_ms"),
        "out of range": case("deploy", "--max-batch", "0", "--dry-run", needle="--max-batch"),
        "wrong type": case("deploy", "--max-batch", "many", "--dry-run", needle="--max-batch"),
        "conflicting flags": case("deploy", "--dry-run", "--print-wsk", needle="--print-wsk"),
        "port in use": NA("opens no port"),
        "unwritable output": case("deploy", "--print-wsk", "--zip-dir", "{file}/zips", needle="--zip-dir"),
    },
}

#: More cases for flags added after a command's row was written (same checks, same classes).
EXTRA: list[tuple[str, str, Case]] = [
    ("scheduler", "malformed", case("scheduler", *SERVICE, "--activation-store", "ftp://u:pw@db:5984/x",
                                    needle="--activation-store")),
    ("scheduler", "malformed", case("scheduler", *SERVICE, "--activation-store", "http://db:5984/Not_A_DB",
                                    needle="--activation-store")),
    ("scheduler", "out of range", case("scheduler", *SERVICE, "--timeout-factor", "0", needle="--timeout-factor")),
    ("scheduler", "wrong type", case("scheduler", *SERVICE, "--timeout-addon-s", "soon",
                                     needle="--timeout-addon-s")),
    ("scheduler", "out of range", case("scheduler", *SERVICE, "--std-time-limit-s", "-60",
                                       needle="--std-time-limit-s")),
    ("scheduler", "malformed", case("scheduler", *SERVICE, "--parameter-storage-aes128", "not*base64",
                                    needle="--parameter-storage-aes128")),
    ("scheduler", "out of range", case("scheduler", *SERVICE, "--parameter-storage-aes256", "AAAAAAAAAAAAAAAAAAAAAA==",
                                       needle="--parameter-storage-aes256")),
    ("scheduler", "out of range", case("scheduler", *SERVICE, "--explore-fraction", "1.5",
                                       needle="--explore-fraction")),
    ("scheduler", "wrong type", case("scheduler", *SERVICE, "--explore-fraction", "some",
                                     needle="--explore-fraction")),
    ("agent", "missing", case("agent", *AGENT, "--runner", "twin", "--profiles", "{tmp}/none",
                              needle="--profiles")),
    ("agent", "malformed", case("agent", *AGENT, "--runner", "twin", "--profiles", "{bad_profiles}",
                                needle="pre.json")),
    ("agent", "conflicting flags", case("agent", *AGENT, "--profiles", A100, needle="--runner twin")),
    ("agent", "out of range", case("agent", *AGENT, "--runner", "fast", needle="--runner")),
    ("agent", "wrong type", case("agent", *AGENT, "--runner", "twin", "--profiles", A100, "--seed", "x",
                                 needle="--seed")),
    ("emulate", "missing", case("emulate", "--arrivals", "{tmp}/none.csv", "--out", "{tmp}/out",
                                needle="--arrivals")),
    ("emulate", "malformed", case("emulate", "--arrivals", "{bad_trace}", "--out", "{tmp}/out", needle="line 1")),
    ("emulate", "conflicting flags", case("emulate", "--write-arrivals", "{tmp}/arr.csv", "--out", "{tmp}/out",
                                          needle="--load")),
    ("emulate", "unwritable output", case("emulate", "--load", "light", "--write-arrivals", "{file}/arr.csv",
                                          "--out", "{tmp}/out", needle="--write-arrivals")),
    ("up", "conflicting flags", case("up", "--runner", "twin", "--fake-gpu", "A30", needle="--fake-gpu")),
    ("up", "out of range", case("up", "--runner", "fast", needle="--runner")),
    ("up", "conflicting flags", case("up", "--slo", "moderate", "--slo-factor", "2", needle="--slo")),
]
CASES = [(cmd, cls, c) for cmd, row in TABLE.items() for cls, c in row.items() if isinstance(c, Case)] + EXTRA
FIRST = {cmd: next(c for c in row.values() if isinstance(c, Case)) for cmd, row in TABLE.items()}


def _files(tmp: Path, busy: int) -> dict[str, str]:
    """The placeholders: bad input files of each kind, made fresh in ``tmp``."""
    (tmp / "not-a-dir.txt").write_text("a file where a directory must go\n")
    app = json.loads(Path(APP).read_text())
    cyclic = dict(app, edges=[["preprocess", "resnet50"], ["resnet50", "preprocess"]])
    (tmp / "cyclic.json").write_text(json.dumps(cyclic))
    (tmp / "negative-slo.json").write_text(json.dumps(dict(app, slo_ms=-5)))
    (tmp / "trace.csv").write_text("HashOwner,HashApp,HashFunction,Trigger,1,2\na,b,c,http,3,lots\n")
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "pre.json").write_text('{"function": "pre", "gpu_model": "A100-40GB", "configs": [')
    (tmp / "arrivals.csv").write_text("time_s,app\n0.5,image-classification\n2,image-classification\n")
    (tmp / "empty").mkdir()
    (tmp / "cyclic-apps").mkdir()
    (tmp / "cyclic-apps" / "cyclic.json").write_text(json.dumps(cyclic))
    return {"tmp": str(tmp), "file": str(tmp / "not-a-dir.txt"), "busy": str(busy),
            "cyclic_app": str(tmp / "cyclic.json"), "negative_slo_app": str(tmp / "negative-slo.json"),
            "bad_trace": str(tmp / "trace.csv"), "bad_profiles": str(profiles),
            "empty_dir": str(tmp / "empty"), "cyclic_dir": str(tmp / "cyclic-apps"),
            "arrivals": str(tmp / "arrivals.csv")}


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("ESG_"):
            monkeypatch.delenv(k)


def _argv(cmd: str, c: Case, values: dict[str, str]) -> list[str]:
    return [a.format(**values) for a in c.argv]


def _check(cmd: str, cls: str, c: Case, rc: int, out: str, err: str, before: dict, after: dict) -> None:
    where = f"{cmd} / {cls}: {c.argv}"
    assert rc == 2, f"{where}: exit {rc}\n{err}"
    assert "Traceback" not in err, f"{where}:\n{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{where}: not one line:\n{err}"
    assert c.needle in lines[0], f"{where}: {lines[0]!r} does not name {c.needle!r}"
    assert out == "", f"{where}: printed before failing:\n{out}"
    assert after == before, f"{where}: wrote {sorted(set(after) - set(before))}"


@pytest.mark.parametrize("cmd,cls,c", CASES, ids=[f"{cmd}-{cls.replace(' ', '_')}-{i}" for i, (cmd, cls, _)
                                                    in enumerate(CASES)])
def test_bad_input_is_one_line_and_exit_2(cmd, cls, c, tmp_path, busy_port, clean_env, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = _files(tmp_path, busy_port)
    before = _tree(tmp_path)
    argv = _argv(cmd, c, values)
    rc = esg_main(argv)
    out, err = capsys.readouterr()
    _check(cmd, cls, c, rc, out, err, before, _tree(tmp_path))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_as_a_real_process(cmd, tmp_path, busy_port):
    c = FIRST[cmd]
    values = _files(tmp_path, busy_port)
    before = _tree(tmp_path)
    entry = ["-m", "esg_cli.main"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESG_")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, *entry, *_argv(cmd, c, values)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    _check(cmd, "real process", c, r.returncode, r.stdout, r.stderr, before, _tree(tmp_path))


def test_the_table_covers_every_command_and_class():
    from esg_cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(TABLE) == set(sub.choices), "a subcommand without bad-input cases"
    for cmd, row in TABLE.items():
        assert tuple(row) == CLASSES, f"{cmd}: every class needs a case or a reason it cannot occur"


EXTRA = [("emulate", "trace minute 0", case("emulate", "--trace-minute-s", "0", "--out", "{tmp}/out",
                                             needle="--trace-minute-s")),
         ("emulate", "trace minute nan", case("emulate", "--trace-minute-s", "nan", "--out", "{tmp}/out",
                                               needle="--trace-minute-s")),
         ("emulate", "hop samples missing", case("emulate", "--hop-samples", "{tmp}/none.txt", "--out",
                                                  "{tmp}/out", needle="--hop-samples")),
         ("emulate", "hop samples malformed", case("emulate", "--hop-samples", "{bad_trace}", "--out",
                                                    "{tmp}/out", needle="--hop-samples")),
         ("emulate", "hop samples and spread", case("emulate", "--hop-samples", "{bad_trace}", "--hop-log-sd",
                                                     "0.5", "--out", "{tmp}/out", needle="--hop-log-sd")),
         *((cmd, f"slo percentile {bad or 'empty'}", case(*argv, "--slo-percentile", bad, needle="--slo-percentile"))
           for cmd, argv in (("emulate", ("emulate", "--out", "{tmp}/out")),
                             ("plan", ("plan", "--app", APP, "--profiles", A100)),
                             ("scheduler", ("scheduler", *SERVICE)),
                             ("up", ("up",)))
           for bad in ("50", "100", "120", "p95", "nan", ""))]


@pytest.mark.parametrize("cmd,cls,c", EXTRA, ids=[f"{cmd}-{cls.replace(' ', '_')}" for cmd, cls, _ in EXTRA])
def test_more_bad_flags_are_one_line_and_exit_2(cmd, cls, c, tmp_path, busy_port, clean_env, capsys, monkeypatch):
    test_bad_input_is_one_line_and_exit_2(cmd, cls, c, tmp_path, busy_port, clean_env, capsys, monkeypatch)
