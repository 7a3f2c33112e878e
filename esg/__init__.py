"""ESG, the pure scheduling core.

Nothing in this package touches Kafka, Redis, HTTP, NVML, threads, processes or the wall clock:
the live service (``controller_plugin``) and the emulator drive the same objects with their own clocks.
"""
