"""Each backend names the extra that installs what it needs; importing the CLI or the
annotate package loads no model framework."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragguard._optional import install_hint


def test_importing_the_cli_and_the_package_loads_no_framework() -> None:
    code = (
        "import sys, ragguard.cli, ragguard.calibration.annotate; "
        "print(sorted(m for m in ('torch', 'transformers', 'httpx', 'gguf', 'langchain_core') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("blocked", "call", "extra"),
    [
        ("httpx", "OpenAIEndpointEstimator('m')", "endpoint"),
        ("httpx", "EndpointGenerator('m')", "endpoint"),
        ("torch", "TransformersEstimator('some/model')", "annotate"),
        ("transformers", "TransformersEstimator('some/model')", "annotate"),
        ("gguf", "TransformersEstimator.from_gguf(sys.executable)", "gguf"),
        ("langchain_core", "SamplingEstimator(object())", "langchain"),
    ],
)
def test_a_missing_dependency_names_the_extra(blocked: str, call: str, extra: str) -> None:
    code = f"""
import sys
sys.modules[{blocked!r}] = None  # as if it were not installed
from ragguard.calibration.annotate import *
from ragguard import MissingDependencyError
try:
    {call}
except MissingDependencyError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert install_hint(extra) in out.stdout, out.stdout + out.stderr
