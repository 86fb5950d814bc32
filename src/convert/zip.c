/* zip.c -- the zip container of .npz files (APPNOTE 6.3): reading its directory, streaming
 * members (stored or deflated) with their CRC-32 checked, and writing stored members.
 *
 * Reading trusts nothing: the end of central directory record is the last one whose comment
 * reaches exactly the end of the file; ZIP64 records are used when its locator is there; every
 * central directory entry and local header is read through a bounded cursor; every offset and
 * size is checked against the file, members must lie before the central directory without
 * overlapping, names must be unique and the two headers of a member must agree. Inflating
 * stops at the declared size (a member that inflates further is rejected: no zip bomb can
 * make it write more than it declared), and a declared size beyond what deflate can produce
 * from the compressed bytes is rejected before any work.
 *
 * CRC-32 is computed here (slicing by 8), so that stored members need no library; inflate is
 * zlib's, loaded at run time on the first deflated member (libz.so.1; ADR-073): libhurray.so
 * needs nothing beyond libc at load time. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "convert.h"
#include "dl.h"

/* ---- zlib, loaded at run time ------------------------------------------------------------- */

/* zlib.h gives the types and the macros; the calls go through these pointers (the macro
 * inflateInit2 expands to inflateInit2_, redirected below like the others). */
typedef struct Zlib {
  __typeof__(zlibVersion) *zlibVersion;
  __typeof__(inflateInit2_) *inflateInit2_;
  __typeof__(inflate) *inflate;
  __typeof__(inflateEnd) *inflateEnd;
} Zlib;

#define SYMBOL(name) {#name, offsetof(Zlib, name)}
static const HurrayDlSymbol kZlibSymbols[] = {
    SYMBOL(zlibVersion),
    SYMBOL(inflateInit2_),
    SYMBOL(inflate),
    SYMBOL(inflateEnd),
};
#undef SYMBOL

static Zlib zlib;
static pthread_once_t g_zlib_once = PTHREAD_ONCE_INIT;
static HurrayLoadResult g_zlib;

#define zlibVersion (zlib.zlibVersion)
#define inflateInit2_ (zlib.inflateInit2_)
#define inflate (zlib.inflate)
#define inflateEnd (zlib.inflateEnd)

static void zlib_load_once(void) {
  g_zlib.status = hurray__dl_load_for("reading a deflated .npz member", "libz.so.1", kZlibSymbols,
                                      sizeof kZlibSymbols / sizeof *kZlibSymbols, &zlib,
                                      &g_zlib.error);
  if (g_zlib.status == HURRAY_OK && zlibVersion()[0] != ZLIB_VERSION[0]) {
    g_zlib.status = hurray__fail(&g_zlib.error, HURRAY_EUNSUPPORTED,
                                 "libz.so.1 is zlib %s; Hurray was built for zlib %s",
                                 zlibVersion(), ZLIB_VERSION);
  }
}

static int zlib_load(HurrayError *error) {
  pthread_once(&g_zlib_once, zlib_load_once);
  return hurray__load_result(&g_zlib, error);
}

/* ---- CRC-32 (ISO 3309, the reflected polynomial 0xEDB88320) -------------------------------- */

static uint32_t g_crc_table[8][256]; /* [k][b]: the CRC of byte b followed by k zero bytes */
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_tables(void) {
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_crc_table[0][b] = c;
  }
  for (int k = 1; k < 8; k++) {
    for (int b = 0; b < 256; b++) {
      uint32_t c = g_crc_table[k - 1][b];
      g_crc_table[k][b] = (c >> 8) ^ g_crc_table[0][c & 0xFF];
    }
  }
}

uint32_t hurray__crc32(uint32_t crc, const uint8_t *p, uint64_t n) {
  pthread_once(&g_crc_once, crc_tables);
  uint32_t (*t)[256] = g_crc_table; /* read only, once built */
  crc = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo = crc ^ hurray__load_le32(p), hi = hurray__load_le32(p + 4);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; p++, n--) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

enum {
  SIG_LOCAL = 0x04034b50,
  SIG_CENTRAL = 0x02014b50,
  SIG_EOCD = 0x06054b50,
  SIG_ZIP64_EOCD = 0x06064b50,
  SIG_ZIP64_LOCATOR = 0x07064b50,
  LOCAL_SIZE = 30,
  CENTRAL_SIZE = 46,
  EOCD_SIZE = 22,
  ZIP64_EOCD_SIZE = 56,
  ZIP64_LOCATOR_SIZE = 20,
  EXTRA_ZIP64 = 0x0001,
  FLAG_ENCRYPTED = 1 << 0,
  FLAG_DATA_DESCRIPTOR = 1 << 3,
  FLAG_STRONG_ENCRYPTION = 1 << 6,
  METHOD_STORED = 0,
  METHOD_DEFLATE = 8,
  MAX_COMMENT = 0xFFFF,
};

uint64_t hurray__zip64_threshold = 0xFFFFFFFFu;

/* ---- reading the directory ---------------------------------------------------------------- */

/* A bounded little-endian cursor over a window of the file, for messages by file offset. */
typedef struct ZipCursor {
  const uint8_t *p;
  uint64_t at; /* file offset of p */
  uint64_t left;
} ZipCursor;

static uint16_t take16(ZipCursor *c) {
  uint16_t v = hurray__load_le16(c->p);
  c->p += 2, c->at += 2, c->left -= 2;
  return v;
}
static uint32_t take32(ZipCursor *c) {
  uint32_t v = hurray__load_le32(c->p);
  c->p += 4, c->at += 4, c->left -= 4;
  return v;
}
static uint64_t take64(ZipCursor *c) {
  uint64_t v = hurray__load_le64(c->p);
  c->p += 8, c->at += 8, c->left -= 8;
  return v;
}

/* Fields a ZIP64 extended information extra field replaces when they are all ones. */
typedef struct Zip64Fields {
  uint64_t *size, *compressed, *offset;
  uint32_t *disk;
} Zip64Fields;

/* Walks the extra fields at [p, p + len) (file offset `at`), applying the ZIP64 one. */
static int read_extra(const uint8_t *p, uint64_t len, uint64_t at, Zip64Fields f,
                      HurrayError *error) {
  ZipCursor c = {.p = p, .at = at, .left = len};
  bool zip64_seen = false;
  while (c.left > 0) {
    if (c.left < 4) {
      return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": truncated extra field", c.at);
    }
    uint64_t field_at = c.at;
    uint16_t id = take16(&c), size = take16(&c);
    if (size > c.left) {
      return hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": extra field 0x%04X of %u bytes overruns its header",
                          field_at, id, size);
    }
    if (id == EXTRA_ZIP64) {
      if (zip64_seen) {
        return hurray__fail(error, HURRAY_EFORMAT, "byte %" PRIu64 ": two ZIP64 extra fields",
                            field_at);
      }
      zip64_seen = true;
      ZipCursor z = {.p = c.p, .at = c.at, .left = size};
      uint64_t *const wide[] = {f.size, f.compressed, f.offset};
      for (int i = 0; i < 3; i++) {
        if (wide[i] == NULL || *wide[i] != 0xFFFFFFFFu) continue;
        if (z.left < 8) {
          return hurray__fail(error, HURRAY_EFORMAT,
                              "byte %" PRIu64
                              ": the ZIP64 extra field lacks a 64-bit value its "
                              "header promises",
                              field_at);
        }
        *wide[i] = take64(&z);
      }
      if (f.disk != NULL && *f.disk == 0xFFFF) {
        if (z.left < 4) {
          return hurray__fail(error, HURRAY_EFORMAT,
                              "byte %" PRIu64 ": the ZIP64 extra field lacks the disk number",
                              field_at);
        }
        *f.disk = take32(&z);
      }
    }
    c.p += size, c.at += size, c.left -= size;
  }
  return HURRAY_OK;
}

/* The end records: where the central directory is and how many entries it has. */
typedef struct ZipEnd {
  uint64_t count, cd_offset, cd_size;
  uint64_t end; /* where the central directory must end: the first end record */
} ZipEnd;

static int read_zip64_end(const uint8_t *bytes, uint64_t size, uint64_t eocd, ZipEnd *z,
                          HurrayError *error) {
  uint64_t at = eocd - ZIP64_LOCATOR_SIZE;
  ZipCursor c = {.p = bytes + at, .at = at, .left = ZIP64_LOCATOR_SIZE};
  take32(&c);
  uint32_t disk = take32(&c);
  uint64_t record = take64(&c);
  uint32_t disks = take32(&c);
  if (disk != 0 || disks != 1) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": multi-disk zip archives are not supported", at);
  }
  if (record > at || at - record < ZIP64_EOCD_SIZE) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": the ZIP64 locator points at %" PRIu64
                        ", where no ZIP64 end record fits before it",
                        at, record);
  }
  c = (ZipCursor){.p = bytes + record, .at = record, .left = at - record};
  if (take32(&c) != SIG_ZIP64_EOCD) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": no ZIP64 end of central directory record there", record);
  }
  uint64_t remaining = take64(&c);
  if (remaining < ZIP64_EOCD_SIZE - 12 || remaining > c.left) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": the ZIP64 end record's size %" PRIu64 " is wrong",
                        record, remaining);
  }
  take16(&c), take16(&c);
  uint32_t this_disk = take32(&c), cd_disk = take32(&c);
  uint64_t on_disk = take64(&c);
  z->count = take64(&c);
  z->cd_size = take64(&c);
  z->cd_offset = take64(&c);
  if (this_disk != 0 || cd_disk != 0 || on_disk != z->count) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": multi-disk zip archives are not supported", record);
  }
  z->end = record;
  (void)size;
  return HURRAY_OK;
}

static int read_end(const uint8_t *bytes, uint64_t size, ZipEnd *z, HurrayError *error) {
  if (size < EOCD_SIZE) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "not a zip file: %" PRIu64 " bytes is shorter than the 22-byte end record",
                        size);
  }
  /* The last record whose comment ends exactly at the end of the file. */
  uint64_t lowest = size - EOCD_SIZE > MAX_COMMENT ? size - EOCD_SIZE - MAX_COMMENT : 0;
  uint64_t eocd = UINT64_MAX;
  for (uint64_t at = size - EOCD_SIZE + 1; at-- > lowest;) {
    if (hurray__load_le32(bytes + at) == SIG_EOCD &&
        hurray__load_le16(bytes + at + 20) == size - EOCD_SIZE - at) {
      eocd = at;
      break;
    }
  }
  if (eocd == UINT64_MAX) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "not a zip file: no end of central directory record in the last %" PRIu64
                        " bytes (truncated?)",
                        size - lowest);
  }
  ZipCursor c = {.p = bytes + eocd + 4, .at = eocd + 4, .left = EOCD_SIZE - 4};
  uint16_t disk = take16(&c), cd_disk = take16(&c), on_disk = take16(&c), count = take16(&c);
  uint32_t cd_size = take32(&c), cd_offset = take32(&c);
  if (disk != 0 && disk != 0xFFFF) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": multi-disk zip archives are not supported", eocd);
  }
  *z = (ZipEnd){.count = count, .cd_offset = cd_offset, .cd_size = cd_size, .end = eocd};
  bool locator = eocd >= ZIP64_LOCATOR_SIZE &&
                 hurray__load_le32(bytes + eocd - ZIP64_LOCATOR_SIZE) == SIG_ZIP64_LOCATOR;
  if (locator) return read_zip64_end(bytes, size, eocd, z, error);
  if (cd_disk != 0 || on_disk != count) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "byte %" PRIu64 ": multi-disk zip archives are not supported", eocd);
  }
  if (count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": the end record defers to ZIP64 records that are missing",
                        eocd);
  }
  return HURRAY_OK;
}

/* A central directory entry at the cursor; advances past it. */
static int read_central(ZipCursor *c, FileArena *arena, ZipMember *m, HurrayError *error) {
  uint64_t at = c->at;
  if (c->left < CENTRAL_SIZE || hurray__load_le32(c->p) != SIG_CENTRAL) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": expected a central directory entry", at);
  }
  take32(c);
  take16(c), take16(c);
  uint16_t flags = take16(c), method = take16(c);
  take16(c), take16(c);
  uint32_t crc = take32(c);
  uint64_t compressed = take32(c), usize = take32(c);
  uint16_t name_len = take16(c), extra_len = take16(c), comment_len = take16(c);
  uint32_t disk = take16(c);
  take16(c), take32(c);
  uint64_t offset = take32(c);
  if ((uint64_t)name_len + extra_len + comment_len > c->left) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64
                        ": the entry's name, extra and comment overrun the "
                        "central directory",
                        at);
  }
  const uint8_t *name = c->p;
  int status = read_extra(c->p + name_len, extra_len, c->at + name_len,
                          (Zip64Fields){&usize, &compressed, &offset, &disk}, error);
  if (status != HURRAY_OK) return status;
  c->p += name_len + extra_len + comment_len;
  c->at += (uint64_t)name_len + extra_len + comment_len;
  c->left -= (uint64_t)name_len + extra_len + comment_len;
  if (name_len == 0 || memchr(name, 0, name_len) != NULL || !hurray__utf8_valid(name, name_len)) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "byte %" PRIu64 ": a member name is empty, holds NUL or is not UTF-8", at);
  }
  m->name = hurray__arena_strndup(arena, name, name_len);
  if (m->name == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  m->name_len = name_len;
  if (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION)) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "member '%.64s' is encrypted", m->name);
  }
  if (method != METHOD_STORED && method != METHOD_DEFLATE) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "member '%.64s' uses compression method %u (stored and deflate are read)",
                        m->name, method);
  }
  if (disk != 0) {
    return hurray__fail(error, HURRAY_EUNSUPPORTED,
                        "member '%.64s' starts on disk %" PRIu32
                        ": multi-disk archives are not "
                        "supported",
                        m->name, disk);
  }
  if (method == METHOD_STORED && compressed != usize) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "member '%.64s' is stored but its sizes differ (%" PRIu64 " and %" PRIu64
                        ")",
                        m->name, compressed, usize);
  }
  uint64_t limit = 0;
  if (method == METHOD_DEFLATE &&
      (hurray__mul_u64(compressed, CONV_ZIP_MAX_RATIO, &limit) || usize > limit)) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "member '%.64s' declares %" PRIu64 " bytes from %" PRIu64
                        " compressed, more than deflate can produce (a zip bomb?)",
                        m->name, usize, compressed);
  }
  m->method = method;
  m->crc32 = crc;
  m->compressed_size = compressed;
  m->size = usize;
  m->header_offset = offset;
  return HURRAY_OK;
}

/* The local header of `m`: where its data starts, and that it agrees with the central one. */
static int read_local(const uint8_t *bytes, uint64_t cd_offset, ZipMember *m, HurrayError *error) {
  uint64_t at = m->header_offset;
  if (at > cd_offset || cd_offset - at < LOCAL_SIZE) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "member '%.64s': its local header at %" PRIu64
                        " is not before the central directory (at %" PRIu64 ")",
                        m->name, at, cd_offset);
  }
  ZipCursor c = {.p = bytes + at, .at = at, .left = cd_offset - at};
  if (take32(&c) != SIG_LOCAL) {
    return hurray__fail(error, HURRAY_EFORMAT, "member '%.64s': no local header at byte %" PRIu64,
                        m->name, at);
  }
  take16(&c);
  uint16_t flags = take16(&c), method = take16(&c);
  take16(&c), take16(&c);
  uint32_t crc = take32(&c);
  uint64_t compressed = take32(&c), usize = take32(&c);
  uint16_t name_len = take16(&c), extra_len = take16(&c);
  if ((uint64_t)name_len + extra_len > c.left) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "member '%.64s': its local header at byte %" PRIu64
                        " overruns the central directory",
                        m->name, at);
  }
  if (name_len != m->name_len || memcmp(c.p, m->name, name_len) != 0) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "member '%.64s': the local header at byte %" PRIu64 " names another file",
                        m->name, at);
  }
  int status = read_extra(c.p + name_len, extra_len, c.at + name_len,
                          (Zip64Fields){&usize, &compressed, NULL, NULL}, error);
  if (status != HURRAY_OK) return status;
  bool sizes_deferred = (flags & FLAG_DATA_DESCRIPTOR) != 0;
  if (method != m->method || (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION)) ||
      (!sizes_deferred &&
       (crc != m->crc32 || compressed != m->compressed_size || usize != m->size))) {
    return hurray__fail(error, HURRAY_EFORMAT,
                        "member '%.64s': the local header at byte %" PRIu64
                        " disagrees with the central directory",
                        m->name, at);
  }
  m->data_offset = at + LOCAL_SIZE + name_len + extra_len;
  if (m->compressed_size > cd_offset - m->data_offset) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "member '%.64s': its %" PRIu64 " bytes at byte %" PRIu64
                        " run past the central directory (at %" PRIu64 ")",
                        m->name, m->compressed_size, m->data_offset, cd_offset);
  }
  return HURRAY_OK;
}

static int compare_offsets(const void *a, const void *b) {
  const ZipMember *x = *(const ZipMember *const *)a, *y = *(const ZipMember *const *)b;
  return (x->header_offset > y->header_offset) - (x->header_offset < y->header_offset);
}

static int compare_member_names(const void *a, const void *b) {
  const ZipMember *x = *(const ZipMember *const *)a, *y = *(const ZipMember *const *)b;
  return hurray__compare_bytes(x->name, x->name_len, y->name, y->name_len);
}

/* No two members overlap; no two share a name. */
static int check_members(ZipDirectory *d, HurrayError *error) {
  if (d->count < 2) return HURRAY_OK;
  const ZipMember **sorted = malloc(d->count * sizeof *sorted);
  if (sorted == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < d->count; i++) sorted[i] = &d->members[i];
  int status = HURRAY_OK;
  qsort(sorted, d->count, sizeof *sorted, compare_offsets);
  for (uint32_t i = 1; i < d->count && status == HURRAY_OK; i++) {
    const ZipMember *a = sorted[i - 1], *b = sorted[i];
    if (b->header_offset < a->data_offset + a->compressed_size) {
      status =
          hurray__fail(error, HURRAY_EFORMAT,
                       "members '%.64s' and '%.64s' overlap (at bytes %" PRIu64 " and %" PRIu64 ")",
                       a->name, b->name, a->header_offset, b->header_offset);
    }
  }
  qsort(sorted, d->count, sizeof *sorted, compare_member_names);
  for (uint32_t i = 1; i < d->count && status == HURRAY_OK; i++) {
    if (compare_member_names(&sorted[i - 1], &sorted[i]) == 0) {
      status =
          hurray__fail(error, HURRAY_EFORMAT, "two members are named '%.64s'", sorted[i]->name);
    }
  }
  free(sorted);
  return status;
}

int hurray__zip_read(const uint8_t *bytes, uint64_t size, FileArena *arena, ZipDirectory *out,
                     HurrayError *error) {
  ZipEnd z = {0};
  int status = read_end(bytes, size, &z, error);
  if (status != HURRAY_OK) return status;
  uint64_t cd_end = 0;
  if (hurray__add_u64(z.cd_offset, z.cd_size, &cd_end) || cd_end > z.end) {
    return hurray__fail(error, HURRAY_EBOUNDS,
                        "the central directory [%" PRIu64 ", +%" PRIu64
                        ") is not inside the file before its end record (at %" PRIu64 ")",
                        z.cd_offset, z.cd_size, z.end);
  }
  if (z.count > z.cd_size / CENTRAL_SIZE || z.count > HURRAY_FILE_MAX_TENSORS) {
    return hurray__fail(error, z.count > HURRAY_FILE_MAX_TENSORS ? HURRAY_ELIMIT : HURRAY_EFORMAT,
                        "%" PRIu64 " members cannot fit in a central directory of %" PRIu64
                        " bytes, or exceed %u",
                        z.count, z.cd_size, HURRAY_FILE_MAX_TENSORS);
  }
  ZipMember *members = hurray__arena_alloc(arena, (size_t)z.count * sizeof *members);
  if (members == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  ZipCursor c = {.p = bytes + z.cd_offset, .at = z.cd_offset, .left = z.cd_size};
  for (uint64_t i = 0; i < z.count && status == HURRAY_OK; i++) {
    members[i] = (ZipMember){0};
    status = read_central(&c, arena, &members[i], error);
    if (status == HURRAY_OK) status = read_local(bytes, z.cd_offset, &members[i], error);
  }
  if (status == HURRAY_OK && c.left != 0) {
    status = hurray__fail(error, HURRAY_EFORMAT,
                          "byte %" PRIu64 ": %" PRIu64 " bytes follow the %" PRIu64
                          " entries the end record announces",
                          c.at, c.left, z.count);
  }
  *out = (ZipDirectory){.count = (uint32_t)z.count, .members = members};
  if (status == HURRAY_OK) status = check_members(out, error);
  return status;
}

/* ---- streaming members -------------------------------------------------------------------- */

enum { INFLATE_CHUNK = 1u << 20, READ_STEP = 4u << 20 };

/* Hands the part of [at, at + n) of the member's data that lies in [skip, skip + len) on. */
static int deliver(uint64_t at, const uint8_t *p, size_t n, uint64_t skip, uint64_t len,
                   ConvChunkFn fn, void *context, HurrayError *error) {
  if (fn == NULL || at + n <= skip || at >= skip + len) return HURRAY_OK;
  uint64_t from = at < skip ? skip - at : 0;
  uint64_t to = at + n > skip + len ? skip + len - at : n;
  return fn(context, p + from, (size_t)(to - from), error);
}

static int check_crc(const ZipMember *m, uint32_t crc, HurrayError *error) {
  if (crc == m->crc32) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ECHECKSUM,
                      "member '%.64s': CRC-32 mismatch (stored %08" PRIX32 ", computed %08" PRIX32
                      ")",
                      m->name, m->crc32, crc);
}

/* Runs inflate over the member, read from the mapping `bytes` (a peek at open) or from `file`
 * with pread in READ_STEP chunks (streaming), handing each chunk of output to `out`. Stops after `stop`
 * output bytes when `stop` is below the member's size (a peek); otherwise requires the stream
 * to end exactly at the declared sizes. */
typedef int (*InflateFn)(void *context, uint64_t at, const uint8_t *p, size_t n,
                         HurrayError *error);

static int inflate_member(const uint8_t *bytes, const FileSource *file, const ZipMember *m,
                          uint64_t stop, InflateFn out, void *context, HurrayError *error) {
  /* A peek needs no more than it asks for (a .npz of many small members peeks at each). */
  size_t chunk = stop < INFLATE_CHUNK ? (size_t)stop + 1 : INFLATE_CHUNK;
  uint8_t *buffer = malloc(chunk), *input = file != NULL ? malloc(READ_STEP) : NULL;
  z_stream z = {0};
  int status = zlib_load(error);
  if (status != HURRAY_OK || buffer == NULL || (file != NULL && input == NULL) ||
      inflateInit2(&z, -MAX_WBITS) != Z_OK) {
    free(buffer);
    free(input);
    return status != HURRAY_OK ? status : hurray__fail(error, HURRAY_ENOMEM, "out of memory (inflate)");
  }
  uint64_t in_at = m->data_offset, in_left = m->compressed_size, produced = 0;
  int rc = Z_OK;
  while (status == HURRAY_OK && rc != Z_STREAM_END && produced < stop) {
    if (z.avail_in == 0) {
      uInt step = in_left > READ_STEP ? READ_STEP : (uInt)in_left;
      if (file != NULL) {
        status = hurray__source_read(file, in_at, input, step, error);
        if (status != HURRAY_OK) break;
        z.next_in = input;
      } else {
        z.next_in = (Bytef *)(uintptr_t)(bytes + in_at);
      }
      z.avail_in = step;
      in_at += step;
      in_left -= step;
    }
    z.next_out = buffer;
    z.avail_out = (uInt)chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    size_t n = chunk - z.avail_out;
    if (rc == Z_BUF_ERROR && n == 0 && z.avail_in == 0 && in_left == 0) rc = Z_DATA_ERROR;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      status = hurray__fail(error, HURRAY_EFORMAT, "member '%.64s': bad deflate data: %s", m->name,
                            z.msg != NULL ? z.msg : "the stream ends early");
      break;
    }
    if (n > m->size - produced) {
      status = hurray__fail(error, HURRAY_EFORMAT,
                            "member '%.64s' inflates past its declared %" PRIu64 " bytes", m->name,
                            m->size);
      break;
    }
    if (n > 0) status = out(context, produced, buffer, n, error);
    produced += n;
  }
  if (status == HURRAY_OK && stop >= m->size &&
      (rc != Z_STREAM_END || produced != m->size || in_left != 0 || z.avail_in != 0)) {
    status = hurray__fail(
        error, HURRAY_EFORMAT,
        "member '%.64s': the deflate stream gives %" PRIu64 " bytes of %" PRIu64 " declared%s",
        m->name, produced, m->size,
        rc == Z_STREAM_END && produced == m->size ? ", with compressed bytes left over" : "");
  }
  inflateEnd(&z);
  free(buffer);
  free(input);
  return status;
}

typedef struct StreamState {
  uint32_t crc;
  uint64_t skip, len;
  uint64_t at; /* of a stored member: the next byte's offset in it */
  ConvChunkFn fn;
  void *context;
} StreamState;

static int stream_inflated(void *context, uint64_t at, const uint8_t *p, size_t n,
                           HurrayError *error) {
  StreamState *s = context;
  s->crc = hurray__crc32(s->crc, p, n);
  return deliver(at, p, n, s->skip, s->len, s->fn, s->context, error);
}

static int stream_stored(void *context, const uint8_t *p, size_t n, HurrayError *error) {
  StreamState *s = context;
  int status = stream_inflated(s, s->at, p, n, error);
  s->at += n;
  return status;
}

int hurray__zip_stream(const FileSource *file, const ZipMember *m, uint64_t skip, uint64_t len,
                       ConvChunkFn fn, void *context, HurrayError *error) {
  if (skip > m->size || len > m->size - skip) {
    return hurray__fail(error, HURRAY_EINVAL, "member '%.64s': bytes past its end requested",
                        m->name);
  }
  StreamState s = {.skip = skip, .len = len, .fn = fn, .context = context};
  int status =
      m->method == METHOD_DEFLATE
          ? inflate_member(NULL, file, m, UINT64_MAX, stream_inflated, &s, error)
          : hurray__stream_file(file, m->data_offset, m->size, 0, NULL, stream_stored, &s, error);
  return status == HURRAY_OK ? check_crc(m, s.crc, error) : status;
}

typedef struct PeekState {
  uint8_t *out;
  size_t cap, got;
} PeekState;

static int peek_chunk(void *context, uint64_t at, const uint8_t *p, size_t n, HurrayError *error) {
  (void)error;
  PeekState *s = context;
  if (at < s->cap) {
    size_t take = s->cap - (size_t)at < n ? s->cap - (size_t)at : n;
    memcpy(s->out + at, p, take);
    s->got = (size_t)at + take;
  }
  return HURRAY_OK;
}

int hurray__zip_peek(const uint8_t *bytes, const ZipMember *m, uint8_t *out, size_t cap,
                     size_t *got, HurrayError *error) {
  if (m->method == METHOD_STORED) {
    *got = m->size < cap ? (size_t)m->size : cap;
    if (*got > 0) memcpy(out, bytes + m->data_offset, *got);
    return HURRAY_OK;
  }
  PeekState s = {.out = out, .cap = cap};
  int status = inflate_member(bytes, NULL, m, cap, peek_chunk, &s, error);
  *got = s.got;
  return status;
}

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct WrittenMember {
  char *name;
  size_t name_len;
  uint32_t crc;
  uint64_t size, offset;
} WrittenMember;

struct ZipWriter {
  FileOutput *out;
  WrittenMember *members;
  uint32_t count, capacity;
  /* the open member */
  bool open;
  uint32_t crc;
  uint64_t declared, written;
};

/* DOS date 1980-01-01, time 00:00: fixed, so equal inputs give equal files. */
enum {
  DOS_TIME = 0,
  DOS_DATE = (0 << 9) | (1 << 5) | 1,
  VERSION = 20,
  VERSION_ZIP64 = 45,
  MADE_BY = (3 << 8) | 20 /* unix, 2.0 */
};

int hurray__zip_writer_create(FileOutput *out, ZipWriter **writer, HurrayError *error) {
  ZipWriter *w = calloc(1, sizeof *w);
  if (w == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  w->out = out;
  *writer = w;
  return HURRAY_OK;
}

void hurray__zip_writer_destroy(ZipWriter *w) {
  if (w == NULL) return;
  for (uint32_t i = 0; i < w->count; i++) free(w->members[i].name);
  free(w->members);
  free(w);
}

static bool wide(uint64_t v) {
  return v >= hurray__zip64_threshold || v >= 0xFFFFFFFFu;
}

int hurray__zip_writer_begin(ZipWriter *w, const char *name, size_t name_len, uint64_t size,
                             HurrayError *error) {
  if (w->count == HURRAY_FILE_MAX_TENSORS) {
    return hurray__fail(error, HURRAY_ELIMIT, "a .npz holds at most %u members here",
                        HURRAY_FILE_MAX_TENSORS);
  }
  if (w->count == w->capacity) {
    uint32_t capacity = w->capacity ? w->capacity * 2 : 16;
    WrittenMember *grown = realloc(w->members, capacity * sizeof *grown);
    if (grown == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
    w->members = grown;
    w->capacity = capacity;
  }
  WrittenMember *m = &w->members[w->count];
  *m = (WrittenMember){.name = malloc(name_len + 1),
                       .name_len = name_len,
                       .size = size,
                       .offset = hurray__output_position(w->out)};
  if (m->name == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  memcpy(m->name, name, name_len);
  m->name[name_len] = '\0';
  w->count++;
  bool zip64 = wide(size);
  uint8_t h[LOCAL_SIZE + 20];
  hurray__store_le32(h, SIG_LOCAL);
  hurray__store_le16(h + 4, zip64 ? VERSION_ZIP64 : VERSION);
  hurray__store_le16(h + 6, 0);
  hurray__store_le16(h + 8, METHOD_STORED);
  hurray__store_le16(h + 10, DOS_TIME);
  hurray__store_le16(h + 12, DOS_DATE);
  hurray__store_le32(h + 14, 0); /* CRC-32, patched at the end */
  hurray__store_le32(h + 18, zip64 ? 0xFFFFFFFFu : (uint32_t)size);
  hurray__store_le32(h + 22, zip64 ? 0xFFFFFFFFu : (uint32_t)size);
  hurray__store_le16(h + 26, (uint16_t)name_len);
  hurray__store_le16(h + 28, zip64 ? 20 : 0);
  size_t extra = 0;
  if (zip64) { /* a local ZIP64 field holds both sizes */
    hurray__store_le16(h + 30, EXTRA_ZIP64);
    hurray__store_le16(h + 32, 16);
    hurray__store_le64(h + 34, size);
    hurray__store_le64(h + 42, size);
    extra = 20;
  }
  int status = hurray__output_write(w->out, h, LOCAL_SIZE, error);
  if (status == HURRAY_OK) status = hurray__output_write(w->out, name, name_len, error);
  if (status == HURRAY_OK) status = hurray__output_write(w->out, h + LOCAL_SIZE, extra, error);
  w->open = true;
  w->crc = 0;
  w->declared = size;
  w->written = 0;
  return status;
}

int hurray__zip_writer_write(void *writer, const uint8_t *bytes, size_t len, HurrayError *error) {
  ZipWriter *w = writer;
  if (len > w->declared - w->written) {
    return hurray__fail(error, HURRAY_EINVAL, "member '%.64s' is longer than declared",
                        w->members[w->count - 1].name);
  }
  w->crc = hurray__crc32(w->crc, bytes, len);
  w->written += len;
  return hurray__output_write(w->out, bytes, len, error);
}

int hurray__zip_writer_end(ZipWriter *w, HurrayError *error) {
  WrittenMember *m = &w->members[w->count - 1];
  w->open = false;
  if (w->written != w->declared) {
    return hurray__fail(error, HURRAY_EINVAL, "member '%.64s' is shorter than declared", m->name);
  }
  m->crc = w->crc;
  uint8_t crc[4];
  hurray__store_le32(crc, w->crc);
  return hurray__output_patch(w->out, m->offset + 14, crc, 4, error);
}

int hurray__zip_writer_finish(ZipWriter *w, HurrayError *error) {
  uint64_t cd_offset = hurray__output_position(w->out);
  int status = HURRAY_OK;
  for (uint32_t i = 0; i < w->count && status == HURRAY_OK; i++) {
    const WrittenMember *m = &w->members[i];
    bool sizes = wide(m->size), offset = wide(m->offset);
    uint8_t h[CENTRAL_SIZE + 4 + 24];
    size_t extra = 0;
    if (sizes || offset) {
      uint8_t *e = h + CENTRAL_SIZE;
      hurray__store_le16(e, EXTRA_ZIP64);
      extra = 4;
      if (sizes) {
        hurray__store_le64(e + extra, m->size);
        hurray__store_le64(e + extra + 8, m->size);
        extra += 16;
      }
      if (offset) {
        hurray__store_le64(e + extra, m->offset);
        extra += 8;
      }
      hurray__store_le16(e + 2, (uint16_t)(extra - 4));
    }
    hurray__store_le32(h, SIG_CENTRAL);
    hurray__store_le16(h + 4, MADE_BY);
    hurray__store_le16(h + 6, extra > 0 ? VERSION_ZIP64 : VERSION);
    hurray__store_le16(h + 8, 0);
    hurray__store_le16(h + 10, METHOD_STORED);
    hurray__store_le16(h + 12, DOS_TIME);
    hurray__store_le16(h + 14, DOS_DATE);
    hurray__store_le32(h + 16, m->crc);
    hurray__store_le32(h + 20, sizes ? 0xFFFFFFFFu : (uint32_t)m->size);
    hurray__store_le32(h + 24, sizes ? 0xFFFFFFFFu : (uint32_t)m->size);
    hurray__store_le16(h + 28, (uint16_t)m->name_len);
    hurray__store_le16(h + 30, (uint16_t)extra);
    hurray__store_le16(h + 32, 0);           /* comment */
    hurray__store_le16(h + 34, 0);           /* disk */
    hurray__store_le16(h + 36, 0);           /* internal attributes */
    hurray__store_le32(h + 38, 0644u << 16); /* rw-r--r-- */
    hurray__store_le32(h + 42, offset ? 0xFFFFFFFFu : (uint32_t)m->offset);
    status = hurray__output_write(w->out, h, CENTRAL_SIZE, error);
    if (status == HURRAY_OK) status = hurray__output_write(w->out, m->name, m->name_len, error);
    if (status == HURRAY_OK) status = hurray__output_write(w->out, h + CENTRAL_SIZE, extra, error);
  }
  if (status != HURRAY_OK) return status;
  uint64_t cd_end = hurray__output_position(w->out), cd_size = cd_end - cd_offset;
  bool zip64 = w->count >= 0xFFFF || wide(cd_offset) || wide(cd_size);
  uint8_t e[ZIP64_EOCD_SIZE + ZIP64_LOCATOR_SIZE + EOCD_SIZE];
  size_t n = 0;
  if (zip64) {
    hurray__store_le32(e, SIG_ZIP64_EOCD);
    hurray__store_le64(e + 4, ZIP64_EOCD_SIZE - 12);
    hurray__store_le16(e + 12, MADE_BY);
    hurray__store_le16(e + 14, VERSION_ZIP64);
    hurray__store_le32(e + 16, 0);
    hurray__store_le32(e + 20, 0);
    hurray__store_le64(e + 24, w->count);
    hurray__store_le64(e + 32, w->count);
    hurray__store_le64(e + 40, cd_size);
    hurray__store_le64(e + 48, cd_offset);
    hurray__store_le32(e + 56, SIG_ZIP64_LOCATOR);
    hurray__store_le32(e + 60, 0);
    hurray__store_le64(e + 64, cd_end);
    hurray__store_le32(e + 72, 1);
    n = ZIP64_EOCD_SIZE + ZIP64_LOCATOR_SIZE;
  }
  uint8_t *r = e + n;
  hurray__store_le32(r, SIG_EOCD);
  hurray__store_le16(r + 4, 0);
  hurray__store_le16(r + 6, 0);
  hurray__store_le16(r + 8, zip64 ? 0xFFFF : (uint16_t)w->count);
  hurray__store_le16(r + 10, zip64 ? 0xFFFF : (uint16_t)w->count);
  hurray__store_le32(r + 12, zip64 ? 0xFFFFFFFFu : (uint32_t)cd_size);
  hurray__store_le32(r + 16, zip64 ? 0xFFFFFFFFu : (uint32_t)cd_offset);
  hurray__store_le16(r + 20, 0);
  return hurray__output_write(w->out, e, n + EOCD_SIZE, error);
}
