/* shards.c -- sharded checkpoints (file-format.md §12, ADR-090): an index file in Hugging
 * Face's shape, {"metadata": {...}, "weight_map": {tensor: shard file name}}, beside shards
 * that are Hurray or safetensors files, opened as one HurrayFileReader; and the index written
 * for a sharded save. The index is untrusted text: its size, its nesting, its tensor and
 * shard counts are bounded, every name is checked, and a shard is a plain file name in the
 * index's own directory, never a path. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"

static const char kIndexSuffix[] = ".index.json";

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

bool hurray__shards_path(const char *path) {
  struct stat st;
  return ends_with(path, strlen(path), kIndexSuffix) || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

/* ---- the index ---------------------------------------------------------------------------- */

/* One weight_map member as read, before the shards are numbered. */
typedef struct IndexMember {
  const char *name;
  const char *shard;
} IndexMember;

static int by_shard_then_name(const void *a, const void *b) {
  const IndexMember *x = a, *y = b;
  int order = strcmp(x->shard, y->shard);
  return order != 0 ? order : strcmp(x->name, y->name);
}

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const FileShardEntry *)a)->name, ((const FileShardEntry *)b)->name);
}

/* A shard is named by a plain file name: no directory part, not "." or "..". */
static int check_shard_name(const char *shard, size_t len, const char *tensor,
                            HurrayError *error) {
  if (len == 0 || len > CONV_MAX_SHARD_NAME || strlen(shard) != len || strchr(shard, '/') ||
      strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "tensor '%.64s' is placed in shard '%.64s', which is not a file name in "
                        "the index's directory",
                        tensor, shard);
  }
  return HURRAY_OK;
}

static int read_weight_map(TextCursor *j, FileArena *arena, FileSink *members,
                           HurrayError *error) {
  int status = hurray__cursor_expect(j, '{', "'{' (the weight_map object)", error);
  if (status != HURRAY_OK || hurray__cursor_accept(j, '}')) return status;
  uint64_t count = 0;
  do {
    IndexMember m;
    size_t name_len = 0, shard_len = 0;
    status = hurray__json_string(j, arena, &m.name, &name_len, "a tensor name", error);
    if (status == HURRAY_OK) {
      status = hurray__check_name((const uint8_t *)m.name, name_len, HURRAY_EFORMAT,
                                  "weight_map tensor name", error);
    }
    if (status == HURRAY_OK) status = hurray__cursor_expect(j, ':', "':'", error);
    if (status == HURRAY_OK)
      status = hurray__json_string(j, arena, &m.shard, &shard_len, "a shard file name", error);
    if (status == HURRAY_OK) status = check_shard_name(m.shard, shard_len, m.name, error);
    if (status == HURRAY_OK && ++count > HURRAY_FILE_MAX_TENSORS) {
      status = hurray__fail(error, HURRAY_ELIMIT, "the weight_map lists more than %u tensors",
                            HURRAY_FILE_MAX_TENSORS);
    }
    if (status == HURRAY_OK) hurray__sink_bytes(members, &m, sizeof m);
  } while (status == HURRAY_OK && hurray__cursor_accept(j, ','));
  if (status == HURRAY_OK) status = hurray__cursor_expect(j, '}', "',' or '}'", error);
  if (status == HURRAY_OK && members->failed) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  return status;
}

/* Numbers the shards in file-name order and sorts the tensors by name. */
static int number_shards(IndexMember *members, uint32_t count, FileArena *arena,
                         ShardIndex *out, HurrayError *error) {
  if (count > 1) qsort(members, count, sizeof *members, by_shard_then_name); /* NULL when 0 */
  out->entries = hurray__arena_alloc(arena, (count ? count : 1) * sizeof *out->entries);
  out->shards = hurray__arena_alloc(arena, (count ? count : 1) * sizeof *out->shards);
  if (out->entries == NULL || out->shards == NULL)
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < count; i++) {
    if (i == 0 || strcmp(members[i].shard, members[i - 1].shard) != 0) {
      if (out->shard_count == CONV_MAX_SHARDS) {
        return hurray__fail(error, HURRAY_ELIMIT, "the index names more than %u shards",
                            CONV_MAX_SHARDS);
      }
      out->shards[out->shard_count++] = members[i].shard;
    }
    out->entries[i] = (FileShardEntry){.name = members[i].name, .shard = out->shard_count - 1};
  }
  out->count = count;
  if (count > 1) qsort(out->entries, count, sizeof *out->entries, entry_by_name);
  for (uint32_t i = 1; i < count; i++) {
    if (strcmp(out->entries[i].name, out->entries[i - 1].name) == 0) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "tensor '%.64s' is listed twice in the weight_map (shards '%.64s' and "
                          "'%.64s')",
                          out->entries[i].name, out->shards[out->entries[i - 1].shard],
                          out->shards[out->entries[i].shard]);
    }
  }
  return HURRAY_OK;
}

int hurray__shard_index_parse(const uint8_t *text, size_t len, FileArena *arena, ShardIndex *out,
                              HurrayError *error) {
  *out = (ShardIndex){0};
  if (len > CONV_SHARD_INDEX_MAX) {
    return hurray__fail(error, HURRAY_ELIMIT, "the index is %zu bytes, over the limit of %u", len,
                        CONV_SHARD_INDEX_MAX);
  }
  TextCursor j = {.text = text, .len = len, .name = "the index"};
  FileSink members = {0};
  bool have_map = false;
  int status = hurray__cursor_expect(&j, '{', "'{' (a JSON object)", error);
  if (status == HURRAY_OK && !hurray__cursor_accept(&j, '}')) {
    do {
      const char *key = NULL;
      size_t key_len = 0;
      status = hurray__json_string(&j, arena, &key, &key_len, "a member name", error);
      if (status == HURRAY_OK) status = hurray__cursor_expect(&j, ':', "':'", error);
      if (status != HURRAY_OK) break;
      if (strcmp(key, "weight_map") == 0 && key_len == 10) {
        status = have_map ? hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64
                                         ": a second weight_map", hurray__cursor_offset(&j))
                          : read_weight_map(&j, arena, &members, error);
        have_map = true;
      } else { /* "metadata" (total_size, ...) and anything else: any JSON value */
        status = hurray__json_skip(&j, arena, error);
      }
    } while (status == HURRAY_OK && hurray__cursor_accept(&j, ','));
    if (status == HURRAY_OK) status = hurray__cursor_expect(&j, '}', "',' or '}'", error);
  }
  if (status == HURRAY_OK) status = hurray__cursor_end(&j, "the end of the index", error);
  if (status == HURRAY_OK && !have_map) {
    status = hurray__fail(error, HURRAY_EFORMAT, "the index has no weight_map");
  }
  if (status == HURRAY_OK) {
    status = number_shards((IndexMember *)members.data,
                           (uint32_t)(members.len / sizeof(IndexMember)), arena, out, error);
  }
  hurray__sink_reset(&members);
  return status;
}

/* ---- opening a checkpoint ----------------------------------------------------------------- */

/* `dir` + "/" + `name`, malloc'd. */
static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *path = malloc(a + b + 2);
  if (path == NULL) return NULL;
  memcpy(path, dir, a);
  path[a] = '/';
  memcpy(path + a + 1, name, b + 1);
  return path;
}

static bool is_checkpoint_file(const char *name, size_t len) {
  return ends_with(name, len, ".hurray") || ends_with(name, len, ".hry") ||
         ends_with(name, len, ".safetensors");
}

/* What a directory holds: its one index, else its one checkpoint file (save_pretrained of a
 * model that fits one shard writes model.safetensors alone). `*path` is malloc'd; `*is_index`
 * says which it is. */
static int find_in_directory(const char *dir, char **path, bool *is_index, HurrayError *error) {
  DIR *d = opendir(dir);
  if (d == NULL) return hurray__fail_errno(error, HURRAY_EIO, errno, "%s: %s", dir, strerror(errno));
  char index[256] = "", file[256] = "";
  unsigned indexes = 0, files = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.') continue; /* hidden: a save's staging, editors' files */
    if (ends_with(e->d_name, len, kIndexSuffix)) {
      if (indexes++ == 0 || strcmp(e->d_name, index) < 0) snprintf(index, sizeof index, "%s", e->d_name);
    } else if (is_checkpoint_file(e->d_name, len)) {
      if (files++ == 0 || strcmp(e->d_name, file) < 0) snprintf(file, sizeof file, "%s", e->d_name);
    }
  }
  closedir(d);
  if (indexes > 1) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "%s holds %u checkpoint indexes (*.index.json, '%s' first): open one of "
                        "them",
                        dir, indexes, index);
  }
  if (indexes == 0 && files != 1) {
    return hurray__fail_errno(
        error, HURRAY_EIO, files == 0 ? ENOENT : 0,
        files == 0 ? "%s holds no checkpoint index (*.index.json) and no .hurray or .safetensors "
                     "file"
                   : "%s holds no checkpoint index (*.index.json) but %u checkpoint files ('%s' "
                     "first): open one of them",
        dir, files, file);
  }
  *is_index = indexes == 1;
  *path = join(dir, *is_index ? index : file);
  return *path != NULL ? HURRAY_OK : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
}

/* The index's text, read whole (it is bounded). */
static int read_index(const char *path, uint8_t **text, size_t *len, HurrayError *error) {
  FileSource *source = NULL;
  int status = hurray__source_open(path, 0, &source, error);
  uint64_t size = status == HURRAY_OK ? hurray__source_size(source) : 0;
  if (status == HURRAY_OK && size > CONV_SHARD_INDEX_MAX) {
    status = hurray__fail(error, HURRAY_ELIMIT, "the index is %" PRIu64 " bytes, over the limit of %u",
                          size, CONV_SHARD_INDEX_MAX);
  }
  *text = status == HURRAY_OK ? malloc(size ? size : 1) : NULL;
  if (status == HURRAY_OK && *text == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK) status = hurray__source_read(source, 0, *text, (size_t)size, error);
  hurray__source_release(source);
  *len = (size_t)size;
  return status;
}

/* The first tensor the index places in shard `k`, for messages. */
static const char *a_tensor_of(const ShardIndex *index, uint32_t k) {
  for (uint32_t i = 0; i < index->count; i++)
    if (index->entries[i].shard == k) return index->entries[i].name;
  return "";
}

/* Why the shards hold other tensors than the index lists: the first tensor of a shard that the
 * index does not place there. */
static int extra_tensor(const FileShards *s, HurrayError *error) {
  for (uint32_t k = 0; k < s->count; k++) {
    HurrayFileInfo info;
    int status = hurray_file_reader_info(s->readers[k], &info, error);
    for (uint32_t i = 0; status == HURRAY_OK && i < info.tensor_count; i++) {
      HurrayFileTensorInfo ti;
      status = hurray_file_reader_tensor_info(s->readers[k], i, &ti, error);
      if (status != HURRAY_OK) break;
      FileShardEntry key = {.name = ti.name};
      const FileShardEntry *e = bsearch(&key, s->entries, s->entry_count, sizeof key, entry_by_name);
      if (e == NULL) {
        return hurray__fail(error, HURRAY_EFORMAT,
                            "shard '%s' holds tensor '%s', which the weight_map does not list",
                            s->names[k], ti.name);
      }
      if (e->shard != k) {
        return hurray__fail(error, HURRAY_EFORMAT,
                            "tensor '%s' is in shards '%s' and '%s' (the weight_map places it in "
                            "'%s')",
                            ti.name, s->names[e->shard], s->names[k], s->names[e->shard]);
      }
    }
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "shard '%s': ", s->names[k]);
  }
  return hurray__fail(error, HURRAY_EFORMAT, "the shards hold other tensors than the weight_map lists");
}

/* Opens every shard of `index` (in `dir`) and checks that they hold exactly the tensors the
 * index places in them; the merged facts in `info`. */
static int open_shards(FileShards *s, const ShardIndex *index, const char *dir, uint32_t flags,
                       HurrayFileInfo *info, HurrayError *error) {
  s->count = index->shard_count;
  s->names = index->shards;
  s->entries = index->entries;
  s->entry_count = index->count;
  s->readers = calloc(s->count + 1, sizeof *s->readers);
  s->first = calloc(s->count + 1, sizeof *s->first);
  if (s->readers == NULL || s->first == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  uint64_t total = 0;
  for (uint32_t k = 0; k < s->count; k++) {
    char *path = join(dir, s->names[k]);
    HurrayFileInfo si;
    int status = path != NULL ? hurray_file_reader_open(path, flags, &s->readers[k], error)
                              : hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    free(path);
    if (status == HURRAY_OK) status = hurray_file_reader_info(s->readers[k], &si, error);
    if (status == HURRAY_OK && si.format != HURRAY_FORMAT_HURRAY &&
        si.format != HURRAY_FORMAT_SAFETENSORS) {
      status = hurray__fail(error, HURRAY_EFORMAT, "a %s file: shards are Hurray or safetensors files",
                            hurray_format_name(si.format));
    }
    if (status != HURRAY_OK) {
      return hurray__error_prefix(error, status, "shard '%s' (holding '%s'): ", s->names[k],
                                  a_tensor_of(index, k));
    }
    if (k == 0) {
      *info = si;
    } else {
      info->alignment = si.alignment < info->alignment ? si.alignment : info->alignment;
      info->buffer_count += si.buffer_count;
      info->file_size += si.file_size;
      info->data_bytes += si.data_bytes;
    }
    s->first[k] = (uint32_t)total;
    total += si.tensor_count;
  }
  s->first[s->count] = (uint32_t)(total < UINT32_MAX ? total : UINT32_MAX);
  for (uint32_t i = 0; i < s->entry_count; i++) {
    FileShardEntry *e = &s->entries[i];
    if (hurray_file_reader_find(s->readers[e->shard], e->name, &e->local, NULL) != HURRAY_OK) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "the weight_map places tensor '%s' in shard '%s', which does not hold it",
                          e->name, s->names[e->shard]);
    }
  }
  if (total != s->entry_count) return extra_tensor(s, error);
  info->tensor_count = s->entry_count;
  info->index_offset = 0;
  info->shard_count = s->count;
  return HURRAY_OK;
}

int hurray__shards_open(const char *path, uint32_t flags, HurrayFileReader **out,
                        HurrayError *error) {
  char *found = NULL, *dir = NULL;
  bool is_index = true;
  struct stat st;
  int status = HURRAY_OK;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    status = find_in_directory(path, &found, &is_index, error);
    if (status != HURRAY_OK) return status;
    if (!is_index) { /* one checkpoint file: itself */
      status = hurray_file_reader_open(found, flags, out, error);
      free(found);
      return status;
    }
    dir = strdup(path);
  } else {
    const char *slash = strrchr(path, '/');
    dir = slash == NULL ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
  }
  const char *index_path = found != NULL ? found : path;
  FileShards *shards = calloc(1, sizeof *shards);
  uint8_t *text = NULL;
  size_t len = 0;
  if (dir == NULL || shards == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK) status = read_index(index_path, &text, &len, error);
  ShardIndex index;
  if (status == HURRAY_OK) {
    status = hurray__shard_index_parse(text, len, &shards->arena, &index, error);
    if (status != HURRAY_OK) status = hurray__error_prefix(error, status, "%s: ", index_path);
  }
  HurrayFileInfo info = {.alignment = HURRAY_MIN_ALIGNMENT, .format = HURRAY_FORMAT_HURRAY};
  if (status == HURRAY_OK) {
    status = open_shards(shards, &index, dir, flags, &info, error);
    if (status != HURRAY_OK) status = hurray__error_prefix(error, status, "%s: ", index_path);
  }
  info.index_length = len;
  free(text);
  free(found);
  free(dir);
  if (status != HURRAY_OK) {
    hurray__reader_shards_free(shards);
    return status;
  }
  return hurray__reader_open_shards(shards, &info, out, error);
}

/* ---- writing the index -------------------------------------------------------------------- */

typedef struct NamedShard {
  const char *name;
  uint32_t shard;
} NamedShard;

static int named_by_name(const void *a, const void *b) {
  return strcmp(((const NamedShard *)a)->name, ((const NamedShard *)b)->name);
}

int hurray_shard_index_write(const char *path, const char *const *names, const uint32_t *shard_of,
                             uint32_t count, const char *const *shards, uint32_t shard_count,
                             uint64_t total_size, uint32_t flags, HurrayError *error) {
  if (path == NULL || (count > 0 && (names == NULL || shard_of == NULL)) ||
      (shard_count > 0 && shards == NULL)) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_shard_index_write: an argument is NULL");
  }
  if (flags & ~HURRAY_FILE_WRITE_NOT_DURABLE) {
    return hurray__fail(error, HURRAY_EINVAL, "flags 0x%" PRIX32 " include unknown bits", flags);
  }
  if (count > HURRAY_FILE_MAX_TENSORS || shard_count > CONV_MAX_SHARDS) {
    return hurray__fail(error, HURRAY_ELIMIT, "%" PRIu32 " tensors in %" PRIu32
                        " shards exceed the limits of %u and %u", count, shard_count,
                        HURRAY_FILE_MAX_TENSORS, CONV_MAX_SHARDS);
  }
  int status = HURRAY_OK;
  for (uint32_t k = 0; k < shard_count && status == HURRAY_OK; k++) {
    if (shards[k] == NULL) return hurray__fail(error, HURRAY_EINVAL, "shard %" PRIu32 " is NULL", k);
    status = check_shard_name(shards[k], strlen(shards[k]), "", error);
    if (status != HURRAY_OK)
      return hurray__fail(error, HURRAY_EINVAL, "shard '%.64s' is not a plain file name", shards[k]);
  }
  NamedShard *order = malloc((count ? count : 1) * sizeof *order);
  if (order == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < count && status == HURRAY_OK; i++) {
    size_t len = 0;
    status = names[i] == NULL ? hurray__fail(error, HURRAY_EINVAL, "tensor name %" PRIu32 " is NULL", i)
                              : hurray__check_cname(names[i], "tensor name", &len, error);
    if (status == HURRAY_OK && shard_of[i] >= shard_count) {
      status = hurray__fail(error, HURRAY_EINVAL, "tensor '%s' is in shard %" PRIu32 " of %" PRIu32,
                            names[i], shard_of[i], shard_count);
    }
    order[i] = (NamedShard){names[i], shard_of[i]};
  }
  if (status == HURRAY_OK) qsort(order, count, sizeof *order, named_by_name);
  for (uint32_t i = 1; i < count && status == HURRAY_OK; i++) {
    if (strcmp(order[i].name, order[i - 1].name) == 0)
      status = hurray__fail(error, HURRAY_EINVAL, "tensor '%s' is named twice", order[i].name);
  }
  FileSink json = {0};
  if (status == HURRAY_OK) {
    char head[64];
    int n = snprintf(head, sizeof head, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n",
                     total_size);
    hurray__sink_bytes(&json, head, (size_t)n);
    hurray__sink_bytes(&json, "  \"weight_map\": {", 17);
    for (uint32_t i = 0; i < count; i++) {
      hurray__sink_bytes(&json, i == 0 ? "\n    \"" : ",\n    \"", i == 0 ? 6 : 7);
      hurray__json_escape(&json, order[i].name, strlen(order[i].name));
      hurray__sink_bytes(&json, "\": \"", 4);
      hurray__json_escape(&json, shards[order[i].shard], strlen(shards[order[i].shard]));
      hurray__sink_bytes(&json, "\"", 1);
    }
    hurray__sink_bytes(&json, count > 0 ? "\n  }\n}\n" : "}\n}\n", count > 0 ? 7 : 4);
    if (json.failed) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  free(order);
  FileOutput output;
  if (status == HURRAY_OK)
    status = hurray__output_open(&output, path, !(flags & HURRAY_FILE_WRITE_NOT_DURABLE), error);
  if (status == HURRAY_OK) {
    status = hurray__output_write(&output, json.data, json.len, error);
    if (status == HURRAY_OK) status = hurray__output_commit(&output, error);
    hurray__output_close(&output);
  }
  hurray__sink_reset(&json);
  return status;
}

int hurray_size_parse(const char *text, uint64_t *out, HurrayError *error) {
  static const struct {
    const char *unit;
    uint64_t scale;
  } kUnits[] = {{"", 1},           {"B", 1},         {"KB", 1000ull},
                {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
                {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
                {"TiB", 1ull << 40}};
  if (text == NULL || out == NULL)
    return hurray__fail(error, HURRAY_EINVAL, "hurray_size_parse: an argument is NULL");
  uint64_t n = 0;
  size_t i = 0;
  bool overflow = false;
  for (; text[i] >= '0' && text[i] <= '9'; i++)
    overflow |= hurray__mul_u64(n, 10, &n) || hurray__add_u64(n, (uint64_t)(text[i] - '0'), &n);
  for (size_t u = 0; i > 0 && !overflow && n > 0 && u < sizeof kUnits / sizeof *kUnits; u++) {
    if (strcmp(text + i, kUnits[u].unit) == 0 && !hurray__mul_u64(n, kUnits[u].scale, out))
      return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_EINVAL,
                      "'%.64s' is not a positive size such as '500MB', '5GB' or '2GiB'", text);
}

/* ---- writing a checkpoint ----------------------------------------------------------------- */

struct HurrayShardWriter {
  HurrayFileWriterOptions options;
  uint64_t max_shard_size;
  HurrayMetaValue *metadata; /* a copy, written into every shard; NULL for none */
  char *dir, *prefix, *index, *staging;
  HurrayFileWriter *writer; /* the shard being written */
  uint64_t filled;          /* data bytes in it */
  uint32_t shards;          /* shards begun */
  FileSink names;           /* tensor names, NUL-terminated, one after the other */
  FileSink shard_of;        /* uint32_t each */
  uint32_t count;
  uint64_t total;
  bool failed; /* a call failed: only destroy remains */
};

static const char kHurrayIndexSuffix[] = ".hurray.index.json";

/* A staged shard's name: its number, as the final name's N is not known before finish. */
static char *staged_path(const HurrayShardWriter *w, uint32_t shard) {
  char name[32];
  snprintf(name, sizeof name, "shard-%05" PRIu32 ".hurray", shard + 1);
  return join(w->staging, name);
}

static char *final_name(const HurrayShardWriter *w, uint32_t shard) {
  size_t size = strlen(w->prefix) + 32;
  char *name = malloc(size);
  if (name != NULL) {
    snprintf(name, size, "%s-%05" PRIu32 "-of-%05" PRIu32 ".hurray", w->prefix, shard + 1,
             w->shards);
  }
  return name;
}

/* Whether `name` is `prefix`-NNNNN-of-NNNNN.hurray, a shard name of a sharded save. */
static bool is_shard_name(const char *name, const char *prefix) {
  size_t p = strlen(prefix), n = strlen(name);
  static const char kPattern[] = "-00000-of-00000.hurray";
  if (n != p + sizeof kPattern - 1 || strncmp(name, prefix, p) != 0) return false;
  for (size_t i = 0; i < sizeof kPattern - 1; i++) {
    char c = name[p + i], want = kPattern[i];
    if (want == '0' ? (c < '0' || c > '9') : c != want) return false;
  }
  return true;
}

static int writer_fail(HurrayShardWriter *w, int status) {
  if (status != HURRAY_OK) w->failed = true;
  return status;
}

int hurray_shard_writer_create(const char *path, uint64_t max_shard_size,
                               const HurrayFileWriterOptions *options,
                               const HurrayMetaValue *metadata, HurrayShardWriter **out,
                               HurrayError *error) {
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_shard_writer_create: %s is NULL",
                        path == NULL ? "path" : "out");
  }
  if (max_shard_size == 0) return hurray__fail(error, HURRAY_EINVAL, "max_shard_size is 0");
  HurrayShardWriter *w = calloc(1, sizeof *w);
  if (w == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  w->max_shard_size = max_shard_size;
  if (options != NULL) w->options = *options;
  int status = HURRAY_OK;
  if (metadata != NULL) { /* a private copy: encoded (and so validated) once, decoded back */
    FileSink encoded = {0};
    uint16_t minor = 0;
    status = hurray__meta_encode_max(metadata, HURRAY_FILE_META_MAX_BYTES, &encoded, &minor,
                                     error);
    if (status == HURRAY_OK) {
      status = hurray__meta_decode_tree_max(encoded.data, encoded.len, HURRAY_FILE_META_MAX_BYTES,
                                            &w->metadata, error);
    }
    hurray__sink_reset(&encoded);
    if (status != HURRAY_OK) hurray__error_prefix(error, status, "file metadata: ");
  }
  size_t len = strlen(path), suffix = strlen(kHurrayIndexSuffix);
  if (status == HURRAY_OK && len > suffix && strcmp(path + len - suffix, kHurrayIndexSuffix) == 0) {
    const char *slash = strrchr(path, '/');
    const char *base = slash == NULL ? path : slash + 1;
    w->dir = slash == NULL ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
    w->prefix = strndup(base, strlen(base) - suffix);
    w->index = strdup(path);
  } else if (status == HURRAY_OK) {
    w->dir = strdup(path);
    w->prefix = strdup("model");
    w->index = join(path, "model.hurray.index.json");
  }
  if (status == HURRAY_OK && w->dir != NULL && mkdir(w->dir, 0777) != 0 && errno != EEXIST) {
    status = hurray__fail_errno(error, HURRAY_EIO, errno, "%s: %s", w->dir, strerror(errno));
  }
  if (status == HURRAY_OK && (w->dir == NULL || w->prefix == NULL || w->index == NULL ||
                              (w->staging = join(w->dir, ".hurray-save-XXXXXX")) == NULL)) {
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  }
  if (status == HURRAY_OK && mkdtemp(w->staging) == NULL) {
    status = hurray__fail_errno(error, HURRAY_EIO, errno, "%s: %s", path, strerror(errno));
    free(w->staging);
    w->staging = NULL;
  }
  if (status != HURRAY_OK) {
    hurray_shard_writer_destroy(w);
    return status;
  }
  *out = w;
  return HURRAY_OK;
}

/* Finishes the shard being written, the file metadata set first. */
static int finish_shard(HurrayShardWriter *w, HurrayError *error) {
  if (w->writer == NULL) return HURRAY_OK;
  int status = hurray_file_writer_set_metadata(w->writer, w->metadata, error);
  if (status == HURRAY_OK) status = hurray_file_writer_finish(w->writer, error);
  hurray_file_writer_destroy(w->writer);
  w->writer = NULL;
  return status;
}

/* Finishes the shard being written, if any, and starts the next one in the staging directory. */
static int next_shard(HurrayShardWriter *w, HurrayError *error) {
  int status = finish_shard(w, error);
  if (status == HURRAY_OK && w->shards == CONV_MAX_SHARDS) {
    status = hurray__fail(error, HURRAY_ELIMIT, "a checkpoint holds at most %u shards",
                          CONV_MAX_SHARDS);
  }
  char *path = status == HURRAY_OK ? staged_path(w, w->shards) : NULL;
  if (status == HURRAY_OK && path == NULL) status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  if (status == HURRAY_OK) status = hurray_file_writer_create(path, &w->options, &w->writer, error);
  free(path);
  if (status != HURRAY_OK) return status;
  w->shards++;
  w->filled = 0;
  return HURRAY_OK;
}

int hurray_shard_writer_next(HurrayShardWriter *w, const char *name, uint64_t bytes,
                             HurrayFileWriter **out, HurrayError *error) {
  if (w == NULL || name == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_shard_writer_next: an argument is NULL");
  }
  if (w->failed) return hurray__fail(error, HURRAY_ESTATE, "the shard writer has failed");
  size_t len = 0;
  int status = hurray__check_cname(name, "tensor name", &len, error);
  if (status == HURRAY_OK && w->count == HURRAY_FILE_MAX_TENSORS) {
    status = hurray__fail(error, HURRAY_ELIMIT, "a checkpoint holds at most %u tensors",
                          HURRAY_FILE_MAX_TENSORS);
  }
  if (status != HURRAY_OK) return status;
  if (w->writer == NULL || (w->filled > 0 && bytes > w->max_shard_size - (w->filled < w->max_shard_size ? w->filled : w->max_shard_size))) {
    status = next_shard(w, error);
    if (status != HURRAY_OK) return writer_fail(w, status);
  }
  uint32_t shard = w->shards - 1;
  hurray__sink_bytes(&w->names, name, len + 1);
  hurray__sink_bytes(&w->shard_of, &shard, sizeof shard);
  if (w->names.failed || w->shard_of.failed)
    return writer_fail(w, hurray__fail(error, HURRAY_ENOMEM, "out of memory"));
  w->count++;
  w->filled += bytes;
  w->total += bytes;
  *out = w->writer;
  return HURRAY_OK;
}

/* After the index: the shards of an earlier save under the same prefix that this one did not
 * write, regular files only (as save_pretrained removes its stale shards). A failure to
 * remove one is no failure of the save. */
static void remove_stale_shards(const HurrayShardWriter *w) {
  DIR *d = opendir(w->dir);
  if (d == NULL) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!is_shard_name(e->d_name, w->prefix)) continue;
    unsigned long k = strtoul(e->d_name + strlen(w->prefix) + 1, NULL, 10);
    unsigned long of = strtoul(e->d_name + strlen(w->prefix) + 10, NULL, 10);
    struct stat st;
    char *path = join(w->dir, e->d_name);
    if ((of != w->shards || k == 0 || k > of) && path != NULL && lstat(path, &st) == 0 &&
        S_ISREG(st.st_mode)) {
      unlink(path);
    }
    free(path);
  }
  closedir(d);
}

int hurray_shard_writer_finish(HurrayShardWriter *w, HurrayError *error) {
  if (w == NULL) return hurray__fail(error, HURRAY_EINVAL, "hurray_shard_writer_finish: writer is NULL");
  if (w->failed) return hurray__fail(error, HURRAY_ESTATE, "the shard writer has failed");
  /* No tensors: an index with an empty weight_map and no shard, as save_pretrained writes it.
   * The metadata lives in the shards, so with none it would be lost: refused instead. */
  int status = w->count == 0 && w->metadata != NULL
                   ? hurray__fail(error, HURRAY_EINVAL,
                                  "a sharded checkpoint of no tensors has no shard to keep the file "
                                  "metadata in; write it as one file")
                   : finish_shard(w, error);
  const char **names = calloc(w->count + 1, sizeof *names);
  char **shards = calloc(w->shards + 1, sizeof *shards);
  if (status == HURRAY_OK && (names == NULL || shards == NULL))
    status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t k = 0; k < w->shards && status == HURRAY_OK; k++) {
    shards[k] = final_name(w, k);
    char *from = staged_path(w, k), *to = shards[k] != NULL ? join(w->dir, shards[k]) : NULL;
    if (from == NULL || to == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    } else if (rename(from, to) != 0) {
      status = hurray__fail_errno(error, HURRAY_EIO, errno, "%s: %s", to, strerror(errno));
    }
    free(from);
    free(to);
  }
  const char *at = (const char *)w->names.data;
  for (uint32_t i = 0; i < w->count && status == HURRAY_OK; i++) {
    names[i] = at;
    at += strlen(at) + 1;
  }
  if (status == HURRAY_OK) {
    status = hurray_shard_index_write(w->index, names, (const uint32_t *)w->shard_of.data, w->count,
                                      (const char *const *)shards, w->shards, w->total,
                                      w->options.flags & HURRAY_FILE_WRITE_NOT_DURABLE, error);
  }
  if (status == HURRAY_OK) remove_stale_shards(w);
  for (uint32_t k = 0; shards != NULL && k < w->shards; k++) free(shards[k]);
  free(shards);
  free(names);
  return writer_fail(w, status);
}

void hurray_shard_writer_destroy(HurrayShardWriter *w) {
  if (w == NULL) return;
  hurray_file_writer_destroy(w->writer); /* an unfinished shard's temporary goes with it */
  for (uint32_t k = 0; w->staging != NULL && k < w->shards; k++) { /* staged, never renamed */
    char *path = staged_path(w, k);
    if (path != NULL) unlink(path);
    free(path);
  }
  if (w->staging != NULL) rmdir(w->staging);
  hurray_meta_destroy(w->metadata);
  hurray__sink_reset(&w->names);
  hurray__sink_reset(&w->shard_of);
  free(w->dir);
  free(w->prefix);
  free(w->index);
  free(w->staging);
  free(w);
}
