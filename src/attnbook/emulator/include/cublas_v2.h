// cuBLAS on the CPU emulator: its types and handle only (cublas_api.h), for kernel files
// that include cublas_v2.h without calling it.
#pragma once
#include "cublas_api.h"
