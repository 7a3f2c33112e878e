"""Profiling of actions over a configuration grid (``esg profile``) and the shipped profile tables.

- :mod:`profiles.grid` parses and validates the grid (batch sizes, vCPUs, MIG profiles);
- :mod:`profiles.targets` resolves what to profile (a function, an app, an action file) and builds
  each function's deterministic input by running its predecessors locally;
- :mod:`profiles.host` describes the machine (CPU, GPU via NVML, existing MIG slices);
- :mod:`profiles.profiler` measures every configuration through the invoker agent's process runner,
  keeps a resumable partial results file and writes the profile table (``docs/architecture.md`` §6).

``tables/`` holds the shipped tables, one directory per source (``cpu/`` measured here, ``a100/`` derived).
"""
