// The emulator provides these in cuda_pipeline.h.
#pragma once
#include "cuda_pipeline.h"
