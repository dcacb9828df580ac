/* Accelerator discovery: what this build supports and what this machine has. */
#ifndef LT_LEARNER_DEVICE_H
#define LT_LEARNER_DEVICE_H

#include <stddef.h>

/* "cuda=yes (sm_90), nccl=2.27.3" or "cuda=no, nccl=no". */
void lt_device_build_info(char *out, size_t cap);
/* Number of usable CUDA devices (0 without CUDA support or GPU). */
int lt_device_cuda_count(void);
/* 1 when this binary contains the CUDA learner. */
int lt_device_cuda_built(void);

#endif
