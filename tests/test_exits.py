"""drainhook.exits against CONTRACT §5, row for row: the table is written out
here as the contract gives it, and every place that turns an outcome, a verdict,
an error or a signal into an exit code is checked against it."""

from __future__ import annotations

import signal

import pytest

from drainhook import exits
from drainhook.engines.verdict import Verdict
from drainhook.errors import (
    DrainhookError,
    InstallError,
    NoHistogram,
    ObserveError,
    Unreachable,
    UsageError,
)
from drainhook.hook.drain import Outcome, Result
from drainhook.hook.probe import PROBE_EXIT
from drainhook.hook.run import exit_code

# CONTRACT §5: the outcome of `wait` and its exit.
CONTRACT_WAIT = {
    "drained": 0,
    "deadline": 3,
    "unreachable": 4,
    "stalled": 5,
    "misconfigured": 6,
    "interrupted by SIGINT": 130,
    "interrupted by SIGTERM": 143,
    "usage error": 2,
}
# `probe` exits 0 idle, 1 busy, 3 unknown, 4 unreachable, 2 usage.
CONTRACT_PROBE = {"idle": 0, "busy": 1, "unknown": 3, "unreachable": 4}
CONTRACT_INTERNAL = 70  # in every command, a code no outcome uses


def test_the_table_is_the_contracts() -> None:
    table = {**exits.WAIT, "usage error": exits.USAGE}
    table["interrupted by SIGINT"] = exits.interrupted(signal.SIGINT)
    table["interrupted by SIGTERM"] = exits.interrupted(signal.SIGTERM)
    assert table == CONTRACT_WAIT
    assert exits.PROBE == CONTRACT_PROBE
    assert exits.INTERNAL == CONTRACT_INTERNAL
    assert CONTRACT_INTERNAL not in {*CONTRACT_WAIT.values(), *CONTRACT_PROBE.values()}


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.INTERRUPTED])
def test_each_outcome_of_wait_exits_as_the_contract_says(outcome: Outcome) -> None:
    result = Result(outcome, 1.0, 2, None)
    assert exit_code(result) == CONTRACT_WAIT[outcome.value]
    assert exit_code(result, exit_zero=True) == 0  # --exit-zero maps every outcome to 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_wait_exits_128_plus_the_signal(signum: signal.Signals) -> None:
    result = Result(Outcome.INTERRUPTED, 1.0, 2, None, signum)
    assert exit_code(result) == CONTRACT_WAIT[f"interrupted by {signum.name}"]
    assert exit_code(result, exit_zero=True) == 0


def test_an_interrupted_wait_whose_signal_is_unknown_exits_as_for_sigterm() -> None:
    result = Result(Outcome.INTERRUPTED, 1.0, 2, None, None)
    assert exit_code(result) == CONTRACT_WAIT["interrupted by SIGTERM"] == 143


def test_each_verdict_of_probe_exits_as_the_contract_says() -> None:
    assert {v.value: PROBE_EXIT[v] for v in Verdict} == CONTRACT_PROBE


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (DrainhookError, CONTRACT_INTERNAL),
        (UsageError, CONTRACT_WAIT["usage error"]),
        (InstallError, 1),
        (ObserveError, 3),
        (NoHistogram, CONTRACT_WAIT["usage error"]),
        (Unreachable, CONTRACT_PROBE["unreachable"]),
    ],
)
def test_each_error_kind_exits_with_its_code(kind: type[DrainhookError], code: int) -> None:
    assert kind("x").exit_code == code


def test_inject_exits_as_the_contract_says() -> None:
    """CONTRACT §4: `inject` exits 1 if any document was refused, else 0; 2 usage."""
    from drainhook.cli.main import wait
    from drainhook.inject.options import Options, Refused
    from drainhook.inject.run import inject_texts

    WAIT = tuple(wait.params)

    assert Refused("x").exit_code == exits.INJECT_REFUSED == 1
    knative = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: k}\n" + (
        "spec:\n  template:\n    spec:\n      containers: [{image: vllm/vllm-openai:v0.18.0}]\n"
    )
    assert (
        inject_texts([("k.yaml", knative)], Options(wait_params=WAIT, binary_given=True)).code == 1
    )
    assert (
        inject_texts(
            [("k.yaml", "kind: ConfigMap\n")], Options(wait_params=WAIT, binary_given=True)
        ).code
        == 0
    )
    with pytest.raises(UsageError) as caught:
        inject_texts([("k.yaml", "a: [\n")], Options(wait_params=WAIT, binary_given=True))
    assert caught.value.exit_code == CONTRACT_WAIT["usage error"]
