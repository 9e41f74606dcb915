"""``python -m bench.rebalance``: bad sizes are usage errors, before any process starts (the
rollout and the rebalance it times are tested in test_balancer.py and test_rebalance.py)."""

from __future__ import annotations

import pytest

from bench.rebalance import main


@pytest.mark.parametrize(
    "argv", [["--sockets", "0"], ["--gateways", "1"], ["--over", "-1"], ["--max-wait", "0"], ["--tolerance", "-0.1"]]
)
def test_bad_sizes_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
