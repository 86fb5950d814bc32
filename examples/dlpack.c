/* dlpack.c -- DLPack in C (ADR-083): a Hurray tensor handed to code that knows only DLPack's
 * rules, and a DLPack producer's tensor taken by Hurray, both without a copy. Run: dlpack */
#include <inttypes.h>
#include <stdio.h>

#include "hurray/hurray.h"

static int failed(const HurrayError *error) {
  fprintf(stderr, "%s: %s\n", hurray_status_name(error->code), error->message);
  return 1;
}

/* What a DLPack consumer does with a managed tensor: read it by dlpack.h's rules (code that
 * includes dlpack.h casts the pointer to DLManagedTensorVersioned *), then call the deleter,
 * once. */
static void consume(HurrayDLManagedTensorVersioned *m) {
  const HurrayDLTensor *t = &m->dl_tensor;
  printf("DLPack %u.%u, device (%d, %d), dtype (%u, %u, %u)%s:", (unsigned)m->version.major,
         (unsigned)m->version.minor, (int)t->device.device_type, (int)t->device.device_id,
         (unsigned)t->dtype.code, (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes,
         (m->flags & HURRAY_DLPACK_FLAG_READ_ONLY) != 0 ? " read-only" : "");
  const float *x = (const float *)((const char *)t->data + t->byte_offset);
  for (int64_t i = 0; i < t->shape[0]; i++) {
    for (int64_t j = 0; j < t->shape[1]; j++) {
      printf(" %g", (double)x[i * t->strides[0] + j * t->strides[1]]);
    }
  }
  printf("\n");
  m->deleter(m); /* releases the Hurray context, and with it the buffer */
}

/* A DLPack producer's tensor: its memory, and a deleter that says when it runs. */
static float g_values[6] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
static int64_t g_shape[2] = {3, 2};

static void producer_deleter(HurrayDLManagedTensorVersioned *self) {
  (void)self;
  printf("the producer's deleter ran\n");
}

int main(void) {
  HurrayError error = {0};

  /* Hurray -> DLPack: a 2 x 3 float32 tensor in memory Hurray allocates. */
  HurrayBuffer *buffer = NULL;
  HurrayBufferList *list = NULL;
  if (hurray_buffer_alloc(6 * sizeof(float), 0, 0, &buffer, &error) != HURRAY_OK) {
    return failed(&error);
  }
  for (int i = 0; i < 6; i++) ((float *)buffer->data)[i] = (float)i * 2.0f;
  if (hurray_buffer_list_create(1, &list, &error) != HURRAY_OK) {
    hurray_buffer_destroy(buffer);
    return failed(&error);
  }
  if (hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, &error) != HURRAY_OK) {
    hurray_buffer_list_destroy(list); /* the append destroyed the buffer */
    return failed(&error);
  }
  const int64_t shape[2] = {2, 3};
  const HurrayArray values = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  const HurrayTensorDesc desc = {.layout = HURRAY_LAYOUT_DENSE,
                                 .ndim = 2,
                                 .shape = shape,
                                 .parts = &values,
                                 .nparts = 1,
                                 .dtype = HURRAY_DTYPE_FLOAT32};
  HurrayTensorContext *context = NULL;
  if (hurray_tensor_context_create(&desc, list, 0, NULL, NULL, &context, &error) != HURRAY_OK) {
    return failed(&error); /* create released the list */
  }
  HurrayDLManagedTensorVersioned *exported = NULL;
  if (hurray_tensor_to_dlpack(context, 0, &exported, &error) != HURRAY_OK) {
    hurray_tensor_context_release(context); /* refused: still ours */
    return failed(&error);
  }
  consume(exported); /* the managed tensor owned the context */

  /* DLPack -> Hurray: a 3 x 2 float32 tensor a DLPack producer made (NULL strides: row-major). */
  HurrayDLManagedTensorVersioned managed = {
      .version = {HURRAY_DLPACK_MAJOR_VERSION, HURRAY_DLPACK_MINOR_VERSION},
      .deleter = producer_deleter,
      .flags = HURRAY_DLPACK_FLAG_READ_ONLY,
      .dl_tensor = {.data = g_values,
                    .device = {HURRAY_DLPACK_CPU, 0},
                    .ndim = 2,
                    .dtype = {2 /* kDLFloat */, 32, 1},
                    .shape = g_shape}};
  HurrayTensorContext *taken = NULL;
  if (hurray_tensor_from_dlpack(&managed, 0, &taken, &error) != HURRAY_OK) {
    managed.deleter(&managed); /* refused: the caller still owns it */
    return failed(&error);
  }
  const HurrayTensorDesc *t = taken->tensor;
  printf("a %s %s tensor of shape [%" PRId64 ", %" PRId64 "]%s, %s\n",
         hurray_layout_name((int)t->layout), hurray_dtype_info(t->dtype)->name, t->shape[0],
         t->shape[1], (taken->flags & HURRAY_BUFFER_READ_ONLY) != 0 ? " read-only" : "",
         hurray_tensor_context_data(taken, 0) == (void *)g_values ? "over the producer's memory"
                                                                  : "copied");
  hurray_tensor_context_release(taken); /* calls the producer's deleter, once */
  return 0;
}
