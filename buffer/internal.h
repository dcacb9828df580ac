/* Internals shared by the files of buffer/ (nothing outside buffer/ includes this). */
#ifndef LT_BUFFER_INTERNAL_H
#define LT_BUFFER_INTERNAL_H

#include <sqlite3.h>

#include "buffer/buffer.h"

sqlite3 *lt__buffer_db(lt_buffer_t *b);
/* An SQLite result code as an lt error naming the file and `what`. */
int lt__buffer_err(lt_buffer_t *b, int rc, const char *what);
const char *lt__task_status_name(lt_task_status s);

#endif
