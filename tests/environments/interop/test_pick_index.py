"""The reset option 'index' of the row-backed interop adapters (SkyRL, verifiers)."""

import numpy as np
import pytest

from agentgym.environments.interop.base import pick_index
from agentgym.errors import ConfigError


def test_an_index_picks_its_row_and_none_draws_one_in_range():
    rng = np.random.default_rng(0)
    assert pick_index({"index": 2}, rng, 3) == 2
    assert pick_index({"index": np.int64(0)}, rng, 3) == 0
    assert {pick_index({}, rng, 3) for _ in range(50)} == {0, 1, 2}


@pytest.mark.parametrize("options, says", [
    ({"index": 3}, "[0, 3)"), ({"index": -1}, "[0, 3)"), ({"index": True}, "got True"),
    ({"index": "1"}, "got '1'"), ({"split": "eval"}, "unknown reset option(s) ['split']"),
])
def test_a_bad_option_is_a_config_error_that_says_what_is_allowed(options, says):
    with pytest.raises(ConfigError, match=None) as e:
        pick_index(options, np.random.default_rng(0), 3)
    assert says in str(e.value)
