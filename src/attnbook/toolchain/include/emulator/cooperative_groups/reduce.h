// cg::reduce and its operators are in cooperative_groups.h on the emulator.
#pragma once
#include "../cooperative_groups.h"
