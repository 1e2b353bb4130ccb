// CUDA's cuda_runtime.h on the emulator: cuda_emulator.h, which a .cu file
// gets first, and a .cpp file that includes this header first gets here.
#pragma once
#include "cuda_emulator.h"
