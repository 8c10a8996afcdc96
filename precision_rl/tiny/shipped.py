"""The shipped tiny base model: the tiny instrument's calibrated base, committed in ``precision_rl/tiny/base_model``.

The folder holds the weights, the tokenizer, the model config and the build record, and ``SHA256SUMS`` lists every
other file with its sha256 in the format ``sha256sum -c`` reads. Everything that loads the model checks the folder
against that list first, so a corrupted, truncated or changed file stops a run with one line naming it; the sha256
of the weights file names the model in every run manifest.
"""

from __future__ import annotations

from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_text, sha256_file
from precision_rl.paths import REPO_ROOT

SHIPPED_DIR = Path(__file__).with_name("base_model")
CHECKSUMS_FILE = "SHA256SUMS"
WEIGHTS_FILE = "model.safetensors"


def _shown(path: Path) -> str:
    """Return ``path`` relative to the repository when it lies inside it (as a user types it), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def folder_checksums(folder: Path) -> dict[str, str]:
    """Return the sha256 of every file in ``folder`` but the checksum list, by file name, sorted by name."""
    return {p.name: sha256_file(p) for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.name != CHECKSUMS_FILE}


def write_checksums(folder: Path) -> Path:
    """Write ``SHA256SUMS`` for every other file of ``folder``; return its path."""
    lines = "".join(f"{digest}  {name}\n" for name, digest in folder_checksums(folder).items())
    return atomic_write_text(Path(folder) / CHECKSUMS_FILE, lines)


def recorded_checksums(folder: Path = SHIPPED_DIR) -> dict[str, str]:
    """Return the checksums ``SHA256SUMS`` records for ``folder``, by file name; raise UserError when the list is
    missing or malformed."""
    listing = Path(folder) / CHECKSUMS_FILE
    if not listing.is_file():
        raise UserError(f"{_shown(listing)} is missing: the tiny base model cannot be checked "
                        f"(`git checkout -- {_shown(folder)}` restores the shipped model)")
    recorded = {}
    for number, line in enumerate(listing.read_text().splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name or "/" in name:
            raise UserError(f"{_shown(listing)}:{number}: not a '<sha256>  <file name>' line: {line!r}")
        recorded[name] = digest
    if WEIGHTS_FILE not in recorded:
        raise UserError(f"{_shown(listing)} lists no {WEIGHTS_FILE}")
    return recorded


def verify(folder: Path = SHIPPED_DIR) -> Path:
    """Check every file ``SHA256SUMS`` lists against its recorded sha256; return ``folder``, or raise UserError with
    one line naming the first missing or changed file (and both checksums)."""
    folder = Path(folder)
    for name, expected in recorded_checksums(folder).items():
        path = folder / name
        if not path.is_file():
            raise UserError(f"{_shown(path)} is missing from the tiny base model "
                            f"(`git checkout -- {_shown(folder)}` restores the shipped model)")
        actual = sha256_file(path)
        if actual != expected:
            raise UserError(f"{_shown(path)}: sha256 {actual} does not match {expected} recorded in "
                            f"{CHECKSUMS_FILE}: the file is corrupted or changed "
                            f"(`git checkout -- {_shown(folder)}` restores the shipped model)")
    return folder


def weights_sha256(folder: Path = SHIPPED_DIR) -> str:
    """Return the recorded sha256 of the model's weights file: the model's identity in manifests and problem
    lists."""
    return recorded_checksums(folder)[WEIGHTS_FILE]
