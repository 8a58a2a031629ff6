// Border-safe 4-float accesses shared by the rungs that move 128 bits at a time (cuda_vectorized,
// cuda_warptile). The Python side pastes this file in place of the #include line, so every rung compiles as
// one self-contained source (and the compile cache keys on everything that was compiled).
//
// Both helpers touch 4 consecutive floats of one row. VEC = true: one 128-bit access; the caller guarantees a
// row length that is a multiple of 4, a 16-byte-aligned base and a column that is a multiple of 4, so one
// predicate covers the vector. VEC = false: four scalar accesses, each predicated: any shape, any alignment.

template <bool VEC>
__device__ __forceinline__ float4 load4(const float* __restrict__ q, bool row_ok, int cols_left) {
    // q[0 .. 3] where the row exists and j < cols_left; zeros elsewhere (they add nothing to a dot product)
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (VEC) {
        if (row_ok && cols_left > 0) v = *reinterpret_cast<const float4*>(q);
    } else if (row_ok) {
        if (cols_left > 0) v.x = q[0];
        if (cols_left > 1) v.y = q[1];
        if (cols_left > 2) v.z = q[2];
        if (cols_left > 3) v.w = q[3];
    }
    return v;
}

template <bool VEC>
__device__ __forceinline__ void store4(float* __restrict__ q, bool row_ok, int cols_left, float4 v) {
    // q[j] = v[j] where the row exists and j < cols_left
    if (VEC) {
        if (row_ok && cols_left > 0) *reinterpret_cast<float4*>(q) = v;
    } else if (row_ok) {
        if (cols_left > 0) q[0] = v.x;
        if (cols_left > 1) q[1] = v.y;
        if (cols_left > 2) q[2] = v.z;
        if (cols_left > 3) q[3] = v.w;
    }
}
