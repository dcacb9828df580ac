/* Dataset runs as real processes: killed with SIGKILL and resumed, a run
 * continues the same epoch (every row used exactly group_size times per
 * epoch, none skipped or repeated); started from a sharded Hugging Face
 * folder, its saved checkpoints are Hugging Face folders with the source's
 * tokenizer. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "learner/model.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"
#include "util/error.h"

#define ROWS 20
#define GROUP 2
#define EPOCHS 3

/* Writes the config and trains it to the end (exit 0). */
static void train_ok(const char *cfg, const char *js, const char *rd, double timeout_s) {
  cr_assert_eq(lt_test_write(cfg, js), 0);
  lt_run_t r;
  const char *train[] = {"longtail", "train", cfg, "--run-dir", rd, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, timeout_s, train), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
}

/* A test directory with the places of a run in it (each buffer 4200 bytes, db 4300): the dataset, the config,
 * the run directory and its buffer. */
static char *run_paths(const char *tag, char *data, char *cfg, char *rd, char *db) {
  char *dir = lt_test_tmpdir(tag);
  snprintf(data, 4200, "%s/train.jsonl", dir);
  snprintf(cfg, 4200, "%s/cfg.json", dir);
  snprintf(rd, 4200, "%s/run", dir);
  snprintf(db, 4300, "%s/buffer.db", rd);
  return dir;
}

Test(dataset_run, sigkill_then_resume_uses_each_row_group_size_times_per_epoch, .timeout = 240) {
  char data[4200], cfg[4200], rd[4200], db[4300];
  char *dir = run_paths("ds_resume", data, cfg, rd, db);
  FILE *f = fopen(data, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < ROWS; i++)
    fprintf(f, "{\"id\": \"q%d\", \"prompt\": \"%d+%d=\", \"answer\": \"%d\"}\n", i, i, i, 2 * i);
  fclose(f);
  char js[2048];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 5}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"},"
      " \"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 8}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": %d, \"max_tasks\": %d, \"dynamic_filter\": false, \"task_timeout_s\": 20},"
      " \"workers\": {\"spawn_local\": 2, \"slots\": 4, \"backend\": \"scripted\", \"daemon_gone_s\": 20,"
      "   \"scripted\": {\"mean_tokens\": 16, \"token_us\": 3000}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:%d\", \"heartbeat_ms\": 200, \"liveness\": 5},"
      " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 1}, \"monitor\": {\"progress\": \"off\"}}",
      lt_test_root(), data, GROUP, ROWS * GROUP * EPOCHS, lt_test_free_port());
  cr_assert_eq(lt_test_write(cfg, js), 0);
  const char *argv[] = {"longtail", "train", cfg, "--run-dir", rd, NULL};
  pid_t d = lt_test_spawn(dir, "daemon1", argv);
  cr_assert_gt(d, 0);
  /* Killed inside the first or second epoch, with tasks in flight. */
  long long done = 0;
  for (int i = 0; i < 600 && done < ROWS * GROUP / 2 + 3; i++) {
    usleep(100000);
    if (access(db, F_OK) == 0) done = lt_test_sql1(db, "SELECT count(*) FROM trajectories");
  }
  cr_assert_geq(done, ROWS * GROUP / 2 + 3, "too few trajectories before the kill: %lld", done);
  kill(d, SIGKILL);
  lt_test_wait(d, 10);
  long long before = lt_test_sql1(db, "SELECT count(*) FROM trajectories");
  cr_assert_lt(before, ROWS * GROUP * EPOCHS, "the run ended before the kill");
  const char *argv2[] = {"longtail", "train", cfg, "--run-dir", rd, "--resume", NULL};
  pid_t d2 = lt_test_spawn(dir, "daemon2", argv2);
  int st = lt_test_wait(d2, 180);
  cr_assert_eq(st, 0, "resumed daemon exit %d", st);
  /* Each (epoch, row) is one prompt; each epoch has every row; each prompt has GROUP trajectories. */
  cr_assert_eq(lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE eval = 0"), ROWS * EPOCHS);
  cr_assert_eq(
      lt_test_sql1(db,
                   "SELECT count(DISTINCT json_extract(spec, '$.epoch') || ':' || json_extract(spec, '$.row')) "
                   "FROM prompts WHERE eval = 0"),
      ROWS * EPOCHS);
  for (int e = 0; e < EPOCHS; e++) {
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(DISTINCT json_extract(spec, '$.row')) FROM prompts WHERE eval = 0 AND "
             "json_extract(spec, '$.epoch') = %d AND json_extract(spec, '$.row') BETWEEN 1 AND %d",
             e, ROWS);
    cr_assert_eq(lt_test_sql1(db, sql), ROWS, "epoch %d does not use every row once", e);
  }
  cr_assert_eq(lt_test_sql1(db, "SELECT count(*) FROM trajectories"), ROWS * GROUP * EPOCHS);
  char per[256];
  snprintf(per, sizeof per,
           "SELECT count(*) FROM (SELECT p.id FROM prompts p JOIN trajectories t ON t.group_id = p.id "
           "GROUP BY p.id HAVING count(*) = %d)",
           GROUP);
  cr_assert_eq(lt_test_sql1(db, per), ROWS * EPOCHS);
  /* The row's answer reached the trajectory's prompt (the spec carried the row). */
  cr_assert_eq(lt_test_sql1(db,
                            "SELECT count(*) FROM prompts WHERE json_extract(spec, '$.answer') = "
                            "CAST(2 * (json_extract(spec, '$.row') - 1) AS TEXT)"),
               ROWS * EPOCHS);
  /* export shows each row's prompt and answer. */
  lt_run_t r;
  const char *ex[] = {"longtail", "export", rd, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, ex), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *nl = strchr(r.out, '\n');
  cr_assert_not_null(nl);
  *nl = 0;
  cJSON *line = cJSON_Parse(r.out);
  cr_assert_not_null(line, "%s", r.out);
  int row = (int)cJSON_GetObjectItem(line, "row")->valuedouble;
  char want[64];
  snprintf(want, sizeof want, "%d", 2 * (row - 1));
  cr_assert_str_eq(cJSON_GetObjectItem(line, "answer")->valuestring, want);
  snprintf(want, sizeof want, "q%d", row - 1);
  cr_assert_str_eq(cJSON_GetObjectItem(line, "id")->valuestring, want);
  const cJSON *user = cJSON_GetArrayItem(cJSON_GetObjectItem(line, "messages"), 0);
  snprintf(want, sizeof want, "%d+%d=", row - 1, row - 1);
  cr_assert_str_eq(cJSON_GetObjectItem(user, "content")->valuestring, want);
  cJSON_Delete(line);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

static int same_file(const char *a, const char *b) {
  char *x = lt_test_read(a), *y = lt_test_read(b);
  int same = x && y && !strcmp(x, y);
  free(x), free(y);
  return same;
}

Test(dataset_run, a_sharded_hugging_face_source_trains_into_hugging_face_folders, .timeout = 180) {
  char *dir = lt_test_tmpdir("ds_hf");
  char src[4200], mcfg[4200], data[4200], cfg[4200], rd[4200], p[4400], q[4400];
  snprintf(src, sizeof src, "%s/model", dir);
  snprintf(mcfg, sizeof mcfg, "%s/model-config.json", dir);
  snprintf(data, sizeof data, "%s/train.jsonl", dir);
  snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
  snprintf(rd, sizeof rd, "%s/run", dir);
  /* tiny-moe sized for the small Qwen2 tokenizer (394 ids, <|im_end|> = 393). */
  lt_run_t r;
  cr_assert_eq(
      lt_test_sh(
          &r, 30,
          "sed -e 's/\"vocab_size\": 264/\"vocab_size\": 400/' -e 's/\"eos_token_id\": 258/\"eos_token_id\": 393/' "
          "%s/configs/models/tiny-moe.json > %s",
          lt_test_root(), mcfg),
      0);
  cr_assert_eq(r.status, 0);
  lt_run_free(&r);
  const char *init[] = {"longtail", "init", "--config", mcfg, "--out", src, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, init), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 10, "cp %s/tests/ref/tokenizer/qwen2-small.json %s/tokenizer.json", lt_test_root(), src),
               0);
  lt_run_free(&r);
  snprintf(p, sizeof p, "%s/tokenizer_config.json", src);
  cr_assert_eq(lt_test_write(p,
                             "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}<|im_start|>"
                             "{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}\"}\n"),
               0);
  snprintf(p, sizeof p, "%s/generation_config.json", src);
  unlink(p); /* the source has none: the run writes one */
  /* Sharded as the Hub's larger models are: the run starts from the shards. */
  lt_model_t *m;
  cr_assert_eq(lt_model_load(src, &m), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_model_save_sharded(m, src, (int64_t)m->nparams * 2), 0, "%s", lt_error_msg());
  lt_model_free(m);
  unlink(p);
  snprintf(p, sizeof p, "%s/model.safetensors", src);
  cr_assert_neq(access(p, F_OK), 0, "the source is not sharded");
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", src);
  cr_assert_eq(access(p, R_OK), 0, "the source has no index");
  FILE *f = fopen(data, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 8; i++) fprintf(f, "{\"prompt\": \"what is %d plus %d?\", \"answer\": %d}\n", i, i, 2 * i);
  fclose(f);
  char js[2048];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 2}, \"model\": {\"path\": \"%s\"},"
      " \"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 8}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": 2, \"max_tasks\": 16, \"dynamic_filter\": false},"
      " \"rollout\": {\"max_new_tokens\": 8, \"max_turns\": 1},"
      " \"workers\": {\"spawn_local\": 1, \"slots\": 4}, \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"},"
      " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 1}, \"monitor\": {\"progress\": \"off\"}}",
      src, data);
  cr_assert_eq(lt_test_write(cfg, js), 0);
  const char *train[] = {"longtail", "train", cfg, "--run-dir", rd, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 150, train), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  /* The last published version and the last full checkpoint's policy. */
  const char *folders[] = {"checkpoints/v2", "checkpoints/full-000002/policy"};
  for (int k = 0; k < 2; k++) {
    static const char *const copied[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
      snprintf(p, sizeof p, "%s/%s/%s", rd, folders[k], copied[i]);
      snprintf(q, sizeof q, "%s/%s", src, copied[i]);
      cr_expect(same_file(p, q), "%s is not the source's", p);
    }
    snprintf(p, sizeof p, "%s/%s/generation_config.json", rd, folders[k]);
    char *gen = lt_test_read(p);
    cr_expect(gen && strstr(gen, "\"eos_token_id\": 393"), "%s: %s", p, gen ? gen : "missing");
    free(gen);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", rd, folders[k]);
    cr_expect_eq(access(p, R_OK), 0, "%s is missing", p);
    snprintf(p, sizeof p, "%s/%s/config.json", rd, folders[k]);
    char *c = lt_test_read(p);
    cr_expect(c && strstr(c, "\"model_type\": \"qwen3_moe\"") && strstr(c, "\"vocab_size\": 400"), "%s",
              c ? c : "missing");
    free(c);
  }
  lt_test_rmdir(dir);
}

/* Pass-rate oversampling (scheduler.pass_rate_oversample): the scripted policy always answers 0, so row 1 ("0+0")
 * always passes and row 2 ("1+1") never does.  In the second epoch, with the first epoch's groups as history,
 * the hard row gets max_groups groups (the original and two copies), the easy one a single group; copies do
 * not advance the dataset, so the third epoch still starts at its first row. */
Test(dataset_run, a_task_that_never_passes_gets_more_groups) {
  char data[4200], cfg[4200], rd[4200], db[4300];
  char *dir = run_paths("ds_oversample", data, cfg, rd, db);
  cr_assert_eq(
      lt_test_write(data, "{\"prompt\": \"0+0=\", \"answer\": \"0\"}\n{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n"), 0);
  char js[2048];
  /* queue_depth 2: one group open at a time, so each prompt is made after the ones before it have ended. */
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 5}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"},"
      " \"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 2}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": 2, \"max_tasks\": 16, \"queue_depth\": 2, \"dynamic_filter\": false,"
      "   \"task_timeout_s\": 20, \"pass_rate_oversample\": {\"max_groups\": 3, \"min_history\": 2}},"
      " \"workers\": {\"spawn_local\": 1, \"slots\": 2, \"backend\": \"scripted\","
      "   \"scripted\": {\"mean_tokens\": 8, \"token_us\": 100}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"},"
      " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 0}, \"monitor\": {\"progress\": \"off\"}}",
      lt_test_root(), data);
  train_ok(cfg, js, rd, 120);
  const char *epoch1 = "FROM prompts WHERE eval = 0 AND json_extract(spec, '$.epoch') = 1";
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT count(*) %s AND json_extract(spec, '$.answer') = '2'", epoch1);
  cr_expect_eq(lt_test_sql1(db, sql), 3, "the hard row: three groups");
  snprintf(sql, sizeof sql, "SELECT count(*) %s AND json_extract(spec, '$.answer') = '0'", epoch1);
  cr_expect_eq(lt_test_sql1(db, sql), 1, "the easy row: one group");
  snprintf(sql, sizeof sql, "SELECT count(*) %s AND copy_of IS NOT NULL", epoch1);
  cr_expect_eq(lt_test_sql1(db, sql), 2);
  cr_expect_eq(
      lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE json_extract(spec, '$.epoch') = 2 AND copy_of IS NULL"), 2,
      "the third epoch has both rows");
  cr_expect_geq(lt_test_sql1(db, "SELECT count(*) FROM events WHERE kind = 'pass_rate_oversample'"), 1);
  lt_test_rmdir(dir);
}

/* The noise curriculum closes its loop through the daemon (seed 004 §3.3.3): the scripted policy always answers 0
 * and every row's answer is 0, so clean and noisy episodes succeed alike (gap 0) and the level rises by level_step
 * once each side has `window` episodes, recorded as events; a share of the prompts stays clean (level 0). */
Test(dataset_run, the_noise_level_rises_when_noisy_episodes_succeed_like_clean_ones) {
  char data[4200], cfg[4200], rd[4200], db[4300];
  char *dir = run_paths("ds_noise", data, cfg, rd, db);
  cr_assert_eq(lt_test_write(data,
                             "{\"prompt\": \"zero plus zero\", \"answer\": \"0\"}\n"
                             "{\"prompt\": \"zero times seven\", \"answer\": \"0\"}\n"),
               0);
  char js[2048];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 5}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"},"
      " \"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"},"
      "   \"noise\": {\"instruction\": 1, \"level_start\": 0.2, \"level_step\": 0.4, \"clean_share\": 0.5, \"window\": 2}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 2}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": 2, \"max_tasks\": 48, \"queue_depth\": 2, \"dynamic_filter\": false,"
      "   \"task_timeout_s\": 20},"
      " \"workers\": {\"spawn_local\": 1, \"slots\": 2, \"backend\": \"scripted\","
      "   \"scripted\": {\"mean_tokens\": 8, \"token_us\": 100}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"},"
      " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 0}, \"monitor\": {\"progress\": \"off\"}}",
      lt_test_root(), data);
  train_ok(cfg, js, rd, 120);
  cr_expect_geq(lt_test_sql1(db, "SELECT count(*) FROM events WHERE kind = 'noise_level'"), 1, "the level rose");
  cr_expect_geq(
      lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE eval = 0 AND json_extract(spec, '$.noise_level') = 0"), 2,
      "clean prompts measure the gap");
  cr_expect_geq(
      lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE eval = 0 AND json_extract(spec, '$.noise_level') > 0.5"), 1,
      "prompts were dispatched at a raised level");
  lt_test_rmdir(dir);
}

/* envs.<d>.group_size: the scheduler gives each of a domain's prompts its own group size, and the learner trains
 * the groups at that size. */
Test(dataset_run, each_domain_has_its_group_size) {
  char data[4200], cfg[4200], rd[4200], db[4300];
  char *dir = run_paths("ds_groups", data, cfg, rd, db);
  cr_assert_eq(
      lt_test_write(data, "{\"prompt\": \"0+0=\", \"answer\": \"0\"}\n{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n"), 0);
  char js[2048];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 5}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"},"
      " \"envs\": {\"three\": {\"type\": \"dataset\", \"group_size\": 3, \"params\": {\"train\": \"%s\"}},"
      "   \"two\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 4}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": 2, \"max_tasks\": 24, \"dynamic_filter\": false, \"task_timeout_s\": 20},"
      " \"workers\": {\"spawn_local\": 1, \"slots\": 4, \"backend\": \"scripted\","
      "   \"scripted\": {\"mean_tokens\": 8, \"token_us\": 100}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"},"
      " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 0}, \"monitor\": {\"progress\": \"off\"}}",
      lt_test_root(), data, data);
  train_ok(cfg, js, rd, 120);
  cr_assert_gt(lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE domain = 'three'"), 0);
  cr_assert_gt(lt_test_sql1(db, "SELECT count(*) FROM prompts WHERE domain = 'two'"), 0);
  cr_expect_eq(lt_test_sql1(db,
                            "SELECT count(*) FROM (SELECT p.domain, count(k.id) AS n FROM prompts p JOIN tasks k ON "
                            "k.prompt_id = p.id WHERE p.eval = 0 GROUP BY p.id) WHERE n != (CASE domain WHEN 'three' "
                            "THEN 3 ELSE 2 END)"),
               0, "a prompt with another group size");
  cr_expect_gt(lt_test_sql1(db, "SELECT count(*) FROM trajectories WHERE domain = 'three' AND status = 'consumed'"), 0,
               "the learner trained the groups of three");
  lt_test_rmdir(dir);
}
