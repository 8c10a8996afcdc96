"""What the test suite's last recorded run took, tier by tier, as a block of README.md and tests/README.md.

``make test-record`` runs ``make test`` with each tier recording itself (tests/conftest.py writes one JSON per tier
where ``PRECISION_RL_TEST_RECORD`` names a file: counts, seconds, the CPU, the commit), commits the records to
``results/test_record.json`` and rewrites both blocks; ``python -m precision_rl.analysis.test_record --write``
rewrites the blocks alone. No test count or duration is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch.eta import cpu_label, format_duration
from precision_rl.paths import REPO_ROOT, RESULTS_DIR

RECORD_FILE = RESULTS_DIR / "test_record.json"
RECORD_ENV, TIER_ENV = "PRECISION_RL_TEST_RECORD", "PRECISION_RL_TEST_TIER"
TIERS = ("fast", "slow")  # the tiers `make test` runs, in order
BLOCK = ReadmeBlock("<!-- test record: written by `make test-record` from results/test_record.json -->",
                    "<!-- end of test record -->")
PAGES = (REPO_ROOT / "README.md", REPO_ROOT / "tests" / "README.md")


def session_record(tier: str, counts: dict[str, int], seconds: float, exit_status: int, hardware: dict,
                   git: dict, time_utc: str) -> dict:
    """Return one tier's record: what passed, failed and was skipped, how long it took, where and at which commit."""
    return {"tier": tier, "counts": dict(counts), "seconds": round(seconds, 1), "exit_status": int(exit_status),
            "hardware": hardware, "git": git, "time_utc": time_utc}


def combine(records: list[dict]) -> list[dict]:
    """Return ``records`` in ``TIERS`` order; ValueError unless each tier appears once and passed."""
    by_tier = {r["tier"]: r for r in records}
    if sorted(by_tier) != sorted(TIERS) or len(records) != len(TIERS):
        raise ValueError(f"need one record per tier {', '.join(TIERS)}, got {[r['tier'] for r in records]}")
    failed = [r["tier"] for r in records if r["exit_status"] != 0 or r["counts"].get("failed")]
    if failed:
        raise ValueError(f"tier(s) {', '.join(failed)} failed: a record is of a passing suite")
    return [by_tier[t] for t in TIERS]


def section(records: list[dict]) -> str:
    """Return the block's body: one row per tier and the whole suite's time."""
    rows = [[r["tier"], str(r["counts"].get("passed", 0)), str(r["counts"].get("skipped", 0)),
             format_duration(r["seconds"])] for r in records]
    total = sum(r["seconds"] for r in records)
    first = records[0]
    commit = (first.get("git") or {}).get("sha") or "unknown"
    stamp = first["time_utc"]
    table = render_table(rows, ["tier", "passed", "skipped", "time"], markdown=True, floatfmt="")
    return (f"`make test` as last recorded (`make test-record`): {format_duration(total)} in all on "
            f"{cpu_label(first['hardware'])}, {first['hardware'].get('cpu_count')} cores, commit {commit[:10]}, "
            f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}.\n\n{table}")


def read_records(path: Path = RECORD_FILE) -> list[dict]:
    """Return the committed records (ValueError where the file is unreadable or incomplete)."""
    return combine(json.loads(Path(path).read_text()))


def main(argv: list[str] | None = None) -> int:
    """With ``--from`` files, write them as the committed record; rewrite the blocks; return 0 (2 on bad input)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="sources", nargs="*", type=Path, default=[],
                        help="per-tier records written by a `make test` run, to commit as results/test_record.json")
    parser.add_argument("--write", action="store_true", help="rewrite the block in README.md and tests/README.md")
    args = parser.parse_args(argv)
    try:
        if args.sources:
            records = combine([json.loads(p.read_text()) for p in args.sources])
            atomic_write_json(RECORD_FILE, records)
        records = read_records()
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    body = section(records)
    print(body)
    for page in PAGES if args.write else ():
        write_block(page, BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
