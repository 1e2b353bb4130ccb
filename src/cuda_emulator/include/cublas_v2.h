// cuBLAS on the CPU emulator: its types and handle (cublas_api.h) only, for kernel
// files that include cublas_v2.h without calling it.
#pragma once
#include "cublas_api.h"
