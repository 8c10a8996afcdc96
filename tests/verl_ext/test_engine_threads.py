"""The CPU training engine computes on a pinned thread count, which transfer_queue would otherwise reset."""

from __future__ import annotations

import os

import torch

from precision_rl.verl_ext.engine import engine_threads, pin_torch_threads


def test_pinning_sets_every_core_this_process_may_use():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert pin_torch_threads() == engine_threads() == len(os.sched_getaffinity(0))
        assert torch.get_num_threads() == engine_threads()
    finally:
        torch.set_num_threads(before)


def test_transfer_queue_still_restores_its_import_time_thread_count():
    """Why the engine pins again before every pass: after each transfer, transfer_queue 0.1.11 sets torch's thread
    count to the one it saw at import (1 in a Ray actor), not to the one before the transfer. When this fails, check
    whether the re-pinning in precision_rl.verl_ext.engine is still needed."""
    from transfer_queue.utils import common

    before = torch.get_num_threads()
    imported = common.DEFAULT_TORCH_NUM_THREADS
    try:
        torch.set_num_threads(imported + 1)
        with common.limit_pytorch_auto_parallel_threads(target_num_threads=1):
            pass
        assert torch.get_num_threads() == imported
    finally:
        torch.set_num_threads(before)
