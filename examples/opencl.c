/* A producer puts a 2 x 3 float32 tensor into OpenCL device memory and hands it over as one
 * HurrayTensorContext; a consumer that knows nothing of the producer's cl_context reads it
 * back through a queue of the memory's own context. No OpenCL header or library is needed at
 * build time: hurray-core loads libOpenCL.so.1 when the first device call runs. */
#include <stdio.h>

#include "hurray/hurray.h"

static int produce(HurrayTensorContext **out, HurrayError *error) {
  const float values[6] = {1.5f, -2.0f, 3.25f, 4.0f, -5.5f, 6.0f};
  HurrayDeviceQueue *queue = NULL;
  HurrayBuffer *buffer = NULL;
  HurrayBufferList *list = NULL;
  /* device 0 of the OpenCL platforms, in the library's default context for it */
  int status = hurray_device_queue_create(HURRAY_DEVICE_OPENCL, 0, &queue, error);
  if (status == HURRAY_OK) status = hurray_device_alloc(queue, sizeof values, 0, &buffer, error);
  if (status == HURRAY_OK) {
    status = hurray_device_copy_from_host(queue, buffer, 0, values, sizeof values, error);
  }
  hurray_device_queue_destroy(queue); /* the buffer keeps its memory (and context) alive */
  if (status == HURRAY_OK) status = hurray_buffer_list_create(1, &list, error);
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(buffer);
    return status;
  }
  status = hurray_buffer_list_append(list, buffer, HURRAY_ROLE_VALUES, NULL, error); /* SINK */
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    return status;
  }
  const int64_t shape[2] = {2, 3};
  const HurrayArray array = {.shape = shape, .ndim = 2, .dtype = HURRAY_DTYPE_FLOAT32};
  const HurrayTensorDesc tensor = {.layout = HURRAY_LAYOUT_DENSE, .ndim = 2, .shape = shape,
                                   .parts = &array, .nparts = 1, .dtype = HURRAY_DTYPE_FLOAT32};
  return hurray_tensor_context_create(&tensor, list, 0, NULL, NULL, out, error); /* SINK */
}

static int consume(const HurrayTensorContext *context, HurrayError *error) {
  if (hurray_tensor_context_abi_version(context) != HURRAY_C_ABI_VERSION) return HURRAY_EABI;
  int status = hurray_tensor_context_check(context, 0, error);
  if (status != HURRAY_OK) return status;
  const HurrayBuffer *buffer = context->buffers->buffers[0];
  printf("%s memory, cl_mem %s, alignment %u\n", hurray_device_name(buffer->desc.device_tag),
         buffer->data != NULL ? "set" : "NULL", (unsigned)buffer->desc.alignment);
  HurrayDeviceQueue *queue = NULL; /* in the cl_context the cl_mem belongs to */
  status = hurray_device_queue_for_buffer(buffer, &queue, error);
  float host[6];
  if (status == HURRAY_OK) {
    /* waits on the buffer's sync state first (READY here; EVENT: its cl_event) */
    status = hurray_device_copy_to_host(queue, buffer, 0, host, sizeof host, error);
  }
  hurray_device_queue_destroy(queue);
  if (status != HURRAY_OK) return status;
  const HurrayTensorDesc *t = context->tensor;
  for (int64_t r = 0; r < t->shape[0]; r++) {
    for (int64_t c = 0; c < t->shape[1]; c++) printf(" %6.2f", (double)host[r * t->shape[1] + c]);
    printf("\n");
  }
  return HURRAY_OK;
}

int main(void) {
  HurrayError error = {0};
  int status = hurray_device_runtime_load(HURRAY_DEVICE_OPENCL, &error);
  if (status != HURRAY_OK) {
    fprintf(stderr, "skipped: %s\n", error.message); /* names libOpenCL.so.1 */
    return 77;
  }
  HurrayTensorContext *context = NULL;
  status = produce(&context, &error);
  if (status == HURRAY_OK) status = consume(context, &error);
  hurray_tensor_context_release(context); /* clReleaseMemObject, once */
  if (status != HURRAY_OK) {
    fprintf(stderr, "%s: %s\n", hurray_status_name(status), error.message);
    return 1;
  }
  return 0;
}
