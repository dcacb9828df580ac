/* The supervised warm start: demonstrations → sequences rendered through the
 * checkpoint's chat template (ChatML without one) whose generated tokens (the
 * response and its closing stop token) carry the loss. */
#include "train/train.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "learner/trainer.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/grow.h"
#include "util/json.h"
#include "util/log.h"
#include "util/rng.h"
#include "util/sha256.h"
#include "util/time.h"

typedef struct {
  int32_t *ids;
  uint8_t *mask;
  int n, nseq, *start;
  size_t cap, start_cap;
} pack_t;

/* Room for one more sequence of n tokens. */
static int pack_reserve(pack_t *p, int n) {
  lt_grow_t tok[] = {LT_GROW(p->ids), LT_GROW(p->mask)}, seq[] = {LT_GROW(p->start)};
  int rc = lt_grow(&p->cap, (size_t)(p->n + n), 1024, tok, 2);
  return rc < 0 ? rc : lt_grow(&p->start_cap, (size_t)p->nseq + 2, 16, seq, 1);
}

/* The chat format demonstrations are rendered in: the checkpoint's own template, NULL: ChatML. */
typedef struct {
  const lt_tokenizer_t *tok;
  const lt_chat_template_t *chat;
} chat_t;

/* ChatML as token ids: the response (and, with assistant_turns, the chat's assistant turns) with its closing
 * <|im_end|> is what the policy generates. */
static int chatml_example(const lt_tokenizer_t *tok, const cJSON *messages, const char *response, int assistant_turns,
                          int32_t **ids, uint8_t **mask, int *n) {
  int cap = 0, rc = 0, nspan = 0, span[64][2];
  int32_t end = lt_tokenizer_special(tok, "<|im_end|>");
  for (const cJSON *m = messages->child; m && rc == 0; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
      rc = lt_error_set(LT_EFORMAT, "demonstration message without string role/content");
    } else if (assistant_turns && lt_role_parse(role->valuestring) == LT_ROLE_ASSISTANT && nspan < 64) {
      /* The turn's text and its <|im_end|>: what the policy generated. */
      rc = lt_chat_open(tok, LT_ROLE_ASSISTANT, ids, n, &cap);
      span[nspan][0] = *n;
      if (rc == 0) rc = lt_ids_text(tok, content->valuestring, ids, n, &cap);
      span[nspan++][1] = *n + 1;
      if (rc == 0) rc = lt_chat_close(tok, ids, n, &cap);
    } else {
      rc = lt_chat_message(tok, lt_role_parse(role->valuestring), content->valuestring, ids, n, &cap);
    }
  }
  if (rc == 0) rc = lt_chat_open(tok, LT_ROLE_ASSISTANT, ids, n, &cap);
  int prompt = *n;
  if (rc == 0) rc = lt_ids_text(tok, response, ids, n, &cap);
  if (rc == 0) rc = lt_ids_push(ids, n, &cap, end);
  if (rc == 0 && !(*mask = malloc((size_t)*n + 1))) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc < 0) return rc;
  for (int i = 0; i < *n; i++) (*mask)[i] = i >= prompt;
  for (int k = 0; k < nspan; k++)
    for (int i = span[k][0]; i < span[k][1]; i++) (*mask)[i] = 1;
  return 0;
}

int lt__sft_example(const lt_tokenizer_t *tok, const lt_chat_template_t *chat, const cJSON *messages,
                    const char *response, int assistant_turns, int32_t **ids, uint8_t **mask, int *n) {
  *ids = NULL, *mask = NULL, *n = 0;
  int rc;
  if (!chat) {
    rc = chatml_example(tok, messages, response, assistant_turns, ids, mask, n);
  } else { /* the messages and the response, rendered as the agent loop renders a conversation */
    cJSON *all = cJSON_CreateArray(), *resp = cJSON_CreateObject();
    rc = all && resp ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
    for (const cJSON *m = messages->child; m && rc == 0; m = m->next)
      if (!cJSON_AddItemReferenceToArray(all, (cJSON *)m)) rc = lt_error_set(LT_ENOMEM, "out of memory");
    if (rc == 0 && (!cJSON_AddStringToObject(resp, "role", "assistant") ||
                    !cJSON_AddStringToObject(resp, "content", response) || !cJSON_AddItemToArray(all, resp)))
      rc = lt_error_set(LT_ENOMEM, "out of memory");
    else if (rc == 0) resp = NULL; /* the array owns it */
    if (rc == 0)
      rc = lt_chat_render_ids(chat, lt_toolcall_format_detect(lt_chat_template_source(chat, 0)), tok, all,
                              assistant_turns, ids, mask, n);
    cJSON_Delete(resp);
    cJSON_Delete(all);
  }
  if (rc < 0) {
    free(*ids), free(*mask);
    *ids = NULL, *mask = NULL, *n = 0;
  }
  return rc;
}

/* Appends one demonstration to the pack; 1 if it does not fit in max_len.
 * The response carries the loss, and so do the chat's assistant turns when
 * assistant_turns is set (an environment's multi-turn episode). */
static int render(const chat_t *c, const cJSON *messages, const char *response, int assistant_turns, int max_len,
                  pack_t *p) {
  int32_t *ids;
  uint8_t *mask;
  int n, rc = lt__sft_example(c->tok, c->chat, messages, response, assistant_turns, &ids, &mask, &n);
  if (rc == 0 && n > max_len) rc = 1;
  if (rc == 0) rc = pack_reserve(p, n);
  if (rc == 0) {
    memcpy(p->ids + p->n, ids, sizeof(int32_t) * (size_t)n);
    memcpy(p->mask + p->n, mask, (size_t)n);
    p->start[p->nseq] = p->n;
    p->n += n;
    p->start[++p->nseq] = p->n;
  }
  free(ids), free(mask);
  return rc;
}

static void pack_free(pack_t *p) {
  free(p->ids);
  free(p->mask);
  free(p->start);
  memset(p, 0, sizeof *p);
}

/* A JSONL file of {"prompt": string | messages, "response": string}. */
static int load_jsonl(const char *path, const chat_t *chat, int max_len, pack_t *all) {
  lt_jsonl_t r;
  int rc = lt_jsonl_open(&r, path);
  if (rc < 0) return lt_error_wrap(rc, "sft.data");
  cJSON *o;
  int skipped = 0;
  while ((rc = lt_jsonl_next(&r, &o)) == 1) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "prompt"),
                *re = cJSON_GetObjectItemCaseSensitive(o, "response");
    cJSON *msgs = NULL;
    if (cJSON_IsString(pr)) {
      msgs = cJSON_CreateArray();
      cJSON *m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "role", "user");
      cJSON_AddStringToObject(m, "content", pr->valuestring);
      cJSON_AddItemToArray(msgs, m);
    }
    if (!cJSON_IsString(re) || !(cJSON_IsArray(pr) || msgs)) {
      rc = lt_error_set(LT_EFORMAT, "%s:%ld: expected {\"prompt\": string or messages, \"response\": string}", path,
                        r.lineno);
    } else {
      rc = render(chat, msgs ? msgs : pr, re->valuestring, 0, max_len, all);
      if (rc < 0) lt_error_wrap(rc, "%s:%ld", path, r.lineno);
      skipped += rc == 1;
      rc = rc == 1 ? 0 : rc;
    }
    cJSON_Delete(msgs);
    cJSON_Delete(o);
    if (rc < 0) break;
  }
  lt_jsonl_close(&r);
  if (rc < 0) return rc;
  if (skipped) LT_WARN("sft", "%s: %d demonstrations longer than the context were skipped", path, skipped);
  if (all->nseq == 0) return lt_error_set(LT_EINVAL, "sft.data: %s holds no usable demonstration", path);
  return 0;
}

/* batch demonstrations from the environments, by domain weight. */
static int env_batch(lt_envs_t *envs, const chat_t *chat, int max_len, int batch, uint64_t *index, lt_rng_t *rng,
                     pack_t *p) {
  int nd = lt_envs_count(envs), tries = 0;
  double total = 0;
  for (int i = 0; i < nd; i++) total += lt_envs_weight(envs, i);
  while (p->nseq < batch) {
    if (++tries > 100 * batch)
      return lt_error_set(LT_EUNSUPP, "sft: no environment produced demonstrations that fit the context");
    double u = lt_rng_uniform(rng) * total;
    int d = 0;
    while (d < nd - 1 && u >= lt_envs_weight(envs, d)) u -= lt_envs_weight(envs, d++);
    cJSON *msgs;
    char *resp;
    int rc = lt_envs_demo(envs, lt_envs_name(envs, d), (*index)++, &msgs, &resp);
    if (rc == LT_EUNSUPP) continue;
    if (rc < 0) return rc;
    rc = render(chat, msgs, resp, 1, max_len, p);
    cJSON_Delete(msgs);
    free(resp);
    if (rc < 0) return rc;
  }
  return 0;
}

int lt_policy_source(const lt_config_t *cfg, const char *init_dir, char *out, size_t cap) {
  const char *path = lt_config_str(cfg, "model.path"), *init = lt_config_str(cfg, "model.init");
  char dir[4096];
  if (path[0]) {
    if (!lt_fs_is_dir(path)) return lt_error_set(LT_ENOENT, "model.path: %s is not a directory", path);
    if (!realpath(path, dir)) return lt_error_set(LT_ENOENT, "model.path: %s: %s", path, strerror(errno));
  } else if (init[0]) {
    lt_model_config_t mc;
    int rc = lt_model_config_load(init, &mc);
    if (rc < 0) return lt_error_wrap(rc, "model.init");
    lt_model_t *m;
    if ((rc = lt_model_create(&mc, &m)) < 0) return rc;
    lt_model_init_random(m, (uint64_t)lt_config_int(cfg, "run.seed"), 0.02f);
    rc = lt_model_save(m, init_dir);
    lt_model_free(m);
    if (rc < 0) return rc;
    if (!realpath(init_dir, dir)) return lt_error_set(LT_EIO, "%s: %s", init_dir, strerror(errno));
  } else {
    return lt_error_set(LT_ECONFIG, "model: set model.path (a checkpoint) or model.init (a model config)");
  }
  if (strlen(dir) >= cap) return lt_error_set(LT_EINVAL, "%s: path too long", dir);
  memcpy(out, dir, strlen(dir) + 1);
  return 0;
}

int lt_policy_single_file(const char *dir, const char *out_dir, int bf16, char *out, size_t cap) {
  char st[4200];
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  const char *use = dir;
  if (!lt_fs_exists(st) || bf16) {
    /* Versions travel as one hashed file: a sharded source, or any source published in bf16 (v0 included, with
     * its fp32 master beside it), becomes out_dir once. */
    lt_model_t *m;
    int rc = lt_model_load_master(dir, &m);
    if (rc < 0) return lt_error_wrap(rc, "model.path");
    rc = lt_model_save_as(m, out_dir, bf16 ? LT_ST_BF16 : LT_ST_F32);
    lt_model_free(m);
    if (rc == 0 && strcmp(dir, out_dir)) rc = lt_tokenizer_copy_files(dir, out_dir);
    if (rc < 0) return rc;
    use = out_dir;
  }
  if (strlen(use) >= cap) return lt_error_set(LT_EINVAL, "%s: path too long", use);
  memmove(out, use, strlen(use) + 1);
  return 0;
}

int lt_train_initial_policy(const lt_config_t *cfg, lt_envs_t *envs, const char *run_dir, FILE *metrics,
                            lt_buffer_t *buf, char *out, size_t cap, char sha[65], double *sft_loss) {
  char dir[4096], init[4200];
  *sft_loss = -1;
  snprintf(init, sizeof init, "%s/checkpoints/v0", run_dir);
  int rc = lt_policy_source(cfg, init, dir, sizeof dir);
  if (rc < 0) return rc;
  if (lt_config_bool(cfg, "sft.enabled")) {
    /* The warm start runs before any worker connects: v0 is the tuned policy. */
    char sft[4200];
    snprintf(sft, sizeof sft, "%s/checkpoints/v0-sft", run_dir);
    int progress = strcmp(lt_config_str(cfg, "monitor.progress"), "off") != 0;
    lt_sft_opts_t so = {
        .cfg = cfg, .envs = envs, .in_dir = dir, .out_dir = sft, .metrics = metrics, .buf = buf, .progress = progress};
    LT_INFO("sft", "warm start: %lld steps of %lld sequences", (long long)lt_config_int(cfg, "sft.steps"),
            (long long)lt_config_int(cfg, "sft.batch"));
    if ((rc = lt_sft_run(&so, sft_loss)) < 0) return lt_error_wrap(rc, "sft warm start");
    LT_INFO("sft", "warm start done: loss %.4f", *sft_loss);
    snprintf(dir, sizeof dir, "%s", sft);
  }
  int bf16 = !strcmp(lt_config_str(cfg, "checkpoint.publish_dtype"), "bf16");
  if ((rc = lt_policy_single_file(dir, init, bf16, out, cap)) < 0) return rc;
  char st[4200];
  snprintf(st, sizeof st, "%s/model.safetensors", out);
  if ((rc = lt_sha256_file(st, sha)) < 0) return rc;
  const char *pd = lt_config_str(cfg, "checkpoint.publish_dir");
  return pd[0] ? lt_train_publish_copy(out, pd, sha) : 0;
}

int lt_policy_model_info(const char *dir, int *vocab, cJSON **info) {
  char p[4200];
  lt_model_config_t mc;
  snprintf(p, sizeof p, "%s/config.json", dir);
  int rc = lt_model_config_load(p, &mc);
  lt_tokenizer_t *tok = NULL;
  if (rc == 0) rc = lt_tokenizer_for_model(dir, mc.vocab, &tok);
  if (rc < 0) return rc;
  /* Workers render prompts through the model's own chat template when it ships one (rollout/agent.c):
   * WELCOME says which, so a worker written to docs/protocol.md formats turns as the policy was trained. */
  lt_chat_template_t *tmpl = NULL;
  rc = lt_chat_template_load(dir, &tmpl);
  const char *format = rc == 0 ? "chat_template" : "chatml";
  lt_chat_template_free(tmpl);
  if (rc == LT_ENOENT) lt_error_clear();
  else if (rc < 0) {
    lt_tokenizer_free(tok);
    return rc;
  }
  *vocab = mc.vocab;
  cJSON *o = cJSON_CreateObject();
  cJSON *eos = o ? cJSON_AddArrayToObject(o, "eos_ids") : NULL;
  if (eos) {
    cJSON_AddNumberToObject(o, "vocab_size", mc.vocab);
    cJSON_AddStringToObject(o, "chat_format", format);
    for (int32_t id = 0; id < mc.vocab; id++)
      if (lt_tokenizer_is_stop(tok, id)) cJSON_AddItemToArray(eos, cJSON_CreateNumber(id));
  }
  lt_tokenizer_free(tok);
  if (!eos) {
    cJSON_Delete(o);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  *info = o;
  return 0;
}

int lt_sft_run(const lt_sft_opts_t *o, double *final_loss) {
  const lt_config_t *cfg = o->cfg;
  int64_t steps = lt_config_int(cfg, "sft.steps");
  int batch = (int)lt_config_int(cfg, "sft.batch");
  const char *data = lt_config_str(cfg, "sft.data");
  lt_model_t *policy = NULL;
  lt_tokenizer_t *tok = NULL;
  lt_chat_template_t *tmpl = NULL;
  lt_trainer_t *tr = NULL;
  pack_t all = {0}, p = {0};
  /* The daemon's warm start runs on its loop's thread, which learner.cpus must not leave pinned: its CPUs back at
   * the end. */
  lt_cpus_t caller;
  int restore = lt_cpus_get_self(&caller) == 0;
  int rc = lt_model_load(o->in_dir, &policy);
  if (rc == 0) rc = lt_tokenizer_for_model(o->in_dir, policy->cfg.vocab, &tok);
  /* Demonstrations in the format the agent loop prompts the policy in: the checkpoint's own chat template. */
  if (rc == 0 && (rc = lt_chat_template_load(o->in_dir, &tmpl)) == LT_ENOENT) rc = 0, lt_error_clear();
  if (rc < 0) goto out;
  LT_INFO("sft", "demonstrations rendered %s", tmpl ? "through the checkpoint's chat template" : "as ChatML");
  chat_t chat = {.tok = tok, .chat = tmpl};
  int max_len = policy->cfg.max_pos;
  if (data[0] && (rc = load_jsonl(data, &chat, max_len, &all)) < 0) goto out;
  if (!data[0] && !o->envs) {
    rc = lt_error_set(LT_ECONFIG, "sft.data is empty and there are no environments to draw demonstrations from");
    goto out;
  }
  lt_trainer_cfg_t tc = {
      .actor_minibatches = 1, .critic_minibatches = 1, .threads = (int)lt_config_int(cfg, "learner.threads")};
  if ((rc = lt_cpus_config(cfg, "learner.cpus", &tc.cpus)) < 0) goto out;
  lt_loss_cfg_default(&tc.loss, LT_OBJ_GRPO); /* no critic */
  lt_optim_cfg_default(&tc.actor_opt, LT_OPT_ADAMW);
  tc.actor_opt.lr = (float)lt_config_num(cfg, "sft.lr");
  tc.actor_opt.warmup = (int)(steps / 10);
  tc.actor_opt.total = steps - tc.actor_opt.warmup;
  tc.actor_opt.min_lr_ratio = 0.1f;
  tc.actor_opt.weight_decay = 0.01f;
  if ((rc = lt__learner_cuda(cfg, NULL)) < 0) goto out;
  tc.cuda = rc;
  tc.gpu_recompute = lt_config_bool(cfg, "learner.gpu.recompute");
  if ((rc = lt_trainer_create(&tc, policy, NULL, NULL, &tr)) < 0) goto out;
  policy = NULL;
  lt_rng_t rng;
  lt_rng_seed(&rng, lt_rng_mix((uint64_t)lt_config_int(cfg, "run.seed"), 0x5f7));
  uint64_t index = 0;
  double t0 = lt_time_mono_s(), tail = 0;
  int ntail = 0;
  int64_t tail_from = steps - (steps + 9) / 10;
  for (int64_t s = 0; s < steps; s++) {
    p.n = p.nseq = 0;
    if (all.nseq) {
      /* Uniform sample of the file's demonstrations. */
      for (int i = 0; i < batch; i++) {
        int k = (int)lt_rng_below(&rng, (uint64_t)all.nseq);
        int a = all.start[k], b = all.start[k + 1];
        if ((rc = pack_reserve(&p, b - a)) < 0) goto out;
        memcpy(p.ids + p.n, all.ids + a, sizeof(int32_t) * (size_t)(b - a));
        memcpy(p.mask + p.n, all.mask + a, (size_t)(b - a));
        p.start[p.nseq] = p.n;
        p.n += b - a;
        p.start[++p.nseq] = p.n;
      }
    } else if ((rc = env_batch(o->envs, &chat, max_len, batch, &index, &rng, &p)) < 0) {
      goto out;
    }
    lt_train_batch_t b = {.nseq = p.nseq, .start = p.start, .tokens = p.ids, .mask = p.mask};
    double loss;
    if ((rc = lt_trainer_sft_step(tr, &b, &loss)) < 0) goto out;
    if (s >= tail_from) {
      tail += loss;
      ntail++;
    }
    if (o->buf) lt_buffer_metric(o->buf, s, "sft/loss", loss, lt_time_wall_ms());
    if (o->metrics && (rc = lt_jsonl_write_metric(o->metrics, s, lt_time_wall_ms(), "sft/loss", loss)) < 0) goto out;
    if (o->progress && (s % 25 == 0 || s == steps - 1)) {
      double el = lt_time_mono_s() - t0;
      fprintf(stderr, "sft step %lld/%lld | loss %.4f | %.1f s | ETA %.0f s\n", (long long)s + 1, (long long)steps,
              loss, el, el / (double)(s + 1) * (double)(steps - s - 1));
    }
  }
  *final_loss = ntail ? tail / ntail : 0;
  rc = lt_model_save(lt_trainer_policy(tr), o->out_dir);
  /* The tuned policy is a model folder like its source: it carries the tokenizer. */
  if (rc == 0) rc = lt_tokenizer_copy_files(o->in_dir, o->out_dir);
out:
  if (restore && lt_cpus_pin_self(&caller) < 0) LT_WARN("sft", "the caller's CPUs back: %s", lt_error_msg());
  pack_free(&all);
  pack_free(&p);
  lt_trainer_free(tr);
  lt_model_free(policy);
  lt_tokenizer_free(tok);
  lt_chat_template_free(tmpl);
  return rc;
}
