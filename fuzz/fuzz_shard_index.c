/* fuzz_shard_index.c -- the checkpoint index parser (src/convert/shards.c, json.c) on arbitrary
 * bytes. What it accepts must be what the reader relies on: tensors sorted by name and unique,
 * valid names, shards sorted and unique, plain file names, every tensor in one of them. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FileArena arena = {0};
  ShardIndex index;
  if (hurray__shard_index_parse(data, size, &arena, &index, NULL) == HURRAY_OK) {
    for (uint32_t i = 0; i < index.count; i++) {
      const FileShardEntry *e = &index.entries[i];
      if (e->shard >= index.shard_count || (i > 0 && strcmp(index.entries[i - 1].name, e->name) >= 0) ||
          hurray__check_name((const uint8_t *)e->name, strlen(e->name), HURRAY_EFORMAT, "", NULL) !=
              HURRAY_OK) {
        abort();
      }
    }
    for (uint32_t k = 0; k < index.shard_count; k++) {
      const char *s = index.shards[k];
      if (s[0] == '\0' || strchr(s, '/') != NULL || strcmp(s, "..") == 0 || strcmp(s, ".") == 0 ||
          (k > 0 && strcmp(index.shards[k - 1], s) >= 0)) {
        abort();
      }
    }
  }
  hurray__arena_free(&arena);
  return 0;
}
