/* context.c -- HurrayTensorContext (ADR-034): what a producer hands a consumer, in one pointer.
 *
 * create is a SINK for the buffer list and the owner reference: whatever happens, each buffer's
 * release and owner_release run exactly once, either when create fails or through the context's
 * release. The context owns a deep copy of the descriptor, so the producer's storage may go.
 * check is what a consumer runs on a context it did not build: it reads the ABI version first,
 * through the frozen head, and nothing else when the version is not this library's. */
#include <inttypes.h>
#include <stdlib.h>

#include "internal.h"

/* The release hook of every context this library builds: frees all of it exactly once. */
static void release_context(HurrayTensorContext *self) {
  hurray_buffer_list_destroy(self->buffers);
  hurray_tensor_desc_destroy((HurrayTensorDesc *)self->tensor); /* our own clone */
  if (self->owner_release != NULL) self->owner_release(self->owner);
  self->release = NULL;
  free(self);
}

/* What a failed create does with what it was given, before returning `status`. */
static int create_failed(HurrayBufferList *buffers, void *owner, HurrayOwnerReleaseFn owner_release,
                         int status) {
  hurray_buffer_list_destroy(buffers);
  if (owner_release != NULL) owner_release(owner);
  return status;
}

int hurray_tensor_context_create(const HurrayTensorDesc *tensor, HurrayBufferList *buffers,
                                 uint32_t flags, void *owner, HurrayOwnerReleaseFn owner_release,
                                 HurrayTensorContext **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  int status = HURRAY_OK;
  if (tensor == NULL || buffers == NULL || out == NULL) {
    status = hurray__fail(error, HURRAY_EINVAL, "hurray_tensor_context_create: %s is NULL",
                          tensor == NULL    ? "tensor"
                          : buffers == NULL ? "buffers"
                                            : "out");
  } else if (flags & ~HURRAY_BUFFER_READ_ONLY) {
    status = hurray__fail(error, HURRAY_EINVAL, "context flags 0x%" PRIX32 " include unknown bits",
                          flags);
  }
  if (status == HURRAY_OK) status = hurray_tensor_validate(tensor, buffers, 0, error);
  HurrayTensorDesc *copy = NULL;
  if (status == HURRAY_OK) status = hurray_tensor_desc_clone(tensor, &copy, error);
  HurrayTensorContext *context = NULL;
  if (status == HURRAY_OK) {
    context = calloc(1, sizeof *context);
    if (context == NULL) {
      status = hurray__fail(error, HURRAY_ENOMEM, "cannot allocate a tensor context (%zu bytes)",
                            sizeof *context);
    }
  }
  if (context == NULL) {
    hurray_tensor_desc_destroy(copy);
    return create_failed(buffers, owner, owner_release, status);
  }

  context->abi_version = HURRAY_C_ABI_VERSION;
  context->flags = flags;
  context->release = release_context;
  context->tensor = copy;
  context->buffers = buffers;
  context->owner = owner;
  context->owner_release = owner_release;
  *out = context;
  return HURRAY_OK;
}

uint32_t hurray_tensor_context_abi_version(const HurrayTensorContext *context) {
  return context == NULL ? 0 : context->abi_version;
}

int hurray_tensor_context_check(const HurrayTensorContext *context, uint32_t flags,
                                HurrayError *error) {
  if (context == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "hurray_tensor_context_check: context is NULL");
  }
  uint32_t version = hurray_tensor_context_abi_version(context);
  if (version != HURRAY_C_ABI_VERSION) { /* then nothing past the version may be read */
    return hurray__fail(error, HURRAY_EABI,
                        "producer C ABI version %" PRIu32 ", consumer C ABI version %d", version,
                        HURRAY_C_ABI_VERSION);
  }
  if (context->release == NULL) {
    return hurray__fail(error, HURRAY_ESTATE, "the tensor context was released");
  }
  if (context->flags & ~HURRAY_BUFFER_READ_ONLY) {
    return hurray__fail(error, HURRAY_EINVAL, "context flags 0x%" PRIX32 " include unknown bits",
                        context->flags);
  }
  if (context->tensor == NULL || context->buffers == NULL) {
    return hurray__fail(error, HURRAY_EINVAL, "the tensor context has no %s",
                        context->tensor == NULL ? "tensor" : "buffer list");
  }
  return hurray_tensor_validate(context->tensor, context->buffers, flags, error);
}

void hurray_tensor_context_release(HurrayTensorContext *context) {
  if (context != NULL && context->release != NULL) context->release(context);
}
