"""The test suite's record: one passing record per tier, rendered as a block of README.md and tests/README.md."""

import json

import pytest

from precision_rl.analysis import test_record as T

HW = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
      "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}


def _record(tier, passed=10, failed=0, seconds=60.0, exit_status=0):
    return T.session_record(tier, {"passed": passed, "failed": failed, "skipped": 1}, seconds, exit_status, HW,
                            {"sha": "0123456789abcdef", "dirty": False}, "20261203T215445Z")


def test_the_block_gives_each_tier_and_the_whole_suite():
    body = T.section(T.combine([_record("slow", 50, seconds=1200), _record("fast", 870, seconds=180)]))
    lines = body.splitlines()
    assert "23 min in all" in lines[0] and "family 25 model 17" in lines[0] and "0123456789" in lines[0]
    assert "2026-12-03" in lines[0]
    fast, slow = (next(line for line in lines if line.startswith(f"| {tier}")) for tier in ("fast", "slow"))
    assert "870" in fast and "3 min" in fast and "50" in slow and "20 min" in slow


@pytest.mark.parametrize("records,message", [
    ([_record("fast")], "one record per tier"),
    ([_record("fast"), _record("fast")], "one record per tier"),
    ([_record("fast"), _record("slow", failed=1, exit_status=1)], "slow failed"),
])
def test_a_record_of_a_missing_or_failing_tier_is_refused(records, message):
    with pytest.raises(ValueError, match=message):
        T.combine(records)


def test_the_tool_refuses_a_failing_record_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(T, "RECORD_FILE", tmp_path / "record.json")
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    fast.write_text(json.dumps(_record("fast")))
    slow.write_text(json.dumps(_record("slow", failed=2, exit_status=1)))
    assert T.main(["--from", str(fast), str(slow)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not (tmp_path / "record.json").exists()


def test_both_pages_show_the_committed_record():
    body = T.section(T.read_records())
    for page in T.PAGES:
        assert T.BLOCK.render(body) in page.read_text(), \
            f"{page.name}'s test-record block is stale: python -m precision_rl.analysis.test_record --write"
