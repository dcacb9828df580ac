/* Where this host keeps its unpacked task images (sandbox.image_cache, docs/sandbox.md). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

void lt_sandbox_image_cache(const lt_config_t *cfg, char *out, size_t cap) {
  const char *set = cfg ? lt_config_str(cfg, "sandbox.image_cache") : NULL;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (set && set[0]) snprintf(out, cap, "%s", set);
  else if (xdg && xdg[0] == '/') snprintf(out, cap, "%s/longtail/images", xdg);
  else if (home && home[0] == '/') snprintf(out, cap, "%s/.cache/longtail/images", home);
  else snprintf(out, cap, "/tmp/longtail-images-%u", (unsigned)getuid());
}
