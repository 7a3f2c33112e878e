"""Test action: a single request raises; batches (main_batch) succeed."""


def main(args):
    raise RuntimeError("single requests are not supported")


def main_batch(batch):
    return [{"n": len(batch)} for _ in batch]
