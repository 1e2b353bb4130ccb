// Greedy decoding takes, in each row b of logits [B, V], the column of the largest
// value; on a tie the smallest such column (as torch.argmax). One block of 128 threads
// per row: thread t scans columns t, t + 128, …, then the block combines the 128
// candidates in shared memory. Write the column as a float.
__global__ void greedy_argmax(const float* logits, float* out, int V) {
  __shared__ float best[128];
  __shared__ int where[128];
  const int b = blockIdx.x, t = threadIdx.x;
  // TODO
}
