"""precision-rl: reproduction suite for "Defeating the Training-Inference Mismatch via FP16" (arXiv 2510.26788)."""

__version__ = "0.1.0"
