/* test_file_writer.c -- the writer's promises: a file appears at its path only when finished
 * (never after a destroy or a crash, and a previous file survives both); streaming writes of
 * any size in bounded memory; a tensor that fails is discarded without a trace (the finished
 * file is byte-identical to one written without the attempt); calls out of order change
 * nothing; bad arguments are refused before anything is written. */
#define _GNU_SOURCE /* flock, O_TMPFILE */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "file.h" /* the output layer and its fault-injection hook */

#include "test_file_helpers.h"
#include "test_tmpdir.h"

#define FAILS(call, expected)                                                      \
  do {                                                                             \
    HurrayError fails_error = {0};                                                 \
    int fails_status = (call);                                                     \
    if (fails_status != (expected)) {                                              \
      fail_msg("%s: expected %s, got %s: %s", #call, hurray_status_name(expected), \
               hurray_status_name(fails_status), fails_error.message);             \
    }                                                                              \
  } while (0)
#define F (&fails_error)

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Names in the directory other than `except...`: temporaries left behind, if any. */
static int count_entries(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  int count = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) count += e->d_name[0] != '.';
  closedir(d);
  return count;
}

static void clear_dir(void) {
  char command[300];
  snprintf(command, sizeof command, "rm -f '%s'/*", g_dir);
  assert_int_equal(system(command), 0);
}

static void add_dense(HurrayFileWriter *w) {
  Sample s = sample_dense();
  OK(hurray_file_writer_add(w, "dense", &s.desc, s.list, NULL, E));
  sample_free(&s);
}

/* ---- atomic completion -------------------------------------------------------------------- */

/* The private hook of output.c that forces named temporaries (no O_TMPFILE): each test of the
 * temporaries runs both ways. */
static void named_temporaries(bool on) {
  if (on) {
    setenv("_HURRAY_TEST_NAMED_TEMPORARY", "1", 1);
  } else {
    unsetenv("_HURRAY_TEST_NAMED_TEMPORARY");
  }
}

/* Whether this directory's file system gives unnamed temporaries (O_TMPFILE). */
static bool has_tmpfile(void) {
  int fd = open(g_dir, O_TMPFILE | O_RDWR, 0600);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

static void appears_only_when_finished(bool named) {
  named_temporaries(named);
  clear_dir();
  const char *path = path_of("model.hurray");
  write_text(path, "previous contents");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  add_dense(w);
  size_t size = 0;
  char *text = (char *)file_contents(path, &size);
  assert_string_equal(text, "previous contents"); /* untouched until finish */
  free(text);
  /* the file, and the temporary where it has a name */
  assert_int_equal(count_entries(), named || !has_tmpfile() ? 2 : 1);
  OK(hurray_file_writer_finish(w, E));
  assert_int_equal(count_entries(), 1);
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open(path, 0, &r, E));
  hurray_file_reader_destroy(r);
  named_temporaries(false);
}

static void the_file_appears_only_when_finished(void **state) {
  (void)state;
  appears_only_when_finished(false); /* O_TMPFILE where the file system has it */
  appears_only_when_finished(true);
}

static void destroy_without_finish_leaves_no_trace(void **state) {
  (void)state;
  clear_dir();
  const char *path = path_of("model.hurray");
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  add_dense(w);
  hurray_file_writer_destroy(w);
  assert_int_equal(count_entries(), 0); /* nothing at the path, no temporary */

  write_text(path, "previous contents");
  OK(hurray_file_writer_create(path, NULL, &w, E));
  OK(hurray_file_writer_begin_tensor(w, "half", E));
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
  hurray_file_writer_destroy(w); /* mid-tensor */
  size_t size = 0;
  char *text = (char *)file_contents(path, &size);
  assert_string_equal(text, "previous contents");
  free(text);
  assert_int_equal(count_entries(), 1);
}

/* A process that dies mid-write leaves the previous file, and nothing at a new path. */
static void a_crash_leaves_the_previous_file(void **state) {
  (void)state;
  clear_dir();
  const char *old_path = path_of("old.hurray");
  const char *new_path = path_of("new.hurray");
  write_text(old_path, "previous contents");
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    HurrayFileWriter *a = NULL, *b = NULL;
    if (hurray_file_writer_create(old_path, NULL, &a, NULL) != HURRAY_OK ||
        hurray_file_writer_create(new_path, NULL, &b, NULL) != HURRAY_OK) {
      _exit(1);
    }
    add_dense(a);
    add_dense(b);
    _exit(0); /* no finish, no destroy: as if killed */
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  size_t size = 0;
  char *text = (char *)file_contents(old_path, &size);
  assert_string_equal(text, "previous contents");
  free(text);
  assert_null((char *)file_contents(new_path, &size));
}

/* A dead writer's temporaries: none with O_TMPFILE; named ones, removed by the next save of the
 * same destination when nothing says their writer lives. */
static void a_crashed_writers_temporaries_go_with_the_next_save(void **state) {
  (void)state;
  for (int named = 0; named < 2; named++) {
    named_temporaries(named);
    clear_dir();
    const char *path = path_of("model.hurray");
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      HurrayFileWriter *w = NULL;
      if (hurray_file_writer_create(path, NULL, &w, NULL) != HURRAY_OK) _exit(1);
      add_dense(w);
      _exit(0); /* as if killed mid-save */
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(count_entries(), named || !has_tmpfile() ? 1 : 0);
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path, NULL, &w, E));
    add_dense(w);
    OK(hurray_file_writer_finish(w, E));
    hurray_file_writer_destroy(w);
    assert_int_equal(count_entries(), 1); /* the file alone */
  }
  named_temporaries(false);
}

/* What the next save removes: exactly the temporaries of its own destination whose writer is
 * dead (its pid gone, no lock held on the file); everything else stays. */
static void only_dead_writers_temporaries_are_removed(void **state) {
  (void)state;
  clear_dir();
  pid_t dead = fork();
  assert_true(dead >= 0);
  if (dead == 0) _exit(0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  static char names[6][1024];
  const struct {
    const char *stem, *tail; /* stem + ".tmp-" + pid + tail */
  } kinds[6] = {
      {"model.hurray", "-0"},     /* stale: removed */
      {"model.hurray", "-1"},     /* a live pid */
      {"model.hurray", "-2"},     /* locked */
      {"other.hurray", "-0"},     /* another file's */
      {"model.hurray", "-0.bak"}, /* not the pattern */
      {"model.hurray", "-"},      /* nor this */
  };
  for (int i = 0; i < 6; i++) {
    snprintf(names[i], sizeof names[i], "%s/%s.tmp-%ld%s", g_dir, kinds[i].stem,
             (long)(i == 1 ? getppid() : dead), kinds[i].tail);
    write_text(names[i], "partial");
  }
  int held = open(names[2], O_RDWR);
  assert_true(held >= 0);
  assert_int_equal(flock(held, LOCK_EX), 0); /* a writer on another host, as the lock shows */
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("model.hurray"), NULL, &w, E));
  add_dense(w);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  close(held);
  struct stat st;
  assert_int_equal(stat(names[0], &st), -1);
  for (int i = 1; i < 6; i++) assert_int_equal(stat(names[i], &st), 0);
  assert_int_equal(count_entries(), 6);
}

/* ---- streaming ---------------------------------------------------------------------------- */

static void streamed_tensors_round_trip(void **state) {
  (void)state;
  const char *path = path_of("streamed.hurray");
  enum { COUNT = 300000 }; /* 1.2 MB: beyond the staging buffer */
  int32_t *values = malloc(COUNT * sizeof *values);
  for (int32_t i = 0; i < COUNT; i++) values[i] = i * 3 - 7;
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  OK(hurray_file_writer_begin_tensor(w, "ramp", E));
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
  size_t total = COUNT * sizeof *values, at = 0, chunk = 1;
  while (at < total) { /* chunks of growing, odd sizes */
    size_t n = chunk < total - at ? chunk : total - at;
    OK(hurray_file_writer_write(w, (const uint8_t *)values + at, n, E));
    at += n;
    chunk = chunk * 3 + 1;
  }
  OK(hurray_file_writer_write(w, NULL, 0, E));
  static const int64_t shape[] = {COUNT};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_INT32, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 1,
                                 .shape = shape,
                                 .parts = &part,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_INT32};
  OK(hurray_file_writer_end_tensor(w, &desc, NULL, E));
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open(path, HURRAY_FILE_OPEN_PREAD, &r, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_file_reader_get(r, 0, HURRAY_FILE_GET_VERIFY, &c, E));
  assert_memory_equal(c->buffers->buffers[0]->data, values, total);
  hurray_tensor_context_release(c);
  hurray_file_reader_destroy(r);
  free(values);
}

/* Writes dense, then (when `attempt`) a failing tensor of `junk` bytes, then per_channel. */
static char *write_with_attempt(const char *name, size_t junk, int attempt, size_t *size) {
  const char *path = path_of(name);
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  add_dense(w);
  if (attempt == 1) { /* streamed bytes that do not match the descriptor */
    uint8_t *bytes = calloc(1, junk);
    OK(hurray_file_writer_begin_tensor(w, "per_channel", E));
    OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
    OK(hurray_file_writer_write(w, bytes, junk, E));
    Sample s = sample_per_channel(); /* needs three buffers */
    assert_int_not_equal(hurray_file_writer_end_tensor(w, &s.desc, NULL, NULL), HURRAY_OK);
    sample_free(&s);
    free(bytes);
  } else if (attempt == 2) { /* a tensor whose descriptor is invalid for its buffers */
    Sample s = sample_per_channel();
    s.desc.axis = 5;
    FAILS(hurray_file_writer_add(w, "per_channel", &s.desc, s.list, NULL, F), HURRAY_ELAYOUT);
    sample_free(&s);
  } else if (attempt == 3) { /* an unknown role mid-stream */
    OK(hurray_file_writer_begin_tensor(w, "per_channel", E));
    OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
    OK(hurray_file_writer_write(w, "abc", 3, E));
    FAILS(hurray_file_writer_begin_buffer(w, 9, F), HURRAY_EINVAL);
    FAILS(hurray_file_writer_write(w, "abc", 3, F), HURRAY_ESTATE); /* discarded */
  }
  Sample s = sample_per_channel();
  OK(hurray_file_writer_add(w, "per_channel", &s.desc, s.list, NULL, E));
  sample_free(&s);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  return (char *)file_contents(path, size);
}

static void a_failed_tensor_leaves_no_trace(void **state) {
  (void)state;
  size_t clean_size = 0;
  char *clean = write_with_attempt("clean.hurray", 0, 0, &clean_size);
  static const size_t junk[] = {5, 100000, 3u << 20}; /* staged, flushed, far past the end */
  for (size_t i = 0; i < 3; i++) {
    size_t size = 0;
    char *bytes = write_with_attempt("attempt.hurray", junk[i], 1, &size);
    assert_int_equal(size, clean_size);
    assert_memory_equal(bytes, clean, size);
    free(bytes);
  }
  for (int attempt = 2; attempt <= 3; attempt++) {
    size_t size = 0;
    char *bytes = write_with_attempt("attempt.hurray", 0, attempt, &size);
    assert_int_equal(size, clean_size);
    assert_memory_equal(bytes, clean, size);
    free(bytes);
  }
  free(clean);
}

/* ---- states and arguments ----------------------------------------------------------------- */

static void calls_out_of_order_change_nothing(void **state) {
  (void)state;
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("order.hurray"), NULL, &w, E));
  Sample s = sample_dense();
  FAILS(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_write(w, "x", 1, F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_end_tensor(w, &s.desc, NULL, F), HURRAY_ESTATE);
  OK(hurray_file_writer_begin_tensor(w, "a", E));
  FAILS(hurray_file_writer_write(w, "x", 1, F), HURRAY_ESTATE); /* no buffer yet */
  FAILS(hurray_file_writer_begin_tensor(w, "b", F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_add(w, "b", &s.desc, s.list, NULL, F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_finish(w, F), HURRAY_ESTATE);
  OK(hurray_file_writer_set_metadata(w, NULL, E));               /* allowed mid-tensor */
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E)); /* the tensor is still open */
  OK(hurray_file_writer_write(w, s.list->buffers[0]->data, 24, E));
  OK(hurray_file_writer_end_tensor(w, &s.desc, NULL, E));
  FAILS(hurray_file_writer_add(w, "a", &s.desc, s.list, NULL, F), HURRAY_EINVAL); /* taken */
  OK(hurray_file_writer_finish(w, E));
  FAILS(hurray_file_writer_finish(w, F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_add(w, "c", &s.desc, s.list, NULL, F), HURRAY_ESTATE);
  FAILS(hurray_file_writer_set_metadata(w, NULL, F), HURRAY_ESTATE);
  hurray_file_writer_destroy(w);
  FAILS(hurray_file_writer_finish(NULL, F), HURRAY_EINVAL);
  hurray_file_writer_destroy(NULL);
  /* The file holds "a" as written, and nothing the refused calls tried. */
  HurrayFileReader *r = NULL;
  HurrayFileInfo info;
  OK(hurray_file_reader_open(path_of("order.hurray"), 0, &r, E));
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.tensor_count, 1);
  assert_int_equal(info.buffer_count, 1);
  HurrayTensorContext *a = NULL;
  uint32_t index = 1;
  OK(hurray_file_reader_find(r, "a", &index, E));
  OK(hurray_file_reader_get(r, index, HURRAY_FILE_GET_VERIFY, &a, E));
  assert_true(same_tensor(a->tensor, a->buffers, &s.desc, s.list));
  HurrayMetaValue *meta = NULL;
  OK(hurray_file_reader_metadata(r, HURRAY_FILE_WHOLE, &meta, E));
  assert_int_equal(meta->count, 0);
  hurray_meta_destroy(meta);
  hurray_tensor_context_release(a);
  hurray_file_reader_destroy(r);
  sample_free(&s);
}

/* A record whose metadata block is past the size limit is refused by the record decoder
 * itself (the writer never writes one, so the record is encoded directly). */
static void record_metadata_past_the_limit_is_refused(void **state) {
  (void)state;
  static const int64_t shape[] = {2};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_FLOAT32, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 1,
                                 .shape = shape,
                                 .parts = &part,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_FLOAT32};
  uint8_t *metadata = calloc(HURRAY_META_MAX_BYTES + 1, 1);
  assert_non_null(metadata);
  metadata[0] = HURRAY_META_MAP;
  FileSink record = {0};
  OK(hurray__record_encode((const uint8_t *)"x", 1, &desc, NULL, NULL, metadata,
                           HURRAY_META_MAX_BYTES + 1, &record, E));
  FileArena arena = {0};
  FileRecord decoded;
  HurrayError error = {0};
  assert_int_equal(hurray__record_decode(record.data, record.len, &arena, &decoded, &error),
                   HURRAY_ELIMIT);
  assert_non_null(strstr(error.message, "metadata is 16777217 bytes, more than 16777216"));
  hurray__arena_free(&arena);
  hurray__sink_reset(&record);
  free(metadata);
}

/* ---- commit failures (through the output layer's test hook) ------------------------------- */

/* A failing truncate, fsync or rename leaves the previous file and no temporary; a failing
 * directory fsync leaves the new file in place and says its durability is unknown. */
static void commit_failures_leave_the_previous_file(void **state) {
  (void)state;
  static const struct {
    FileOutputStep step;
    const char *words;
  } kSteps[] = {{OUTPUT_STEP_TRUNCATE, "cannot truncate"},
                {OUTPUT_STEP_SYNC, "cannot sync"},
                {OUTPUT_STEP_RENAME, "cannot rename into place"},
                {OUTPUT_STEP_SYNC_DIRECTORY, "cannot sync the directory"}};
  const char *path = path_of("commit.hurray");
  for (size_t i = 0; i < sizeof kSteps / sizeof kSteps[0]; i++) {
    clear_dir();
    write_text(path, "previous contents");
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path, NULL, &w, E));
    add_dense(w);
    hurray__output_fault = (FileOutputFault){kSteps[i].step, ENOSPC};
    HurrayError error = {0};
    assert_int_equal(hurray_file_writer_finish(w, &error), HURRAY_EIO);
    assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_NONE); /* it fired */
    assert_non_null(strstr(error.message, kSteps[i].words));
    assert_int_equal(error.system_errno, ENOSPC);
    bool renamed = kSteps[i].step == OUTPUT_STEP_SYNC_DIRECTORY;
    /* Finished once renamed (only destroy remains), failed otherwise. */
    FAILS(hurray_file_writer_finish(w, F), HURRAY_ESTATE);
    hurray_file_writer_destroy(w);
    assert_int_equal(count_entries(), 1);
    size_t size = 0;
    char *text = (char *)file_contents(path, &size);
    if (renamed) {
      HurrayFileReader *r = NULL;
      OK(hurray_file_reader_open(path, 0, &r, E));
      OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
      hurray_file_reader_destroy(r);
    } else {
      assert_string_equal(text, "previous contents");
    }
    free(text);
  }
}

/* HURRAY_FILE_WRITE_NOT_DURABLE skips the two fsyncs (their fault hooks never fire) and keeps
 * everything else: the file appears whole, and a failing truncate or rename leaves the previous
 * file and no temporary, as a durable save does. */
static void not_durable_skips_only_the_fsyncs(void **state) {
  (void)state;
  const HurrayFileWriterOptions options = {.flags = HURRAY_FILE_WRITE_NOT_DURABLE};
  const char *path = path_of("cached.hurray");
  const FileOutputStep skipped[] = {OUTPUT_STEP_SYNC, OUTPUT_STEP_SYNC_DIRECTORY};
  for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++) {
    clear_dir();
    write_text(path, "previous contents");
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path, &options, &w, E));
    add_dense(w);
    hurray__output_fault = (FileOutputFault){skipped[i], EIO};
    OK(hurray_file_writer_finish(w, E));
    assert_int_equal(hurray__output_fault.step, skipped[i]); /* never reached */
    hurray__output_fault = (FileOutputFault){0};
    hurray_file_writer_destroy(w);
    assert_int_equal(count_entries(), 1);
    HurrayFileReader *r = NULL;
    OK(hurray_file_reader_open(path, 0, &r, E));
    OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
    hurray_file_reader_destroy(r);
  }
  const FileOutputStep failing[] = {OUTPUT_STEP_TRUNCATE, OUTPUT_STEP_RENAME};
  for (size_t i = 0; i < sizeof failing / sizeof failing[0]; i++) {
    clear_dir();
    write_text(path, "previous contents");
    HurrayFileWriter *w = NULL;
    OK(hurray_file_writer_create(path, &options, &w, E));
    add_dense(w);
    hurray__output_fault = (FileOutputFault){failing[i], ENOSPC};
    FAILS(hurray_file_writer_finish(w, F), HURRAY_EIO);
    assert_int_equal(hurray__output_fault.step, OUTPUT_STEP_NONE); /* it fired */
    hurray_file_writer_destroy(w);
    assert_int_equal(count_entries(), 1); /* no temporary */
    size_t size = 0;
    char *text = (char *)file_contents(path, &size);
    assert_string_equal(text, "previous contents");
    free(text);
  }
  HurrayFileWriter *w = NULL;
  const HurrayFileWriterOptions unknown = {.flags = 1u << 1};
  FAILS(hurray_file_writer_create(path, &unknown, &w, F), HURRAY_EINVAL);
  assert_null(w);
}

/* ---- destinations (ADR-037) ---------------------------------------------------------------- */

static int save_dense(const char *path, HurrayError *error) {
  HurrayFileWriter *w = NULL;
  int status = hurray_file_writer_create(path, NULL, &w, error);
  if (status == HURRAY_OK) {
    add_dense(w);
    status = hurray_file_writer_finish(w, error);
  }
  hurray_file_writer_destroy(w);
  return status;
}

static bool is_hurray_file(const char *path) {
  HurrayFileReader *r = NULL;
  int status = hurray_file_reader_open(path, 0, &r, NULL);
  hurray_file_reader_destroy(r);
  return status == HURRAY_OK;
}

static void destinations_other_than_regular_files_are_refused(void **state) {
  (void)state;
  clear_dir();
  char command[600];
  snprintf(command, sizeof command, "rm -rf '%s'/*", g_dir);
  struct stat st;
  HurrayError error = {0};
  /* A FIFO, a directory, a character device: refused, left as they are. */
  const char *fifo = path_of("fifo.hurray");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(save_dense(fifo, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "is a FIFO"));
  assert_true(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  const char *dir = path_of("dir.hurray");
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(save_dense(dir, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "is a directory"));
  assert_int_equal(error.system_errno, EISDIR);
  assert_int_equal(save_dense("/dev/null", &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "/dev/null is a character device"));
  assert_true(lstat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
  /* Through a symlink, the target decides. */
  const char *to_fifo = path_of("to-fifo.hurray");
  assert_int_equal(symlink("fifo.hurray", to_fifo), 0);
  assert_int_equal(save_dense(to_fifo, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "is a FIFO"));
  const char *loop = path_of("loop.hurray");
  assert_int_equal(symlink("loop.hurray", loop), 0);
  assert_int_equal(save_dense(loop, &error), HURRAY_EIO);
  assert_int_equal(error.system_errno, ELOOP);
  assert_int_equal(count_entries(), 4); /* no temporary left */
  assert_int_equal(system(command), 0);
}

/* A symlink stays; its final target, in the target's directory, is replaced or created. */
static void symlinks_are_followed_to_their_target(void **state) {
  (void)state;
  char command[600];
  snprintf(command, sizeof command, "rm -rf '%s'/*", g_dir);
  assert_int_equal(system(command), 0);
  assert_int_equal(mkdir(path_of("blobs"), 0700), 0);
  assert_int_equal(mkdir(path_of("snapshot"), 0700), 0);
  const char *blob = path_of("blobs/abc");
  write_text(blob, "previous contents");
  const char *link = path_of("snapshot/model.hurray");
  assert_int_equal(symlink("../blobs/abc", link), 0);
  const char *hop = path_of("hop.hurray"); /* a symlink to the symlink */
  assert_int_equal(symlink("snapshot/model.hurray", hop), 0);
  for (int i = 0; i < 2; i++) {
    OK(save_dense(i == 0 ? link : hop, E));
    struct stat st;
    assert_true(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    assert_true(lstat(hop, &st) == 0 && S_ISLNK(st.st_mode));
    assert_true(is_hurray_file(blob));
  }
  /* A dangling symlink: its target is created. */
  const char *dangling = path_of("snapshot/new.hurray");
  assert_int_equal(symlink("../blobs/def", dangling), 0);
  OK(save_dense(dangling, E));
  assert_true(is_hurray_file(path_of("blobs/def")));
  struct stat st;
  assert_true(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
  assert_int_equal(system(command), 0);
}

/* The kernel's copy of memory that went away fails with EFAULT: a clear error, not SIGBUS. */
static void unreadable_source_memory_is_a_clear_error(void **state) {
  (void)state;
  clear_dir();
  const char *source = path_of("source.bin");
  size_t size = 1u << 20;
  FILE *f = fopen(source, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < size; i++) fputc((int)(i & 0xff), f);
  fclose(f);
  int fd = open(source, O_RDONLY);
  assert_true(fd >= 0);
  void *mapped = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  assert_true(mapped != MAP_FAILED);
  close(fd);
  assert_int_equal(truncate(source, 0), 0);
  FileOutput out;
  OK(hurray__output_open(&out, path_of("out.bin"), true, E));
  HurrayError error = {0};
  assert_int_equal(hurray__output_write(&out, mapped, size, &error), HURRAY_EIO);
  assert_non_null(strstr(error.message, "no longer readable (a mapped input file shrank"));
  assert_int_equal(error.system_errno, EFAULT);
  hurray__output_close(&out);
  munmap(mapped, size);
  assert_int_equal(count_entries(), 1);
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  clear_dir();
  HurrayFileWriter *w = NULL;
  const char *path = path_of("args.hurray");
  HurrayFileWriterOptions options = {.alignment = 32};
  FAILS(hurray_file_writer_create(path, &options, &w, F), HURRAY_EALIGN);
  options.alignment = 3000;
  FAILS(hurray_file_writer_create(path, &options, &w, F), HURRAY_EALIGN);
  options.alignment = HURRAY_FILE_MAX_ALIGNMENT * 2;
  FAILS(hurray_file_writer_create(path, &options, &w, F), HURRAY_EALIGN);
  options = (HurrayFileWriterOptions){.reserved = {1}};
  FAILS(hurray_file_writer_create(path, &options, &w, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_create(path_of("missing/dir.hurray"), NULL, &w, F), HURRAY_EIO);
  FAILS(hurray_file_writer_create(NULL, NULL, &w, F), HURRAY_EINVAL);
  assert_int_equal(count_entries(), 0);

  OK(hurray_file_writer_create(path, NULL, &w, E));
  Sample s = sample_dense();
  char long_name[300];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  FAILS(hurray_file_writer_add(w, "", &s.desc, s.list, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_add(w, long_name, &s.desc, s.list, NULL, F), HURRAY_ELIMIT);
  long_name[HURRAY_MAX_NAME] = '\0'; /* 255 bytes: fine */
  OK(hurray_file_writer_add(w, long_name, &s.desc, s.list, NULL, E));
  FAILS(hurray_file_writer_add(w, "\xc0\x80", &s.desc, s.list, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_add(w, "\xed\xa0\x80", &s.desc, s.list, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_add(w, NULL, &s.desc, s.list, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_add(w, "t", NULL, s.list, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_add(w, "t", &s.desc, NULL, NULL, F), HURRAY_EINVAL);
  FAILS(hurray_file_writer_begin_tensor(w, long_name, F), HURRAY_EINVAL); /* duplicate */
  OK(hurray_file_writer_begin_tensor(w, "t", E));
  FAILS(hurray_file_writer_write(w, NULL, 1, F), HURRAY_ESTATE); /* no buffer */
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
  FAILS(hurray_file_writer_write(w, NULL, 1, F), HURRAY_EINVAL); /* and the tensor is gone */
  FAILS(hurray_file_writer_end_tensor(w, &s.desc, NULL, F), HURRAY_ESTATE);
  OK(hurray_file_writer_add(w, "t", &s.desc, s.list, NULL, E)); /* the name is free again */

  /* Device memory is not written: it must be copied to the host first. */
  HurrayBufferList *list = sample_list();
  static uint8_t device_memory[64] __attribute__((aligned(64)));
  const HurrayBufferDesc cuda = {.byte_size = 64,
                                 .alignment = 64,
                                 .device_tag = HURRAY_DEVICE_CUDA,
                                 .memory_class = HURRAY_MEM_DEVICE,
                                 .sync_mode = HURRAY_SYNC_READY};
  HurrayBuffer *buffer = NULL;
  OK(hurray_buffer_wrap(device_memory, &cuda, 0, NULL, 0, NULL, NULL, &buffer, E));
  OK(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, E));
  HurrayError error = {0};
  assert_int_equal(hurray_file_writer_add(w, "on_gpu", &s.desc, list, NULL, &error),
                   HURRAY_EUNSUPPORTED);
  assert_non_null(strstr(error.message, "buffer 0 is cuda memory"));
  hurray_buffer_list_destroy(list);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  sample_free(&s);

  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open(path, 0, &r, E));
  HurrayFileInfo info;
  OK(hurray_file_reader_info(r, &info, E));
  assert_int_equal(info.tensor_count, 2);
  hurray_file_reader_destroy(r);
}

/* A tree whose levels share one children array (64 children, 8 levels: 64^8 nodes on paper)
 * is refused quickly, not expanded. */
static void shared_descriptor_trees_are_bounded(void **state) {
  (void)state;
  enum { WIDTH = 64 };
  static const int64_t shape[] = {1};
  static const HurrayArray part = {.shape = shape, .ndim = 1, .dtype = HURRAY_DTYPE_UINT8};
  static HurrayTensorDesc levels[HURRAY_MAX_DEPTH + 1][WIDTH];
  static char names[WIDTH][8];
  static const char *name_list[WIDTH];
  for (int i = 0; i < WIDTH; i++) {
    snprintf(names[i], sizeof names[i], "c%d", i);
    name_list[i] = names[i];
    levels[0][i] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_DENSE,
                                      .ndim = 1,
                                      .shape = shape,
                                      .parts = &part,
                                      .nparts = 1,
                                      .dtype = HURRAY_DTYPE_UINT8};
  }
  for (int d = 1; d <= HURRAY_MAX_DEPTH; d++) {
    for (int i = 0; i < WIDTH; i++) {
      levels[d][i] = (HurrayTensorDesc){.layout = HURRAY_LAYOUT_COMPOSITE,
                                        .nchildren = WIDTH,
                                        .children = levels[d - 1],
                                        .child_names = name_list};
    }
  }
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path_of("dag.hurray"), NULL, &w, E));
  OK(hurray_file_writer_begin_tensor(w, "dag", E));
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
  OK(hurray_file_writer_write(w, "x", 1, E));
  FAILS(hurray_file_writer_end_tensor(w, &levels[HURRAY_MAX_DEPTH - 1][0], NULL, F), HURRAY_ELIMIT);
  HurrayBufferList *list = sample_list();
  sample_append(list, "x", 1, HURRAY_ROLE_VALUES);
  FAILS(hurray_file_writer_add(w, "dag", &levels[HURRAY_MAX_DEPTH - 1][0], list, NULL, F),
        HURRAY_ELIMIT);
  hurray_buffer_list_destroy(list);
  hurray_file_writer_destroy(w);
}

/* A relative path: the directory synced is the working directory. */
static void relative_paths_work(void **state) {
  (void)state;
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(g_dir), 0);
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create("relative.hurray", NULL, &w, E));
  add_dense(w);
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open("relative.hurray", 0, &r, E));
  hurray_file_reader_destroy(r);
  assert_int_equal(chdir(cwd), 0);
}

/* ---- bounded memory ----------------------------------------------------------------------- */

static long peak_rss_kib(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

/* 256 MiB through the writer, then verified through a PREAD reader, each in a few MiB. */
static void memory_stays_bounded(void **state) {
  (void)state;
  enum { CHUNK = 1 << 20, CHUNKS = 256 };
  const char *path = path_of("large.hurray");
  uint8_t *chunk = malloc(CHUNK);
  for (size_t i = 0; i < CHUNK; i++) chunk[i] = (uint8_t)(i * 131);
  long before = peak_rss_kib();
  HurrayFileWriter *w = NULL;
  OK(hurray_file_writer_create(path, NULL, &w, E));
  OK(hurray_file_writer_begin_tensor(w, "large", E));
  OK(hurray_file_writer_begin_buffer(w, HURRAY_ROLE_VALUES, E));
  for (int i = 0; i < CHUNKS; i++) OK(hurray_file_writer_write(w, chunk, CHUNK, E));
  static const int64_t shape[] = {(int64_t)CHUNK * CHUNKS};
  const HurrayArray part = SAMPLE_ARRAY(HURRAY_DTYPE_UINT8, 1, shape, NULL, 0, 0);
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 1,
                                 .shape = shape,
                                 .parts = &part,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_UINT8};
  OK(hurray_file_writer_end_tensor(w, &desc, NULL, E));
  OK(hurray_file_writer_finish(w, E));
  hurray_file_writer_destroy(w);
  HurrayFileReader *r = NULL;
  OK(hurray_file_reader_open(path, HURRAY_FILE_OPEN_PREAD, &r, E));
  OK(hurray_file_reader_verify(r, HURRAY_FILE_WHOLE, NULL, NULL, E));
  HurrayTensorContext *c = NULL;
  OK(hurray_file_reader_get_rows(r, 0, 5 * CHUNK, 5 * CHUNK + 10, &c, E));
  assert_int_equal(c->tensor->shape[0], 10);
  hurray_tensor_context_release(c);
  hurray_file_reader_destroy(r);
  long growth = peak_rss_kib() - before;
  if (growth > 16 * 1024) fail_msg("peak memory grew by %ld KiB for 256 MiB of data", growth);
  free(chunk);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_file_appears_only_when_finished),
      cmocka_unit_test(destroy_without_finish_leaves_no_trace),
      cmocka_unit_test(a_crash_leaves_the_previous_file),
      cmocka_unit_test(a_crashed_writers_temporaries_go_with_the_next_save),
      cmocka_unit_test(only_dead_writers_temporaries_are_removed),
      cmocka_unit_test(streamed_tensors_round_trip),
      cmocka_unit_test(a_failed_tensor_leaves_no_trace),
      cmocka_unit_test(calls_out_of_order_change_nothing),
      cmocka_unit_test(commit_failures_leave_the_previous_file),
      cmocka_unit_test(not_durable_skips_only_the_fsyncs),
      cmocka_unit_test(record_metadata_past_the_limit_is_refused),
      cmocka_unit_test(destinations_other_than_regular_files_are_refused),
      cmocka_unit_test(symlinks_are_followed_to_their_target),
      cmocka_unit_test(unreadable_source_memory_is_a_clear_error),
      cmocka_unit_test(bad_arguments_are_refused),
      cmocka_unit_test(shared_descriptor_trees_are_bounded),
      cmocka_unit_test(relative_paths_work),
      cmocka_unit_test(memory_stays_bounded),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
