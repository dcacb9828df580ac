/* The thread <-> loop bridge: work handed to the thread comes back on the loop, in full, and closing joins. */
#include <criterion/criterion.h>
#include <uv.h>

#include "net/bridge.h"

typedef struct {
  lt_bridge_t *br;
  int asked, done, seen, quit, closed; /* asked/done/quit under the lock */
} job_t;

static void run(lt_bridge_t *br, void *ud) {
  job_t *j = ud;
  lt_bridge_lock(br);
  while (!j->quit) {
    if (j->done < j->asked) {
      j->done++;
      lt_bridge_notify(br);
    } else {
      lt_bridge_wait(br, 0);
    }
  }
  lt_bridge_unlock(br);
}

static void closed(void *ud) { ((job_t *)ud)->closed = 1; }

static void on_notify(void *ud) {
  job_t *j = ud;
  lt_bridge_lock(j->br);
  j->seen = j->done;
  int more = j->asked < 100, finished = j->done == 100;
  if (more) j->asked += 10, lt_bridge_signal(j->br);
  if (finished) j->quit = 1, lt_bridge_signal(j->br);
  lt_bridge_unlock(j->br);
  if (finished) lt_bridge_close(j->br, closed, j);
}

Test(bridge, work_round_trips_and_close_joins) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  job_t j = {0};
  cr_assert_eq(lt_bridge_start(&loop, run, on_notify, &j, "test", &j.br), 0);
  lt_bridge_lock(j.br);
  j.asked = 10;
  lt_bridge_signal(j.br);
  lt_bridge_unlock(j.br);
  uv_run(&loop, UV_RUN_DEFAULT); /* returns once the bridge's handle is closed */
  cr_assert_eq(j.seen, 100);
  cr_assert(j.closed);
  cr_assert_eq(uv_loop_close(&loop), 0);
}
