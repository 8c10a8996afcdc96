"""The trainer extension's workarounds of verl's replay buffer (trainer.py, _build_replay_buffer): its polling interval and
the order it hands a batch over in."""

from __future__ import annotations

import inspect

from precision_rl.verl_ext.trainer import REPLAY_POLL_S, row_order


def test_verls_replay_buffer_still_polls_at_the_interval_the_trainer_shortens():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default == 2.0
    assert "time.sleep(self.poll_interval)" in inspect.getsource(ReplayBuffer._wait_for_next_poll)
    assert REPLAY_POLL_S < 2.0


def test_a_batch_is_put_in_dataset_row_order_whatever_order_it_finished_in():
    keys = ["u9_1_0", "u3_0_0", "u9_0_0", "u1_0_1", "u1_0_0"]
    rows = [7, 2, 7, 5, 5]
    assert [keys[i] for i in row_order(keys, rows)] == ["u3_0_0", "u1_0_0", "u1_0_1", "u9_0_0", "u9_1_0"]
    assert row_order(keys, rows) == row_order(keys, rows)


def test_verls_replay_buffer_still_hands_a_batch_over_in_finishing_order():
    """Why the trainer reorders batches: verl 0.9.1 lists a batch's keys in the order the replay buffer's partition
    received them (a dict filled as samples finish). When this fails, check whether verl orders batches itself."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    source = inspect.getsource(ReplayBuffer._materialize_batch)
    assert "for key, tag in partition_snapshot.items():" in source


def test_verls_trainer_still_keeps_the_prompts_that_the_extremes_file_reads_back():
    """``PrecisionTrainer._write_extremes`` reads each extreme response's ``prompts`` and ``index`` from verl 0.9.1's
    TransferQueue batch; verl reads ``prompts`` back itself when it dumps generations. When this fails, find where
    verl keeps a sample's prompt ids now, or a run would fail at its first extreme step."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert 'select_fields=["prompts", "responses"]' in inspect.getsource(PPOTrainer)


def test_verls_trainer_still_sets_the_schedule_horizon_before_the_loop_end_the_stop_lowers():
    """The quick profile's stop (``stop_after_step``, applied after ``PPOTrainer._init_dataloader``) relies on verl
    0.9.1 fixing the optimizer's horizon from ``total_training_steps`` inside ``_init_dataloader`` and ending ``fit`` at
    ``self.total_training_steps`` with the last step's validation and checkpoint. When this fails, the quick profile
    would either not stop or shorten the learning-rate schedule, and stop being a prefix of the calibrated run."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    setup = inspect.getsource(PPOTrainer._init_dataloader)
    assert "self.total_training_steps = total_training_steps" in setup
    assert setup.index("self.total_training_steps = total_training_steps") < setup.index(
        "actor_rollout_ref.actor.optim.total_training_steps = optim_total_training_steps")
    loop = inspect.getsource(PPOTrainer.fit)
    assert "is_last_step = self.global_steps >= self.total_training_steps" in loop
    assert "is_last_step or self.global_steps % self.config.trainer.save_freq == 0" in loop


def test_the_stop_is_read_from_verls_config_and_absent_means_the_whole_run():
    from omegaconf import OmegaConf

    from precision_rl.verl_ext.trainer import stop_after_step

    assert stop_after_step(OmegaConf.create({"trainer": {"stop_after_step": 25, "total_training_steps": 300}})) == 25
    assert stop_after_step(OmegaConf.create({"trainer": {"total_training_steps": 300}})) is None
