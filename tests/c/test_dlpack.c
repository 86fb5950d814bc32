/* test_dlpack.c -- DLPack in C (ADR-083): hurray_tensor_to_dlpack and
 * hurray_tensor_from_dlpack (and their legacy twins) round-trip every dtype DLPack carries and
 * every device of the mapping table (docs/spec/buffer-protocol.md, "DLPack mapping"), with
 * strides, byte offsets and read-only; they refuse what DLPack cannot carry with the Python
 * binding's messages; the deleter runs exactly once, ownership moves on success only, and
 * hostile managed tensors are refused with the deleter untouched -- a tensor of another major
 * version is read no further than its version (the bytes after it lie on an inaccessible
 * page). Device memory is not real here: on other devices the address or handle is carried,
 * never dereferenced. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define HAVE_MPROTECT 1
#endif

#include <cmocka.h>

#include "hurray/hurray.h"

/* ---- producers of contexts whose releases count ------------------------------------------- */

typedef struct Counts {
  int buffer; /* the buffer's release */
  int owner;  /* the context's owner release */
} Counts;

static void count_buffer(HurrayBuffer *self) {
  ((Counts *)self->release_ctx)->buffer++;
}

static void count_owner(void *owner) {
  ((Counts *)owner)->owner++;
}

/* What a context is made of: one buffer (data, device, sync) and one dense array. */
typedef struct Spec {
  void *data; /* CPU memory, or an address / handle never dereferenced */
  uint64_t byte_size;
  uint8_t tag, memory_class, sync_mode;
  void *sync_handle;
  uint16_t device_id, peer_device_id;
  uint8_t dtype;
  int32_t ndim;
  const int64_t *shape;
  const int64_t *strides;
  uint64_t byte_offset;
  uint32_t flags; /* HURRAY_BUFFER_READ_ONLY */
} Spec;

static HurrayTensorContext *make_context(const Spec *spec, Counts *counts) {
  const HurrayBufferDesc desc = {.byte_size = spec->byte_size,
                                 .alignment = 64,
                                 .device_id = spec->device_id,
                                 .peer_device_id = spec->peer_device_id,
                                 .device_tag = spec->tag,
                                 .memory_class = spec->memory_class,
                                 .sync_mode = spec->sync_mode};
  HurrayError error = {0};
  HurrayBuffer *buffer = NULL;
  int status = hurray_buffer_wrap(spec->data, &desc, spec->flags, spec->sync_handle, 0,
                                  count_buffer, counts, &buffer, &error);
  if (status != HURRAY_OK) fail_msg("wrap: %s", error.message);
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(1, &list, NULL), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, NULL),
                   HURRAY_OK);
  const HurrayArray array = {.byte_offset = spec->byte_offset,
                             .shape = spec->shape,
                             .strides = spec->strides,
                             .ndim = spec->ndim,
                             .dtype = spec->dtype};
  const HurrayTensorDesc tensor = {.layout = HURRAY_LAYOUT_DENSE,
                                   .ndim = spec->ndim,
                                   .shape = spec->shape,
                                   .parts = &array,
                                   .nparts = 1,
                                   .dtype = spec->dtype};
  HurrayTensorContext *context = NULL;
  status = hurray_tensor_context_create(&tensor, list, spec->flags, counts, count_owner, &context,
                                        &error);
  if (status != HURRAY_OK) fail_msg("create: %s", error.message);
  return context;
}

/* A 64-byte aligned CPU block of `n` bytes holding 0, 1, 2, ... */
static uint8_t *pattern(size_t n) {
  uint8_t *p = aligned_alloc(64, (n + 63) / 64 * 64);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 7 + 1);
  return p;
}

/* ---- a DLPack producer's managed tensor, with a counting deleter -------------------------- */

static int g_deleted;

static void count_deleter(HurrayDLManagedTensorVersioned *self) {
  assert_non_null(self);
  g_deleted++;
}

static void count_legacy_deleter(HurrayDLManagedTensor *self) {
  assert_non_null(self);
  g_deleted++;
}

/* A versioned managed tensor (1.1) over `data`, with g_deleted reset. */
static HurrayDLManagedTensorVersioned managed_over(void *data, int32_t ndim, int64_t *shape,
                                                   int64_t *strides) {
  g_deleted = 0;
  HurrayDLManagedTensorVersioned m = {
      .version = {1, 1},
      .deleter = count_deleter,
      .dl_tensor = {.data = data,
                    .device = {HURRAY_DLPACK_CPU, 0},
                    .ndim = ndim,
                    .dtype = {2 /* kDLFloat */, 32, 1},
                    .shape = shape,
                    .strides = strides}};
  return m;
}

/* from_dlpack fails with `status` and a message containing `text`, the deleter untouched. */
static void refused(HurrayDLManagedTensorVersioned *m, int status, const char *text) {
  HurrayError error = {0};
  HurrayTensorContext *context = (HurrayTensorContext *)m; /* must become NULL */
  assert_int_equal(hurray_tensor_from_dlpack(m, 0, &context, &error), status);
  assert_int_equal(error.code, status);
  assert_null(context);
  if (strstr(error.message, text) == NULL) fail_msg("'%s' lacks '%s'", error.message, text);
  assert_int_equal(g_deleted, 0);
}

/* ---- every dtype ------------------------------------------------------------------------- */

/* C -> DLPack -> C for each dtype of the table, versioned and legacy: the DLPack dtype is the
 * table's, the memory the same bytes, and every release runs once; the dtypes DLPack cannot
 * carry are refused with the context left to the caller. */
static void every_dtype_round_trips(void **state) {
  (void)state;
  int carried = 0, refusals = 0;
  for (size_t i = 0; i < hurray_dtype_count(); i++) {
    const HurrayDTypeInfo *info = hurray_dtype_at(i);
    for (int legacy = 0; legacy < 2; legacy++) {
      uint32_t elements = 0, block = 0; /* a block dtype's row is whole blocks */
      int64_t shape[1] = {hurray_dtype_block(info->code, &elements, &block, NULL) == HURRAY_OK
                              ? (int64_t)block
                              : 8};
      uint8_t *data = pattern(512);
      Counts counts = {0, 0};
      Spec spec = {.data = data,
                   .byte_size = 512,
                   .dtype = info->code,
                   .ndim = 1,
                   .shape = shape};
      HurrayTensorContext *context = make_context(&spec, &counts);
      HurrayError error = {0};
      HurrayDLManagedTensorVersioned *versioned = NULL;
      HurrayDLManagedTensor *old = NULL;
      int status = legacy ? hurray_tensor_to_dlpack_legacy(context, 0, &old, &error)
                          : hurray_tensor_to_dlpack(context, 0, &versioned, &error);
      if (info->dlpack_lanes == 0) {
        assert_int_equal(status, HURRAY_EUNSUPPORTED);
        assert_null(versioned);
        assert_null(old);
        char want[128];
        if (info->kind == HURRAY_KIND_BLOCK) {
          snprintf(want, sizeof want,
                   "%s has no DLPack dtype (DLPack has no code for GGML blocks): dequantise it "
                   "first",
                   info->name);
        } else {
          snprintf(want, sizeof want,
                   "%s has no DLPack dtype (DLPack has no code for packed %d-bit integers)",
                   info->name, (int)info->bits);
        }
        assert_string_equal(error.message, want);
        assert_int_equal(counts.buffer + counts.owner, 0); /* still the caller's */
        hurray_tensor_context_release(context);
        assert_int_equal(counts.buffer, 1);
        assert_int_equal(counts.owner, 1);
        free(data);
        refusals++;
        continue;
      }
      if (status != HURRAY_OK) fail_msg("%s: %s", info->name, error.message);
      HurrayDLTensor *dl = legacy ? &old->dl_tensor : &versioned->dl_tensor;
      if (!legacy) {
        assert_int_equal(versioned->version.major, 1);
        assert_int_equal(versioned->version.minor, HURRAY_DLPACK_MINOR_VERSION);
        assert_true(versioned->flags == 0);
      }
      assert_int_equal(dl->dtype.code, info->dlpack_code);
      assert_int_equal(dl->dtype.bits, info->dlpack_bits);
      assert_int_equal(dl->dtype.lanes, 1);
      assert_int_equal(dl->device.device_type, HURRAY_DLPACK_CPU);
      assert_int_equal(dl->device.device_id, 0);
      assert_int_equal(dl->ndim, 1);
      assert_int_equal(dl->shape[0], 8);
      assert_int_equal(dl->strides[0], 1);
      assert_ptr_equal(dl->data, data);
      assert_true(dl->byte_offset == 0);

      HurrayTensorContext *back = NULL;
      status = legacy ? hurray_tensor_from_dlpack_legacy(old, 0, &back, &error)
                      : hurray_tensor_from_dlpack(versioned, 0, &back, &error);
      if (status != HURRAY_OK) fail_msg("%s back: %s", info->name, error.message);
      assert_int_equal(hurray_tensor_context_check(back, 0, NULL), HURRAY_OK);
      assert_int_equal(back->tensor->dtype, info->code);
      assert_int_equal(back->tensor->layout, HURRAY_LAYOUT_DENSE);
      assert_int_equal(back->tensor->ndim, 1);
      assert_int_equal(back->tensor->shape[0], 8);
      assert_true((back->flags & HURRAY_BUFFER_READ_ONLY) == 0);
      assert_ptr_equal(hurray_tensor_context_data(back, 0), data);
      assert_int_equal(back->buffers->buffers[0]->desc.device_tag, HURRAY_DEVICE_CPU);
      assert_int_equal(back->buffers->buffers[0]->desc.sync_mode, HURRAY_SYNC_READY);
      assert_int_equal(counts.buffer + counts.owner, 0);
      hurray_tensor_context_release(back); /* the deleter: the first context's release */
      assert_int_equal(counts.buffer, 1);
      assert_int_equal(counts.owner, 1);
      free(data);
      carried++;
    }
  }
  assert_int_equal(carried, 2 * 27); /* Tier 1 and Tier 2 */
  assert_int_equal(refusals, 2 * 16); /* Tier 3: the packed integers and the GGML blocks */
}

/* ---- every device of the mapping table --------------------------------------------------- */

/* Every (tag, memory class) of the named devices, exported over a fake address or handle and
 * imported back: the DLPack device type is the table's (hurray_device_to_dlpack), the device
 * id and the address or handle are carried, and the import lands on the table's inverse;
 * (tag, class) pairs without a DLPack form are refused with the table's reason. */
static void every_device_mapping_round_trips(void **state) {
  (void)state;
  int mapped = 0, unmapped = 0;
  for (int tag = HURRAY_DEVICE_CPU; tag <= HURRAY_DEVICE_LAST_NAMED; tag++) {
    for (int mc = HURRAY_MEM_DEVICE; mc <= HURRAY_MEM_PEER; mc++) {
      /* Only combinations the device has (buffer-protocol.md §2.6) make a buffer at all. */
      if (hurray_device_supports(tag, mc, HURRAY_SYNC_READY, NULL) != HURRAY_OK) continue;
      int handle = tag == HURRAY_DEVICE_METAL || tag == HURRAY_DEVICE_WEBGPU ||
                   tag == HURRAY_DEVICE_OPENCL;
      uint8_t *cpu = tag == HURRAY_DEVICE_CPU ? pattern(4096) : NULL;
      void *data = cpu != NULL ? (void *)cpu
                   : handle    ? (void *)(uintptr_t)0x1234 /* a buffer object */
                               : (void *)(uintptr_t)0x7f0000000000u;
      int64_t shape[2] = {3, 4};
      int64_t strides[2] = {8, 1}; /* a slice of a 3 x 8 float32 array */
      uint16_t device_id = tag == HURRAY_DEVICE_CPU ? 0 : 3;
      Counts counts = {0, 0};
      Spec spec = {.data = data,
                   .byte_size = 4096,
                   .tag = (uint8_t)tag,
                   .memory_class = (uint8_t)mc,
                   .device_id = device_id,
                   .peer_device_id = mc == HURRAY_MEM_PEER ? 1 : 0,
                   .dtype = HURRAY_DTYPE_FLOAT32,
                   .ndim = 2,
                   .shape = shape,
                   .strides = strides,
                   .byte_offset = 128};
      HurrayTensorContext *context = make_context(&spec, &counts);
      int32_t dl_type = 0;
      HurrayError expected = {0};
      int mapping = hurray_device_to_dlpack(tag, mc, &dl_type, &expected);
      HurrayError error = {0};
      HurrayDLManagedTensorVersioned *m = NULL;
      int status = hurray_tensor_to_dlpack(context, 0, &m, &error);
      if (mapping != HURRAY_OK) {
        assert_int_equal(status, mapping);
        assert_string_equal(error.message, expected.message);
        assert_null(m);
        hurray_tensor_context_release(context);
        assert_int_equal(counts.buffer, 1);
        assert_int_equal(counts.owner, 1);
        unmapped++;
        continue;
      }
      if (status != HURRAY_OK) fail_msg("tag %d class %d: %s", tag, mc, error.message);
      const HurrayDLTensor *dl = &m->dl_tensor;
      assert_int_equal(dl->device.device_type, dl_type);
      assert_int_equal(dl->device.device_id, device_id);
      if (handle) {
        assert_ptr_equal(dl->data, data); /* the handle stays; the offset says where */
        assert_true(dl->byte_offset == 128);
      } else {
        assert_ptr_equal(dl->data, (uint8_t *)data + 128); /* folded into the address */
        assert_true(dl->byte_offset == 0);
      }
      assert_int_equal(dl->strides[0], 8);
      assert_int_equal(dl->strides[1], 1);

      HurrayTensorContext *back = NULL;
      status = hurray_tensor_from_dlpack(m, 0, &back, &error);
      if (status != HURRAY_OK) fail_msg("tag %d class %d back: %s", tag, mc, error.message);
      assert_int_equal(hurray_tensor_context_check(back, 0, NULL), HURRAY_OK);
      const HurrayBuffer *buffer = back->buffers->buffers[0];
      uint8_t want_tag = 0, want_class = 0;
      assert_int_equal(hurray_device_from_dlpack(dl_type, &want_tag, &want_class, NULL),
                       HURRAY_OK);
      assert_int_equal(buffer->desc.device_tag, want_tag);
      assert_int_equal(buffer->desc.memory_class, want_class);
      assert_int_equal(want_tag, tag);
      if (tag == HURRAY_DEVICE_CUDA || tag == HURRAY_DEVICE_ROCM) {
        assert_int_equal(want_class, mc); /* a DLPack type per memory class */
        assert_int_equal(buffer->desc.sync_mode, HURRAY_SYNC_STREAM);
        assert_ptr_equal(buffer->sync_handle, (void *)(uintptr_t)1); /* the default stream */
      } else {
        assert_int_equal(want_class, HURRAY_MEM_DEVICE); /* one DLPack type for all */
        assert_int_equal(buffer->desc.sync_mode, HURRAY_SYNC_READY);
      }
      assert_int_equal(buffer->desc.device_id, device_id);
      const HurrayArray *part = &back->tensor->parts[0];
      assert_int_equal(part->strides[0], 8);
      assert_int_equal(part->strides[1], 1);
      if (handle) {
        assert_ptr_equal(buffer->data, data);
        assert_true(part->byte_offset == 128);
      } else {
        assert_true((uintptr_t)buffer->data + part->byte_offset == (uintptr_t)data + 128);
      }
      /* What came back goes out again (CUDA and ROCm now on the default stream). */
      HurrayDLManagedTensorVersioned *again = NULL;
      status = hurray_tensor_to_dlpack(back, 0, &again, &error);
      if (status != HURRAY_OK) fail_msg("tag %d class %d again: %s", tag, mc, error.message);
      assert_int_equal(again->dl_tensor.device.device_type, dl_type);
      assert_int_equal(counts.buffer + counts.owner, 0);
      again->deleter(again); /* releases `back`, which calls the first deleter */
      assert_int_equal(counts.buffer, 1);
      assert_int_equal(counts.owner, 1);
      free(cpu);
      mapped++;
    }
  }
  /* CPU; CUDA 3 classes; ROCm 2; Metal 3; Vulkan 2 (no unified); WebGPU and Hexagon device
   * only; Level Zero 3; OpenCL 3 (no peer) */
  assert_int_equal(mapped, 1 + 3 + 2 + 3 + 2 + 1 + 1 + 3 + 3);
  /* CUDA peer; ROCm unified and peer; the peers of Metal, Vulkan and Level Zero */
  assert_int_equal(unmapped, 1 + 2 + 3);
}

/* The DLPack device types Hurray does not name are refused on import, the deleter untouched,
 * and a private tag (registered) is refused on export. */
static void devices_without_a_mapping(void **state) {
  (void)state;
  static const struct {
    int32_t type;
    const char *name;
  } unnamed[] = {{9, "kDLVPI"}, {12, "kDLExtDev"}, {17, "kDLMAIA"}, {18, "kDLTrn"},
                 {0, ""},      {99, ""},          {-1, ""}};
  float x[4] = {0};
  int64_t shape[1] = {4};
  for (size_t i = 0; i < sizeof unnamed / sizeof unnamed[0]; i++) {
    HurrayDLManagedTensorVersioned m = managed_over(x, 1, shape, NULL);
    m.dl_tensor.device.device_type = unnamed[i].type;
    refused(&m, HURRAY_EUNSUPPORTED, unnamed[i].name);
  }
  assert_int_equal(hurray_device_register_private(0xF3, "test_dlpack", NULL), HURRAY_OK);
  Counts counts = {0, 0};
  Spec spec = {.data = (void *)(uintptr_t)0x10000,
               .byte_size = 64,
               .tag = 0xF3,
               .dtype = HURRAY_DTYPE_FLOAT32,
               .ndim = 1,
               .shape = shape};
  HurrayTensorContext *context = make_context(&spec, &counts);
  HurrayError error = {0};
  HurrayDLManagedTensorVersioned *out = NULL;
  assert_int_equal(hurray_tensor_to_dlpack(context, 0, &out, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message,
                      "device tag 0xF3 is implementation-private; DLPack has no form for it");
  assert_null(out);
  hurray_tensor_context_release(context);
  assert_int_equal(counts.buffer, 1);
  assert_int_equal(hurray_device_unregister_private(0xF3, NULL), HURRAY_OK);
}

/* ---- strides, offsets, read-only ---------------------------------------------------------- */

/* A transposed view at a byte offset and a reversed one (negative strides): DLPack gets the
 * address of element 0 and the strides as they are; the import re-bases on the lowest byte
 * and finds element 0 where it was. */
static void strides_and_byte_offset(void **state) {
  (void)state;
  int32_t *values = aligned_alloc(64, 256);
  assert_non_null(values);
  for (int i = 0; i < 64; i++) values[i] = i;
  static const struct {
    int32_t ndim;
    int64_t shape[2], strides[2];
    uint64_t byte_offset;
    int32_t first, last; /* elements (0, 0) and (n-1, m-1) */
  } views[] = {
      {2, {5, 4}, {1, 5}, 8, 2, 2 + 4 + 15},   /* the transpose of 4 x 5 from element 2 */
      {1, {4, 0}, {-1, 0}, 12, 3, 0},          /* reversed */
      {1, {64, 0}, {-1, 0}, 252, 63, 0},       /* reversed, reaching 252 bytes below */
      {2, {2, 3}, {-6, 2}, 40, 10, 10 - 6 + 4}, /* rows reversed, every other column */
  };
  for (size_t v = 0; v < sizeof views / sizeof views[0]; v++) {
    Counts counts = {0, 0};
    Spec spec = {.data = values,
                 .byte_size = 256,
                 .dtype = HURRAY_DTYPE_INT32,
                 .ndim = views[v].ndim,
                 .shape = views[v].shape,
                 .strides = views[v].strides,
                 .byte_offset = views[v].byte_offset};
    HurrayTensorContext *context = make_context(&spec, &counts);
    HurrayError error = {0};
    HurrayDLManagedTensorVersioned *m = NULL;
    assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_OK);
    const HurrayDLTensor *dl = &m->dl_tensor;
    assert_ptr_equal(dl->data, (uint8_t *)values + views[v].byte_offset);
    int64_t last = 0;
    for (int32_t k = 0; k < dl->ndim; k++) {
      assert_int_equal(dl->strides[k], views[v].strides[k]);
      last += (dl->shape[k] - 1) * dl->strides[k];
    }
    assert_int_equal(((const int32_t *)dl->data)[0], views[v].first);
    assert_int_equal(((const int32_t *)dl->data)[last], views[v].last);
    HurrayTensorContext *back = NULL;
    assert_int_equal(hurray_tensor_from_dlpack(m, 0, &back, &error), HURRAY_OK);
    assert_int_equal(hurray_tensor_context_check(back, 0, NULL), HURRAY_OK);
    const int32_t *first = hurray_tensor_context_data(back, 0);
    assert_ptr_equal(first, dl->data);
    const HurrayArray *part = &back->tensor->parts[0];
    for (int32_t k = 0; k < part->ndim; k++) {
      assert_int_equal(part->strides[k], views[v].strides[k]);
    }
    /* The buffer holds every element, from the lowest one up. */
    uint64_t begin = 0, end = 0;
    assert_int_equal(hurray_array_span(part, &begin, &end, NULL), HURRAY_OK);
    assert_true(end <= back->buffers->buffers[0]->desc.byte_size);
    const uint8_t *base = back->buffers->buffers[0]->data;
    assert_true(base + begin >= (const uint8_t *)values);
    assert_int_equal(first[last], views[v].last);
    hurray_tensor_context_release(back);
    assert_int_equal(counts.buffer, 1);
    assert_int_equal(counts.owner, 1);
  }
  free(values);
}

/* A read-only context is exported with READ_ONLY and imported read-only; the legacy struct,
 * which cannot say so, is refused and the context stays the caller's; a consumer may import
 * read-only what the producer did not mark. */
static void read_only(void **state) {
  (void)state;
  float *x = aligned_alloc(64, 64);
  assert_non_null(x);
  int64_t shape[1] = {4};
  Counts counts = {0, 0};
  Spec spec = {.data = x,
               .byte_size = 64,
               .dtype = HURRAY_DTYPE_FLOAT32,
               .ndim = 1,
               .shape = shape,
               .flags = HURRAY_BUFFER_READ_ONLY};
  HurrayTensorContext *context = make_context(&spec, &counts);
  HurrayError error = {0};
  HurrayDLManagedTensor *old = NULL;
  assert_int_equal(hurray_tensor_to_dlpack_legacy(context, 0, &old, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message,
                      "hurray_tensor_to_dlpack_legacy: the tensor is read-only and a legacy "
                      "DLManagedTensor cannot say so; hurray_tensor_to_dlpack (DLPack 1.x) "
                      "carries the flag");
  assert_null(old);
  assert_int_equal(counts.buffer + counts.owner, 0);
  HurrayDLManagedTensorVersioned *m = NULL;
  assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_OK);
  assert_true(m->flags == HURRAY_DLPACK_FLAG_READ_ONLY);
  HurrayTensorContext *back = NULL;
  assert_int_equal(hurray_tensor_from_dlpack(m, 0, &back, &error), HURRAY_OK);
  assert_true((back->flags & HURRAY_BUFFER_READ_ONLY) != 0);
  assert_true((back->buffers->buffers[0]->flags & HURRAY_BUFFER_READ_ONLY) != 0);
  hurray_tensor_context_release(back);
  assert_int_equal(counts.buffer, 1);
  assert_int_equal(counts.owner, 1);

  /* A writable producer's tensor, imported read-only by the consumer's choice. */
  int64_t dims[1] = {4};
  HurrayDLManagedTensor legacy = {.dl_tensor = {.data = x,
                                                .device = {HURRAY_DLPACK_CPU, 0},
                                                .ndim = 1,
                                                .dtype = {2, 32, 1},
                                                .shape = dims},
                                  .deleter = count_legacy_deleter};
  g_deleted = 0;
  assert_int_equal(
      hurray_tensor_from_dlpack_legacy(&legacy, HURRAY_BUFFER_READ_ONLY, &back, &error),
      HURRAY_OK);
  assert_true((back->flags & HURRAY_BUFFER_READ_ONLY) != 0);
  assert_null(back->tensor->parts[0].strides); /* NULL strides: row-major, as given */
  hurray_tensor_context_release(back);
  assert_int_equal(g_deleted, 1);
  g_deleted = 0;
  assert_int_equal(hurray_tensor_from_dlpack_legacy(&legacy, 0, &back, &error), HURRAY_OK);
  assert_true((back->flags & HURRAY_BUFFER_READ_ONLY) == 0);
  hurray_tensor_context_release(back);
  assert_int_equal(g_deleted, 1);
  free(x);
}

/* A 0-d tensor and an empty one over no memory at all (data NULL) go out and come back. */
static void scalar_and_empty(void **state) {
  (void)state;
  double *x = aligned_alloc(64, 64);
  assert_non_null(x);
  x[0] = 2.5;
  int64_t empty[2] = {0, 3};
  const Spec specs[] = {
      {.data = x, .byte_size = 64, .dtype = HURRAY_DTYPE_FLOAT64, .ndim = 0},
      {.data = NULL, .byte_size = 0, .dtype = HURRAY_DTYPE_FLOAT64, .ndim = 2, .shape = empty},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    Counts counts = {0, 0};
    HurrayTensorContext *context = make_context(&specs[i], &counts);
    HurrayError error = {0};
    HurrayDLManagedTensorVersioned *m = NULL;
    assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_OK);
    assert_int_equal(m->dl_tensor.ndim, specs[i].ndim);
    assert_ptr_equal(m->dl_tensor.data, specs[i].data);
    HurrayTensorContext *back = NULL;
    if (hurray_tensor_from_dlpack(m, 0, &back, &error) != HURRAY_OK) fail_msg("%s", error.message);
    assert_int_equal(hurray_tensor_context_check(back, 0, NULL), HURRAY_OK);
    assert_int_equal(back->tensor->ndim, specs[i].ndim);
    if (specs[i].data != NULL) {
      assert_true(*(const double *)hurray_tensor_context_data(back, 0) == 2.5);
    } else {
      assert_int_equal(back->tensor->shape[0], 0);
      assert_null(back->buffers->buffers[0]->data);
    }
    hurray_tensor_context_release(back);
    assert_int_equal(counts.buffer, 1);
    assert_int_equal(counts.owner, 1);
  }
  free(x);
}

/* ---- what DLPack cannot carry, and what the producer may not be asked -------------------- */

/* Layouts other than DENSE, data that is not ready, and bad arguments: refused, the context
 * still the caller's (each release runs once, when the caller releases it). */
static void export_refusals(void **state) {
  (void)state;
  int64_t shape[1] = {4};
  float *x = aligned_alloc(64, 64);
  assert_non_null(x);
  Counts counts = {0, 0};
  Spec spec = {.data = x,
               .byte_size = 64,
               .dtype = HURRAY_DTYPE_FLOAT32,
               .ndim = 1,
               .shape = shape};
  HurrayTensorContext *context = make_context(&spec, &counts);
  HurrayError error = {0};
  HurrayDLManagedTensorVersioned *m = (HurrayDLManagedTensorVersioned *)&error;
  assert_int_equal(hurray_tensor_to_dlpack(context, 1, &m, &error), HURRAY_EINVAL);
  assert_null(m);
  assert_string_equal(error.message, "hurray_tensor_to_dlpack: flags must be 0, not 0x1");
  assert_int_equal(hurray_tensor_to_dlpack(NULL, 0, &m, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_to_dlpack(context, 0, NULL, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_to_dlpack_legacy(context, 0, NULL, NULL), HURRAY_EINVAL);
  assert_int_equal(counts.buffer + counts.owner, 0);
  hurray_tensor_context_release(context);
  assert_int_equal(counts.buffer, 1);
  free(x);

  /* A per-channel tensor: DLPack carries dense tensors only. */
  int8_t *q = aligned_alloc(64, 128);
  assert_non_null(q);
  counts = (Counts){0, 0};
  const HurrayBufferDesc desc = {.byte_size = 64, .alignment = 64};
  HurrayBuffer *buffer = NULL;
  assert_int_equal(hurray_buffer_wrap(q, &desc, 0, NULL, 0, count_buffer, &counts, &buffer, NULL),
                   HURRAY_OK);
  HurrayBufferList *list = NULL;
  assert_int_equal(hurray_buffer_list_create(2, &list, NULL), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, NULL),
                   HURRAY_OK);
  HurrayBuffer *scales = NULL;
  const HurrayBufferDesc half = {.byte_size = 64, .alignment = 64};
  assert_int_equal(hurray_buffer_wrap(q + 64, &half, 0, NULL, 0, NULL, NULL, &scales, NULL),
                   HURRAY_OK);
  assert_int_equal(hurray_buffer_list_append(list, scales, HURRAY_ROLE_SCALES, NULL, NULL),
                   HURRAY_OK);
  int64_t qshape[2] = {2, 4}, channels[1] = {2};
  const HurrayArray parts[2] = {
      {.shape = qshape, .ndim = 2, .buffer = 0, .dtype = HURRAY_DTYPE_INT8},
      {.shape = channels, .ndim = 1, .buffer = 1, .dtype = HURRAY_DTYPE_FLOAT32}};
  const HurrayTensorDesc per_channel = {.layout = HURRAY_LAYOUT_PER_CHANNEL,
                                        .ndim = 2,
                                        .shape = qshape,
                                        .parts = parts,
                                        .nparts = 2,
                                        .dtype = HURRAY_DTYPE_INT8};
  assert_int_equal(hurray_tensor_context_create(&per_channel, list, 0, NULL, NULL, &context,
                                                &error),
                   HURRAY_OK);
  assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_EUNSUPPORTED);
  assert_string_equal(error.message, "DLPack carries dense tensors only; this one is per_channel");
  hurray_tensor_context_release(context);
  assert_int_equal(counts.buffer, 1);
  free(q);

  /* CUDA data ordered on a stream of its own, or behind an event: a managed tensor cannot say
   * what to wait for. */
  static const struct {
    uint8_t sync_mode;
    uintptr_t handle;
  } unready[] = {{HURRAY_SYNC_STREAM, 0x5000}, {HURRAY_SYNC_EVENT, 0x6000}};
  for (size_t i = 0; i < sizeof unready / sizeof unready[0]; i++) {
    counts = (Counts){0, 0};
    Spec cuda = {.data = (void *)(uintptr_t)0x7f0000000000u,
                 .byte_size = 64,
                 .tag = HURRAY_DEVICE_CUDA,
                 .sync_mode = unready[i].sync_mode,
                 .sync_handle = (void *)unready[i].handle,
                 .dtype = HURRAY_DTYPE_FLOAT32,
                 .ndim = 1,
                 .shape = shape};
    context = make_context(&cuda, &counts);
    assert_int_equal(hurray_tensor_to_dlpack(context, 0, &m, &error), HURRAY_EUNSUPPORTED);
    assert_non_null(strstr(error.message, "the data is not ready"));
    assert_non_null(strstr(error.message, hurray_sync_mode_name(unready[i].sync_mode)));
    hurray_tensor_context_release(context);
    assert_int_equal(counts.buffer, 1);
    assert_int_equal(counts.owner, 1);
  }
}

/* ---- hostile managed tensors ------------------------------------------------------------- */

static void hostile_inputs(void **state) {
  (void)state;
  float x[8] = {0};
  int64_t shape[2] = {2, 4};
  HurrayDLManagedTensorVersioned m = managed_over(x, 2, NULL, NULL);
  refused(&m, HURRAY_EINVAL, "DLPack tensor has a NULL shape");

  int64_t negative[2] = {2, -3};
  m = managed_over(x, 2, negative, NULL);
  refused(&m, HURRAY_ELAYOUT, "DLPack shape[1] is -3");

  m = managed_over(x, HURRAY_MAX_NDIM + 1, shape, NULL);
  refused(&m, HURRAY_ELIMIT, "DLPack tensor has 65 dimensions; at most 64");
  m = managed_over(x, -1, shape, NULL);
  refused(&m, HURRAY_ELIMIT, "DLPack tensor has -1 dimensions");

  int64_t huge[2] = {(int64_t)1 << 62, (int64_t)1 << 62};
  m = managed_over(x, 2, huge, NULL);
  refused(&m, HURRAY_EOVERFLOW, "DLPack shape has too many elements");
  int64_t over[1] = {((int64_t)1 << 62) + 1};
  m = managed_over(x, 1, over, NULL);
  refused(&m, HURRAY_ELIMIT, "over HURRAY_MAX_DIM");

  int64_t wide[2] = {2, 2}, far[2] = {INT64_MAX / 2, 1};
  m = managed_over(x, 2, wide, far);
  refused(&m, HURRAY_EOVERFLOW, "DLPack strides reach 2^63 bytes or more");

  m = managed_over((void *)(UINTPTR_MAX - 8), 2, shape, NULL);
  refused(&m, HURRAY_EOVERFLOW, "the DLPack tensor wraps the address space");
  m = managed_over(x, 2, shape, NULL);
  m.dl_tensor.byte_offset = UINT64_MAX - 4;
  refused(&m, HURRAY_EOVERFLOW, "wraps the address space");

  m = managed_over(NULL, 2, shape, NULL);
  refused(&m, HURRAY_EINVAL, "DLPack tensor of 8 elements has NULL data");

  m = managed_over(x, 2, shape, NULL);
  m.dl_tensor.dtype.code = 99;
  refused(&m, HURRAY_EUNSUPPORTED, "");
  m = managed_over(x, 2, shape, NULL);
  m.dl_tensor.dtype.lanes = 4;
  refused(&m, HURRAY_EUNSUPPORTED, "");

  m = managed_over(x, 2, shape, NULL);
  m.dl_tensor.device.device_id = -1;
  refused(&m, HURRAY_EUNSUPPORTED, "DLPack device id -1 is out of range");

  m = managed_over(x, 1, shape, NULL);
  const HurrayDTypeInfo *fp4 = hurray_dtype_info(HURRAY_DTYPE_FLOAT4_E2M1FN);
  m.dl_tensor.dtype = (HurrayDLDataType){fp4->dlpack_code, fp4->dlpack_bits, 1};
  m.flags = HURRAY_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED;
  refused(&m, HURRAY_EUNSUPPORTED, "padded to one element per byte");

  m = managed_over(x, 2, shape, NULL);
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_from_dlpack(&m, 2, &context, &error), HURRAY_EINVAL);
  assert_string_equal(error.message,
                      "hurray_tensor_from_dlpack: flags may hold only HURRAY_BUFFER_READ_ONLY, "
                      "not 0x2");
  assert_int_equal(hurray_tensor_from_dlpack(NULL, 0, &context, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_from_dlpack(&m, 0, NULL, &error), HURRAY_EINVAL);
  assert_int_equal(hurray_tensor_from_dlpack_legacy(NULL, 0, &context, NULL), HURRAY_EINVAL);
  assert_int_equal(g_deleted, 0);

  /* Accepted after all that: the same struct, now sound, and its deleter once. */
  assert_int_equal(hurray_tensor_from_dlpack(&m, 0, &context, &error), HURRAY_OK);
  assert_int_equal(g_deleted, 0);
  hurray_tensor_context_release(context);
  assert_int_equal(g_deleted, 1);
}

/* A tensor of another major version: HURRAY_EABI naming both versions, the deleter untouched
 * (the caller's to call, as DLPack asks), and nothing past `version` read: the version's 8
 * bytes end a readable page, and the next page is inaccessible. */
static void other_major_version_read_no_further(void **state) {
  (void)state;
  HurrayDLManagedTensorVersioned m = managed_over(NULL, 0, NULL, NULL);
  m.version.major = 2;
  refused(&m, HURRAY_EABI, "DLPack 2.1 is not supported: this consumer reads major version 1");
  m.version = (HurrayDLPackVersion){0, 8};
  refused(&m, HURRAY_EABI, "DLPack 0.8 is not supported");
#if HAVE_MPROTECT
  long page = sysconf(_SC_PAGESIZE);
  uint8_t *pages =
      mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(pages != MAP_FAILED);
  assert_int_equal(mprotect(pages + page, (size_t)page, PROT_NONE), 0);
  HurrayDLPackVersion *version = (HurrayDLPackVersion *)(pages + page - sizeof *version);
  *version = (HurrayDLPackVersion){3, 1};
  HurrayTensorContext *context = NULL;
  HurrayError error = {0};
  assert_int_equal(hurray_tensor_from_dlpack((HurrayDLManagedTensorVersioned *)version, 0,
                                             &context, &error),
                   HURRAY_EABI);
  assert_string_equal(error.message,
                      "DLPack 3.1 is not supported: this consumer reads major version 1");
  assert_null(context);
  munmap(pages, 2 * (size_t)page);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_dtype_round_trips),
      cmocka_unit_test(every_device_mapping_round_trips),
      cmocka_unit_test(devices_without_a_mapping),
      cmocka_unit_test(strides_and_byte_offset),
      cmocka_unit_test(read_only),
      cmocka_unit_test(scalar_and_empty),
      cmocka_unit_test(export_refusals),
      cmocka_unit_test(hostile_inputs),
      cmocka_unit_test(other_major_version_read_no_further),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
