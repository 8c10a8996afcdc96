"""How the CPU engines compute each 16-bit format's GEMMs: chosen from the CPU's flags per format, overridable per
format, bad values refused."""

import pytest

from precision_rl.errors import UserError
from precision_rl.verl_ext.cpu.features import cpu_flags, cpu_identity, cpu_model, gemm_mode, gemm_modes, matrix_flags
from precision_rl.verl_ext.settings import GEMM_ENV

AVX2_ONLY = {"fpu", "avx", "avx2", "fma", "f16c"}
AVX512_BF16 = {"avx2", "avx512f", "avx512_bf16"}  # e.g. AMD EPYC Zen 4, Intel Cooper Lake
SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"}
GRANITE_RAPIDS = {"avx512f", "amx_tile", "amx_bf16", "amx_fp16"}


@pytest.fixture
def no_override(monkeypatch):
    for name in GEMM_ENV.values():
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("flags,expected", [
    (AVX2_ONLY, {"fp16": "emulated", "bf16": "emulated"}),
    (AVX512_BF16, {"fp16": "emulated", "bf16": "native"}),
    (SAPPHIRE_RAPIDS, {"fp16": "native", "bf16": "native"}),
    (GRANITE_RAPIDS, {"fp16": "native", "bf16": "native"}),
    ({"avx512f", "avx512_fp16"}, {"fp16": "native", "bf16": "emulated"}),
])
def test_each_format_follows_its_own_flags(no_override, flags, expected):
    assert gemm_modes(flags) == expected
    assert {fmt: gemm_mode(fmt, flags) for fmt in expected} == expected


def test_override_is_per_format_and_bad_values_are_refused(no_override, monkeypatch):
    monkeypatch.setenv(GEMM_ENV["bf16"], "native")
    assert gemm_modes(AVX2_ONLY) == {"fp16": "emulated", "bf16": "native"}
    monkeypatch.setenv(GEMM_ENV["fp16"], "fast")
    with pytest.raises(UserError, match=GEMM_ENV["fp16"]):
        gemm_mode("fp16", set())
    with pytest.raises(ValueError, match="fp8"):
        gemm_mode("fp8", set())


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


def test_cpu_identity_tells_generations_with_one_model_name_apart(tmp_path):
    zen4, zen5 = tmp_path / "zen4", tmp_path / "zen5"
    block = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {f}\nmodel\t\t: {m}\n"
             "model name\t: AMD EPYC\nstepping\t: 1\n")
    zen4.write_text(block.format(f=25, m=17) + "\n" + block.format(f=99, m=99))
    zen5.write_text(block.format(f=26, m=2))
    assert cpu_identity(zen4) == "AuthenticAMD family 25 model 17 stepping 1"
    assert cpu_identity(zen5) == "AuthenticAMD family 26 model 2 stepping 1"
    assert cpu_model(zen4) == cpu_model(zen5) == "AMD EPYC"
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert cpu_identity(tmp_path / "arm") is None and cpu_identity(tmp_path / "absent") is None
