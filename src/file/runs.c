/* runs.c -- the bytes of a tensor's buffers that its arrays address, merged into runs and laid
 * out compactly (file-format.md §10): what the file writer writes and what a wire server sends
 * (interchange.md §6.3). Bytes no array addresses are never read. */
#include <stdlib.h>

#include "file.h"

static int compare_runs(const void *a, const void *b) {
  const FileRun *x = a, *y = b;
  if (x->buffer != y->buffer) return x->buffer < y->buffer ? -1 : 1;
  return (x->begin > y->begin) - (x->begin < y->begin);
}

/* The bytes an array addresses; false when it addresses none. Valid arrays cannot fail. */
static bool array_bytes(const HurrayArray *array, uint64_t *begin, uint64_t *end) {
  uint64_t numel = 0;
  return hurray_array_numel(array, &numel, NULL) == HURRAY_OK && numel > 0 &&
         hurray_array_span(array, begin, end, NULL) == HURRAY_OK;
}

static int collect_spans(FileRuns *plan, const HurrayTensorDesc *t, HurrayError *error) {
  for (uint32_t i = 0; i < t->nparts; i++) {
    FileRun run = {.buffer = t->parts[i].buffer};
    if (!array_bytes(&t->parts[i], &run.begin, &run.end)) continue;
    if (plan->count == plan->capacity) {
      size_t capacity = plan->capacity ? plan->capacity * 2 : 8;
      FileRun *grown = realloc(plan->runs, capacity * sizeof *grown);
      if (grown == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
      plan->runs = grown;
      plan->capacity = capacity;
    }
    plan->runs[plan->count++] = run;
  }
  for (uint32_t i = 0; i < t->nchildren; i++) {
    int status = collect_spans(plan, &t->children[i], error);
    if (status != HURRAY_OK) return status;
  }
  return HURRAY_OK;
}

/* Merges overlapping (and adjacent) spans into runs and places each buffer's runs in address
 * order: the first at the buffer's start, which the file aligns, each later one at the first
 * multiple of 64 after the previous (spec §10). Where the source's bytes lie in memory does
 * not matter: alignment is a promise about the tensor as it is read back. */
int hurray__runs_make(FileRuns *plan, const HurrayTensorDesc *tensor, HurrayError *error) {
  int status = collect_spans(plan, tensor, error);
  if (status != HURRAY_OK) return status;
  if (plan->count > 0) qsort(plan->runs, plan->count, sizeof *plan->runs, compare_runs);
  size_t merged = 0;
  uint64_t at = 0;
  for (size_t i = 0; i < plan->count; i++) {
    FileRun run = plan->runs[i];
    FileRun *last = merged > 0 ? &plan->runs[merged - 1] : NULL;
    if (last != NULL && last->buffer == run.buffer && run.begin <= last->end) {
      if (run.end > last->end) last->end = run.end;
      at = last->placed + (last->end - last->begin);
      continue;
    }
    if (last == NULL || last->buffer != run.buffer) at = 0;
    run.placed = (at + HURRAY_MIN_ALIGNMENT - 1) & ~(uint64_t)(HURRAY_MIN_ALIGNMENT - 1);
    at = run.placed + (run.end - run.begin);
    plan->runs[merged++] = run;
  }
  plan->count = merged;
  return HURRAY_OK;
}

uint64_t hurray__runs_rebase(void *context, const HurrayArray *array) {
  const FileRuns *plan = context;
  uint64_t begin = 0, end = 0;
  if (!array_bytes(array, &begin, &end)) return 0;
  size_t lo = 0, hi = plan->count; /* the last run at or before (buffer, begin) */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    const FileRun *r = &plan->runs[mid];
    bool after = r->buffer > array->buffer || (r->buffer == array->buffer && r->begin > begin);
    if (after)
      hi = mid;
    else
      lo = mid;
  }
  const FileRun *run = &plan->runs[lo];
  return array->byte_offset - (run->begin - run->placed);
}

void hurray__runs_free(FileRuns *plan) {
  free(plan->runs);
  plan->runs = NULL;
  plan->count = plan->capacity = 0;
}
