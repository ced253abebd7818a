/* See frame_check.h. Formats: RFC 8878 (zstd), lz4_Block_format.md (LZ4), Snappy's
 * format_description.txt, RFC 1952 (gzip). */
#include "frame_check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#define ZSTD_MAGIC 0xFD2FB528u
#define ZSTD_SKIPPABLE_MASK 0xFFFFFFF0u
#define ZSTD_SKIPPABLE_MAGIC 0x184D2A50u
#define ZSTD_BLOCK_MAX ((uint64_t)128 << 10)

/* A walk through a chunk: where it is, and where to say what it found. */
typedef struct walk {
  const unsigned char *p;
  size_t size, at;
  char *why;
  size_t len;
} walk;

__attribute__((format(printf, 3, 4))) static int found(const walk *w, int code, const char *format,
                                                       ...) {
  if (w->len) {
    va_list args;
    va_start(args, format);
    vsnprintf(w->why, w->len, format, args);
    va_end(args);
  }
  return code;
}

static size_t left(const walk *w) { return w->size - w->at; }

static uint64_t little_endian(const unsigned char *p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = v << 8 | p[i];
  return v;
}

/* ---- zstd -------------------------------------------------------------------------------- */

/* What a chunk's zstd frames say of the size they decode to. */
typedef struct zstd_sizes {
  uint64_t stated; /* the frames' content sizes, added up */
  int all_stated;  /* every frame states its content size */
  uint64_t least,
      most; /* what the blocks can make: raw and RLE exactly, compressed up to 128 KiB */
} zstd_sizes;

static int zstd_blocks(walk *w, zstd_sizes *z) {
  for (;;) {
    if (left(w) < 3) return found(w, -EBADMSG, "zstd block header cut at byte %zu", w->at);
    uint64_t header = little_endian(w->p + w->at, 3);
    size_t at = w->at;
    w->at += 3;
    unsigned type = (unsigned)(header >> 1) & 3;
    uint64_t block = header >> 3;
    if (type == 3) return found(w, -EBADMSG, "zstd block of the reserved type at byte %zu", at);
    if (block > ZSTD_BLOCK_MAX)
      return found(w, -EBADMSG, "zstd block of %llu bytes at byte %zu (128 KiB at most)",
                   (unsigned long long)block, at);
    uint64_t payload = type == 1 ? 1 : block; /* RLE: one byte, repeated */
    if (payload > left(w))
      return found(w, -EBADMSG, "zstd block at byte %zu runs past the chunk's end", at);
    w->at += (size_t)payload;
    z->least += type == 2 ? 0 : block;
    z->most += type == 2 ? ZSTD_BLOCK_MAX : block;
    if (header & 1) return 0; /* the frame's last block */
  }
}

/* One frame: 1 for a zstd frame, 0 for a skippable one, or an error. */
static int zstd_frame(walk *w, zstd_sizes *z) {
  if (left(w) < 4) return found(w, -EBADMSG, "zstd frame cut at byte %zu", w->at);
  uint32_t magic = (uint32_t)little_endian(w->p + w->at, 4);
  if ((magic & ZSTD_SKIPPABLE_MASK) == ZSTD_SKIPPABLE_MAGIC) {
    if (left(w) < 8) return found(w, -EBADMSG, "zstd skippable frame cut at byte %zu", w->at);
    uint64_t skip = little_endian(w->p + w->at + 4, 4);
    if (skip > left(w) - 8)
      return found(w, -EBADMSG, "zstd skippable frame at byte %zu runs past the end", w->at);
    w->at += 8 + (size_t)skip;
    return 0;
  }
  if (magic != ZSTD_MAGIC) return found(w, -EBADMSG, "no zstd frame at byte %zu", w->at);
  w->at += 4;
  if (left(w) < 1) return found(w, -EBADMSG, "zstd frame header cut at byte %zu", w->at);
  unsigned descriptor = w->p[w->at++];
  if (descriptor & 0x08)
    return found(w, -EBADMSG, "zstd frame header at byte %zu sets a reserved bit", w->at - 1);
  unsigned single_segment = (descriptor >> 5) & 1, size_flag = descriptor >> 6;
  size_t size_bytes = size_flag ? (size_t)1 << size_flag : single_segment;
  size_t dictionary_bytes = (descriptor & 3) == 3 ? 4 : descriptor & 3;
  size_t skipped = !single_segment + dictionary_bytes; /* window descriptor, dictionary id */
  if (left(w) < skipped + size_bytes)
    return found(w, -EBADMSG, "zstd frame header cut at byte %zu", w->at);
  w->at += skipped;
  if (size_bytes) {
    z->stated += little_endian(w->p + w->at, size_bytes) + (size_bytes == 2 ? 256 : 0);
    w->at += size_bytes;
  } else {
    z->all_stated = 0;
  }
  int rc = zstd_blocks(w, z);
  if (rc < 0) return rc;
  if (descriptor & 0x04) { /* a content checksum ends the frame */
    if (left(w) < 4) return found(w, -EBADMSG, "zstd checksum cut at byte %zu", w->at);
    w->at += 4;
  }
  return 1;
}

static int zstd_check(walk *w, uint64_t expected) {
  zstd_sizes z = {.all_stated = 1};
  int frames = 0;
  while (left(w) > 0) {
    int rc = zstd_frame(w, &z);
    if (rc < 0) return rc;
    frames += rc;
  }
  if (!frames) return found(w, -EBADMSG, "no zstd frame in the chunk");
  if (z.all_stated && z.stated != expected)
    return found(w, KVIK_EDECODED_SIZE, "the zstd frames state %llu bytes, not %llu",
                 (unsigned long long)z.stated, (unsigned long long)expected);
  if (expected < z.least || expected > z.most)
    return found(w, KVIK_EDECODED_SIZE, "the zstd blocks make %llu to %llu bytes, not %llu",
                 (unsigned long long)z.least, (unsigned long long)z.most,
                 (unsigned long long)expected);
  return 0;
}

/* ---- LZ4 --------------------------------------------------------------------------------- */

/* A length that goes on in bytes of 255 (the token's 15, then bytes added while they are 255);
 * NULL where the chunk ends first. */
static const unsigned char *lz4_length(const unsigned char *p, const unsigned char *end,
                                       size_t *length) {
  unsigned byte;
  do {
    if (p == end) return NULL;
    byte = *p++;
    *length += byte;
  } while (byte == 255);
  return p;
}

/* Every sequence of the block (a few bytes each: this loop is the check's cost). */
static int lz4_check(walk *w, uint64_t expected) {
  const unsigned char *p = w->p, *end = w->p + w->size;
  uint64_t made = 0;
  for (;;) {
    if (p == end) return found(w, -EBADMSG, "LZ4 sequence cut at byte %zu", w->size);
    unsigned token = *p++;
    size_t literals = token >> 4, match = (token & 15) + 4;
    if (literals == 15 && !(p = lz4_length(p, end, &literals)))
      return found(w, -EBADMSG, "LZ4 length cut at byte %zu", w->size);
    if (literals > (size_t)(end - p))
      return found(w, -EBADMSG, "LZ4 literals at byte %zu run past the chunk's end",
                   (size_t)(p - w->p));
    p += literals;
    made += literals;
    if (p == end) break; /* the last sequence: literals only */
    if (end - p < 2) return found(w, -EBADMSG, "LZ4 match offset cut at byte %zu", w->size);
    size_t offset = (size_t)p[0] | (size_t)p[1] << 8;
    if (offset == 0 || offset > made)
      return found(w, -EBADMSG, "LZ4 match at byte %zu reaches %zu bytes back, %llu made",
                   (size_t)(p - w->p), offset, (unsigned long long)made);
    p += 2;
    if (match == 19 && !(p = lz4_length(p, end, &match)))
      return found(w, -EBADMSG, "LZ4 length cut at byte %zu", w->size);
    made += match;
    if (made > expected) break;
  }
  if (made != expected)
    return found(w, KVIK_EDECODED_SIZE, "the LZ4 block makes %s%llu bytes, not %llu",
                 made > expected ? "over " : "", (unsigned long long)made,
                 (unsigned long long)expected);
  return 0;
}

/* ---- Snappy, gzip ------------------------------------------------------------------------ */

static int snappy_check(walk *w, uint64_t expected) {
  uint64_t length = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (left(w) < 1 || shift > 28)
      return found(w, -EBADMSG, "Snappy length broken at byte %zu", w->at);
    unsigned byte = w->p[w->at++];
    length |= (uint64_t)(byte & 127) << shift;
    if (!(byte & 128)) break;
  }
  if (length != expected)
    return found(w, KVIK_EDECODED_SIZE, "the Snappy chunk states %llu bytes, not %llu",
                 (unsigned long long)length, (unsigned long long)expected);
  return 0;
}

static int gzip_check(walk *w, uint64_t expected) {
  const unsigned char *p = w->p;
  if (w->size < 18) return found(w, -EBADMSG, "gzip member of %zu bytes (18 at least)", w->size);
  if (p[0] != 0x1f || p[1] != 0x8b || p[2] != 8 || (p[3] & 0xe0))
    return found(w, -EBADMSG, "no gzip header (magic, method 8, flags)");
  uint64_t isize = little_endian(p + w->size - 4, 4);
  if (isize != (expected & 0xffffffffu))
    return found(w, KVIK_EDECODED_SIZE, "the gzip trailer states %llu bytes, not %llu (mod 2^32)",
                 (unsigned long long)isize, (unsigned long long)expected);
  return 0;
}

int kvik__frame_checked(kvik_codec codec) {
  return codec == KVIK_CODEC_ZSTD || codec == KVIK_CODEC_LZ4 || codec == KVIK_CODEC_SNAPPY ||
         codec == KVIK_CODEC_GZIP;
}

int kvik__frame_check_walks_bytes(kvik_codec codec) { return codec == KVIK_CODEC_LZ4; }

int kvik__frame_check(kvik_codec codec, const unsigned char *p, size_t size, size_t expected,
                      char *why, size_t len) {
  walk w = {.p = p, .size = size, .why = why, .len = len};
  if (len) why[0] = '\0';
  switch (codec) {
  case KVIK_CODEC_ZSTD: return zstd_check(&w, expected);
  case KVIK_CODEC_LZ4: return lz4_check(&w, expected);
  case KVIK_CODEC_SNAPPY: return snappy_check(&w, expected);
  case KVIK_CODEC_GZIP: return gzip_check(&w, expected);
  default: return 0;
  }
}
