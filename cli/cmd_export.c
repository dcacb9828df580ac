/* `longtail export RUN --format jsonl|tokens [filters] [-o FILE]`: the run's
 * trajectories as JSON lines, streamed in pages of ids (constant memory; a
 * live run is read from a WAL snapshot per page).  Formats: docs/trajectory-format.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "cli/commands.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#define PAGE 1024

typedef struct {
  int64_t rowid[PAGE], task[PAGE];
  int n;
} page_t;

static int safe_word(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

/* The stored tool calls ({name, arguments}) as OpenAI's: ids, type "function",
 * arguments as a JSON string; tool results answer them in order. */
static cJSON *openai_messages(const cJSON *stored) {
  cJSON *out = cJSON_CreateArray();
  char ids[64][32];
  int nids = 0, next_result = 0, turn = 0;
  for (const cJSON *m = stored ? stored->child : NULL; m; m = m->next) {
    cJSON *c = cJSON_Duplicate(m, 1);
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(c, "tool_calls");
    if (role && !strcmp(role, "assistant")) {
      turn++;
      nids = next_result = 0;
      for (cJSON *call = calls ? calls->child : NULL; call; call = call->next) {
        cJSON *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(fn, "name", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "name")));
        char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(call, "arguments"));
        cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
        free(args);
        char id[32];
        snprintf(id, sizeof id, "call_%d_%d", turn, nids);
        if (nids < 64) snprintf(ids[nids++], sizeof ids[0], "%s", id);
        cJSON *n = cJSON_CreateObject();
        cJSON_AddStringToObject(n, "id", id);
        cJSON_AddStringToObject(n, "type", "function");
        cJSON_AddItemToObject(n, "function", fn);
        cJSON_ReplaceItemViaPointer(calls, call, n);
        call = n;
      }
    } else if (role && !strcmp(role, "tool") && next_result < nids &&
               !cJSON_GetObjectItemCaseSensitive(c, "tool_call_id")) {
      cJSON_AddStringToObject(c, "tool_call_id", ids[next_result++]);
    }
    cJSON_AddItemToArray(out, c);
  }
  return out;
}

/* Fields both formats carry. */
static void common(lt_buf_t *b, const lt_traj_t *t, const lt_traj_meta_t *m) {
  lt_buf_printf(b, "\"task_id\":%llu,\"group_id\":%llu,\"domain\":", (unsigned long long)t->task_id,
                (unsigned long long)t->group_id);
  lt_json_quote(b, t->domain ? t->domain : "");
  lt_buf_printf(b, ",\"status\":\"%s\",\"traj_status\":", lt_sample_state_name(m->status));
  lt_json_quote(b, lt_traj_status_name(t->status));
  lt_buf_puts(b, ",\"reward\":");
  if (t->has_reward) lt_json_num(b, t->reward);
  else lt_buf_puts(b, "null");
  lt_buf_puts(b, ",\"components\":");
  /* Re-printed from the parsed value (a damaged row's loads as {}), so the line's JSON holds. */
  lt_json_write(b, t->components);
  lt_buf_puts(b, ",\"finish\":");
  lt_json_quote(b, lt_finish_name(t->finish));
  lt_buf_puts(b, ",\"reason\":");
  lt_json_quote(b, t->reason ? t->reason : "");
  lt_buf_printf(b, ",\"truncated\":%s,\"turns\":%d,\"version_min\":%lld,\"version_max\":%lld,\"consumed_step\":",
                m->truncated ? "true" : "false", t->turns, (long long)m->version_min, (long long)m->version_max);
  if (m->consumed_step >= 0) lt_buf_printf(b, "%lld", (long long)m->consumed_step);
  else lt_buf_puts(b, "null");
  lt_buf_puts(b, ",\"worker\":");
  lt_json_quote(b, m->loaded_worker);
  lt_buf_printf(b, ",\"eval\":%s", t->eval ? "true" : "false");
  if (t->error && t->error[0]) {
    lt_buf_puts(b, ",\"error\":");
    lt_json_quote(b, t->error);
  }
}

/* The prompt's reference answer and, for a dataset row, where it came from:
 * read from the prompt's spec, once per group. */
typedef struct {
  int64_t group;
  cJSON *spec;
} prompt_cache_t;

static void prompt_fields(lt_buf_t *b, lt_buffer_t *db, prompt_cache_t *pc, const lt_traj_t *t) {
  if (pc->group != (int64_t)t->group_id) {
    cJSON_Delete(pc->spec);
    char *text = lt_buffer_prompt_spec(db, (int64_t)t->group_id);
    pc->spec = text ? cJSON_Parse(text) : NULL;
    pc->group = (int64_t)t->group_id;
    free(text);
  }
  static const char *const keys[] = {"answer", "row", "epoch", "id", "metadata"};
  for (size_t i = 0; pc->spec && i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pc->spec, keys[i]);
    if (!v) continue;
    lt_buf_printf(b, ",\"%s\":", keys[i]);
    lt_json_write(b, v);
  }
}

static void u8_array(lt_buf_t *b, const uint8_t *v, int n) {
  lt_buf_putc(b, '[');
  for (int i = 0; i < n; i++) {
    if (i) lt_buf_putc(b, ',');
    lt_json_int(b, v[i]);
  }
  lt_buf_putc(b, ']');
}

/* Contiguous runs of the loss mask after the prompt: what the policy wrote and
 * what came back from the environment, as token spans [start, end) of tokens[a, end). */
static void segments(lt_buf_t *b, const lt_traj_t *t, int a, int T) {
  lt_buf_puts(b, "[");
  int first = 1, i = a;
  while (i < T && !t->loss_mask[i]) i++; /* the prompt */
  while (i < T) {
    int j = i;
    while (j < T && t->loss_mask[j] == t->loss_mask[i]) j++;
    lt_buf_printf(b, "%s{\"start\":%d,\"end\":%d,\"kind\":\"%s\"}", first ? "" : ",", i - a, j - a,
                  t->loss_mask[i] ? "generated" : "observation");
    first = 0;
    i = j;
  }
  lt_buf_puts(b, "]");
}

/* Schema 1's per-token fields for tokens [a, end) of t. */
static void token_arrays(lt_buf_t *b, const lt_traj_t *t, int a, int end) {
  int n = end - a, prompt = a;
  while (prompt < end && !t->loss_mask[prompt]) prompt++;
  lt_buf_printf(b, "\"ntokens\":%d,\"prompt_tokens\":%d,\"tokens\":", n, prompt - a);
  lt_json_i32_array(b, t->tokens + a, n);
  lt_buf_puts(b, ",\"logprobs\":");
  lt_json_f32_array(b, t->logprobs + a, n);
  lt_buf_puts(b, ",\"loss_mask\":");
  u8_array(b, t->loss_mask + a, n);
  lt_buf_puts(b, ",\"versions\":");
  lt_json_i32_array(b, t->versions + a, n);
  lt_buf_puts(b, ",\"support\":");
  if (t->support) lt_json_i32_array(b, t->support + a, n);
  else lt_buf_puts(b, "null");
  lt_buf_puts(b, ",\"support_ids\":");
  if (t->support_ids) {
    int skip = 0, k = 0;
    for (int i = 0; i < a; i++) skip += t->support[i];
    for (int i = a; i < end; i++) k += t->support[i];
    lt_json_i32_array(b, t->support_ids + skip, k);
  } else {
    lt_buf_puts(b, "null");
  }
  lt_buf_puts(b, ",\"routing\":");
  size_t L = (size_t)t->routing_layers * (size_t)t->routing_k, R = (size_t)n * L;
  if (R && t->routing_ids && t->routing_probs) {
    lt_buf_printf(b, "{\"layers\":%d,\"k\":%d,\"experts\":%d,\"ids\":[", t->routing_layers, t->routing_k,
                  t->routing_experts);
    for (size_t i = 0; i < R; i++) {
      if (i) lt_buf_putc(b, ',');
      lt_json_int(b, t->routing_ids[(size_t)a * L + i]);
    }
    lt_buf_puts(b, "],\"probs\":");
    lt_json_f32_array(b, t->routing_probs + (size_t)a * L, (int)R);
    lt_buf_puts(b, "}");
  } else {
    lt_buf_puts(b, "null");
  }
  lt_buf_puts(b, ",\"segments\":");
  segments(b, t, a, end);
}

/* longtail.tokens/1, or /2 for a trajectory of several contexts: each under
 * "sequences" with schema 1's per-token fields (docs/trajectory-format.md). */
static void line_tokens(lt_buf_t *b, const lt_traj_t *t, const lt_traj_meta_t *m, lt_buffer_t *db, prompt_cache_t *pc) {
  int multi = t->nseqs > 1;
  lt_buf_printf(b, "{\"format\":\"longtail.tokens/%d\",", multi ? 2 : 1);
  common(b, t, m);
  prompt_fields(b, db, pc, t);
  if (t->temperature >= 0) lt_buf_printf(b, ",\"temperature\":%.9g,", t->temperature);
  else lt_buf_puts(b, ",\"temperature\":null,");
  if (!multi) {
    token_arrays(b, t, 0, t->ntokens);
  } else {
    lt_buf_printf(b, "\"ntokens\":%d,\"sequences\":[", t->ntokens);
    for (int k = 0; k < t->nseqs; k++) {
      lt_buf_puts(b, k ? ",{" : "{");
      token_arrays(b, t, t->seq_starts[k], k + 1 < t->nseqs ? t->seq_starts[k + 1] : t->ntokens);
      lt_buf_puts(b, "}");
    }
    lt_buf_puts(b, "]");
  }
  lt_buf_puts(b, "}\n");
}

static void line_chat(lt_buf_t *b, const lt_traj_t *t, const lt_traj_meta_t *m, lt_buffer_t *db, prompt_cache_t *pc) {
  lt_buf_puts(b, "{\"messages\":");
  cJSON *msgs = openai_messages(t->messages);
  lt_json_write(b, msgs);
  cJSON_Delete(msgs);
  lt_buf_putc(b, ',');
  common(b, t, m);
  prompt_fields(b, db, pc, t);
  lt_buf_puts(b, "}\n");
}

int lt_cmd_export(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--format",
       .kind = LT_ARG_VALUE,
       .metavar = "F",
       .help = "jsonl (chat messages, default) | tokens (ids, logprobs, masks, versions, routing)"},
      {.name = "--status",
       .kind = LT_ARG_VALUE,
       .metavar = "LIST",
       .help = "only these statuses, comma-separated (ready,consumed,stale,filtered,failed,eval)"},
      {.name = "--min-reward", .kind = LT_ARG_VALUE, .metavar = "R", .help = "only trajectories with reward >= R"},
      {.name = "--step-range",
       .kind = LT_ARG_VALUE,
       .metavar = "A:B",
       .help = "only those consumed by learner steps A..B (either side may be empty)"},
      {.name = "--domain", .kind = LT_ARG_VALUE, .metavar = "NAME", .help = "only this environment domain"},
      {.name = "-o", .kind = LT_ARG_VALUE, .metavar = "FILE", .help = "output file (default: stdout)"},
      LT_CLI_CHECK_ARG,
  };
  lt_cmd_args_t c = {.command = "export",
                     .usage =
                         "RUN --format jsonl|tokens [--status LIST] [--min-reward R] [--step-range A:B] "
                         "[--domain NAME] [-o FILE] [--check]",
                     .summary =
                         "Writes the run's trajectories, one JSON object per line, in arrival order: chat "
                         "messages in the OpenAI format (jsonl) or the token-level record a trainer needs "
                         "(tokens, docs/trajectory-format.md). Streams in constant memory; works on a live run.",
                     .args = args,
                     .nargs = 7,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *fmt = lt_args_str(&c, "--format", "jsonl");
  int tokens = !strcmp(fmt, "tokens");
  if (!tokens && strcmp(fmt, "jsonl")) return lt_args_usage_error(&c, "--format: '%s' is not jsonl or tokens", fmt);
  lt_traj_filter_t where = {.step_lo = -1, .step_hi = -1};
  const char *st = lt_args_str(&c, "--status", NULL);
  if (st) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", st);
    for (char *save, *w = strtok_r(tmp, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
      int ok = 0;
      for (int i = 0; i < LT_SAMPLE_NSTATES; i++)
        if (!strcmp(w, lt_sample_state_name((lt_sample_state)i))) ok = 1, where.statuses |= 1u << i;
      if (!ok) {
        return lt_args_usage_error(&c, "--status: '%s' is not one of ready,consumed,stale,filtered,failed,eval", w);
      }
    }
  }
  const char *mr = lt_args_str(&c, "--min-reward", NULL);
  if (mr) {
    char *e;
    double v = strtod(mr, &e);
    if (*e || e == mr) {
      return lt_args_usage_error(&c, "--min-reward: '%s' is not a number", mr);
    }
    where.has_min_reward = 1;
    where.min_reward = v;
  }
  const char *sr = lt_args_str(&c, "--step-range", NULL);
  if (sr) {
    char *e;
    const char *colon = strchr(sr, ':');
    long long a = -1, bnd = -1;
    if (!colon) {
      return lt_args_usage_error(&c, "--step-range: expected A:B, got '%s'", sr);
    }
    if (colon > sr && ((a = strtoll(sr, &e, 10)) < 0 || e != colon)) a = -2;
    if (colon[1] && ((bnd = strtoll(colon + 1, &e, 10)) < 0 || *e)) a = -2;
    if (a == -2) {
      return lt_args_usage_error(&c, "--step-range: expected A:B with non-negative integers, got '%s'", sr);
    }
    where.consumed = 1;
    where.step_lo = a;
    where.step_hi = bnd;
  }
  const char *dom = lt_args_str(&c, "--domain", NULL);
  if (dom) {
    if (!safe_word(dom)) {
      return lt_args_usage_error(&c, "--domain: '%s' is not a domain name", dom);
    }
    where.domain = dom;
  }
  lt_buffer_t *b;
  if ((rc = lt_cli_open_run("export", c.pos[0], lt_args_flag(&c, "--check"), &b, NULL, 0))) {
    return rc;
  }
  const char *outp = lt_args_str(&c, "-o", NULL);
  FILE *out = outp ? fopen(outp, "w") : stdout;
  if (!out) {
    fprintf(stderr, "longtail export: error: %s: %s\n", outp, strerror(errno));
    lt_buffer_close(b);
    return LT_EXIT_IO;
  }
  page_t *pg = malloc(sizeof *pg);
  lt_buf_t line = {0};
  int64_t last = 0, count = 0;
  prompt_cache_t pc = {.group = -1};
  int code = pg ? 0 : LT_EXIT_FAIL;
  while (code == 0) {
    if ((rc = lt_buffer_traj_page(b, &where, last, pg->task, pg->rowid, PAGE, &pg->n)) < 0) {
      code = lt_cli_fail("export", rc);
      break;
    }
    if (pg->n == 0) break;
    for (int i = 0; i < pg->n && code == 0; i++) {
      lt_traj_t t;
      lt_traj_meta_t m;
      if ((rc = lt_buffer_traj_load(b, pg->task[i], LT_LOAD_ALL, &t, &m)) < 0) {
        code = lt_cli_fail("export", rc);
        break;
      }
      line.len = 0;
      if (tokens) line_tokens(&line, &t, &m, b, &pc);
      else line_chat(&line, &t, &m, b, &pc);
      lt_traj_free(&t);
      if (line.oom || fwrite(line.data, 1, line.len, out) != line.len) {
        fprintf(stderr, "longtail export: error: %s: %s\n", outp ? outp : "stdout",
                line.oom ? "out of memory" : strerror(errno));
        code = line.oom ? LT_EXIT_FAIL : LT_EXIT_IO;
      }
      count++;
    }
    last = pg->rowid[pg->n - 1];
  }
  if ((out != stdout ? fclose(out) : fflush(out)) != 0 && code == 0) {
    fprintf(stderr, "longtail export: error: %s: %s\n", outp ? outp : "stdout", strerror(errno));
    code = LT_EXIT_IO;
  }
  if (code == 0 && outp) fprintf(stderr, "longtail export: %lld trajectories to %s\n", (long long)count, outp);
  free(pg);
  cJSON_Delete(pc.spec);
  lt_buf_free(&line);
  return lt_cli_close_run("export", b, code);
}
