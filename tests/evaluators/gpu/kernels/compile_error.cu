// An undeclared identifier: NVRTC's log must name it and the line.
extern "C" __global__ void silu_and_mul_bf16(unsigned short* out, const unsigned short* x, long long d) {
    out[threadIdx.x] = x[threadIdx.x] * undeclared_scale;
}
