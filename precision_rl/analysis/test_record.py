"""What the test suite's last recorded run on each CPU kind took, tier by tier, as a block of README.md and
tests/README.md.

``make test-record`` runs ``make test`` with each tier recording itself (tests/conftest.py writes one JSON per tier
where ``PRECISION_RL_TEST_RECORD`` names a file: counts, seconds, the CPU, the commit), puts the records in
``results/test_record.json`` in place of the earlier ones of the same CPU kind (those of other kinds stay) and
rewrites both blocks; ``python -m precision_rl.analysis.test_record --write`` rewrites the blocks alone. No test
count or duration is typed by hand.
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


def cpu_kind(record: dict) -> str:
    """Return the CPU kind a record was made on: ``eta.cpu_label`` and the core count."""
    return f"{cpu_label(record['hardware'])}, {record['hardware'].get('cpu_count')} cores"


def combine(records: list[dict]) -> list[dict]:
    """Return one suite run's ``records`` in ``TIERS`` order; ValueError unless each tier appears once, passed, and
    all ran on one CPU kind."""
    by_tier = {r["tier"]: r for r in records}
    if sorted(by_tier) != sorted(TIERS) or len(records) != len(TIERS):
        raise ValueError(f"need one record per tier {', '.join(TIERS)}, got {[r['tier'] for r in records]}")
    failed = [r["tier"] for r in records if r["exit_status"] != 0 or r["counts"].get("failed")]
    if failed:
        raise ValueError(f"tier(s) {', '.join(failed)} failed: a record is of a passing suite")
    kinds = sorted({cpu_kind(r) for r in records})
    if len(kinds) > 1:
        raise ValueError(f"the tiers ran on different CPU kinds ({'; '.join(kinds)}): a record is of one machine")
    return [by_tier[t] for t in TIERS]


def merge(committed: list[list[dict]], suite: list[dict]) -> list[list[dict]]:
    """Return the ``committed`` suite records with ``suite`` in place of the one of its CPU kind, newest first."""
    kept = [s for s in committed if cpu_kind(s[0]) != cpu_kind(suite[0])]
    return sorted([*kept, suite], key=lambda s: s[0]["time_utc"], reverse=True)


def section(suites: list[list[dict]]) -> str:
    """Return the block's body: per CPU kind, each tier's passed tests and time, the whole suite's time, the commit
    (and whether the tree held uncommitted changes) and the date."""
    rows = []
    for records in suites:
        fast, slow = records
        stamp = fast["time_utc"]
        commit = ((fast.get("git") or {}).get("sha") or "unknown")[:10]
        if any((r.get("git") or {}).get("dirty") for r in records):
            commit += " with uncommitted changes"
        rows.append([cpu_kind(fast), commit,
                     f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}",
                     f"{fast['counts'].get('passed', 0)} passed, {format_duration(fast['seconds'])}",
                     f"{slow['counts'].get('passed', 0)} passed, {format_duration(slow['seconds'])}",
                     str(sum(r["counts"].get("skipped", 0) for r in records)),
                     format_duration(sum(r["seconds"] for r in records))])
    table = render_table(rows, ["CPU", "commit", "date", "fast tier", "slow tier", "skipped", "in all"],
                         markdown=True, floatfmt="")
    return f"`make test` as last recorded on each CPU kind (`make test-record`), the newest first:\n\n{table}"


def read_records(path: Path = RECORD_FILE) -> list[list[dict]]:
    """Return the committed records, one suite (``TIERS`` in order) per CPU kind, newest first (ValueError where the
    file is unreadable or a kind's suite is incomplete)."""
    by_kind: dict[str, list[dict]] = {}
    for record in json.loads(Path(path).read_text()):
        by_kind.setdefault(cpu_kind(record), []).append(record)
    return sorted((combine(records) for records in by_kind.values()), key=lambda s: s[0]["time_utc"], reverse=True)


def main(argv: list[str] | None = None) -> int:
    """With ``--from`` files, put them in the committed record in place of their CPU kind's; rewrite the blocks;
    return 0 (2 on bad input)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="sources", nargs="*", type=Path, default=[],
                        help="per-tier records written by a `make test` run, to put in results/test_record.json "
                             "in place of its CPU kind's")
    parser.add_argument("--write", action="store_true", help="rewrite the block in README.md and tests/README.md")
    args = parser.parse_args(argv)
    try:
        if args.sources:
            suite = combine([json.loads(p.read_text()) for p in args.sources])
            committed = read_records(RECORD_FILE) if RECORD_FILE.exists() else []
            atomic_write_json(RECORD_FILE, [r for s in merge(committed, suite) for r in s])
        suites = read_records(RECORD_FILE)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    body = section(suites)
    print(body)
    for page in PAGES if args.write else ():
        write_block(page, BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
