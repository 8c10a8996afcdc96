"""The trainer extension's workaround of verl's replay-buffer polling (trainer.py, _build_replay_buffer)."""

from __future__ import annotations

import inspect

from precision_rl.verl_ext.trainer import REPLAY_POLL_S


def test_verls_replay_buffer_still_polls_at_the_interval_the_trainer_shortens():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default == 2.0
    assert "time.sleep(self.poll_interval)" in inspect.getsource(ReplayBuffer._wait_for_next_poll)
    assert REPLAY_POLL_S < 2.0
