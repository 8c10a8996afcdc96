"""The run's progress bar estimates the time left from the steps of the current attempt only."""

import io

from tqdm import tqdm

from precision_rl.launch.supervise import start_bar_at


def test_a_resumed_run_counts_only_the_steps_of_its_own_attempt():
    bar = tqdm(total=300, file=io.StringIO(), bar_format="{n_fmt}/{total_fmt} [{elapsed}<{remaining}]")
    start_bar_at(bar, 51)  # resumed from the checkpoint of step 50
    bar.n = 60
    bar.start_t -= 100  # ten steps of this attempt took 100 s
    assert "60/300" in str(bar) and "<40:00]" in str(bar)  # 240 steps left at 10 s a step
    bar.close()


def test_a_fresh_run_starts_at_zero():
    bar = tqdm(total=300, file=io.StringIO())
    start_bar_at(bar, 0)
    assert bar.n == bar.initial == 0
    bar.close()
