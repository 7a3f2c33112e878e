"""Test action: answers its thread setting, and fails unless ESG_ACTION_THREADS equals its pinned CPU count."""

import os


def main(args):
    threads = os.environ.get("ESG_ACTION_THREADS")
    cpus = len(os.sched_getaffinity(0))
    if threads != str(cpus):
        return {"error": f"ESG_ACTION_THREADS={threads} but pinned to {cpus} CPUs"}
    return {"threads": int(threads), "seed": args.get("seed")}


def main_batch(batch):
    return [main(a) for a in batch]
