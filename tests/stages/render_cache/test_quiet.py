"""The demo and the eval renderer print no gymnasium float-precision warnings on the user's console:
OGBench's reset builds a Box from float64 bounds; that one message is silenced for that call, no other."""

from __future__ import annotations

import warnings

import pytest

from pipeline.stages.render_cache.render import make_env, reset_quietly

pytestmark = pytest.mark.render


def test_making_and_resetting_the_env_warns_nothing():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = make_env("cube-single-v0", 1)
        reset_quietly(env, seed=3)
        env.close()
    assert [str(w.message) for w in caught if "precision lowered" in str(w.message)] == []


def test_only_that_message_is_silenced():
    class Env:
        def reset(self, **kwargs):
            warnings.warn("something else the user should see", UserWarning, stacklevel=1)
            return kwargs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert reset_quietly(Env(), seed=1) == {"seed": 1}
    assert [str(w.message) for w in caught] == ["something else the user should see"]
