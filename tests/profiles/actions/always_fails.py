"""Test action: every request raises."""


def main(args):
    raise RuntimeError("boom")
