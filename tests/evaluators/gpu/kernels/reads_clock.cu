// Reads the global timer through inline PTX assembled from string pieces: the screen cannot see
// it, the PTX check must.
extern "C" __global__ void silu_and_mul_bf16(unsigned short* out, const unsigned short* x, long long d) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%glob" "altimer;" : "=l"(t));
    out[threadIdx.x] = (unsigned short)(t & 1) + x[threadIdx.x];
}
