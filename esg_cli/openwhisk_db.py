"""OpenWhisk's databases on the embedded CouchDB (``esg_cli.servers.start_couchdb``), made by the same
initialisation the compose deployment runs (``deploy/couchdb/init.py``, OpenWhisk's ``initdb``): the
``{prefix}subjects``, ``{prefix}whisks`` and ``{prefix}activations`` databases with OpenWhisk's design
documents -- the activation views the REST stand-in lists records through among them -- and the
``guest`` and ``whisk.system`` identities with OpenWhisk's public keys.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from controller_plugin.activation_store import parse_url
from esg_cli.errors import CliError

INIT = Path(__file__).resolve().parent.parent / "deploy" / "couchdb" / "init.py"
#: OpenWhisk's database prefix in its ansible deployment (``whisk_local_activations``, ...).
PREFIX = "whisk_local_"


def _init() -> ModuleType:
    """``deploy/couchdb/init.py``, a script in the compose image, loaded as a module."""
    name = "esg_couchdb_init"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, INIT)
        if spec is None or spec.loader is None:
            raise CliError(f"{INIT}: cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def initialise(couch_url: str, prefix: str = PREFIX) -> str:
    """Make OpenWhisk's databases on the CouchDB at ``couch_url`` (``http://admin:password@host:port``);
    return the activations database's URL. A refusal is a CliError naming the step."""
    init = _init()
    url = parse_url(couch_url + "/x")
    try:
        databases = init.plan(prefix, init.identity_keys({}))
        init.apply(init.CouchDB(url.base, url.user or "", url.password or ""), databases)
    except init.InitError as exc:
        raise CliError(f"OpenWhisk's databases: {exc}") from None
    return f"{couch_url}/{prefix}activations"
