"""The test suite's record: one passing record per tier and CPU kind, rendered as a block of README.md and
tests/README.md."""

import json

import pytest

from precision_rl.analysis import test_record as T

HW = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
      "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}
INTEL = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_id": "GenuineIntel family 6 model 207 stepping 2",
         "cpu_count": 2, "matrix_flags": ["amx_bf16", "avx2", "avx512_bf16", "avx512_fp16", "avx512f"]}


def _record(tier, passed=10, failed=0, seconds=60.0, exit_status=0, hardware=HW, stamp="20261203T215445Z",
            sha="0123456789abcdef"):
    return T.session_record(tier, {"passed": passed, "failed": failed, "skipped": 1}, seconds, exit_status,
                            hardware, {"sha": sha, "dirty": False}, stamp)


def test_the_block_gives_each_tier_and_the_whole_suite():
    body = T.section([T.combine([_record("slow", 50, seconds=1200), _record("fast", 870, seconds=180)])])
    row = next(line for line in body.splitlines() if "family 25 model 17" in line)
    assert "0123456789" in row and "2026-12-03" in row and "2 cores" in row
    assert "870 passed, 3 min" in row and "50 passed, 20 min" in row and "23 min" in row
    assert "uncommitted" not in row
    dirty = _record("slow", 50, seconds=1200)
    dirty["git"]["dirty"] = True
    assert "0123456789 with uncommitted changes" in T.section([T.combine([dirty, _record("fast")])])


def test_a_record_replaces_only_the_earlier_one_of_its_cpu_kind(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "RECORD_FILE", tmp_path / "record.json")
    files = {}
    for name, hardware, stamp, seconds in (("amd", HW, "20261203T000000Z", 100.0),
                                          ("intel", INTEL, "20261206T000000Z", 200.0),
                                          ("amd2", HW, "20261207T000000Z", 300.0)):
        for tier in T.TIERS:
            files[name, tier] = tmp_path / f"{name}-{tier}.json"
            files[name, tier].write_text(json.dumps(_record(tier, seconds=seconds, hardware=hardware, stamp=stamp)))
        assert T.main(["--from", str(files[name, "fast"]), str(files[name, "slow"])]) == 0
    suites = T.read_records(T.RECORD_FILE)
    assert [(s[0]["hardware"]["cpu_model"], s[0]["seconds"]) for s in suites] == \
        [("AMD EPYC", 300.0), ("Intel(R) Xeon(R) Processor", 200.0)]
    rows = [line for line in T.section(suites).splitlines() if "cores" in line]
    assert len(rows) == 2 and "model 17" in rows[0] and "model 207" in rows[1]


@pytest.mark.parametrize("records,message", [
    ([_record("fast")], "one record per tier"),
    ([_record("fast"), _record("fast")], "one record per tier"),
    ([_record("fast"), _record("slow", failed=1, exit_status=1)], "slow failed"),
    ([_record("fast"), _record("slow", hardware=INTEL)], "different CPU kinds"),
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
    body = T.section(T.read_records(T.RECORD_FILE))
    for page in T.PAGES:
        assert T.BLOCK.render(body) in page.read_text(), \
            f"{page.name}'s test-record block is stale: python -m precision_rl.analysis.test_record --write"
