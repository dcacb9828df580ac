/* Accelerator discovery (learner/device.h): what this build supports and which devices this machine has. */
#include "learner/device.h"

#include <stdio.h>

#ifdef LT_HAVE_CUDA
/* Implemented in learner/cuda/ (needs the CUDA runtime). */
void lt__cuda_build_info(char *out, size_t cap);
int lt__cuda_device_count(void);
#endif

void lt_device_build_info(char *out, size_t cap) {
#ifdef LT_HAVE_CUDA
  lt__cuda_build_info(out, cap);
#else
  snprintf(out, cap, "cuda=no, nccl=no");
#endif
}

int lt_device_cuda_count(void) {
#ifdef LT_HAVE_CUDA
  return lt__cuda_device_count();
#else
  return 0;
#endif
}

int lt_device_cuda_built(void) {
#ifdef LT_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}
