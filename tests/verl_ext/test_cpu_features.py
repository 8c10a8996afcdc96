"""How the CPU engine computes fp16 GEMMs: chosen from the CPU's flags, overridable, bad values refused."""

import pytest

from precision_rl.errors import UserError
from precision_rl.verl_ext.cpu_features import cpu_flags, cpu_model, fp16_gemm_mode, matrix_flags
from precision_rl.verl_ext.settings import FP16_GEMM_ENV


def test_mode_follows_the_flags(monkeypatch):
    monkeypatch.delenv(FP16_GEMM_ENV, raising=False)
    assert fp16_gemm_mode({"avx512f", "avx512_bf16"}) == "emulated"
    assert fp16_gemm_mode({"avx512f", "avx512_fp16"}) == "native"
    assert fp16_gemm_mode({"amx_fp16"}) == "native"


def test_override_and_bad_value(monkeypatch):
    monkeypatch.setenv(FP16_GEMM_ENV, "native")
    assert fp16_gemm_mode({"avx2"}) == "native"
    monkeypatch.setenv(FP16_GEMM_ENV, "fast")
    with pytest.raises(UserError, match=FP16_GEMM_ENV):
        fp16_gemm_mode(set())


def test_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_fp16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_fp16"}
    assert cpu_flags(tmp_path / "absent") == set()


def test_model_and_matrix_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    assert cpu_model(info) == "Some CPU @ 2.0GHz" and cpu_model(tmp_path / "absent") is None
    assert matrix_flags(cpu_flags(info)) == ["amx_tile", "avx512_bf16", "avx512f"]
    assert matrix_flags({"fpu", "sse2"}) == []
