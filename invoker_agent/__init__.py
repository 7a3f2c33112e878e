"""The node agent: MIG reconcile through NVML, warm workers pinned to MIG slices and vCPUs, batched runs."""
