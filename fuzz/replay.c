/* replay.c -- runs a fuzz target over every file of its corpus directories, so the corpus is
 * a regression suite of the ordinary test run. A crash or a sanitizer report fails the test. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return -1;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *grown = realloc(buf, cap);
      if (grown == NULL) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = grown;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) break;
  }
  int failed = ferror(f);
  fclose(f);
  if (!failed) LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return failed ? -1 : 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  long replayed = 0;
  for (int i = 1; i < argc; i++) {
    DIR *dir = opendir(argv[i]);
    if (dir == NULL) {
      perror(argv[i]);
      return 1;
    }
    char **names = NULL;
    size_t count = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
      if (e->d_name[0] == '.') continue;
      char **grown = realloc(names, (count + 1) * sizeof *names);
      if (grown == NULL) return 1;
      names = grown;
      names[count] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
      if (names[count] == NULL) return 1;
      sprintf(names[count], "%s/%s", argv[i], e->d_name);
      count++;
    }
    closedir(dir);
    qsort(names, count, sizeof *names, compare_names);
    for (size_t k = 0; k < count; k++) {
      struct stat st;
      if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
        if (replay_file(names[k]) != 0) return 1;
        replayed++;
      }
      free(names[k]);
    }
    free(names);
  }
  if (replayed == 0) {
    fprintf(stderr, "no corpus files replayed\n");
    return 1;
  }
  printf("replayed %ld corpus files\n", replayed);
  return 0;
}
