// Row r's keys were split into S parts; part s gave o[r][s] (D values, normalised
// within the part) and its log-sum-exp lse[r][s] (-inf: the part had no admissible
// key). Write out[r] = Σ_s exp(lse[r][s] − L) o[r][s] with L = log Σ_s exp(lse[r][s]);
// a row whose parts are all empty is 0. One thread per (row, d): threadIdx.x = d,
// blockIdx.x = r.
__global__ void combine_splits(const float* o, const float* lse, float* out, int S,
                               int D) {
  const int r = blockIdx.x, d = threadIdx.x;
  // TODO
}
