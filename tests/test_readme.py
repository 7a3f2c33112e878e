"""The README's own command lines, run or checked, so they cannot drift from the code; and the docs' numbers
against the files they describe.

Every command of the README -- each line of its ``sh`` blocks and each command written inline -- is
matched by exactly one rule of :data:`RULES`, which says how it is exercised:

* ``run``: run as written (through ``scripts/esg``, which the README offers for a fresh shell);
* ``small``: run as written with small arguments appended (argparse takes the last value of a flag), so
  a long job runs in seconds: the README's flags must still parse and the command must still succeed;
* ``checked``: parsed by the real parser and its input checked by the command's own ``check_args``, not
  run: it starts servers (``esg up`` itself runs in full in ``tests/e2e/test_up.py``);
* ``synopsis``: a usage line with placeholders: every flag it names must exist in the command's --help;
* ``parsed``: a command named in the prose: its flags must parse;
* ``help``: a benchmark that runs for minutes, or a module named without arguments: its ``--help`` must work;
* ``every help``: ``esg COMMAND --help``: every subcommand's help prints;
* ``pytest``: ``scripts/test`` with pytest arguments: the arguments must select tests (collection only;
  ``scripts/test`` itself is what runs this file);
* ``script``: a script of ``scripts/`` that must exist and be executable (``scripts/run-demo`` is
  ``scripts/setup`` + ``esg up``);
* ``wsk``: OpenWhisk's CLI, which this machine lacks: each ``wsk action create`` is sent to the REST
  stand-in as the PUT ``wsk`` makes (annotation values parsed as JSON where they parse), and the app
  they declare must plan with the shipped profile tables through the scheduler's own metadata reader;
  ``wsk action invoke`` must name an action created above;
* ``deploy``: ``esg deploy`` run against the REST stand-in (its API host and key replaced);
* ``external``: Docker, ``kubectl``, ``helm`` or ``curl`` against a real OpenWhisk, which this machine lacks:
  the deployment files they name must exist (``tests/deploy/`` validates those files offline);
* ``key``: a shell variable holding an API key: it must be OpenWhisk's public guest key, which the
  stand-in and OpenWhisk's own deployments know;
* ``env``: ``export`` of settings (secrets go in the environment or in files, never on a command line):
  each variable must be one the code reads, or its ``_FILE`` form.

Variables set before a command (``VAR=value esg ...``) or exported earlier in its block are its
environment: the rules above see the command without them, and ``checked`` and ``deploy`` run with them
(a ``_FILE`` variable pointing at a file that holds a value of the right form).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from controller_plugin.metadata import AppPlan, MetadataClient, ProfileStore, plan_for
from esg_cli.main import build_parser
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
from esg_cli.profile_tables import rewrite

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ESG = [str(ROOT / "scripts" / "esg")]
SMALL = {
    "bench": ["--slos", "3", "--brute-slos", "1", "--exact-slos", "2", "--repeat", "1"],
    "emulate": ["--duration-s", "3", "--warmup-s", "0", "--nodes", "2", "--slo", "moderate", "--load", "light",
                "--jobs", "1", "--no-plots", "--out", "{tmp}/results"],
    "profile": ["--batch", "1", "--vcpus", "1", "--runs", "1", "--no-progress", "--out", "{tmp}/my-profiles"],
}
RULES: list[tuple[str, str]] = [           # (regular expression on the command, how it is exercised)
    (r"^scripts/(run-demo|test|setup|esg|tour-images)$", "script"),
    (r"^esg --version$", "run"),
    (r"^scripts/device-check( --(dry-run|rehearse))?$", "script"),
    (r"^scripts/test .+", "pytest"),
    (r"^esg (plan|mig) .*\[", "synopsis"),
    (r"^esg scheduler .*\[", "synopsis"),
    (r"^esg profile (export|import) ", "synopsis"),
    (r"^esg (replay|status) .*\[", "synopsis"),
    (r"^esg (plan|mig layouts) ", "run"),
    (r"^esg (bench search|emulate --|profile )", "small"),
    (r"^(scripts/)?esg (up|agent --openwhisk-api)", "checked"),
    (r"^esg COMMAND --help$", "every help"),
    (r"^esg (agent|scheduler|bench search|emulate|plan|profile|up|status)( --fake-gpu \S+)?$", "parsed"),
    (r"^wsk ", "wsk"),
    (r"^esg deploy ", "deploy"),
    (r"^PYTHONPATH=\. \.venv/bin/python benchmarks/", "help"),
    (r"^(docker|kubectl|helm|curl) ", "external"),
    (r"^KEY=", "key"),
    (r"^export ", "env"),
]
#: Values of the settings the README's variables hold, for the commands checked with them.
SETTING_VALUES = {"ESG_REDIS": "redis://:pw@127.0.0.1:1/0", "ESG_OPENWHISK_AUTH": GUEST_KEY,
                  "ESG_ACTIVATION_STORE": "http://u:pw@127.0.0.1:1/whisk_local_activations"}
ASSIGNMENT = re.compile(r"^\[?(ESG_[A-Z0-9_]*)=(\S*?)\]?$")
INLINE = re.compile(r"`((?:esg |scripts/|python -m |PYTHONPATH=|wsk )[^`]*)`")


ENVS: dict[str, dict[str, str]] = {}
"""Each command's environment: the variables set before it and those its block exported earlier."""


def readme_commands() -> list[str]:
    """Each command line of the README's ``sh`` blocks (continuations joined, comments dropped, variables
    set before it moved to :data:`ENVS`), then the commands written inline in its prose."""
    text = README.read_text()
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        exported: dict[str, str] = {}
        # a line ending in a backslash, or followed by an indented line, goes on on the next one
        for line in re.sub(r"\\\n|\n(?=[ \t]+\S)", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "export":
                exported.update(_assignments(words[1:]))
                out.append(shlex.join(words))
                continue
            env = dict(exported)
            while words and ASSIGNMENT.match(words[0]) and len(words) > 1:
                env.update(_assignments(words[:1]))
                words = words[1:]
            command = shlex.join(words)
            out.append(command)
            ENVS.setdefault(command, {}).update(env)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in INLINE.findall(prose):
        words = m.split()
        env = {}
        while words and ASSIGNMENT.match(words[0]) and len(words) > 1:
            env.update(_assignments(words[:1]))
            words = words[1:]
        out.append(" ".join(words))
        ENVS.setdefault(" ".join(words), {}).update(env)
    return list(dict.fromkeys(out))


def _assignments(words: list[str]) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in map(ASSIGNMENT.match, words) if m}


def _environment(command: str, tmp: Path) -> dict[str, str]:
    """The command's README variables with values of their form (a ``_FILE`` one names a file holding one)."""
    env = {}
    for name in ENVS.get(command, {}):
        setting = name.removesuffix("_FILE")
        value = SETTING_VALUES.get(setting, "x")
        if name.endswith("_FILE"):
            path = tmp / setting
            path.write_text(value + "\n")
            env[name] = str(path)
        else:
            env[name] = value
    return env


def rule(command: str) -> str | None:
    return next((how for pattern, how in RULES if re.search(pattern, command)), None)


COMMANDS = readme_commands()


def test_every_readme_command_has_a_rule():
    assert len(COMMANDS) >= 20
    unruled = [c for c in COMMANDS if rule(c) is None]
    assert not unruled, f"README commands without a rule in tests/test_readme.py: {unruled}"


def _esg(args: list[str], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*ESG, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _parse(argv: list[str]):
    return build_parser().parse_args(argv)


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) in ("run", "small")])
def test_run(command, tmp_path):
    argv = shlex.split(command)[1:]
    if rule(command) == "small":
        argv += [a.format(tmp=tmp_path) for a in SMALL[argv[0]]]
    r = _esg(argv, tmp_path)
    assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "checked"])
def test_checked(command, monkeypatch, tmp_path):
    import importlib

    for k in [k for k in __import__("os").environ if k.startswith("ESG_")]:
        monkeypatch.delenv(k)
    for k, v in _environment(command, tmp_path).items():
        monkeypatch.setenv(k, v)
    words = shlex.split(command)
    assert words[0] in ("esg", "scripts/esg")
    args = _parse(words[1:])
    module = importlib.import_module(f"esg_cli.{args.command}")
    module.check_args(args)                   # raises (one line, exit 2 in the CLI) on a bad input


def _options(sub: str) -> dict:
    action = next(a for a in build_parser()._actions if a.dest == "command")
    assert sub in action.choices, f"no subcommand esg {sub}"
    return {o: a for a in action.choices[sub]._actions for o in a.option_strings}


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "parsed"])
def test_parsed(command):
    words = shlex.split(command)
    options = _options(words[1])
    for i, w in enumerate(words[2:], 2):
        if w.startswith("--"):
            assert w in options, f"{command}: esg {words[1]} has no {w}"
            if options[w].type is not None and i + 1 < len(words):
                options[w].type(words[i + 1])


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "synopsis"])
def test_synopsis_flags_exist(command):
    sub = rewrite(shlex.split(command)[1:])[0]
    named = set(re.findall(r"--[a-z][a-z0-9-]*", command))
    assert named and named <= set(_options(sub)), f"{command}: {sorted(named - set(_options(sub)))} not in esg {sub}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) in ("script", "pytest")])
def test_scripts(command):
    words = shlex.split(command)
    script = ROOT / words[0]
    assert script.is_file() and script.stat().st_mode & 0o111, f"{script} is not an executable script"
    if rule(command) == "pytest":
        # pytest takes the README's arguments (markers, options); collecting this one file is enough to
        # tell, where the command names no path of its own (the suite itself collects everything)
        paths = [] if any(w.startswith("tests") for w in words[1:]) else ["tests/test_readme.py"]
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                            *words[1:], *paths], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "collected" in r.stdout, r.stdout[-1500:]


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "help"])
def test_help(command):
    words = shlex.split(command)
    words = words[1:] if words[0].startswith("PYTHONPATH=") else words
    env = dict(__import__("os").environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), *words[1:], "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "usage" in r.stdout, r.stderr[-1000:]


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "every help"])
def test_every_subcommand_help(command, capsys):
    action = next(a for a in build_parser()._actions if a.dest == "command")
    for sub in action.choices:
        with pytest.raises(SystemExit) as done:
            _parse([sub, "--help"])
        shown = sub.replace("profile-", "profile ")   # esg profile export|import
        assert done.value.code == 0 and f"usage: esg {shown}" in capsys.readouterr().out


def _wsk_annotations(words: list[str]) -> list[dict]:
    out = []
    for i, w in enumerate(words):
        if w in ("-a", "--annotation"):
            key, value = words[i + 1], words[i + 2]
            try:
                value = json.loads(value)      # as wsk does: JSON where it parses, else the string
            except ValueError:
                pass
            out.append({"key": key, "value": value})
    return out


def test_wsk_commands_declare_an_app_the_scheduler_plans():
    lines = [shlex.split(c) for c in COMMANDS if rule(c) == "wsk"]
    assert lines
    created = set()
    with OpenWhiskStandIn() as api:
        for words in lines:
            if words[1:3] in (["action", "create"], ["action", "update"]):
                kind = words[words.index("--kind") + 1] if "--kind" in words else "python:3"
                api.put_action(f"guest/{words[3]}", {"exec": {"kind": kind, "code": "def main(a): return a"},
                                                     "annotations": _wsk_annotations(words)})
                created.add(words[3])
        client = MetadataClient(api.url, GUEST_KEY)
        profiles = ProfileStore(ROOT / "profiles" / "tables" / "cpu")
        apps = [w[3] for w in lines if "esg-slo-ms" in w]
        for name in apps:
            meta = client.action(f"guest/{name}", None, cache=False)
            plan = plan_for(meta, None, lambda fqn: client.action(fqn, None, cache=False), profiles)
            assert isinstance(plan, AppPlan) and not plan.plain and len(plan.app.functions) > 1
    invoked = [w[3] for w in lines if w[1:3] == ["action", "invoke"]]
    assert invoked and set(invoked) <= created


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "deploy"])
def test_deploy_against_the_standin(command, tmp_path):
    with OpenWhiskStandIn() as api:
        words = shlex.split(command)
        for i, w in enumerate(words[:-1]):
            if w == "--apihost":
                words[i + 1] = api.url
            elif w == "--auth":
                words[i + 1] = GUEST_KEY
        r = subprocess.run([sys.executable, "-m", "esg_cli.main", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env=dict(__import__("os").environ, PYTHONPATH=str(ROOT),
                                    **_environment(command, tmp_path)))
        assert r.returncode == 0, r.stderr[-2000:]
        apps = sorted(json.loads(p.read_text())["name"] for p in (ROOT / "apps").glob("*.json"))
        assert all(api.store.lookup(f"guest/{a}") is not None for a in apps)


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "external"])
def test_external_commands_name_files_that_exist(command):
    for word in shlex.split(command):
        path = word.split("/path/to/esg-openwhisk/")[-1]
        if path.startswith(("deploy/", "docker-compose")) or path.endswith((".yml", ".yaml")) and "/" in path:
            assert (ROOT / path).exists(), f"{command}: {path} does not exist"


@pytest.mark.parametrize("command", [c for c in COMMANDS if rule(c) == "key"])
def test_key_is_the_public_guest_key(command):
    assert command.split("=", 1)[1] == GUEST_KEY


def _settings_read() -> set[str]:
    """The environment variables the entry points read (``ESG_...`` named in their sources)."""
    sources = [*(ROOT / "esg_cli").glob("*.py")]
    return {m for p in sources for m in re.findall(r"\bESG_[A-Z0-9_]+", p.read_text())}


@pytest.mark.parametrize("command", sorted({c for c in COMMANDS if rule(c) == "env"}
                                           | {c for c in COMMANDS if ENVS.get(c)}))
def test_variables_are_settings_the_code_reads(command):
    named = set(_assignments(shlex.split(command)[1:])) if command.startswith("export ") else set(ENVS[command])
    unknown = {n for n in named if n.removesuffix("_FILE") not in _settings_read()}
    assert named and not unknown, f"{command}: {sorted(unknown)} is no setting of the code"


# -- the docs' numbers -------------------------------------------------------------------------------

def _app_slos() -> dict[str, float]:
    return {d["name"]: d["slo_ms"] for d in (json.loads(p.read_text()) for p in (ROOT / "apps").glob("*.json"))}


def test_actions_readme_slos_are_the_app_files():
    rows = re.findall(r"^\| `([a-z-]+)` \| .* \| ([0-9.]+) \|$", (ROOT / "actions" / "README.md").read_text(), re.M)
    assert {name: float(slo) for name, slo in rows} == _app_slos()


def test_readme_up_table_slos_are_what_esg_up_deploys():
    from esg_cli.up import _apps

    block = re.search(r"app\s+ok\s+SLO ms.*?\n```", README.read_text(), re.S).group(0)
    shown = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+)\s+\d+/\d+\s+([0-9.]+)", block, re.M)}
    deployed = _apps(ROOT / "apps", ROOT / "profiles" / "tables" / "cpu", 3.0)
    assert shown == {d.app.name: d.slo_ms for d in deployed}
    assert set(shown) == set(_app_slos())


# -- --help shows defaults and choices ---------------------------------------------------------------

def _subparsers(parser, prefix="esg"):
    for action in parser._actions:
        if action.choices and hasattr(action, "_name_parser_map"):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _subparsers(sub, f"{prefix} {name}")


@pytest.mark.parametrize("name,sub", list(_subparsers(build_parser())), ids=lambda v: v if isinstance(v, str) else "")
def test_help_shows_every_default_and_choice(name, sub):
    formatter = sub._get_formatter()
    for action in sub._actions:
        if not action.option_strings or action.nargs == 0:
            continue
        assert action.help, f"{name} {action.option_strings[0]} has no help text"
        text = formatter._expand_help(action)
        if action.default not in (None, False) and not action.required:
            shown = f"{action.default:g}" if isinstance(action.default, float) else \
                action.default.name if isinstance(action.default, Path) else action.default   # a path: by name
            assert str(shown) in text or str(action.default) in text, \
                f"{name} {action.option_strings[0]}: default {action.default!r} not in its help {text!r}"
        if action.choices:
            assert all(str(c) in text for c in action.choices), \
                f"{name} {action.option_strings[0]}: choices not in its help {text!r}"
    assert sub.format_help()
