// The emulator already provides what this CUDA header declares (see cuda_emulator.h).
#pragma once
