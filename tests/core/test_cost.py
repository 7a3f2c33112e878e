"""Slice prices per GPU model: one table (the MIG geometry), the cost model reads it."""

import pytest

from esg.cost import Prices, config_cost
from esg.model import Config


def test_a_slice_of_a_dearer_gpu_costs_more_by_the_ratio_of_their_list_derived_prices():
    a100 = config_cost(Prices(), "A100-40GB", Config(1, 1, "3g.20gb"), 10.0)
    h100 = config_cost(Prices(), "H100-80GB", Config(1, 1, "3g.40gb"), 10.0)
    assert a100 == pytest.approx((1.0 + 12.1 * 3) * 10.0)       # a vCPU 1.0, an A100-40GB slice 12.1
    assert h100 == pytest.approx((1.0 + 37.9 * 3) * 10.0)       # p5.48xlarge against p4d.24xlarge


def test_the_slice_price_given_is_the_default_models_and_scales_the_others():
    assert Prices(1.0, 0.0).rate("H100-80GB", Config(1, 2, "7g.80gb")) == 2.0
    assert Prices(0.0, 12.1 * 2).slice_rate("A100-80GB") == pytest.approx(15.5 * 2)


def test_a_model_without_a_list_price_is_priced_as_the_default_model():
    assert Prices().slice_rate("A30") == Prices().slice_rate("A100-40GB") == 12.1
