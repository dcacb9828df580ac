/* Metric plots through gnuplot (Debian gnuplot-nox): the series are read from
 * each run's buffer (read-only, so a live run can be plotted), written as
 * "step value" files in a temporary directory, and drawn by one generated
 * gnuplot script, one panel per metric group with the runs overlaid. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "util/error.h"
#include "util/fs.h"

extern char **environ;

const char *const lt_cli_dashboard[] = {
    "reward/mean",
    "eval/accuracy",
    "mis/token_accept,mis/traj_accept,mis/kept_fraction",
    "mismatch/abs_log_ratio",
    "routing/confidence_learner,routing/confidence_rollout",
    "staleness/mean,staleness/max",
    "throughput/gen_tokens_per_s,learner/tokens_per_s",
    "actor/grad_norm",
    "policy/entropy",
};
const int lt_cli_ndashboard = sizeof lt_cli_dashboard / sizeof lt_cli_dashboard[0];

/* Names reach SQL and gnuplot text: keep them to the characters metrics use. */
static int name_ok(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("_/.-*?[]", *s)))
      return 0;
  return 1;
}

/* One gnuplot single-quoted string: a quote is written twice. */
static void gp_str(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

typedef struct {
  FILE *f;         /* the open data file, or NULL */
  char cur[128];   /* metric name of the open file */
  const char *dir; /* temporary directory */
  int *nfiles;
  int64_t points; /* in the open file */
  FILE *script;
  int *first; /* first curve of the panel */
  const char *label;
  int nruns;
  int err; /* a data file could not be written */
} series_t;

static void series_close(series_t *s) {
  if (!s->f) return;
  fclose(s->f);
  s->f = NULL;
  fprintf(s->script, "%s", *s->first ? "plot " : ", \\\n     ");
  *s->first = 0;
  char path[4200];
  snprintf(path, sizeof path, "%s/%d.dat", s->dir, *s->nfiles - 1);
  gp_str(s->script, path);
  char title[512];
  if (s->nruns > 1) snprintf(title, sizeof title, "%s %s", s->label, s->cur);
  else snprintf(title, sizeof title, "%s", s->cur);
  fprintf(s->script, " using 1:2 with %s lw 1.5 title ", s->points <= 40 ? "linespoints pt 7 ps 0.6" : "lines");
  gp_str(s->script, title);
}

/* Rows (name, step, value) ordered by name: one data file per name. */
static int series_row(const char *name, int64_t step, double value, void *ud) {
  series_t *s = ud;
  if (!s->f || strcmp(s->cur, name)) {
    series_close(s);
    char path[4200];
    snprintf(path, sizeof path, "%s/%d.dat", s->dir, (*s->nfiles)++);
    if (!(s->f = fopen(path, "w"))) {
      s->err = 1;
      return 1;
    }
    snprintf(s->cur, sizeof s->cur, "%s", name);
    s->points = 0;
  }
  fprintf(s->f, "%lld %.17g\n", (long long)step, value);
  s->points++;
  return 0;
}

/* The recorded names after "no metric matches": as many as fit a readable line, then how many more, and the
 * one nearest to what was asked.  (A run records more names the longer it runs, e.g. the daemon's health every
 * 5 s, so a name past the cut must still be offered.) */
typedef struct {
  const char *want;
  size_t len; /* characters written */
  int more;   /* names past the cut */
  int best_d; /* edit distance of best to want */
  char best[128];
} names_t;

static int name_row(const char *name, void *ud) {
  names_t *n = ud;
  if (n->len < 600) n->len += (size_t)fprintf(stderr, "%s%s", n->len ? ", " : "", name);
  else n->more++;
  int d = lt_edit_distance(name, n->want);
  if (d < n->best_d) {
    n->best_d = d;
    snprintf(n->best, sizeof n->best, "%s", name);
  }
  return 0;
}

static int run_gnuplot(const char *command, const char *script, const char *errlog) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  char *argv[] = {"gnuplot", (char *)script, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    fprintf(stderr, "longtail %s: error: cannot run gnuplot: %s (install the Debian package gnuplot-nox)\n", command,
            strerror(rc));
    return LT_EXIT_FAIL;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return LT_EXIT_FAIL;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  fprintf(stderr, "longtail %s: error: gnuplot failed:\n", command);
  FILE *f = fopen(errlog, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) fprintf(stderr, "  %s", line);
  if (f) fclose(f);
  return LT_EXIT_FAIL;
}

int lt_cli_plot(const char *command, const char *const *runs, int nruns, const char *const *panels, int npanels,
                const char *title, const char *out, int strict, int check) {
  const char *ext = strrchr(out, '.');
  int svg = ext && !strcmp(ext, ".svg");
  if (!ext || (!svg && strcmp(ext, ".png"))) {
    fprintf(stderr, "longtail %s: error: %s: the output must end in .png or .svg\n", command, out);
    return LT_EXIT_USAGE;
  }
  for (int p = 0; p < npanels; p++) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", panels[p]);
    for (char *save, *m = strtok_r(tmp, ",", &save); m; m = strtok_r(NULL, ",", &save))
      if (!name_ok(m)) {
        fprintf(stderr, "longtail %s: error: metric '%s': names use letters, digits and _/.- (GLOB: * ? [])\n", command,
                m);
        return LT_EXIT_USAGE;
      }
  }
  lt_buffer_t *bufs[LT_ARGS_MAX_POS] = {0};
  char names[LT_ARGS_MAX_POS][128];
  int rc = 0;
  if (nruns > LT_ARGS_MAX_POS) nruns = LT_ARGS_MAX_POS;
  for (int r = 0; r < nruns && !rc; r++)
    rc = lt_cli_open_run(command, runs[r], check, &bufs[r], names[r], sizeof names[r]);
  const char *tmpdir = getenv("TMPDIR");
  for (int r = 0; r < nruns && !rc; r++)
    for (int q = 0; q < r; q++)
      if (!strcmp(names[r], names[q])) { /* same recorded name: tell them apart by path */
        for (int k = 0; k < nruns; k++) snprintf(names[k], sizeof names[k], "%s", runs[k]);
        q = r = nruns;
      }
  char dirbuf[4200];
  snprintf(dirbuf, sizeof dirbuf, "%s/longtail-plot-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int made = 0;
  if (!rc && !(made = mkdtemp(dirbuf) != NULL)) {
    fprintf(stderr, "longtail %s: error: %s: cannot create a temporary directory: %s\n", command, dirbuf,
            strerror(errno));
    rc = LT_EXIT_IO;
  }
  int nfiles = 0;
  char script_path[4300], err_path[4300];
  snprintf(script_path, sizeof script_path, "%s/plot.gp", dirbuf);
  snprintf(err_path, sizeof err_path, "%s/gnuplot.err", dirbuf);
  FILE *sc = rc ? NULL : fopen(script_path, "w");
  if (!rc && !sc) {
    fprintf(stderr, "longtail %s: error: %s: %s\n", command, script_path, strerror(errno));
    rc = LT_EXIT_IO;
  }
  if (!rc) {
    int cols = npanels == 1 ? 1 : npanels <= 4 ? 2 : 3, rows = (npanels + cols - 1) / cols;
    int w = cols == 1 ? 900 : 560 * cols, h = rows * (cols == 1 ? 540 : 380) + 40;
    fprintf(sc, "set terminal %s size %d,%d noenhanced font ',10'\nset output ", svg ? "svg" : "pngcairo", w, h);
    gp_str(sc, out);
    fprintf(sc, "\nset grid\nset key top left font ',8'\nset xlabel 'learner step'\nset datafile missing 'nan'\n");
    fprintf(sc, "set multiplot layout %d,%d title ", rows, cols);
    gp_str(sc, title ? title : "");
    fputc('\n', sc);
  }
  for (int p = 0; p < npanels && !rc; p++) {
    fprintf(sc, "set title ");
    gp_str(sc, panels[p]);
    fputc('\n', sc);
    int first = 1, before = nfiles;
    for (int r = 0; r < nruns; r++) {
      series_t s = {.dir = dirbuf, .nfiles = &nfiles, .script = sc, .first = &first, .label = names[r], .nruns = nruns};
      char tmp[512];
      snprintf(tmp, sizeof tmp, "%s", panels[p]);
      for (char *save, *m = strtok_r(tmp, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        lt_buffer_metric_series(bufs[r], m, series_row, &s);
        series_close(&s);
        if (s.err) {
          fprintf(stderr, "longtail %s: error: %s: cannot write plot data: %s\n", command, dirbuf, strerror(errno));
          rc = LT_EXIT_IO;
        }
      }
    }
    if (nfiles == before) {
      /* Nothing recorded: an empty panel says so rather than a gnuplot error. */
      if (strict) {
        fprintf(stderr, "longtail %s: error: no metric matches '%s' in %s; recorded metrics: ", command, panels[p],
                nruns == 1 ? runs[0] : "these runs");
        names_t n = {.want = panels[p], .best_d = 99};
        lt_buffer_metric_names(bufs[0], name_row, &n);
        if (!n.len) fprintf(stderr, "none");
        if (n.more) fprintf(stderr, " and %d more", n.more);
        if (n.best_d <= 2) fprintf(stderr, " (did you mean '%s'?)", n.best);
        fputc('\n', stderr);
        rc = LT_EXIT_USAGE;
        break;
      }
      fprintf(sc,
              "set label 1 'no data' at graph 0.5,0.5 center\nset xrange [0:1]\nset yrange [0:1]\n"
              "plot -1 notitle\nunset label 1\nset autoscale\n");
    } else {
      fputc('\n', sc);
    }
  }
  if (sc) {
    fprintf(sc, "unset multiplot\n");
    if (fclose(sc) && !rc) {
      fprintf(stderr, "longtail %s: error: %s: %s\n", command, script_path, strerror(errno));
      rc = LT_EXIT_IO;
    }
  }
  for (int r = 0; r < nruns; r++)
    if (bufs[r]) rc = lt_cli_close_run(command, bufs[r], rc);
  if (!rc) rc = run_gnuplot(command, script_path, err_path);
  struct stat st;
  if (!rc && (stat(out, &st) || st.st_size == 0)) {
    fprintf(stderr, "longtail %s: error: %s: gnuplot wrote nothing\n", command, out);
    rc = LT_EXIT_IO;
  }
  if (made) lt_fs_remove_tree(dirbuf);
  return rc;
}
