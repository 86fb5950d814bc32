/* exchange.c -- a multi-buffer tensor crosses a library boundary through hurray-ffi.
 *
 * The producer quantises a float32 weight matrix to int4 with one float32 scale per row (the
 * PER_CHANNEL layout: two buffers, values and scales), wraps each buffer with a release
 * callback, and hands the consumer a single HurrayTensorContext pointer. The consumer knows
 * nothing else: it checks the producer's ABI version, validates the descriptor against the
 * buffers (reading nothing out of bounds), dequantises through the strides, prints what it
 * received, and releases the context, which calls every release callback exactly once.
 *
 * Build: part of the CMake build (examples/); run: build/examples/exchange */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

enum { ROWS = 4, COLS = 8 };

/* ---- producer ---------------------------------------------------------------------------- */

static int g_buffers_released;
static int g_owner_released;

static void release_malloc(HurrayBuffer *self) {
  free(self->release_ctx);
  g_buffers_released++;
}

static void release_owner(void *owner) {
  (void)owner;
  g_owner_released++;
}

/* Wraps malloc'd memory as a CPU buffer with 64-byte alignment and appends it to `list`. */
static int append_cpu_buffer(HurrayBufferList *list, size_t size, int role, void **data,
                             HurrayError *error) {
  void *memory = aligned_alloc(HURRAY_MIN_ALIGNMENT, (size + 63) / 64 * 64);
  if (memory == NULL) return HURRAY_ENOMEM;
  memset(memory, 0, size);
  HurrayBufferDesc desc = {.byte_size = size, .alignment = HURRAY_MIN_ALIGNMENT,
                           .device_tag = HURRAY_DEVICE_CPU, .memory_class = HURRAY_MEM_DEVICE,
                           .sync_mode = HURRAY_SYNC_READY};
  HurrayBuffer *buffer = NULL;
  int status = hurray_buffer_wrap(memory, &desc, 0, NULL, 0, release_malloc, memory, &buffer,
                                  error);
  if (status != HURRAY_OK) {
    free(memory); /* wrap takes nothing on failure */
    return status;
  }
  *data = memory;
  return hurray_buffer_list_append(list, buffer, role, NULL, error); /* SINK */
}

/* Symmetric int4 quantisation per row: q = round(w / scale), scale = max|w| / 7. */
static HurrayTensorContext *produce(float (*weights)[COLS], HurrayError *error) {
  HurrayBufferList *list = NULL;
  if (hurray_buffer_list_create(2, &list, error) != HURRAY_OK) return NULL;

  uint8_t *values = NULL;
  float *scales = NULL;
  uint64_t values_bytes = 0;
  if (hurray_dtype_storage_bytes(HURRAY_DTYPE_INT4, ROWS * COLS, &values_bytes, error) ||
      append_cpu_buffer(list, values_bytes, HURRAY_ROLE_VALUES, (void **)&values, error) ||
      append_cpu_buffer(list, ROWS * sizeof(float), HURRAY_ROLE_SCALES, (void **)&scales,
                        error)) {
    hurray_buffer_list_destroy(list);
    return NULL;
  }
  for (int r = 0; r < ROWS; r++) {
    float amax = 0.0f;
    for (int c = 0; c < COLS; c++) amax = fmaxf(amax, fabsf(weights[r][c]));
    scales[r] = amax > 0.0f ? amax / 7.0f : 1.0f;
    for (int c = 0; c < COLS; c++) {
      int q = (int)lrintf(weights[r][c] / scales[r]);
      int i = r * COLS + c; /* packed: element i in nibble i % 2 of byte i / 2, low first */
      values[i / 2] |= (uint8_t)((q & 0xF) << (4 * (i % 2)));
    }
  }

  static const int64_t shape[2] = {ROWS, COLS};
  static const int64_t scale_shape[1] = {ROWS};
  const HurrayArray parts[2] = {
      {.shape = shape, .ndim = 2, .buffer = 0, .dtype = HURRAY_DTYPE_INT4},
      {.shape = scale_shape, .ndim = 1, .buffer = 1, .dtype = HURRAY_DTYPE_FLOAT32},
  };
  const HurrayTensorDesc tensor = {.layout = HURRAY_LAYOUT_PER_CHANNEL, .ndim = 2, .axis = 0,
                                   .shape = shape, .parts = parts, .nparts = 2,
                                   .dtype = HURRAY_DTYPE_INT4};
  HurrayTensorContext *context = NULL;
  /* SINK: the context now owns the list and the owner reference, also if this fails. */
  if (hurray_tensor_context_create(&tensor, list, HURRAY_BUFFER_READ_ONLY, &g_owner_released,
                                   release_owner, &context, error) != HURRAY_OK) {
    return NULL;
  }
  return context;
}

/* ---- consumer: sees only the context pointer --------------------------------------------- */

static int read_int4(const uint8_t *bytes, int64_t index) {
  int nibble = (bytes[index / 2] >> (4 * (index % 2))) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}

static void print_descriptor(const HurrayBuffer *buffer, int role) {
  uint8_t encoded[HURRAY_DESC_SIZE];
  if (hurray_desc_encode(&buffer->desc, encoded, NULL) != HURRAY_OK) return;
  printf("  buffer %-7s %-4s %-6s %-5s align %-4u %3llu bytes  descriptor",
         hurray_buffer_role_name(role), hurray_device_name(buffer->desc.device_tag),
         hurray_memory_class_name(buffer->desc.memory_class),
         hurray_sync_mode_name(buffer->desc.sync_mode), buffer->desc.alignment,
         (unsigned long long)buffer->desc.byte_size);
  for (int i = 0; i < HURRAY_DESC_SIZE; i++) printf(" %02x", encoded[i]);
  printf("\n");
}

static int consume(HurrayTensorContext *context) {
  uint32_t version = hurray_tensor_context_abi_version(context);
  if (version != HURRAY_C_ABI_VERSION) {
    fprintf(stderr, "producer speaks C ABI %u, this consumer %d\n", version,
            HURRAY_C_ABI_VERSION);
    return 1;
  }
  HurrayError error = {0};
  if (hurray_tensor_context_check(context, HURRAY_VALIDATE_CONTENTS, &error) != HURRAY_OK) {
    fprintf(stderr, "rejected: %s\n", error.message);
    return 1;
  }
  const HurrayTensorDesc *t = context->tensor;
  const HurrayBufferList *list = context->buffers;
  printf("received a %s %s tensor of shape [%lld, %lld], channel axis %d, %u buffers:\n",
         hurray_layout_name((int)t->layout), hurray_dtype_info(t->dtype)->name,
         (long long)t->shape[0], (long long)t->shape[1], t->axis, list->count);
  for (uint32_t i = 0; i < list->count; i++) print_descriptor(list->buffers[i], list->roles[i]);

  const HurrayArray *values = &t->parts[0];
  const HurrayArray *scales = &t->parts[1];
  const uint8_t *q = (const uint8_t *)list->buffers[values->buffer]->data + values->byte_offset;
  const float *s =
      (const float *)((const uint8_t *)list->buffers[scales->buffer]->data + scales->byte_offset);
  printf("dequantised (value = int4 * scale[row]):\n");
  for (int64_t r = 0; r < t->shape[0]; r++) {
    printf("  ");
    for (int64_t c = 0; c < t->shape[1]; c++) {
      printf("%7.3f", (double)((float)read_int4(q, r * t->shape[1] + c) * s[r]));
    }
    printf("\n");
  }
  return 0;
}

int main(void) {
  printf("hurray %s, C ABI version %u\n", hurray_version_string(), hurray_c_abi_version());
  float weights[ROWS][COLS];
  for (int r = 0; r < ROWS; r++) {
    for (int c = 0; c < COLS; c++) weights[r][c] = sinf((float)(r * COLS + c)) * (float)(r + 1);
  }
  HurrayError error = {0};
  HurrayTensorContext *context = produce(weights, &error);
  if (context == NULL) {
    fprintf(stderr, "producer failed: %s\n", error.message);
    return 1;
  }
  int rc = consume(context);
  hurray_tensor_context_release(context);
  printf("released: %d buffers, %d owner reference (each exactly once)\n", g_buffers_released,
         g_owner_released);
  return rc != 0 || g_buffers_released != 2 || g_owner_released != 1;
}
