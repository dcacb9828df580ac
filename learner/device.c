/* Accelerator discovery (learner/device.h): what this build supports and which devices this machine has; and the
 * learner's device a trainer asks for (learner/internal.h). */
#include "learner/device.h"

#include <stdio.h>

#include "learner/internal.h"
#include "util/error.h"

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

int lt__device_pick(const lt_trainer_cfg_t *cfg, const lt__device_impl_t **out) {
  *out = &lt__device_cpu;
#ifdef LT_HAVE_CUDA
  if (cfg->cuda) *out = &lt__device_cuda;
#else
  if (cfg->cuda)
    return lt_error_set(LT_EUNSUPP,
                        "learner.device cuda: this build has no CUDA learner (make CUDA=1 on a machine with nvcc)");
#endif
  return 0;
}
