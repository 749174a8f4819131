"""With callbacks and event handlers on, every adapter sends and returns what it did
before issue 39 made the payloads lazy (payloads_golden.json, captured from that code),
on the sync and the async paths."""

from __future__ import annotations

import json
import warnings

import pytest

from tests.adapters.payloads import GOLDEN, as_json, capture


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_payloads_and_metadata_are_those_of_the_eager_code(run_async: bool) -> None:
    golden = json.loads(GOLDEN.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = as_json(capture(run_async))
    for guard, frameworks in golden.items():
        for framework, expected in frameworks.items():
            assert got[guard][framework] == expected, (guard, framework)
