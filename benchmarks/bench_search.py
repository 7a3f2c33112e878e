"""ESG_1Q search benchmark: ``python benchmarks/bench_search.py [options]`` (same as ``esg bench search``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from esg_cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "search", *sys.argv[1:]]))
