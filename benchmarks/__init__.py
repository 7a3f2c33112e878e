"""Benchmarks of the system, each a script run as a file (``PYTHONPATH=. .venv/bin/python benchmarks/X.py``)
or through ``esg bench``. A package only so that its imports are checked like every other part's."""
