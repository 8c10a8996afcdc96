"""How long each tiny profile of the sanity test takes on each CPU kind, read from the committed runs' manifests and
step times (``launch.eta``; the published, reference and calibration runs), as a block of the README that
``make published-results`` rewrites.

``python -m precision_rl.analysis.profile_times [--readme README.md]`` prints the block's table, and rewrites the
block where ``--readme`` names a file that holds it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.config import registry
from precision_rl.config.profiles import CALIBRATED, QUICK, profile_for
from precision_rl.config.scale import TINY
from precision_rl.console import render_table
from precision_rl.launch import eta, runs
from precision_rl.paths import timing_run_roots

README_BLOCK = ReadmeBlock(
    "<!-- profile times (tiny scale): written by `make published-results` from the committed runs -->",
    "<!-- end of profile times -->")


def _instrument_runs(roots: tuple[Path, ...], experiment: str) -> list[dict]:
    """Return the manifests under ``roots`` of tiny runs of ``experiment`` as registered now (no extra overrides) that
    name their CPU, a run committed under two roots once."""
    spec_raw = registry.load_experiment(experiment, TINY).raw
    found = []
    for _, _, doc in eta.committed_runs(roots):
        if doc.get("experiment") == experiment and doc.get("scale") == TINY \
                and (doc.get("hardware") or {}).get("cpu_id") and runs.made_from(doc, spec_raw):
            found.append(doc)
    return found


def committed_kinds(roots: tuple[Path, ...], experiment: str) -> dict[str, dict]:
    """Return the CPU kinds (``eta.cpu_label``) the committed runs of ``experiment`` as registered now ran on, each with
    one of their manifests' ``hardware`` records."""
    kinds: dict[str, dict] = {}
    for doc in _instrument_runs(roots, experiment):
        kinds.setdefault(eta.cpu_label(doc["hardware"]), doc["hardware"])
    return kinds


def profile_rows(roots: tuple[Path, ...], experiment: str = registry.INSTRUMENT_EXPERIMENT) -> list[list[str]]:
    """Return one row per arm and committed CPU kind where a run of that kind logged a profile's steps: the expected
    wall time of each profile, start-up included, as the committed runs of that kind logged it ('-' where none logged
    the profile's steps)."""
    spec = registry.load_experiment(experiment, TINY)
    rows = []
    for kind, hardware in committed_kinds(roots, experiment).items():
        for arm in spec.arms:
            def matches(doc: dict, arm=arm, hardware=hardware) -> bool:
                return doc.get("experiment") == experiment and (doc.get("precision") or {}).get("label") == arm.label \
                    and runs.made_from(doc, spec.raw) \
                    and eta.kind_distance(hardware, doc.get("hardware") or {})[:3] == (0, 0, 0)

            cells = []
            for profile in (QUICK, CALIBRATED):
                last = profile_for(spec, profile).last_step(spec)
                found = eta.estimate(hardware, matches, 1, last, roots)
                cells.append(f"{eta.format_duration(found.seconds)} ({len(found.runs)} run(s))" if found else "-")
            if cells != ["-", "-"]:
                rows.append([arm.label.upper(), kind, *cells])
    return rows


def section(roots: tuple[Path, ...], experiment: str = registry.INSTRUMENT_EXPERIMENT) -> str:
    """Return the README block's body: the table of ``profile_rows`` with its provenance."""
    spec = registry.load_experiment(experiment, TINY)
    quick, whole = (profile_for(spec, p).last_step(spec) for p in (QUICK, CALIBRATED))
    rows = profile_rows(roots, experiment)
    table = render_table(rows, ["arm", "CPU", f"{QUICK} (steps 1-{quick})", f"{CALIBRATED} (steps 1-{whole})"],
                         markdown=True) if rows else "(no committed run names its CPU)"
    return (f"Tiny scale (CPU): `make run EXP={experiment}` per profile, start-up included: the median over the "
            "committed runs of each CPU kind (published, reference and calibration runs of the experiment as "
            "registered now; their first attempt's start-up plus their logged step times; `launch/eta.py`). A kind or "
            f"arm no such run timed is left out.\n\n{table}")


def main(argv: list[str] | None = None) -> int:
    """Print the block's body; rewrite it in ``--readme`` where given; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, help="a file holding the block, rewritten in place")
    parser.add_argument("--logs", type=Path, nargs="+", default=None,
                        help="folders of committed runs (default: results/logs, results/reference and "
                             "results/calibration)")
    args = parser.parse_args(argv)
    body = section(tuple(args.logs) if args.logs else timing_run_roots())
    print(body)
    write_block(args.readme, README_BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
