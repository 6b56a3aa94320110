"""Which launched kernels are the candidate's own: names as torch.profiler reports them on a GPU
(demangled), judged without a GPU."""

from __future__ import annotations

import pytest

from kernelswarm.evaluators.judge.observations import foreign_launches

OWN = [
    "silu_and_mul_bf16",  # extern "C" (cuda)
    # the torch-ext starting kernel of silu_and_mul, as the profiler named it on an H100
    "void silu_and_mul_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, long)",
    "void rms_kernel<c10::Half, 8>(c10::Half*, c10::Half const*, float, int)",  # torch-ext
    "_silu_and_mul_kernel",  # triton
]
FOREIGN = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    "void (anonymous namespace)::elementwise_kernel_with_index<int, "
    "at::native::arange_cuda_out(c10::Scalar const&)::{lambda(long)#1}>(int, long)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
    "void c10::cuda::some_kernel<float>(float*)",
]


def test_own_kernels_pass_even_when_templated_on_pytorchs_scalar_types():
    assert foreign_launches({"s": [{"kernel": n} for n in OWN]}) is None
    # the runtime's copies and fills beside them are not the candidate's, nor foreign
    assert foreign_launches({"s": [{"kernel": "Memset (Device)"}, {"kernel": OWN[1]}]}) is None


@pytest.mark.parametrize("name", FOREIGN)
def test_pytorch_and_library_kernels_are_foreign(name):
    problem = foreign_launches({"d=1": [{"kernel": OWN[0]}, {"kernel": name}]})
    assert problem is not None and "not the candidate's" in problem and "d=1" in problem


def test_a_call_that_launches_nothing_but_copies_computed_on_the_host():
    problem = foreign_launches({"d=1": [{"kernel": "Memcpy HtoD (Pageable -> Device)"}]})
    assert problem is not None and "launched no GPU kernel" in problem
