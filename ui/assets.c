/* The console's page, script and style sheet, built into the binary (no files to install, nothing fetched at
 * view time): the assembler's .incbin copies the files of ui/assets into read-only data at compile time (the Makefile
 * makes this object depend on them). */
#include <string.h>

#include "ui/ui.h"

#define ASSET(sym, file)                                                                                   \
  __asm__(".section .rodata\n.balign 16\n.global " #sym "\n" #sym ":\n.incbin \"" file "\"\n.global " #sym \
          "_end\n" #sym "_end:\n.byte 0\n.previous\n");                                                    \
  extern const char sym[], sym##_end[];

ASSET(lt__ui_index_html, "ui/assets/index.html")
ASSET(lt__ui_app_js, "ui/assets/app.js")
ASSET(lt__ui_app_css, "ui/assets/app.css")

const char *lt_ui_asset(const char *name, size_t *len, const char **type) {
  static const struct {
    const char *name, *type, *start, *end;
  } a[] = {
      {"index.html", "text/html; charset=utf-8", lt__ui_index_html, lt__ui_index_html_end},
      {"app.js", "text/javascript; charset=utf-8", lt__ui_app_js, lt__ui_app_js_end},
      {"app.css", "text/css; charset=utf-8", lt__ui_app_css, lt__ui_app_css_end},
  };
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
    if (!strcmp(a[i].name, name)) {
      *len = (size_t)(a[i].end - a[i].start);
      *type = a[i].type;
      return a[i].start;
    }
  return NULL;
}
