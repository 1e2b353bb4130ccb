void launch_window(float* bias, int Sq, int Sk, int w, cudaStream_t stream) {
  window_bias<<<dim3((Sk + 63) / 64, Sq), 64, 0, stream>>>(bias, Sq, Sk, w);
}
