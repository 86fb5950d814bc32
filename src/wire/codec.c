/* codec.c -- frames and messages of the wire protocol (docs/spec/interchange.md §2-§7):
 * encoders, and decoders of untrusted bytes that check every field, limit and reserved byte. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

const char *hurray__wire_type_name(int type) {
  switch (type) {
    case WIRE_CLIENT_HELLO: return "CLIENT_HELLO";
    case WIRE_SERVER_HELLO: return "SERVER_HELLO";
    case WIRE_AUTH: return "AUTH";
    case WIRE_AUTH_OK: return "AUTH_OK";
    case WIRE_LIST: return "LIST";
    case WIRE_LIST_RESULT: return "LIST_RESULT";
    case WIRE_METADATA: return "METADATA";
    case WIRE_METADATA_RESULT: return "METADATA_RESULT";
    case WIRE_TENSOR_REQUEST: return "TENSOR_REQUEST";
    case WIRE_TENSOR_HEADER: return "TENSOR_HEADER";
    case WIRE_DATA: return "DATA";
    case WIRE_DATA_FD: return "DATA_FD";
    case WIRE_PUT: return "PUT";
    case WIRE_PUT_OK: return "PUT_OK";
    case WIRE_ERROR: return "ERROR";
    case WIRE_GOODBYE: return "GOODBYE";
    default: return NULL;
  }
}

/* ---- frame header ------------------------------------------------------------------------- */

void hurray__wire_header_encode(const WireHeader *h, uint8_t out[WIRE_HEADER_SIZE]) {
  memcpy(out, WIRE_MAGIC, WIRE_MAGIC_SIZE);
  out[4] = h->type;
  out[5] = h->flags;
  out[6] = 0;
  out[7] = 0;
  hurray__store_le64(out + 8, h->request_id);
  hurray__store_le64(out + 16, h->length);
}

/* The largest payload of each type (DATA: the negotiated max_frame). */
static uint64_t payload_limit(uint8_t type, uint64_t max_data) {
  switch (type) {
    case WIRE_DATA: return max_data;
    case WIRE_TENSOR_HEADER:
    case WIRE_PUT: return WIRE_TENSOR_HEADER_MAX;
    default: return WIRE_CONTROL_MAX;
  }
}

int hurray__wire_header_decode(const uint8_t in[WIRE_HEADER_SIZE], uint64_t max_data,
                               WireHeader *out, HurrayError *error) {
  if (memcmp(in, WIRE_MAGIC, WIRE_MAGIC_SIZE) != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "not a Hurray wire frame (bad magic %02x %02x %02x %02x)", in[0], in[1],
                        in[2], in[3]);
  }
  uint8_t type = in[4];
  const char *name = hurray__wire_type_name(type);
  if (name == NULL) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "unknown frame type 0x%02x", type);
  }
  uint8_t flags = in[5];
  bool may_end = type == WIRE_LIST_RESULT || type == WIRE_TENSOR_HEADER || type == WIRE_DATA ||
                 type == WIRE_DATA_FD || type == WIRE_PUT || type == WIRE_METADATA_RESULT;
  if ((flags & ~(may_end ? WIRE_FLAG_END : 0)) != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "%s frame has unknown flags 0x%02x", name, flags);
  }
  if (in[6] != 0 || in[7] != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "%s frame header reserved bytes are not zero",
                        name);
  }
  uint64_t length = hurray__load_le64(in + 16);
  uint64_t limit = payload_limit(type, max_data);
  if (length > limit) {
    return hurray__fail(error, HURRAY_ELIMIT,
                        "%s frame of %" PRIu64 " bytes exceeds the limit of %" PRIu64, name,
                        length, limit);
  }
  out->type = type;
  out->flags = flags;
  out->request_id = hurray__load_le64(in + 8);
  out->length = length;
  return HURRAY_OK;
}

void hurray__wire_frame(FileSink *out, uint8_t type, uint8_t flags, uint64_t request_id,
                        const void *payload, size_t len) {
  uint8_t header[WIRE_HEADER_SIZE];
  WireHeader h = {type, flags, request_id, len};
  hurray__wire_header_encode(&h, header);
  hurray__sink_bytes(out, header, sizeof header);
  hurray__sink_bytes(out, payload, len);
}

/* ---- hellos ------------------------------------------------------------------------------- */

int hurray__wire_devices_fill(WireHello *hello, const uint8_t *tags, size_t ntags,
                              HurrayError *error) {
  hello->ndevices = 0;
  if (ntags == 0 || ntags > WIRE_MAX_DEVICES) {
    return hurray__fail(error, HURRAY_EINVAL, "a peer lists 1 to %d devices, not %zu",
                        WIRE_MAX_DEVICES, ntags);
  }
  for (size_t i = 0; i < ntags; i++) {
    int status = hurray_device_check(tags[i], error);
    if (status != HURRAY_OK) return status;
    for (size_t j = 0; j < i; j++) {
      if (tags[j] == tags[i]) {
        return hurray__fail(error, HURRAY_EINVAL, "device tag 0x%02x listed twice", tags[i]);
      }
    }
    WireDevice *d = &hello->devices[hello->ndevices++];
    memset(d, 0, sizeof *d);
    d->tag = tags[i];
    if (tags[i] >= HURRAY_DEVICE_PRIVATE_FIRST) {
      const char *name = hurray_device_name(tags[i]);
      size_t n = strlen(name);
      memcpy(d->name, name, n);
      d->name_len = (uint8_t)n;
    }
  }
  return HURRAY_OK;
}

int hurray__wire_hello_encode(uint8_t type, const WireHello *hello, FileSink *out,
                              HurrayError *error) {
  if (hello->ndevices == 0 || hello->ndevices > WIRE_MAX_DEVICES) {
    return hurray__fail(error, HURRAY_EINVAL, "a hello lists 1 to %d devices, not %" PRIu32,
                        WIRE_MAX_DEVICES, hello->ndevices);
  }
  FileSink payload = {0};
  hurray__sink_u16(&payload, hello->version_major);
  hurray__sink_u16(&payload, hello->version_minor);
  hurray__sink_u32(&payload, hello->flags);
  hurray__sink_u64(&payload, hello->max_frame);
  hurray__sink_bytes(&payload, hello->nonce, WIRE_NONCE_SIZE);
  hurray__sink_u16(&payload, (uint16_t)hello->ndevices);
  hurray__sink_zeros(&payload, 6);
  for (uint32_t i = 0; i < hello->ndevices; i++) {
    hurray__sink_u8(&payload, hello->devices[i].tag);
    hurray__sink_u8(&payload, hello->devices[i].name_len);
    hurray__sink_bytes(&payload, hello->devices[i].name, hello->devices[i].name_len);
  }
  if (!payload.failed) hurray__wire_frame(out, type, 0, 0, payload.data, payload.len);
  bool failed = payload.failed || out->failed;
  hurray__sink_reset(&payload);
  return failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory encoding a hello") : HURRAY_OK;
}

static bool private_name_ok(const uint8_t *name, size_t n) {
  if (n == 0 || n > 31) return false;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

int hurray__wire_hello_decode(const uint8_t *p, size_t len, WireHello *out, HurrayError *error) {
  if (len < 4) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "hello truncated: %zu bytes", len);
  }
  uint16_t major = hurray__load_le16(p), minor = hurray__load_le16(p + 2);
  if (major != WIRE_VERSION_MAJOR) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "protocol version %u.%u is not supported (this peer speaks %d.%d)", major,
                        minor, WIRE_VERSION_MAJOR, WIRE_VERSION_MINOR);
  }
  if (len < WIRE_HELLO_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "hello truncated: %zu bytes", len);
  }
  out->version_major = major;
  out->version_minor = minor;
  out->flags = hurray__load_le32(p + 4);
  out->max_frame = hurray__load_le64(p + 8);
  memcpy(out->nonce, p + 16, WIRE_NONCE_SIZE);
  uint32_t count = hurray__load_le16(p + 48);
  if (!hurray__all_zero(p + 50, 6)) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "hello reserved bytes are not zero");
  }
  if (out->max_frame < WIRE_MIN_FRAME || out->max_frame > WIRE_MAX_FRAME) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "hello max_frame %" PRIu64 " is outside [%" PRIu64 ", %" PRIu64 "]",
                        out->max_frame, WIRE_MIN_FRAME, WIRE_MAX_FRAME);
  }
  if (count == 0 || count > WIRE_MAX_DEVICES) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "hello lists %" PRIu32 " devices, not 1 to %d",
                        count, WIRE_MAX_DEVICES);
  }
  FileCursor c = {p + WIRE_HELLO_FIXED, len - WIRE_HELLO_FIXED};
  out->ndevices = 0;
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t *e = NULL, *name = NULL;
    if (hurray__take(&c, 2, &e, NULL) != HURRAY_OK || hurray__take(&c, e[1], &name, NULL) != 0) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "hello truncated in device %" PRIu32, i);
    }
    uint8_t tag = e[0], n = e[1];
    bool is_private = tag >= HURRAY_DEVICE_PRIVATE_FIRST && tag <= HURRAY_DEVICE_PRIVATE_LAST;
    if (is_private ? !private_name_ok(name, n) : n != 0) {
      return hurray__fail(error, HURRAY_EPROTOCOL,
                          is_private ? "private device tag 0x%02x has an invalid name"
                                     : "device tag 0x%02x carries a name",
                          tag);
    }
    for (uint32_t j = 0; j < i; j++) {
      if (out->devices[j].tag == tag) {
        return hurray__fail(error, HURRAY_EPROTOCOL, "device tag 0x%02x listed twice", tag);
      }
    }
    WireDevice *d = &out->devices[out->ndevices++];
    memset(d, 0, sizeof *d);
    d->tag = tag;
    d->name_len = n;
    memcpy(d->name, name, n);
  }
  if (c.left != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "hello has %zu trailing bytes", c.left);
  }
  return HURRAY_OK;
}

int hurray__wire_devices_check(const WireHello *peer, HurrayError *error) {
  for (uint32_t i = 0; i < peer->ndevices; i++) {
    const WireDevice *d = &peer->devices[i];
    if (d->tag == HURRAY_DEVICE_INVALID) {
      return hurray__fail(error, HURRAY_EDEVICE, "device tag 0xff is invalid");
    }
    if (d->tag >= HURRAY_DEVICE_RESERVED_FIRST && d->tag <= HURRAY_DEVICE_RESERVED_LAST) {
      return hurray__fail(error, HURRAY_EDEVICE,
                          "device tag 0x%02x is reserved (0x09..0xef): not in this protocol "
                          "version",
                          d->tag);
    }
    if (d->tag >= HURRAY_DEVICE_PRIVATE_FIRST) {
      const char *mine = hurray_device_name(d->tag);
      if (mine == NULL) {
        return hurray__fail(error, HURRAY_EDEVICE,
                            "private device tag 0x%02x ('%s') is not registered here", d->tag,
                            d->name);
      }
      if (strcmp(mine, d->name) != 0) {
        return hurray__fail(error, HURRAY_EDEVICE,
                            "private device tag 0x%02x is '%s' to the peer but '%s' here", d->tag,
                            d->name, mine);
      }
    }
  }
  return HURRAY_OK;
}

/* ---- TENSOR_REQUEST ----------------------------------------------------------------------- */

int hurray__wire_request_encode(const WireRequest *r, FileSink *out, HurrayError *error) {
  int status = hurray__check_name((const uint8_t *)r->name, r->name_len, HURRAY_EINVAL,
                                  "tensor name", error);
  if (status != HURRAY_OK) return status;
  hurray__sink_u8(out, r->preferred_device);
  hurray__sink_u8(out, r->range_kind);
  hurray__sink_u16(out, r->flags);
  hurray__sink_u16(out, (uint16_t)r->name_len);
  hurray__sink_u16(out, 0);
  hurray__sink_u64(out, (uint64_t)r->start);
  hurray__sink_u64(out, (uint64_t)r->stop);
  hurray__sink_u64(out, r->resume_offset);
  hurray__sink_bytes(out, r->name, r->name_len);
  return out->failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
}

int hurray__wire_request_decode(const uint8_t *p, size_t len, WireRequest *out,
                                HurrayError *error) {
  if (len < WIRE_REQUEST_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "TENSOR_REQUEST truncated: %zu bytes", len);
  }
  out->preferred_device = p[0];
  out->range_kind = p[1];
  out->flags = hurray__load_le16(p + 2);
  out->name_len = hurray__load_le16(p + 4);
  out->start = (int64_t)hurray__load_le64(p + 8);
  out->stop = (int64_t)hurray__load_le64(p + 16);
  out->resume_offset = hurray__load_le64(p + 24);
  if (p[6] != 0 || p[7] != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "TENSOR_REQUEST reserved bytes are not zero");
  }
  if (out->range_kind > WIRE_RANGE_BYTES) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "TENSOR_REQUEST range kind %u is unknown",
                        out->range_kind);
  }
  if ((out->flags & ~WIRE_REQUEST_FALLBACK) != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "TENSOR_REQUEST has unknown flags 0x%04x",
                        out->flags);
  }
  if (out->range_kind == WIRE_RANGE_WHOLE && (out->start != 0 || out->stop != 0)) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "TENSOR_REQUEST for a whole tensor has a start or stop");
  }
  if (len - WIRE_REQUEST_FIXED != out->name_len) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "TENSOR_REQUEST name is %zu bytes but the payload holds %zu",
                        out->name_len, len - WIRE_REQUEST_FIXED);
  }
  int status = hurray__check_name(p + WIRE_REQUEST_FIXED, out->name_len, HURRAY_EPROTOCOL,
                                  "TENSOR_REQUEST name", error);
  if (status != HURRAY_OK) return status == HURRAY_ELIMIT ? HURRAY_EPROTOCOL : status;
  memcpy(out->name, p + WIRE_REQUEST_FIXED, out->name_len);
  out->name[out->name_len] = '\0';
  return HURRAY_OK;
}

/* ---- TENSOR_HEADER / PUT ------------------------------------------------------------------ */

int hurray__wire_tensor_encode(const WireTensorHeader *t, FileSink *out, HurrayError *error) {
  hurray__sink_u8(out, t->device);
  hurray__sink_zeros(out, 3);
  hurray__sink_u32(out, t->nbuffers);
  hurray__sink_u64(out, t->total_bytes);
  hurray__sink_u64(out, t->resume_offset);
  hurray__sink_u32(out, t->record_len);
  hurray__sink_u32(out, 0);
  for (uint32_t i = 0; i < t->nbuffers; i++) {
    uint8_t desc[HURRAY_DESC_SIZE];
    int status = hurray_desc_encode(&t->buffers[i].desc, desc, error);
    if (status != HURRAY_OK) return status;
    hurray__sink_bytes(out, desc, sizeof desc);
    hurray__sink_u64(out, t->buffers[i].checksum);
    hurray__sink_u8(out, t->buffers[i].role);
    hurray__sink_zeros(out, 7);
  }
  hurray__sink_bytes(out, t->record, t->record_len);
  return out->failed ? hurray__fail(error, HURRAY_ENOMEM, "out of memory") : HURRAY_OK;
}

int hurray__wire_tensor_decode(const uint8_t *p, size_t len, FileArena *arena, WireTensor *out,
                               HurrayError *error) {
  if (len < WIRE_TENSOR_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "tensor header truncated: %zu bytes", len);
  }
  out->device = p[0];
  out->nbuffers = hurray__load_le32(p + 4);
  out->total_bytes = hurray__load_le64(p + 8);
  out->resume_offset = hurray__load_le64(p + 16);
  uint32_t record_len = hurray__load_le32(p + 24);
  if (!hurray__all_zero(p + 1, 3) || !hurray__all_zero(p + 28, 4)) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "tensor header reserved bytes are not zero");
  }
  if (out->nbuffers > HURRAY_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ELIMIT, "tensor header lists %" PRIu32 " buffers (limit %u)",
                        out->nbuffers, HURRAY_MAX_BUFFERS);
  }
  uint64_t table = (uint64_t)out->nbuffers * WIRE_BUFFER_ENTRY;
  if ((uint64_t)len - WIRE_TENSOR_FIXED != table + record_len) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "tensor header is %zu bytes, not 32 + %" PRIu64 " + %" PRIu32, len, table,
                        record_len);
  }
  out->buffers = hurray__arena_alloc(arena, sizeof(WireBuffer) * (out->nbuffers + 1u));
  FileBufferEntry *entries =
      hurray__arena_alloc(arena, sizeof(FileBufferEntry) * (out->nbuffers + 1u));
  if (out->buffers == NULL || entries == NULL) {
    return hurray__fail(error, HURRAY_ENOMEM, "out of memory decoding a tensor header");
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < out->nbuffers; i++) {
    const uint8_t *e = p + WIRE_TENSOR_FIXED + (size_t)i * WIRE_BUFFER_ENTRY;
    WireBuffer *b = &out->buffers[i];
    int status = hurray_desc_decode(e, &b->desc, error);
    if (status != HURRAY_OK) return hurray__error_prefix(error, status, "buffer %" PRIu32 ": ", i);
    b->checksum = hurray__load_le64(e + 16);
    b->role = e[24];
    if (b->role > HURRAY_ROLE_MIXED || !hurray__all_zero(e + 25, 7)) {
      return hurray__fail(error, HURRAY_EPROTOCOL,
                          "buffer %" PRIu32 ": role %u unknown or reserved bytes not zero", i,
                          b->role);
    }
    if (b->desc.device_tag != out->device) {
      return hurray__fail(error, HURRAY_EPROTOCOL,
                          "buffer %" PRIu32 " is on device 0x%02x, the header says 0x%02x", i,
                          b->desc.device_tag, out->device);
    }
    if (hurray__add_u64(total, b->desc.byte_size, &total)) {
      return hurray__fail(error, HURRAY_EOVERFLOW, "buffer sizes overflow 64 bits");
    }
    entries[i] = (FileBufferEntry){.desc = b->desc, .checksum = b->checksum, .role = b->role};
  }
  if (total != out->total_bytes) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "total_bytes %" PRIu64 " is not the buffers' sum %" PRIu64,
                        out->total_bytes, total);
  }
  if (out->resume_offset > total) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "resume_offset %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                        out->resume_offset, total);
  }
  int status = hurray__record_decode(p + WIRE_TENSOR_FIXED + table, record_len, arena,
                                     &out->record, error);
  if (status != HURRAY_OK) return hurray__error_prefix(error, status, "tensor record: ");
  if (out->record.metadata_len > 0) { /* it pointed into `p`: the arena outlives the payload */
    uint8_t *metadata = hurray__arena_alloc(arena, out->record.metadata_len);
    if (metadata == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    memcpy(metadata, out->record.metadata, out->record.metadata_len);
    out->record.metadata = metadata;
  }
  status = hurray__validate_against_entries(out->record.tensor, entries, out->nbuffers, error);
  if (status != HURRAY_OK) {
    return hurray__error_prefix(error, status, "tensor '%s': ", out->record.name);
  }
  return HURRAY_OK;
}

/* §6.3.1: header_check, from 1.2 on the last 8 bytes of a TENSOR_HEADER or PUT payload. */
void hurray__wire_tensor_frame(FileSink *out, uint8_t type, uint8_t flags, uint64_t request_id,
                               const uint8_t *payload, size_t len, uint16_t minor) {
  bool check = minor >= WIRE_HEADER_CHECK_MINOR;
  size_t start = out->len;
  uint8_t header[WIRE_HEADER_SIZE];
  WireHeader h = {type, flags, request_id, len + (check ? WIRE_HEADER_CHECK_SIZE : 0u)};
  hurray__wire_header_encode(&h, header);
  hurray__sink_bytes(out, header, sizeof header);
  hurray__sink_bytes(out, payload, len);
  if (check && !out->failed) {
    hurray__sink_u64(out, hurray__xxh3(out->data + start, WIRE_HEADER_SIZE + len));
  }
}

int hurray__wire_tensor_check(const WireHeader *h, const uint8_t *p, size_t len, uint16_t minor,
                              size_t *body, HurrayError *error) {
  *body = len;
  if (minor < WIRE_HEADER_CHECK_MINOR) return HURRAY_OK;
  const char *name = hurray__wire_type_name(h->type);
  if (len < WIRE_HEADER_CHECK_SIZE) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "%s of %zu bytes has no room for its header checksum", name, len);
  }
  *body = len - WIRE_HEADER_CHECK_SIZE;
  uint8_t header[WIRE_HEADER_SIZE];
  hurray__wire_header_encode(h, header); /* byte for byte what arrived: decode checked it */
  FileHasher *hasher = hurray__hasher_create();
  if (hasher == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  hurray__hasher_update(hasher, header, sizeof header);
  hurray__hasher_update(hasher, p, *body);
  uint64_t computed = hurray__hasher_digest(hasher), sent = hurray__load_le64(p + *body);
  hurray__hasher_destroy(hasher);
  if (computed != sent) {
    return hurray__fail(error, HURRAY_ECHECKSUM,
                        "%s header checksum mismatch (header_check 0x%016" PRIx64
                        ", the frame hashes to 0x%016" PRIx64 "): corrupted in transit",
                        name, sent, computed);
  }
  return HURRAY_OK;
}

/* ---- DATA_FD ------------------------------------------------------------------------------ */

void hurray__wire_fd_ref_encode(const WireFdRef *r, uint8_t out[WIRE_DATA_FD_SIZE]) {
  memset(out, 0, WIRE_DATA_FD_SIZE);
  hurray__store_le32(out, r->buffer);
  out[4] = r->kind;
  hurray__store_le64(out + 8, r->file_offset);
  hurray__store_le64(out + 16, r->length);
}

int hurray__wire_fd_ref_decode(const uint8_t *p, size_t len, WireFdRef *out, HurrayError *error) {
  if (len != WIRE_DATA_FD_SIZE) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "DATA_FD of %zu bytes, not %d", len,
                        WIRE_DATA_FD_SIZE);
  }
  out->buffer = hurray__load_le32(p);
  out->kind = p[4];
  out->file_offset = hurray__load_le64(p + 8);
  out->length = hurray__load_le64(p + 16);
  uint64_t end = 0;
  if (out->kind > WIRE_FD_MEMFD || !hurray__all_zero(p + 5, 3)) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "DATA_FD kind %u unknown or reserved bytes not zero", out->kind);
  }
  if (out->length == 0 || hurray__add_u64(out->file_offset, out->length, &end) ||
      end > INT64_MAX) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "DATA_FD bytes [%" PRIu64 ", +%" PRIu64 ") are empty or past 2^63",
                        out->file_offset, out->length);
  }
  return HURRAY_OK;
}

/* ---- LIST_RESULT -------------------------------------------------------------------------- */

size_t hurray__wire_list_entry_size(size_t name_len, int32_t ndim) {
  return WIRE_LIST_ENTRY + 8 * (size_t)ndim + (size_t)hurray__pad8(name_len);
}

void hurray__wire_list_entry_encode(FileSink *out, const char *name, size_t name_len,
                                    const HurrayTensorDesc *desc, uint32_t buffers,
                                    uint64_t data_bytes) {
  hurray__sink_u16(out, (uint16_t)name_len);
  hurray__sink_u8(out, (uint8_t)desc->layout);
  hurray__sink_u8(out, desc->dtype);
  hurray__sink_u32(out, buffers);
  hurray__sink_u64(out, data_bytes);
  hurray__sink_u8(out, (uint8_t)desc->ndim);
  hurray__sink_zeros(out, 7);
  for (int32_t k = 0; k < desc->ndim; k++) hurray__sink_u64(out, (uint64_t)desc->shape[k]);
  hurray__sink_bytes(out, name, name_len);
  hurray__sink_pad8(out);
}

int hurray__wire_list_decode(const uint8_t *p, size_t len, HurrayRemoteTensor **items,
                             uint32_t *count, HurrayError *error) {
  FileCursor cur = {p, len};
  const uint8_t *f = NULL;
  if (hurray__take(&cur, WIRE_LIST_FIXED, &f, NULL) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "LIST_RESULT truncated: %zu bytes", len);
  }
  uint32_t k = hurray__load_le32(f);
  /* every entry takes at least its fixed part and 8 bytes of name */
  if (k > cur.left / (WIRE_LIST_ENTRY + 8) || !hurray__all_zero(f + 4, 4)) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "LIST_RESULT of %zu bytes cannot hold %" PRIu32
                        " entries, or its reserved bytes are not zero",
                        len, k);
  }
  if (*count + (uint64_t)k > WIRE_MAX_LIST) {
    return hurray__fail(error, HURRAY_ELIMIT, "a list of more than %u tensors", WIRE_MAX_LIST);
  }
  HurrayRemoteTensor *grown = realloc(*items, ((size_t)*count + k + 1u) * sizeof *grown);
  if (grown == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  *items = grown;
  for (uint32_t i = 0; i < k; i++) {
    const uint8_t *e = NULL, *shape = NULL, *name = NULL;
    HurrayRemoteTensor *t = &grown[*count];
    memset(t, 0, sizeof *t);
    if (hurray__take(&cur, WIRE_LIST_ENTRY, &e, NULL) != HURRAY_OK) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "LIST_RESULT truncated in entry %" PRIu32, i);
    }
    size_t name_len = hurray__load_le16(e);
    uint8_t ndim = e[16];
    if (ndim > HURRAY_MAX_NDIM || !hurray__all_zero(e + 17, 7)) {
      return hurray__fail(error, HURRAY_EPROTOCOL,
                          "LIST_RESULT entry %" PRIu32 ": ndim %u above %d or reserved bytes not "
                          "zero",
                          i, ndim, HURRAY_MAX_NDIM);
    }
    if (hurray__take(&cur, 8u * ndim, &shape, NULL) != HURRAY_OK ||
        hurray__take(&cur, (size_t)hurray__pad8(name_len), &name, NULL) != HURRAY_OK) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "LIST_RESULT truncated in entry %" PRIu32, i);
    }
    int status = hurray__check_name(name, name_len, HURRAY_EPROTOCOL, "listed name", error);
    if (status != HURRAY_OK) return HURRAY_EPROTOCOL;
    if (!hurray__all_zero(name + name_len, (size_t)hurray__pad8(name_len) - name_len)) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "listed name '%.*s' is not zero-padded",
                          (int)name_len, (const char *)name);
    }
    for (uint8_t d = 0; d < ndim; d++) {
      uint64_t extent = hurray__load_le64(shape + 8u * d);
      if (extent > INT64_MAX) {
        return hurray__fail(error, HURRAY_EPROTOCOL, "listed tensor '%.*s' has a negative extent",
                            (int)name_len, (const char *)name);
      }
      t->shape[d] = (int64_t)extent;
    }
    if (hurray_layout_name(e[2]) == NULL || (e[3] != 0 && hurray_dtype_info(e[3]) == NULL)) {
      return hurray__fail(error, HURRAY_EPROTOCOL,
                          "listed tensor '%.*s': unknown %s code %u", (int)name_len,
                          (const char *)name, hurray_layout_name(e[2]) ? "dtype" : "layout",
                          hurray_layout_name(e[2]) ? e[3] : e[2]);
    }
    memcpy(t->name, name, name_len);
    t->layout = e[2];
    t->dtype = e[3];
    t->buffer_count = hurray__load_le32(e + 4);
    t->data_bytes = hurray__load_le64(e + 8);
    t->ndim = ndim;
    (*count)++;
  }
  if (cur.left != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "LIST_RESULT has %zu trailing bytes", cur.left);
  }
  return HURRAY_OK;
}

/* ---- ERROR -------------------------------------------------------------------------------- */

/* ---- METADATA / METADATA_RESULT (1.3) ---------------------------------------------------- */

void hurray__wire_metadata_request_encode(const char *name, size_t name_len, FileSink *out) {
  hurray__sink_u16(out, (uint16_t)name_len);
  hurray__sink_zeros(out, 6);
  hurray__sink_bytes(out, name, name_len);
}

int hurray__wire_metadata_request_decode(const uint8_t *p, size_t len,
                                         char name[HURRAY_MAX_NAME + 1], size_t *name_len,
                                         HurrayError *error) {
  if (len < WIRE_METADATA_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "METADATA truncated: %zu bytes", len);
  }
  size_t n = hurray__load_le16(p);
  if (!hurray__all_zero(p + 2, 6)) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "METADATA reserved bytes are not zero");
  }
  if (len - WIRE_METADATA_FIXED != n) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "METADATA name_length is %zu but the payload holds %zu bytes of name", n,
                        len - WIRE_METADATA_FIXED);
  }
  if (n > 0) {
    int status = hurray__check_name(p + WIRE_METADATA_FIXED, n, HURRAY_EPROTOCOL,
                                    "METADATA name", error);
    if (status != HURRAY_OK) return status == HURRAY_ELIMIT ? HURRAY_EPROTOCOL : status;
  }
  memcpy(name, p + WIRE_METADATA_FIXED, n);
  name[n] = '\0';
  *name_len = n;
  return HURRAY_OK;
}

void hurray__wire_metadata_result_encode(uint32_t total, uint64_t check, const uint8_t *bytes,
                                         size_t n, FileSink *out) {
  hurray__sink_u32(out, total);
  hurray__sink_u32(out, 0);
  hurray__sink_u64(out, check);
  hurray__sink_bytes(out, bytes, n);
}

int hurray__wire_metadata_result_decode(const uint8_t *p, size_t len, uint32_t *total,
                                        uint64_t *check, const uint8_t **bytes, size_t *n,
                                        HurrayError *error) {
  if (len < WIRE_METADATA_RESULT_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "METADATA_RESULT truncated: %zu bytes", len);
  }
  *total = hurray__load_le32(p);
  if (hurray__load_le32(p + 4) != 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "METADATA_RESULT reserved bytes are not zero");
  }
  if (*total > HURRAY_META_MAX_BYTES) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "METADATA_RESULT metadata_length %" PRIu32 " exceeds %u bytes", *total,
                        HURRAY_META_MAX_BYTES);
  }
  *check = hurray__load_le64(p + 8);
  *bytes = p + WIRE_METADATA_RESULT_FIXED;
  *n = len - WIRE_METADATA_RESULT_FIXED;
  if (*n > *total) {
    return hurray__fail(error, HURRAY_EPROTOCOL,
                        "METADATA_RESULT carries %zu bytes of a %" PRIu32 "-byte block", *n,
                        *total);
  }
  return HURRAY_OK;
}

void hurray__wire_error_encode(int code, const char *message, FileSink *out) {
  /* §7.1: at most 1024 bytes of well-formed UTF-8, cut between characters (a few bytes more
   * are read so that a character across the limit is seen whole and left out) */
  uint8_t text[WIRE_MAX_ERROR_MESSAGE];
  size_t n = hurray__utf8_sanitize((const uint8_t *)message,
                                   strnlen(message, WIRE_MAX_ERROR_MESSAGE + 3), text, sizeof text);
  hurray__sink_u32(out, (uint32_t)code);
  hurray__sink_u16(out, (uint16_t)n);
  hurray__sink_u16(out, 0);
  hurray__sink_bytes(out, text, n);
}

int hurray__wire_error_decode(const uint8_t *p, size_t len, HurrayError *error) {
  if (len < WIRE_ERROR_FIXED) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "ERROR truncated: %zu bytes", len);
  }
  uint32_t code = hurray__load_le32(p);
  size_t n = hurray__load_le16(p + 4);
  if (p[6] != 0 || p[7] != 0 || n != len - WIRE_ERROR_FIXED || n > WIRE_MAX_ERROR_MESSAGE ||
      code == HURRAY_OK || code > INT32_MAX) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "malformed ERROR frame");
  }
  /* a message an older sender cut inside its last character keeps its code (§7.1) */
  if (!hurray__utf8_valid(p + 8, n)) {
    n = hurray__utf8_trim(p + 8, n);
    if (!hurray__utf8_valid(p + 8, n)) {
      return hurray__fail(error, HURRAY_EPROTOCOL, "malformed ERROR frame");
    }
  }
  if (strcmp(hurray_status_name((int)code), "HURRAY_UNKNOWN_STATUS") == 0) {
    return hurray__fail(error, HURRAY_EPROTOCOL, "peer: ERROR of unknown status %" PRIu32 ": %.*s",
                        code, (int)n, (const char *)(p + 8));
  }
  return hurray__fail(error, (int)code, "peer: %.*s", (int)n, (const char *)(p + 8));
}
