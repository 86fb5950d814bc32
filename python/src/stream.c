/* stream.c -- the `stream` argument of __dlpack__ and __hurray__ (docs/impl/python-bindings.md,
 * "Streams"). One judgement, DLPack's, for both protocols (ADR-023 §6, ADR-054): for every
 * device, memory class, sync state and stream value both give the same answer.
 *
 * A stream is the consumer's: it asks the producer to make the bytes safe to use on it. Which
 * values are valid depends on the device (DLPack, "Stream parameter semantics"): for CUDA
 * None and 1 name the legacy default stream, 2 the per-thread default stream, 0 is ambiguous
 * and disallowed; for ROCm None and 0 name the null stream and 1 and 2 mean nothing; larger
 * values are stream pointers; -1 says "do not synchronise, I will". The CPU has no streams and
 * takes None only. Other devices order work on queues for which DLPack defines no stream
 * values (a value other than None is optional there): they take None or -1. The device family
 * follows the Hurray device tag, whatever the memory class, so CUDA and ROCm PEER or UNIFIED
 * memory -- which have no DLPack device type -- get the same rules in the native protocol.
 *
 * The bytes are safe on the consumer's stream when the buffer is READY, or ordered (sync mode
 * 'stream') on exactly that stream, or when the consumer said it synchronises itself (-1).
 * Otherwise the producer waits on the host for the buffer's sync handle through the device
 * runtime (hurray_device_wait: OpenCL, CUDA where libcuda is present) and hands the bytes over
 * as READY; where no runtime can wait it refuses, naming stream=-1. CUDA's cudaStreamLegacy and
 * HIP's null stream are both named 0x1 (buffer-protocol.md §2.6.2-§2.6.3).
 */
#include "hurray_python.h"

/* The consumer's `stream`, as DLPack defines it for a buffer's device. */
typedef struct HurrayPyStream {
  int no_sync;      /* stream=-1: the consumer synchronises itself */
  uintptr_t handle; /* the consumer's stream as a sync handle (None: the legacy default stream,
                       0x1, for CUDA and ROCm); 0 on devices without streams */
} HurrayPyStream;

/* NONE: the CPU, None only. QUEUES: devices with queues but no DLPack stream values, None or
 * -1. CUDA, ROCM: DLPack's stream values. */
typedef enum StreamFamily { STREAMS_NONE, STREAMS_QUEUES, STREAMS_CUDA, STREAMS_ROCM } StreamFamily;

static StreamFamily stream_family(int tag) {
  switch (tag) {
    case HURRAY_DEVICE_CPU:
      return STREAMS_NONE;
    case HURRAY_DEVICE_CUDA:
      return STREAMS_CUDA;
    case HURRAY_DEVICE_ROCM:
      return STREAMS_ROCM;
    default:
      return STREAMS_QUEUES;
  }
}

static int stream_arg(HurrayState *st, PyObject *stream, int tag, HurrayPyStream *out) {
  StreamFamily family = stream_family(tag);
  out->no_sync = 0;
  out->handle = family == STREAMS_CUDA || family == STREAMS_ROCM ? 1 : 0;
  if (stream == NULL || stream == Py_None) return 0;
  if (family == STREAMS_NONE) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "stream must be None for cpu memory (the device has no streams), not %R",
                     stream);
    return -1;
  }
  long long value = 0;
  if (hurray__py_int_in_range(st, stream, -1, (long long)INTPTR_MAX, "stream", &value) < 0) {
    return -1;
  }
  if (family == STREAMS_QUEUES && value != -1) {
    const char *name = hurray_device_name(tag);
    if (name != NULL) {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                       "stream must be None or -1 for %s memory (DLPack defines no stream "
                       "values for the device), not %lld",
                       name, value);
    } else {
      hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                       "stream must be None or -1 for memory of device tag 0x%02X (DLPack "
                       "defines no stream values for it), not %lld",
                       (unsigned)tag, value);
    }
    return -1;
  }
  if (family == STREAMS_CUDA && value == 0) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "stream=0 is ambiguous for CUDA and disallowed: pass None or 1 (legacy "
                     "default stream), 2 (per-thread default stream) or a stream pointer");
    return -1;
  }
  if (family == STREAMS_ROCM && (value == 1 || value == 2)) {
    hurray__py_raise(st, HURRAY_PY_EXC_INVALID_ARGUMENT,
                     "stream=%lld is not valid for ROCm: pass None or 0 (default stream) or a "
                     "stream pointer",
                     value);
    return -1;
  }
  out->no_sync = value == -1;
  if (value > 0) out->handle = (uintptr_t)value;
  return 0;
}

/* 0: the bytes are safe on the consumer's stream as they are; 1: they are now, the producer
 * having waited for them (hand them over as READY); -1: an exception is set. */
static int stream_ready(HurrayState *st, const HurrayBuffer *buffer,
                        const HurrayPyStream *stream) {
  if (buffer->desc.sync_mode == HURRAY_SYNC_READY || stream->no_sync ||
      (buffer->desc.sync_mode == HURRAY_SYNC_STREAM &&
       (uintptr_t)buffer->sync_handle == stream->handle)) {
    return 0;
  }
  HurrayError error;
  error.message[0] = '\0';
  HurrayDeviceQueue *queue = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = hurray_device_queue_for_buffer(buffer, &queue, &error);
  if (status == HURRAY_OK) status = hurray_device_wait(queue, buffer, &error);
  hurray_device_queue_destroy(queue);
  Py_END_ALLOW_THREADS
  if (status == HURRAY_OK) return 1;
  hurray__py_raise(st, HURRAY_PY_EXC_BUFFER,
                   "the tensor's data is not ready on the consumer's stream (sync mode '%s') "
                   "and the producer cannot wait for it (%s); %s",
                   hurray_sync_mode_name(buffer->desc.sync_mode), error.message,
                   buffer->desc.device_tag == HURRAY_DEVICE_CPU
                       ? "cpu memory takes no stream, so it must be ready first"
                       : "pass stream=-1 to take it with its sync state and synchronise "
                         "yourself");
  return -1;
}

int hurray__py_stream_check(HurrayState *st, PyObject *stream_obj, const HurrayBuffer *buffer) {
  HurrayPyStream stream;
  if (stream_arg(st, stream_obj, buffer->desc.device_tag, &stream) < 0) return -1;
  return stream_ready(st, buffer, &stream);
}
