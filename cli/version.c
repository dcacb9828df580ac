/* `longtail --version`: version, commit and the build's features. */
#include <cblas.h>
#include <seccomp.h>
#include <stdio.h>
#include <zmq.h>

#include "build_info.h" /* generated: LT_VERSION, LT_GIT_COMMIT */
#include "cli/commands.h"
#include "learner/device.h"
#include "sandbox/sandbox.h"

void lt_cli_print_version(void) {
  int zmaj, zmin, zpat;
  zmq_version(&zmaj, &zmin, &zpat);
  const struct scmp_version *sv = seccomp_version();
  char dev[256];
  lt_device_build_info(dev, sizeof dev);
  lt_sandbox_caps_t caps;
  lt_sandbox_probe(&caps);
  printf("longtail %s (commit %s)\n", LT_VERSION, LT_GIT_COMMIT);
  char sb[160];
  lt_sandbox_caps_describe(&caps, sb, sizeof sb);
  printf("features: %s, curve=%s, sandbox: %s (libseccomp %u.%u.%u)\n", dev, zmq_has("curve") ? "yes" : "no", sb,
         sv ? sv->major : 0, sv ? sv->minor : 0, sv ? sv->micro : 0);
  printf("libraries: zeromq %d.%d.%d, %s\n", zmaj, zmin, zpat, openblas_get_config());
}
