// <assert.h> for kernel text on the CPU emulator. The standard header redefines assert
// at every inclusion, which would turn a kernel's assert back into the host's abort():
// this stand-in includes it, then restores the device assert once cuda_emulator.h has
// defined it. No include guard, like the original.
#include_next <assert.h>
#ifdef ATTNBOOK_EMULATOR_ASSERT
#undef assert
#define assert(e) ATTNBOOK_EMULATOR_ASSERT(e)
#endif
