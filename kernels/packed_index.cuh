// Where packed entry e (row e / per, then the k-th upper-triangle entry
// (s, u), s <= u, in row-major order) lies in full r x r rows. The host
// prepends this file to row_hessian.cu and to hvp_tiled.cu.
__device__ __forceinline__ long long full_index_of_packed(long long e, int r, long long per)
{
    const long long row = e / per;
    long long k = e % per;
    int s = 0;
    while (k >= r - s) { k -= r - s; ++s; }
    return row * r * r + (long long)s * r + (s + (int)k);
}

