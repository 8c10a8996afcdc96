"""precision-rl: reproduction suite for "Defeating the Training-Inference Mismatch via FP16" (arXiv 2510.26788)."""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
