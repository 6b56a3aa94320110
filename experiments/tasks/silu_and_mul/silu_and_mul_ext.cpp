// silu_and_mul as a PyTorch extension: out[t, i] = silu(x[t, i]) * x[t, d + i].
// A plain first version with host code that checks its tensors: a scalar loop on the CPU and,
// when compiled as CUDA, a grid-stride kernel per row; math in float32 for every float dtype.
#include <torch/extension.h>
#include <cmath>

#ifdef __CUDACC__
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

template <typename T>
__global__ void silu_and_mul_kernel(T* out, const T* x, int64_t d) {
    const int64_t t = blockIdx.y;
    const T* gate = x + t * 2 * d;
    const T* up = gate + d;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < d;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = static_cast<float>(gate[i]);
        out[t * d + i] = static_cast<T>(g / (1.0f + expf(-g)) * static_cast<float>(up[i]));
    }
}
#endif

template <typename T>
static void silu_and_mul_cpu(T* out, const T* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const T* gate = x + t * 2 * d;
        const T* up = gate + d;
        for (int64_t i = 0; i < d; ++i) {
            float g = static_cast<float>(gate[i]);
            out[t * d + i] = static_cast<T>(g / (1.0f + std::exp(-g)) * static_cast<float>(up[i]));
        }
    }
}

void silu_and_mul(torch::Tensor out, torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2 && x.size(1) % 2 == 0, "x must be [tokens, 2d]");
    TORCH_CHECK(x.is_contiguous() && out.is_contiguous(), "tensors must be contiguous");
    TORCH_CHECK(out.scalar_type() == x.scalar_type(), "out and x must have one dtype");
    const int64_t tokens = x.size(0), d = x.size(1) / 2;
    if (tokens == 0 || d == 0) return;
    if (x.is_cuda()) {
#ifdef __CUDACC__
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "silu_and_mul", [&] {
            const int threads = 256;
            const dim3 grid((unsigned)std::min<int64_t>((d + threads - 1) / threads, 1024), (unsigned)tokens);
            silu_and_mul_kernel<scalar_t><<<grid, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
                out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), d);
        });
        C10_CUDA_KERNEL_LAUNCH_CHECK();
#else
        TORCH_CHECK(false, "this build has no CUDA code: build it for a cuda device");
#endif
    } else {
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "silu_and_mul", [&] {
            silu_and_mul_cpu<scalar_t>(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), tokens, d);
        });
    }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("silu_and_mul", &silu_and_mul, "out = silu(x[:, :d]) * x[:, d:]");
}
