/* tensor.c -- tensor descriptors: the layout rules, overflow-checked array spans, the optional
 * check of index data held in CPU memory, and the deep copy into one heap block.
 *
 * Validation order for one tensor: its own fields (limits, layout parameters, part count), then
 * each part against what its layout expects (one helper, expect_part, for every layout), then,
 * with HURRAY_VALIDATE_CONTENTS, the index data. Every error message names what was wrong; a
 * part's message starts with "part N (role)" and a child's ends with the path of child names.
 *
 * Nesting: the tensor given to hurray_tensor_validate has depth 0 and a child of a tensor at
 * depth d has depth d + 1; a depth above HURRAY_MAX_DEPTH is HURRAY_ELIMIT.
 *
 * Cost: validation is linear in the number of descriptors, parts and dimensions, plus
 * O(n log n) in the child names of each composite. Content checks read each index element once;
 * a dimension with stride 0 is read once, however long. Content errors are HURRAY_ELAYOUT. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- messages ------------------------------------------------------------------------------ */

/* A bounded string builder: appends until full, then silently truncates. */
typedef struct Text {
  char *data;
  size_t size;
  size_t used;
} Text;

static void text_append(Text *text, const char *fmt, ...) HURRAY_PRINTF(2, 3);
static void text_append(Text *text, const char *fmt, ...) {
  if (text->used >= text->size) return;
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(text->data + text->used, text->size - text->used, fmt, args);
  va_end(args);
  if (n > 0) text->used += (size_t)n;
}

#define DIMS_TEXT_SIZE 96

/* "[2, *, 5]": an extent list, with the wildcard (a negative entry) of expected shapes as "*". */
static const char *format_dims(char out[DIMS_TEXT_SIZE], const int64_t *dims, int32_t n) {
  Text text = {out, DIMS_TEXT_SIZE, 0};
  out[0] = '\0';
  text_append(&text, "[");
  for (int32_t k = 0; k < n; k++) {
    const char *sep = k > 0 ? ", " : "";
    if (dims[k] < 0) {
      text_append(&text, "%s*", sep);
    } else {
      text_append(&text, "%s%" PRId64, sep, dims[k]);
    }
  }
  text_append(&text, "]");
  return out;
}

/* ---- layouts ------------------------------------------------------------------------------- */

/* Every layout's parts and parameters (hurray_layout_info), in the order of HurrayLayoutInfo's
 * fields; validate_parts checks each part's dtype and shape. */
#define AXIS HURRAY_LAYOUT_HAS_AXIS
#define BLOCK_SIZE HURRAY_LAYOUT_HAS_BLOCK_SIZE
#define VALUES_SHAPE HURRAY_LAYOUT_VALUES_SHAPE
#define LAYOUT(code, name, min_parts, max_parts, values_part, roles, flags, min_ndim, max_ndim) \
  [HURRAY_LAYOUT_##code] = {name,  HURRAY_LAYOUT_##code, min_parts, max_parts, values_part,      \
                            roles, flags,                min_ndim,  max_ndim}
#define ROLES(...) {__VA_ARGS__}
static const HurrayLayoutInfo kLayouts[] = {
    LAYOUT(DENSE, "dense", 1, 1, 0, ROLES(HURRAY_ROLE_VALUES), VALUES_SHAPE, 0, HURRAY_MAX_NDIM),
    LAYOUT(PER_CHANNEL, "per_channel", 2, 3, 0,
           ROLES(HURRAY_ROLE_VALUES, HURRAY_ROLE_SCALES, HURRAY_ROLE_ZERO_POINTS),
           AXIS | VALUES_SHAPE, 1, HURRAY_MAX_NDIM),
    LAYOUT(BLOCK, "block", 2, 3, 0, ROLES(HURRAY_ROLE_VALUES, HURRAY_ROLE_SCALES, HURRAY_ROLE_MINS),
           AXIS | BLOCK_SIZE | VALUES_SHAPE, 1, HURRAY_MAX_NDIM),
    LAYOUT(SPARSE_COO, "sparse_coo", 2, 2, 1, ROLES(HURRAY_ROLE_INDICES, HURRAY_ROLE_VALUES), 0, 1,
           HURRAY_MAX_NDIM),
    LAYOUT(SPARSE_CSR, "sparse_csr", 3, 3, 2,
           ROLES(HURRAY_ROLE_INDPTR, HURRAY_ROLE_INDICES, HURRAY_ROLE_VALUES), 0, 2, 2),
    LAYOUT(PAGED, "paged", 2, 2, 0, ROLES(HURRAY_ROLE_PAGES, HURRAY_ROLE_PAGE_TABLE),
           AXIS | BLOCK_SIZE, 1, HURRAY_MAX_NDIM),
    LAYOUT(COMPOSITE, "composite", 0, 0, HURRAY_LAYOUT_NO_PART, ROLES(0), 0, 0, 0),
};
#undef ROLES
#undef LAYOUT
#undef VALUES_SHAPE
#undef BLOCK_SIZE
#undef AXIS

#define LAYOUT_COUNT (sizeof kLayouts / sizeof kLayouts[0])

const HurrayLayoutInfo *hurray_layout_info(int layout) {
  return layout >= 0 && (size_t)layout < LAYOUT_COUNT ? &kLayouts[layout] : NULL;
}

const char *hurray_layout_name(int layout) {
  const HurrayLayoutInfo *info = hurray_layout_info(layout);
  return info != NULL ? info->name : NULL;
}

static const char *part_role(const HurrayTensorDesc *tensor, uint32_t index) {
  if (tensor->layout >= LAYOUT_COUNT || index >= kLayouts[tensor->layout].max_parts) {
    return "unexpected";
  }
  return hurray_buffer_role_name(kLayouts[tensor->layout].roles[index]);
}

/* Prefixes the message of a failed check of part `index` with "part N (role): ". */
static int in_part(HurrayError *error, const HurrayTensorDesc *tensor, uint32_t index, int status) {
  if (error != NULL) {
    char detail[HURRAY_ERROR_MESSAGE_SIZE];
    memcpy(detail, error->message, sizeof detail);
    hurray__fail(error, status, "part %" PRIu32 " (%s): %s", index, part_role(tensor, index),
                 detail);
  }
  return status;
}

/* ---- arrays -------------------------------------------------------------------------------- */

/* ndim in [0, HURRAY_MAX_NDIM], shape non-NULL when ndim > 0, extents in [0, HURRAY_MAX_DIM]. */
static int check_shape(int32_t ndim, const int64_t *shape, HurrayError *error) {
  if (ndim < 0) return hurray__fail(error, HURRAY_EINVAL, "ndim %" PRId32 " is negative", ndim);
  if (ndim > HURRAY_MAX_NDIM) {
    return hurray__fail(error, HURRAY_ELIMIT, "ndim %" PRId32 " exceeds HURRAY_MAX_NDIM (%d)", ndim,
                        HURRAY_MAX_NDIM);
  }
  if (ndim > 0 && shape == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "shape is NULL but ndim is %" PRId32, ndim);
  }
  for (int32_t k = 0; k < ndim; k++) {
    if (shape[k] < 0) {
      return hurray__fail(error, HURRAY_EINVAL, "shape[%" PRId32 "] = %" PRId64 " is negative", k,
                          shape[k]);
    }
    if (shape[k] > HURRAY_MAX_DIM) {
      return hurray__fail(error, HURRAY_ELIMIT,
                          "shape[%" PRId32 "] = %" PRId64 " exceeds HURRAY_MAX_DIM (2^62)", k,
                          shape[k]);
    }
  }
  return HURRAY_OK;
}

static int check_dtype(uint8_t code, const HurrayDTypeInfo **info, HurrayError *error) {
  *info = code == HURRAY_DTYPE_INVALID ? NULL : hurray_dtype_info(code);
  if (*info != NULL) return HURRAY_OK;
  return hurray__fail(error, HURRAY_EDTYPE, "dtype code %u is not a dtype", code);
}

/* Everything about an array that does not involve its buffer. */
static int check_array(const HurrayArray *array, const HurrayDTypeInfo **info, HurrayError *error) {
  if (array == NULL) return hurray__fail(error, HURRAY_EINVAL, "array is NULL");
  if (!hurray__all_zero(array->reserved, sizeof array->reserved)) {
    return hurray__fail(error, HURRAY_EINVAL, "reserved bytes are not zero");
  }
  int status = check_shape(array->ndim, array->shape, error);
  return status != HURRAY_OK ? status : check_dtype(array->dtype, info, error);
}

static bool array_is_empty(const HurrayArray *array) {
  for (int32_t k = 0; k < array->ndim; k++) {
    if (array->shape[k] == 0) return true;
  }
  return false;
}

/* The array's strides in elements: its own, or row-major contiguous ones when NULL. Called on
 * non-empty arrays only, whose row-major strides overflow exactly when their size does. */
static int array_strides(const HurrayArray *array, int64_t strides[HURRAY_MAX_NDIM],
                         HurrayError *error) {
  if (array->strides != NULL) {
    memcpy(strides, array->strides, (size_t)array->ndim * sizeof *strides);
    return HURRAY_OK;
  }
  int64_t step = 1;
  for (int32_t k = array->ndim - 1; k >= 0; k--) {
    strides[k] = step;
    if (k > 0 && hurray__mul_i64(step, array->shape[k], &step)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "the element count overflows int64");
    }
  }
  return HURRAY_OK;
}

/* The bits [*first, *end) of its buffer that a checked array addresses, relative to the
 * buffer's data; *first may be negative. An empty array addresses nothing: first == end. */
static int array_bits(const HurrayArray *array, unsigned bits, int64_t *first, int64_t *end,
                      HurrayError *error) {
  if (array->byte_offset > (uint64_t)INT64_MAX / 8) {
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "byte_offset %" PRIu64 " overflows a bit offset in int64",
                        array->byte_offset);
  }
  int64_t base = (int64_t)array->byte_offset * 8;
  if (array_is_empty(array)) {
    *first = *end = base;
    return HURRAY_OK;
  }
  int64_t strides[HURRAY_MAX_NDIM];
  int status = array_strides(array, strides, error);
  if (status != HURRAY_OK) return status;
  /* The lowest and highest element index over the index box, then the bits they cover. */
  int64_t low = 0, high = 0;
  bool overflow = false;
  for (int32_t k = 0; k < array->ndim && !overflow; k++) {
    int64_t reach = 0;
    overflow = hurray__mul_i64(array->shape[k] - 1, strides[k], &reach) ||
               hurray__add_i64(reach < 0 ? low : high, reach, reach < 0 ? &low : &high);
  }
  overflow = overflow || hurray__add_i64(high, 1, &high) ||
             hurray__mul_i64(low, (int64_t)bits, &low) ||
             hurray__mul_i64(high, (int64_t)bits, &high) || hurray__add_i64(base, low, first) ||
             hurray__add_i64(base, high, end);
  if (overflow) {
    char shape[DIMS_TEXT_SIZE], steps[DIMS_TEXT_SIZE];
    return hurray__fail(error, HURRAY_EOVERFLOW,
                        "element offsets overflow int64 (shape %s, strides %s, byte_offset "
                        "%" PRIu64 ")",
                        format_dims(shape, array->shape, array->ndim),
                        format_dims(steps, strides, array->ndim), array->byte_offset);
  }
  return HURRAY_OK;
}

static int64_t floor_div8(int64_t bits) {
  int64_t rest = bits % 8;
  return (bits - (rest < 0 ? rest + 8 : rest)) / 8;
}

static uint64_t ceil_div8(int64_t bits) {
  return ((uint64_t)bits + 7) / 8;
} /* bits >= 0 */

int hurray_array_numel(const HurrayArray *array, uint64_t *numel, HurrayError *error) {
  if (numel == NULL) return hurray__fail(error, HURRAY_EINVAL, "hurray_array_numel: numel is NULL");
  const HurrayDTypeInfo *info = NULL;
  int status = check_array(array, &info, error);
  if (status != HURRAY_OK) return status;
  uint64_t count = array_is_empty(array) ? 0 : 1;
  for (int32_t k = 0; k < array->ndim && count != 0; k++) {
    if (hurray__mul_u64(count, (uint64_t)array->shape[k], &count)) {
      char shape[DIMS_TEXT_SIZE];
      return hurray__fail(error, HURRAY_EOVERFLOW, "the element count of shape %s overflows",
                          format_dims(shape, array->shape, array->ndim));
    }
  }
  *numel = count;
  return HURRAY_OK;
}

int hurray_array_span(const HurrayArray *array, uint64_t *begin, uint64_t *end,
                      HurrayError *error) {
  if (begin == NULL || end == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_array_span: begin and end must not be NULL");
  }
  const HurrayDTypeInfo *info = NULL;
  int64_t first = 0, last = 0;
  int status = check_array(array, &info, error);
  if (status == HURRAY_OK) status = array_bits(array, info->bits, &first, &last, error);
  if (status != HURRAY_OK) return status;
  if (first < 0) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "the array starts %" PRId64 " bytes before its buffer's data",
                        -floor_div8(first));
  }
  *begin = (uint64_t)first / 8;
  *end = ceil_div8(last);
  return HURRAY_OK;
}

/* ---- tensors ------------------------------------------------------------------------------- */

typedef struct Validator {
  const HurrayBufferList *buffers;
  uint32_t flags;
  HurrayError *error;
  int depth;                              /* of the tensor being checked */
  const char *path[HURRAY_MAX_DEPTH + 1]; /* child names leading to it */
  uint32_t nodes;                         /* descriptors visited so far */
} Validator;

/* A part's dtype: `code` exactly, or (code 0) any dtype in the `accept` classes. */
enum { ACCEPT_FLOAT = 1 << 0, ACCEPT_INTEGER = 1 << 1, ACCEPT_INDEX = 1 << 2 };
typedef struct DTypeRule {
  uint8_t code;
  uint8_t accept;
} DTypeRule;

static const DTypeRule kFloat = {0, ACCEPT_FLOAT};
static const DTypeRule kFloatOrInteger = {0, ACCEPT_FLOAT | ACCEPT_INTEGER};
static const DTypeRule kIndex = {0, ACCEPT_INDEX};

static bool dtype_accepted(DTypeRule rule, const HurrayDTypeInfo *info) {
  if (rule.code != HURRAY_DTYPE_INVALID) return info->code == rule.code;
  bool is_integer = info->kind == HURRAY_KIND_SIGNED || info->kind == HURRAY_KIND_UNSIGNED;
  bool is_index = info->code == HURRAY_DTYPE_INT32 || info->code == HURRAY_DTYPE_INT64;
  return ((rule.accept & ACCEPT_FLOAT) && info->kind == HURRAY_KIND_FLOAT) ||
         ((rule.accept & ACCEPT_INTEGER) && is_integer) ||
         ((rule.accept & ACCEPT_INDEX) && is_index);
}

static const char *dtype_rule_text(DTypeRule rule) {
  if (rule.code != HURRAY_DTYPE_INVALID) return hurray_dtype_info(rule.code)->name;
  switch (rule.accept) {
    case ACCEPT_FLOAT:
      return "a floating-point dtype";
    case ACCEPT_FLOAT | ACCEPT_INTEGER:
      return "a floating-point or integer dtype";
    default:
      return "int32 or int64";
  }
}

#define ANY_EXTENT (-1) /* an expected extent that any extent matches (nnz, num_pages) */

static bool shape_matches(const HurrayArray *array, int32_t ndim, const int64_t *shape) {
  if (array->ndim != ndim) return false;
  for (int32_t k = 0; k < ndim; k++) {
    if (shape[k] != ANY_EXTENT && shape[k] != array->shape[k]) return false;
  }
  return true;
}

static int check_part(const Validator *v, const HurrayArray *array, DTypeRule rule, int32_t ndim,
                      const int64_t *shape) {
  const HurrayDTypeInfo *info = NULL;
  int status = check_array(array, &info, v->error);
  if (status != HURRAY_OK) return status;
  if (!dtype_accepted(rule, info)) {
    return hurray__fail(v->error, HURRAY_ELAYOUT, "dtype is %s, expected %s", info->name,
                        dtype_rule_text(rule));
  }
  if (!shape_matches(array, ndim, shape)) {
    char got[DIMS_TEXT_SIZE], expected[DIMS_TEXT_SIZE];
    return hurray__fail(v->error, HURRAY_ELAYOUT, "shape is %s, expected %s",
                        format_dims(got, array->shape, array->ndim),
                        format_dims(expected, shape, ndim));
  }
  if (array->buffer >= v->buffers->count) {
    return hurray__fail(v->error, HURRAY_EINVAL,
                        "buffer index %" PRIu32 " is past the %" PRIu32 " buffers of the list",
                        array->buffer, v->buffers->count);
  }
  const HurrayBuffer *buffer = v->buffers->buffers[array->buffer];
  if (buffer == NULL) {
    return hurray__fail(v->error, HURRAY_EINVAL, "buffer %" PRIu32 " of the list is NULL",
                        array->buffer);
  }
  int64_t first = 0, end = 0;
  status = array_bits(array, info->bits, &first, &end, v->error);
  if (status != HURRAY_OK || array_is_empty(array)) return status;
  if (first < 0 || ceil_div8(end) > buffer->desc.byte_size) {
    return hurray__fail(v->error, HURRAY_EBOUNDS,
                        "addresses bytes [%" PRId64 ", %" PRIu64 ") of buffer %" PRIu32
                        ", whose byte_size is %" PRIu64,
                        floor_div8(first), ceil_div8(end), array->buffer, buffer->desc.byte_size);
  }
  return HURRAY_OK;
}

/* The one check of a part against its layout: the array, its dtype (`rule`), its shape
 * (`ndim` extents, ANY_EXTENT matching any) and its place in its buffer. */
static int expect_part(const Validator *v, const HurrayTensorDesc *tensor, uint32_t index,
                       DTypeRule rule, int32_t ndim, const int64_t *shape) {
  int status = check_part(v, &tensor->parts[index], rule, ndim, shape);
  return status == HURRAY_OK ? status : in_part(v->error, tensor, index, status);
}

static int64_t ceil_div(int64_t n, int64_t d) {
  return n == 0 ? 0 : (n - 1) / d + 1;
}

static int validate_parts(const Validator *v, const HurrayTensorDesc *t) {
  const HurrayArray *parts = t->parts;
  const DTypeRule same = {t->dtype, 0};
  int64_t dims[HURRAY_MAX_NDIM + 1];
  int status = HURRAY_OK;
  switch (t->layout) {
    case HURRAY_LAYOUT_DENSE:
      return expect_part(v, t, 0, same, t->ndim, t->shape);
    case HURRAY_LAYOUT_PER_CHANNEL:
      if ((status = expect_part(v, t, 0, same, t->ndim, t->shape)) != HURRAY_OK ||
          (status = expect_part(v, t, 1, kFloat, 1, &t->shape[t->axis])) != HURRAY_OK ||
          t->nparts == 2) {
        return status;
      }
      return expect_part(v, t, 2, kFloatOrInteger, 1, &t->shape[t->axis]);
    case HURRAY_LAYOUT_BLOCK:
      memcpy(dims, t->shape, (size_t)t->ndim * sizeof *dims);
      dims[t->axis] = ceil_div(t->shape[t->axis], t->block_size);
      if ((status = expect_part(v, t, 0, same, t->ndim, t->shape)) != HURRAY_OK ||
          (status = expect_part(v, t, 1, kFloat, t->ndim, dims)) != HURRAY_OK || t->nparts == 2) {
        return status;
      }
      return expect_part(v, t, 2, kFloatOrInteger, t->ndim, dims);
    case HURRAY_LAYOUT_SPARSE_COO:
      dims[0] = t->ndim;
      dims[1] = ANY_EXTENT;
      if ((status = expect_part(v, t, 0, kIndex, 2, dims)) != HURRAY_OK) return status;
      return expect_part(v, t, 1, same, 1, &parts[0].shape[1]);
    case HURRAY_LAYOUT_SPARSE_CSR:
      dims[0] = t->shape[0] + 1;
      dims[1] = ANY_EXTENT;
      if ((status = expect_part(v, t, 0, kIndex, 1, dims)) != HURRAY_OK ||
          (status = expect_part(v, t, 1, (DTypeRule){parts[0].dtype, 0}, 1, &dims[1])) !=
              HURRAY_OK) {
        return status;
      }
      return expect_part(v, t, 2, same, 1, &parts[1].shape[0]);
    case HURRAY_LAYOUT_PAGED: {
      int32_t tail = t->ndim - t->axis - 1; /* the extents after the paged axis */
      dims[0] = ANY_EXTENT;
      dims[1] = t->block_size;
      memcpy(&dims[2], &t->shape[t->axis + 1], (size_t)tail * sizeof *dims);
      if ((status = expect_part(v, t, 0, same, tail + 2, dims)) != HURRAY_OK) return status;
      memcpy(dims, t->shape, (size_t)t->axis * sizeof *dims);
      dims[t->axis] = ceil_div(t->shape[t->axis], t->block_size);
      return expect_part(v, t, 1, kIndex, t->axis + 1, dims);
    }
    default:
      return status; /* COMPOSITE has no parts */
  }
}

/* A tensor of a block dtype (ADR-094): DENSE, rank >= 1, its values row-major, each row whole
 * blocks, so that its bytes are ggml's rows of blocks. */
static int check_block(const Validator *v, const HurrayTensorDesc *t) {
  uint32_t elements = 0, bytes = 0;
  if (hurray_dtype_block(t->dtype, &elements, &bytes, NULL) != HURRAY_OK) return HURRAY_OK;
  const char *name = hurray_dtype_info(t->dtype)->name;
  if (t->layout != HURRAY_LAYOUT_DENSE || t->ndim < 1) {
    return hurray__fail(v->error, HURRAY_ELAYOUT,
                        "a %s tensor is dense and of rank 1 or more, not %s of rank %" PRId32,
                        name, hurray_layout_name((int)t->layout), t->ndim);
  }
  const HurrayArray *a = &t->parts[0];
  if (t->shape[t->ndim - 1] % bytes != 0) {
    return hurray__fail(v->error, HURRAY_ELAYOUT,
                        "a %s tensor's last extent is bytes of whole %" PRIu32
                        "-byte blocks; %" PRId64 " is not a multiple of %" PRIu32,
                        name, bytes, t->shape[t->ndim - 1], bytes);
  }
  int64_t stride = 1;
  for (int32_t k = a->ndim - 1; k >= 0 && a->strides != NULL; k--) {
    if (a->shape[k] > 1 && a->strides[k] != stride) {
      return hurray__fail(v->error, HURRAY_ELAYOUT,
                          "a %s tensor's bytes are row-major; dimension %" PRId32
                          " has stride %" PRId64 ", not %" PRId64,
                          name, k, a->strides[k], stride);
    }
    stride *= a->shape[k];
  }
  return HURRAY_OK;
}

/* ---- contents of index parts --------------------------------------------------------------- */

/* An index part (int32 or int64) whose bytes this process can read. */
typedef struct IndexView {
  const uint8_t *data;
  const HurrayArray *array;
  int64_t strides[HURRAY_MAX_NDIM];
} IndexView;

/* False when there is nothing to read here: the buffer is not CPU memory, or holds no data, or
 * the array is empty. Parts of other devices are not read (the documented scope). */
static bool index_view(const Validator *v, const HurrayArray *array, IndexView *view) {
  const HurrayBuffer *buffer = v->buffers->buffers[array->buffer];
  if (buffer->desc.device_tag != HURRAY_DEVICE_CPU || buffer->data == NULL ||
      array_is_empty(array)) {
    return false;
  }
  view->data = buffer->data;
  view->array = array;
  return array_strides(array, view->strides, NULL) == HURRAY_OK; /* checked by check_part */
}

/* Element `linear` (in elements from element 0, within the checked span). */
static int64_t index_at(const IndexView *view, int64_t linear) {
  int64_t width = view->array->dtype == HURRAY_DTYPE_INT32 ? 4 : 8;
  const uint8_t *p = view->data + (int64_t)view->array->byte_offset + linear * width;
  if (width == 4) {
    int32_t value;
    memcpy(&value, p, sizeof value);
    return value;
  }
  int64_t value;
  memcpy(&value, p, sizeof value);
  return value;
}

/* Every element of part `index` lies in [0, limit): limit is limits[i_0] when `per_row` (COO
 * indices against the tensor's shape), else limits[0]. */
static int check_index_range(const Validator *v, const HurrayTensorDesc *t, uint32_t index,
                             const int64_t *limits, bool per_row) {
  const HurrayArray *array = &t->parts[index];
  IndexView view;
  if (!index_view(v, array, &view)) return HURRAY_OK;
  int64_t extent[HURRAY_MAX_NDIM], at[HURRAY_MAX_NDIM] = {0};
  for (int32_t k = 0; k < array->ndim; k++) { /* a stride-0 dimension repeats one element */
    bool repeats = view.strides[k] == 0 && !(per_row && k == 0);
    extent[k] = repeats ? 1 : array->shape[k];
  }
  for (int64_t linear = 0;;) {
    int64_t value = index_at(&view, linear), limit = limits[per_row ? at[0] : 0];
    if (value < 0 || value >= limit) {
      char where[DIMS_TEXT_SIZE];
      return in_part(v->error, t, index,
                     hurray__fail(v->error, HURRAY_ELAYOUT,
                                  "element %s is %" PRId64 ", outside [0, %" PRId64 ")",
                                  format_dims(where, at, array->ndim), value, limit));
    }
    int32_t k = array->ndim - 1; /* odometer step; k < 0 once every index was visited */
    for (; k >= 0; k--) {
      if (++at[k] < extent[k]) {
        linear += view.strides[k];
        break;
      }
      linear -= (extent[k] - 1) * view.strides[k];
      at[k] = 0;
    }
    if (k < 0) return HURRAY_OK;
  }
}

/* HURRAY_TENSOR_COALESCED: the index columns of a COO tensor strictly increase. */
static int check_coalesced(const Validator *v, const HurrayTensorDesc *t) {
  IndexView view;
  if (!index_view(v, &t->parts[0], &view)) return HURRAY_OK;
  int64_t row = view.strides[0], column = view.strides[1];
  for (int64_t j = 1; j < t->parts[0].shape[1]; j++) {
    int64_t order = 0;
    for (int32_t d = 0; d < t->ndim && order == 0; d++) {
      int64_t a = index_at(&view, d * row + (j - 1) * column),
              b = index_at(&view, d * row + j * column);
      order = (a > b) - (a < b);
    }
    if (order >= 0) {
      return in_part(
          v->error, t, 0,
          hurray__fail(v->error, HURRAY_ELAYOUT,
                       "HURRAY_TENSOR_COALESCED is set but index column %" PRId64
                       " does not follow column %" PRId64 " in strictly increasing order",
                       j, j - 1));
    }
  }
  return HURRAY_OK;
}

/* CSR indptr: starts at 0, never decreases, ends at nnz. */
static int check_indptr(const Validator *v, const HurrayTensorDesc *t) {
  IndexView view;
  if (!index_view(v, &t->parts[0], &view)) return HURRAY_OK;
  int64_t rows = t->shape[0], step = view.strides[0], nnz = t->parts[1].shape[0];
  int64_t first = index_at(&view, 0), last = index_at(&view, rows * step);
  int status = HURRAY_OK;
  if (first != 0) {
    status = hurray__fail(v->error, HURRAY_ELAYOUT, "indptr[0] is %" PRId64 ", expected 0", first);
  } else if (last != nnz) {
    status = hurray__fail(v->error, HURRAY_ELAYOUT,
                          "indptr[%" PRId64 "] is %" PRId64 ", expected nnz = %" PRId64, rows, last,
                          nnz);
  }
  /* with stride 0 every entry is the same, so the sequence is monotone */
  for (int64_t i = 1; status == HURRAY_OK && step != 0 && i <= rows; i++) {
    int64_t previous = index_at(&view, (i - 1) * step), current = index_at(&view, i * step);
    if (current < previous) {
      status = hurray__fail(v->error, HURRAY_ELAYOUT,
                            "indptr decreases: indptr[%" PRId64 "] = %" PRId64 " < indptr[%" PRId64
                            "] = %" PRId64,
                            i, current, i - 1, previous);
    }
  }
  return status == HURRAY_OK ? status : in_part(v->error, t, 0, status);
}

static int validate_contents(const Validator *v, const HurrayTensorDesc *t) {
  int status = HURRAY_OK;
  switch (t->layout) {
    case HURRAY_LAYOUT_SPARSE_COO:
      status = check_index_range(v, t, 0, t->shape, true);
      if (status == HURRAY_OK && (t->flags & HURRAY_TENSOR_COALESCED))
        status = check_coalesced(v, t);
      return status;
    case HURRAY_LAYOUT_SPARSE_CSR:
      status = check_indptr(v, t);
      return status != HURRAY_OK ? status : check_index_range(v, t, 1, &t->shape[1], false);
    case HURRAY_LAYOUT_PAGED:
      return check_index_range(v, t, 1, &t->parts[0].shape[0], false);
    default:
      return status;
  }
}

/* ---- composite tensors --------------------------------------------------------------------- */

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. */
/* A child name: non-NULL, 1..HURRAY_MAX_NAME bytes. */
static int check_name(const char *name, uint32_t index, size_t *length, HurrayError *error) {
  if (name == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "child_names[%" PRIu32 "] is NULL", index);
  }
  *length = strnlen(name, HURRAY_MAX_NAME + 1);
  if (*length == 0) {
    return hurray__fail(error, HURRAY_ELAYOUT, "child_names[%" PRIu32 "] is empty", index);
  }
  if (*length > HURRAY_MAX_NAME) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "child_names[%" PRIu32 "] is longer than HURRAY_MAX_NAME (%d) bytes", index,
                        HURRAY_MAX_NAME);
  }
  return HURRAY_OK;
}

static int check_children_fields(const HurrayTensorDesc *t, HurrayError *error) {
  if (t->nchildren > HURRAY_MAX_CHILDREN) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "%" PRIu32 " children exceed HURRAY_MAX_CHILDREN (%u)", t->nchildren,
                        HURRAY_MAX_CHILDREN);
  }
  if (t->nchildren > 0 && (t->children == NULL || t->child_names == NULL)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "children or child_names is NULL but nchildren is %" PRIu32, t->nchildren);
  }
  return HURRAY_OK;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names valid and unique (sorted copy, O(n log n)). */
static int check_child_names(const HurrayTensorDesc *t, HurrayError *error) {
  const char **sorted = malloc((size_t)t->nchildren * sizeof *sorted);
  if (sorted == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "cannot sort %" PRIu32 " child names", t->nchildren);
  }
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < t->nchildren && status == HURRAY_OK; i++) {
    size_t length = 0;
    status = check_name(t->child_names[i], i, &length, error);
    if (status == HURRAY_OK && !hurray__utf8_valid((const uint8_t *)t->child_names[i], length)) {
      status =
          hurray__fail(error, HURRAY_ELAYOUT, "child_names[%" PRIu32 "] is not valid UTF-8", i);
    }
    sorted[i] = t->child_names[i];
  }
  if (status == HURRAY_OK) {
    qsort(sorted, t->nchildren, sizeof *sorted, compare_names);
    for (uint32_t i = 1; i < t->nchildren && status == HURRAY_OK; i++) {
      if (strcmp(sorted[i - 1], sorted[i]) == 0) {
        status = hurray__fail(error, HURRAY_ELAYOUT, "child name \"%s\" is not unique", sorted[i]);
      }
    }
  }
  free(sorted);
  return status;
}

static int validate_tensor(Validator *v, const HurrayTensorDesc *t);

static int validate_children(Validator *v, const HurrayTensorDesc *t) {
  if (t->nchildren == 0) {
    return hurray__fail(v->error, HURRAY_ELAYOUT, "a composite tensor needs at least one child");
  }
  int status = check_children_fields(t, v->error);
  if (status == HURRAY_OK) status = check_child_names(t, v->error);
  for (uint32_t i = 0; i < t->nchildren && status == HURRAY_OK; i++) {
    v->path[v->depth++] = t->child_names[i];
    status = validate_tensor(v, &t->children[i]);
    if (status == HURRAY_OK) v->depth--; /* on failure the path stays, for the message */
  }
  return status;
}

/* ---- one tensor ---------------------------------------------------------------------------- */

/* flags, rank and dtype against the layout's rule. */
static int check_kind(const HurrayTensorDesc *t, const HurrayLayoutInfo *rule, HurrayError *error) {
  const char *layout = rule->name;
  if (t->flags & ~HURRAY_TENSOR_COALESCED) {
    return hurray__fail(error, HURRAY_EINVAL, "tensor flags 0x%" PRIX32 " include unknown bits",
                        t->flags);
  }
  if ((t->flags & HURRAY_TENSOR_COALESCED) && t->layout != HURRAY_LAYOUT_SPARSE_COO) {
    return hurray__fail(error, HURRAY_ELAYOUT,
                        "HURRAY_TENSOR_COALESCED is set on a %s tensor; only sparse_coo has it",
                        layout);
  }
  int status = check_shape(t->ndim, t->shape, error);
  if (status != HURRAY_OK) return status;
  if (t->ndim < rule->min_ndim || t->ndim > rule->max_ndim) {
    if (rule->min_ndim == rule->max_ndim) {
      return hurray__fail(error, HURRAY_ELAYOUT, "a %s tensor has ndim %" PRId32 ", not %" PRId32,
                          layout, rule->min_ndim, t->ndim);
    }
    return hurray__fail(error, HURRAY_ELAYOUT,
                        "a %s tensor needs ndim >= %" PRId32 ", not %" PRId32, layout,
                        rule->min_ndim, t->ndim);
  }
  if (t->layout == HURRAY_LAYOUT_COMPOSITE) {
    if (t->dtype == HURRAY_DTYPE_INVALID) return HURRAY_OK;
    return hurray__fail(error, HURRAY_ELAYOUT, "a composite tensor has dtype 0 (invalid), not %u",
                        t->dtype);
  }
  const HurrayDTypeInfo *info = NULL;
  return check_dtype(t->dtype, &info, error);
}

/* axis, block_size, nparts and nchildren against the layout's rule. */
static int check_params(const HurrayTensorDesc *t, const HurrayLayoutInfo *rule,
                        HurrayError *error) {
  const char *layout = rule->name;
  bool has_axis = rule->flags & HURRAY_LAYOUT_HAS_AXIS;
  bool has_block = rule->flags & HURRAY_LAYOUT_HAS_BLOCK_SIZE;
  if (has_axis && (t->axis < 0 || t->axis >= t->ndim)) {
    return hurray__fail(error, HURRAY_ELAYOUT, "axis %" PRId32 " is outside [0, %" PRId32 ")",
                        t->axis, t->ndim);
  }
  if (!has_axis && t->axis != 0) {
    return hurray__fail(error, HURRAY_ELAYOUT, "axis is %" PRId32 " but a %s tensor has none",
                        t->axis, layout);
  }
  if (has_block && (t->block_size < 1 || t->block_size > HURRAY_MAX_DIM)) {
    return hurray__fail(error, HURRAY_ELAYOUT, "block_size %" PRId64 " is outside [1, 2^62]",
                        t->block_size);
  }
  if (!has_block && t->block_size != 0) {
    return hurray__fail(error, HURRAY_ELAYOUT,
                        "block_size is %" PRId64 " but a %s tensor has no blocks", t->block_size,
                        layout);
  }
  if (t->nparts < rule->min_parts || t->nparts > rule->max_parts) {
    if (rule->min_parts == rule->max_parts) {
      return hurray__fail(error, HURRAY_ELAYOUT, "a %s tensor has %" PRIu32 " parts, not %" PRIu32,
                          layout, rule->min_parts, t->nparts);
    }
    return hurray__fail(error, HURRAY_ELAYOUT,
                        "a %s tensor has %" PRIu32 " or %" PRIu32 " parts, not %" PRIu32, layout,
                        rule->min_parts, rule->max_parts, t->nparts);
  }
  if (t->nparts > 0 && t->parts == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "parts is NULL but nparts is %" PRIu32, t->nparts);
  }
  if (t->layout != HURRAY_LAYOUT_COMPOSITE && t->nchildren != 0) {
    return hurray__fail(error, HURRAY_ELAYOUT, "a %s tensor has no children, not %" PRIu32, layout,
                        t->nchildren);
  }
  return HURRAY_OK;
}

/* Depth and node count bound the work on any descriptor tree, including one whose children
 * arrays are shared between parents (a DAG that would otherwise expand exponentially). */
static int check_tree_limits(int depth, uint32_t *nodes, HurrayError *error) {
  if (depth > HURRAY_MAX_DEPTH) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "composite tensors nest deeper than HURRAY_MAX_DEPTH (%d)",
                        HURRAY_MAX_DEPTH);
  }
  if (++*nodes > HURRAY_MAX_NODES) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "the descriptor tree has more than HURRAY_MAX_NODES (%u) tensors",
                        HURRAY_MAX_NODES);
  }
  return HURRAY_OK;
}

static int validate_tensor(Validator *v, const HurrayTensorDesc *t) {
  int limits = check_tree_limits(v->depth, &v->nodes, v->error);
  if (limits != HURRAY_OK) return limits;
  if (!hurray__all_zero(t->reserved0, sizeof t->reserved0) || t->reserved1 != 0 ||
      !hurray__all_zero(t->reserved2, sizeof t->reserved2)) {
    return hurray__fail(v->error, HURRAY_EINVAL, "reserved fields of the tensor are not zero");
  }
  if (t->layout >= LAYOUT_COUNT) {
    return hurray__fail(v->error, HURRAY_ELAYOUT, "layout %" PRIu32 " is unknown", t->layout);
  }
  const HurrayLayoutInfo *rule = &kLayouts[t->layout];
  int status = check_kind(t, rule, v->error);
  if (status == HURRAY_OK) status = check_params(t, rule, v->error);
  if (status != HURRAY_OK) return status;
  if (t->layout == HURRAY_LAYOUT_COMPOSITE) return validate_children(v, t);
  status = validate_parts(v, t);
  if (status == HURRAY_OK) status = check_block(v, t);
  if (status != HURRAY_OK || !(v->flags & HURRAY_VALIDATE_CONTENTS)) return status;
  return validate_contents(v, t);
}

/* Appends " (in child "c" of "b" of "a")" to the message of a failure inside a child. */
static int in_child(const Validator *v, int status) {
  if (v->error == NULL || v->depth == 0) return status;
  char message[HURRAY_ERROR_MESSAGE_SIZE];
  Text text = {message, sizeof message, 0};
  text_append(&text, "%s (in child \"%s\"", v->error->message, v->path[v->depth - 1]);
  for (int d = v->depth - 2; d >= 0; d--) text_append(&text, " of \"%s\"", v->path[d]);
  text_append(&text, ")");
  return hurray__fail(v->error, status, "%s", message);
}

int hurray_tensor_validate(const HurrayTensorDesc *tensor, const HurrayBufferList *buffers,
                           uint32_t flags, HurrayError *error) {
  if (tensor == NULL || buffers == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_tensor_validate: %s is NULL",
                        tensor == NULL ? "tensor" : "buffers");
  }
  if (flags & ~HURRAY_VALIDATE_CONTENTS) {
    return hurray__fail(error, HURRAY_EINVAL, "validate flags 0x%" PRIX32 " include unknown bits",
                        flags);
  }
  if (buffers->count > 0 && buffers->buffers == NULL) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "the buffer list has %" PRIu32 " buffers but no array", buffers->count);
  }
  /* Not `= {...}`: that would clear `path` on every call, the largest cost of validating a
   * small tensor; an entry of `path` is written before it is read. */
  Validator v;
  v.buffers = buffers;
  v.flags = flags;
  v.error = error;
  v.depth = 0;
  v.nodes = 0;
  return in_child(&v, validate_tensor(&v, tensor));
}

/* ---- deep copy ----------------------------------------------------------------------------- */

/* The copy is one block: the root descriptor and every array of fixed-size items (descriptors,
 * parts, extents, name pointers), each rounded up to CLONE_ALIGN, then the name bytes. */
#define CLONE_ALIGN _Alignof(max_align_t)

typedef struct CloneSize {
  uint64_t fixed;
  uint64_t text;
  uint32_t nodes;
} CloneSize;

static bool add_items(uint64_t *total, uint64_t count, uint64_t size) {
  uint64_t bytes = 0;
  if (hurray__mul_u64(count, size, &bytes) || hurray__add_u64(bytes, CLONE_ALIGN - 1, &bytes)) {
    return true;
  }
  return hurray__add_u64(*total, bytes - bytes % CLONE_ALIGN, total);
}

static int clone_overflow(HurrayError *error) {
  return hurray__fail(error, HURRAY_EOVERFLOW, "the copy's size overflows");
}

/* Checks the structure the copy relies on (counts, limits, non-NULL arrays) and adds up sizes. */
static int measure(const HurrayTensorDesc *t, int depth, CloneSize *size, HurrayError *error) {
  int status = check_tree_limits(depth, &size->nodes, error);
  if (status == HURRAY_OK) status = check_shape(t->ndim, t->shape, error);
  if (status == HURRAY_OK && t->nparts > HURRAY_MAX_PARTS) {
    status = hurray__fail(error, HURRAY_ELIMIT, "%" PRIu32 " parts exceed HURRAY_MAX_PARTS (%d)",
                          t->nparts, HURRAY_MAX_PARTS);
  }
  if (status == HURRAY_OK && t->nparts > 0 && t->parts == NULL) {
    status = hurray__fail(error, HURRAY_EINVAL, "parts is NULL but nparts is %" PRIu32, t->nparts);
  }
  if (status == HURRAY_OK) status = check_children_fields(t, error);
  if (status != HURRAY_OK) return status;
  if (add_items(&size->fixed, (uint64_t)t->ndim, sizeof(int64_t)) ||
      add_items(&size->fixed, t->nparts, sizeof(HurrayArray)) ||
      add_items(&size->fixed, t->nchildren, sizeof(HurrayTensorDesc)) ||
      add_items(&size->fixed, t->nchildren, sizeof(const char *))) {
    return clone_overflow(error);
  }
  for (uint32_t i = 0; i < t->nparts; i++) {
    const HurrayArray *part = &t->parts[i];
    status = check_shape(part->ndim, part->shape, error);
    if (status != HURRAY_OK) return in_part(error, t, i, status);
    if (add_items(&size->fixed, (uint64_t)part->ndim, sizeof(int64_t)) ||
        (part->strides != NULL && add_items(&size->fixed, (uint64_t)part->ndim, sizeof(int64_t)))) {
      return clone_overflow(error);
    }
  }
  for (uint32_t i = 0; i < t->nchildren; i++) {
    size_t length = 0;
    status = check_name(t->child_names[i], i, &length, error);
    if (status == HURRAY_OK && hurray__add_u64(size->text, length + 1, &size->text)) {
      status = clone_overflow(error);
    }
    if (status == HURRAY_OK) status = measure(&t->children[i], depth + 1, size, error);
    if (status != HURRAY_OK) return status;
  }
  return HURRAY_OK;
}

/* Bump allocation in the measured block: fixed items from `fixed`, name bytes from `text`. */
typedef struct Arena {
  uint8_t *fixed;
  char *text;
} Arena;

static void *arena_take(Arena *arena, size_t count, size_t size) {
  if (count == 0) return NULL;
  void *items = arena->fixed;
  size_t bytes = count * size;
  arena->fixed += bytes + (CLONE_ALIGN - bytes % CLONE_ALIGN) % CLONE_ALIGN;
  return items;
}

static const int64_t *copy_dims(Arena *arena, const int64_t *dims, int32_t ndim) {
  if (dims == NULL) return NULL;
  int64_t *copy = arena_take(arena, (size_t)ndim, sizeof *copy);
  if (copy != NULL) memcpy(copy, dims, (size_t)ndim * sizeof *copy);
  return copy;
}

/* Fills `dst` from a measured `src`; no pointer of the copy points into the original. */
static void copy_tensor(Arena *arena, HurrayTensorDesc *dst, const HurrayTensorDesc *src) {
  const uint32_t nparts = src->nparts, nchildren = src->nchildren;
  *dst = *src;
  dst->shape = copy_dims(arena, src->shape, src->ndim);
  HurrayArray *parts = arena_take(arena, nparts, sizeof *parts);
  for (uint32_t i = 0; i < nparts; i++) {
    parts[i] = src->parts[i];
    parts[i].shape = copy_dims(arena, src->parts[i].shape, src->parts[i].ndim);
    parts[i].strides = copy_dims(arena, src->parts[i].strides, src->parts[i].ndim);
  }
  dst->parts = parts;
  HurrayTensorDesc *children = arena_take(arena, nchildren, sizeof *children);
  const char **names = arena_take(arena, nchildren, sizeof *names);
  for (uint32_t i = 0; i < nchildren; i++) {
    size_t bytes = strlen(src->child_names[i]) + 1;
    names[i] = memcpy(arena->text, src->child_names[i], bytes);
    arena->text += bytes;
    copy_tensor(arena, &children[i], &src->children[i]);
  }
  dst->children = children;
  dst->child_names = names;
}

int hurray__tensor_desc_clone_after(const HurrayTensorDesc *tensor, size_t prefix, void **block,
                                    HurrayTensorDesc **out, HurrayError *error) {
  *block = NULL;
  *out = NULL;
  CloneSize size = {0, 0, 0};
  uint64_t total = 0;
  if (add_items(&size.fixed, 1, prefix) || /* the caller's bytes, aligned as the items are */
      add_items(&size.fixed, 1, sizeof(HurrayTensorDesc))) { /* the root */
    return clone_overflow(error);
  }
  int status = measure(tensor, 0, &size, error);
  if (status != HURRAY_OK) return status;
  if (hurray__add_u64(size.fixed, size.text, &total) || total > SIZE_MAX) {
    return clone_overflow(error);
  }
  uint8_t *memory = malloc((size_t)total);
  if (memory == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "cannot allocate %" PRIu64 " bytes for the copy",
                        total);
  }
  Arena arena = {memory, (char *)memory + size.fixed};
  (void)arena_take(&arena, 1, prefix);
  HurrayTensorDesc *root = arena_take(&arena, 1, sizeof *root);
  copy_tensor(&arena, root, tensor);
  *block = memory;
  *out = root;
  return HURRAY_OK;
}

int hurray_tensor_desc_clone(const HurrayTensorDesc *tensor, HurrayTensorDesc **out,
                             HurrayError *error) {
  if (tensor == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_tensor_desc_clone: %s is NULL",
                        tensor == NULL ? "tensor" : "out");
  }
  void *block = NULL; /* the root is the block: hurray_tensor_desc_destroy frees it */
  return hurray__tensor_desc_clone_after(tensor, 0, &block, out, error);
}

void hurray_tensor_desc_destroy(HurrayTensorDesc *tensor) {
  free(tensor);
}
