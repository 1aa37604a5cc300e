"""model.dtype=auto: bf16 only where the hardware computes it natively (AVX512-BF16/AMX or a GPU); float32 elsewhere."""

import pytest

from earthrl.models.dtype import cpu_bf16_flags, resolve_dtype


def _cpuinfo(tmp_path, flags: str):
    p = tmp_path / "cpuinfo"
    p.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 {flags}\n\n")
    return p


def test_auto_is_float32_on_an_avx2_only_cpu(tmp_path):
    info = _cpuinfo(tmp_path, "avx avx2 fma avx512f")
    assert cpu_bf16_flags(info) == []
    dtype, why = resolve_dtype("auto", cuda=False, cpuinfo=info)
    assert dtype == "float32" and "without native bf16" in why


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_auto_is_bfloat16_with_native_bf16(tmp_path, flag):
    info = _cpuinfo(tmp_path, f"avx2 {flag} amx_tile")
    assert resolve_dtype("auto", cuda=False, cpuinfo=info) == ("bfloat16", f"auto: CPU has {flag}")


def test_auto_is_bfloat16_on_a_gpu_and_explicit_names_win(tmp_path):
    info = _cpuinfo(tmp_path, "avx2")
    assert resolve_dtype("auto", cuda=True, cpuinfo=info)[0] == "bfloat16"
    assert resolve_dtype("bfloat16", cuda=False, cpuinfo=info) == ("bfloat16", "set by model.dtype")
    assert resolve_dtype("float32", cuda=True, cpuinfo=info)[0] == "float32"
    assert cpu_bf16_flags(tmp_path / "missing") == []
    with pytest.raises(ValueError, match=r"model.dtype='bf16': choose one of auto, bfloat16, float16, float32"):
        resolve_dtype("bf16")


def test_this_machine_follows_its_own_cpu_flags():
    flags = open("/proc/cpuinfo").read()
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    import torch

    expect = "bfloat16" if native or torch.cuda.is_available() else "float32"
    assert resolve_dtype("auto")[0] == expect
