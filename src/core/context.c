/* context.c -- HurrayTensorContext (ADR-034): what a producer hands a consumer, in one pointer.
 *
 * create is a SINK for the buffer list and the owner reference: whatever happens, each buffer's
 * release and owner_release run exactly once, either when create fails or through the context's
 * release. The context owns a deep copy of the descriptor, so the producer's storage may go.
 * check is what a consumer runs on a context it did not build: it reads the ABI version first,
 * through the frozen head, and nothing else when the version is not this library's; then every
 * buffer handle by the rules of hurray_buffer_wrap, then the tensor against the buffers.
 * A tensor is read-only if its context or any of its buffers says so: create sets the
 * context's flag when a buffer is read-only, and check refuses a context that lacks it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The release hook of every context this library builds: frees all of it exactly once. The
 * context and its copy of the descriptor are one heap block (they live and die together: one
 * allocation fewer on every exchange). */
static void release_context(HurrayTensorContext *self) {
  hurray_buffer_list_destroy(self->buffers);
  if (self->owner_release != NULL) self->owner_release(self->owner);
  self->release = NULL;
  free(self);
}

/* The index of the first read-only buffer of `list`; list->count if there is none. */
static uint32_t read_only_buffer(const HurrayBufferList *list) {
  if (list->buffers == NULL) return list->count;
  uint32_t i = 0;
  while (i < list->count &&
         (list->buffers[i] == NULL || !(list->buffers[i]->flags & HURRAY_BUFFER_READ_ONLY))) {
    i++;
  }
  return i;
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
  if (status == HURRAY_OK && read_only_buffer(buffers) < buffers->count) {
    flags |= HURRAY_BUFFER_READ_ONLY; /* the tensor is read-only if any of its buffers is */
  }
  void *block = NULL;
  HurrayTensorDesc *copy = NULL;
  if (status == HURRAY_OK) {
    status =
        hurray__tensor_desc_clone_after(tensor, sizeof(HurrayTensorContext), &block, &copy, error);
  }
  if (status != HURRAY_OK) return create_failed(buffers, owner, owner_release, status);

  HurrayTensorContext *context = block;
  memset(context, 0, sizeof *context);
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

/* Each handle of a list someone else built, by the rules hurray_buffer_wrap applies to the
 * handles it makes: a private device tag this copy of the library has not registered, a sync
 * mode without its handle or a misaligned address is refused here, before any use. */
static int check_buffers(const HurrayBufferList *list, HurrayError *error) {
  if (list->count > 0 && (list->buffers == NULL || list->roles == NULL)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "the buffer list has %" PRIu32 " buffers but no arrays", list->count);
  }
  for (uint32_t i = 0; i < list->count; i++) {
    const HurrayBuffer *buffer = list->buffers[i];
    if (buffer == NULL) {
      return hurray__fail(error, HURRAY_EINVAL, "buffer %" PRIu32 " of the list is NULL", i);
    }
    if (hurray_buffer_role_name(list->roles[i]) == NULL) {
      return hurray__fail(error, HURRAY_EINVAL, "buffer %" PRIu32 " has the unknown role %u", i,
                          (unsigned)list->roles[i]);
    }
    int status = hurray__buffer_check(buffer, error);
    if (status != HURRAY_OK) {
      if (error == NULL) return status;
      char message[HURRAY_ERROR_MESSAGE_SIZE];
      memcpy(message, error->message, sizeof message);
      return hurray__fail(error, status, "buffer %" PRIu32 ": %s", i, message);
    }
  }
  return HURRAY_OK;
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
  int status = check_buffers(context->buffers, error);
  if (status != HURRAY_OK) return status;
  /* A consumer honours the context's flag alone: a writable context over read-only memory
   * would let it write there. */
  uint32_t read_only = read_only_buffer(context->buffers);
  if (read_only < context->buffers->count && !(context->flags & HURRAY_BUFFER_READ_ONLY)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "buffer %" PRIu32 " is read-only but the tensor context is not "
                        "(its flags lack HURRAY_BUFFER_READ_ONLY)",
                        read_only);
  }
  return hurray_tensor_validate(context->tensor, context->buffers, flags, error);
}

void *hurray_tensor_context_data(const HurrayTensorContext *context, uint32_t part) {
  if (hurray_tensor_context_abi_version(context) != HURRAY_C_ABI_VERSION ||
      context->release == NULL || context->tensor == NULL || context->buffers == NULL ||
      part >= context->tensor->nparts) {
    return NULL;
  }
  const HurrayArray *array = &context->tensor->parts[part];
  if (array->buffer >= context->buffers->count) return NULL;
  const HurrayBuffer *buffer = context->buffers->buffers[array->buffer];
  if (buffer == NULL || buffer->data == NULL || !hurray__buffer_has_address(&buffer->desc)) {
    return NULL;
  }
  return (uint8_t *)buffer->data + array->byte_offset;
}

void hurray_tensor_context_release(HurrayTensorContext *context) {
  if (context != NULL && context->release != NULL) context->release(context);
}
