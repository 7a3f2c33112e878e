"""The unit costs are shown in (``esg plan``, the plots, ``esg replay``'s and ``esg emulate``'s CSVs).

The cost model (:mod:`esg.cost`) prices a vCPU at 1.0 per millisecond and a MIG compute slice at its
GPU's table price in the same unit, so a cost is resource-time in vCPU-milliseconds per request.
"""

COST_UNIT = "vCPU-ms/request"
