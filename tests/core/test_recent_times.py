"""ESG's pool rule counts each function's jobs within a sliding window (``esg_policy._Recent``): the
times kept after each cut are those a deque that drops its oldest while they precede the cut keeps."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from esg.policies.esg_policy import _Recent

steps = st.lists(st.tuples(st.booleans(), st.floats(0, 1000, allow_nan=False)), max_size=1200)


@given(steps)
def test_the_times_kept_are_a_deques(ops):
    recent, reference = _Recent(), deque()
    for add, t in ops:
        if add:
            recent.add(t)
            reference.append(t)
        else:
            while reference and reference[0] < t:
                reference.popleft()
            assert recent.forget_before(t) == len(reference)
            assert recent.times[recent.first:] == list(reference)


def test_a_long_run_drops_what_it_forgot():
    recent = _Recent()
    for t in range(10_000):
        recent.add(float(t))
        assert recent.forget_before(t - 99.5) == min(t + 1, 100)
    assert len(recent.times) < 1_000
