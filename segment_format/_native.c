/*
 * Compiled columnar kernel for segment_format.
 *
 * decode_v2(data, start, verify_crc, max_rows, skip_records, decompress, data_limit, partial_ok,
 *           key_bytes, value_bytes, flags)
 *   walks magic-2 record batches in `data` from byte `start`, checks each header and CRC-32C, hands
 *   compressed record sections to the Python callable `decompress[codec](memoryview) -> bytes-like`,
 *   and parses every record into column buffers (see `Columns`).  It returns a dict of buffers that
 *   segment_format/columnar.py wraps zero-copy into pyarrow arrays.  It stops at the end of `data`, at a
 *   legacy (magic 0/1) entry, after `max_rows` rows, before a column's data would exceed
 *   `data_limit` bytes (Arrow `binary` uses 32-bit offsets), or (with partial_ok) at a batch cut short
 *   by the end of `data` (streaming).  The projection (key_bytes, value_bytes, flags; see `Opts`) says what
 *   of each record is materialised: a validation policy that reads headers only gets no key or value
 *   columns, one that reads 5 value bytes gets 5 bytes per value; records are walked whole regardless.
 *
 * Every varint, length and count is bounds-checked against the bytes actually present; nothing is
 * allocated from a claimed size before it is checked.  Malformed input raises DecodeError(position,
 * reason) where position is the byte index in `data` (the batch position for compressed batches).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#define HAVE_PREAD_INTO 1
#endif

#if defined(__linux__)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/mman.h>
#define USE_MMAP 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif

/* ------------------------------------------------------------------------------------------------ */
/* CRC-32C (Castagnoli), hardware on x86-64 with SSE4.2, slicing-by-8 table otherwise.                */

static uint32_t crc_table[8][256];
static int crc_hw = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    }
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

/* Advancing a CRC register over runs of zero bytes is linear: build the 32x32 GF(2) operator for `len`
   zero bytes by repeated squaring of the one-zero-bit operator, then tabulate it per input byte so a
   shift costs four lookups.  This lets three independent CRC streams run in parallel (the crc32
   instruction has a latency of 3 cycles but a throughput of 1) and be combined afterwards. */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_zeros_long[4][256], crc_zeros_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1) sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *out, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) out[n] = gf2_times(mat, mat[n]);
}

/* Operator for `len` zero bytes, len a power of two. */
static void crc_zeros_operator(uint32_t *op, size_t len) {
    uint32_t a[32], b[32];
    a[0] = 0x82F63B78u; /* one zero bit (reflected polynomial) */
    for (int n = 1; n < 32; n++) a[n] = 1u << (n - 1);
    gf2_square(b, a); /* 2 bits */
    gf2_square(a, b); /* 4 bits */
    gf2_square(b, a); /* 1 byte */
    memcpy(op, b, sizeof b);
    for (size_t bytes = 1; bytes < len; bytes <<= 1) {
        gf2_square(a, op);
        memcpy(op, a, sizeof a);
    }
}

static void crc_zeros_table(uint32_t table[4][256], size_t len) {
    uint32_t op[32];
    crc_zeros_operator(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        table[0][n] = gf2_times(op, n);
        table[1][n] = gf2_times(op, n << 8);
        table[2][n] = gf2_times(op, n << 16);
        table[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
}

#ifdef HAVE_SSE42_PATH
/* Three interleaved CRC streams over blocks of 3 * len bytes (the instruction's latency hidden behind the
   other two), combined by shifting through `len` zero bytes with `table`; returns the running CRC. */
__attribute__((target("sse4.2"))) static inline uint64_t crc_hw_3way(uint64_t c0, const uint8_t **pp, size_t *np,
                                                                    size_t len, uint32_t table[4][256]) {
    const uint8_t *p = *pp;
    size_t n = *np;
    while (n >= 3 * len) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < len; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, p + len + i, 8);
            memcpy(&d, p + 2 * len + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * len;
        n -= 3 * len;
    }
    *pp = p;
    *np = n;
    return c0;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    c0 = crc_hw_3way(c0, &p, &n, CRC_LONG, crc_zeros_long);
    c0 = crc_hw_3way(c0, &p, &n, CRC_SHORT, crc_zeros_short);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c0 = _mm_crc32_u64(c0, v);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* Standard CRC-32C value of a buffer, continuing from a previous value. */
static uint32_t crc32c_value(uint32_t prev, const uint8_t *p, size_t n) {
    uint32_t c = ~prev;
#ifdef HAVE_SSE42_PATH
    if (crc_hw) return ~crc_hw_run(c, p, n);
#endif
    return ~crc_sw(c, p, n);
}

/* ------------------------------------------------------------------------------------------------ */
/* NativeBuffer: a read-only buffer-protocol object owning malloc'ed memory (zero-copy into Arrow).   */

typedef struct {
    PyObject_HEAD char *data;
    Py_ssize_t len;
    size_t mapped; /* bytes mapped with mmap (0: data came from malloc) */
} NativeBuffer;

/* Released large mappings are kept (bounded) and handed to the next decode: their pages are already
   faulted in, so a reader decoding chunk after chunk does not pay the kernel to zero fresh pages for
   every column of every chunk (the same reuse malloc gives small blocks). */
#define POOL_SLOTS 32
#define POOL_LIMIT ((size_t)128 << 20)
/* SEGMENT_FORMAT_POOL_MIB in the environment lowers it: a process that must stay small (a Spark scan's
   worker, one per task slot) trades some page faults for its resident set. */
static size_t pool_limit = POOL_LIMIT;
static struct {
    char *p;
    size_t cap;
} pool[POOL_SLOTS];
static int pool_n = 0;
static size_t pool_bytes = 0;

static void mem_release(char *p, size_t mapped) {
#ifdef USE_MMAP
    if (mapped) {
        if (pool_n < POOL_SLOTS && pool_bytes + mapped <= pool_limit) {
            pool[pool_n].p = p;
            pool[pool_n].cap = mapped;
            pool_n++;
            pool_bytes += mapped;
        } else {
            munmap(p, mapped);
        }
        return;
    }
#else
    (void)mapped;
#endif
    free(p);
}

static void nb_dealloc(NativeBuffer *self) {
    mem_release(self->data, self->mapped);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int nb_getbuffer(NativeBuffer *self, Py_buffer *view, int flags) {
    static char empty = 0;
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : &empty, self->len, 1, flags);
}

static Py_ssize_t nb_length(NativeBuffer *self) { return self->len; }

static PyBufferProcs nb_as_buffer = {(getbufferproc)nb_getbuffer, NULL};
static PySequenceMethods nb_as_sequence = {(lenfunc)nb_length};

static PyTypeObject NativeBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "segment_format._native.NativeBuffer",
    .tp_basicsize = sizeof(NativeBuffer),
    .tp_dealloc = (destructor)nb_dealloc,
    .tp_as_buffer = &nb_as_buffer,
    .tp_as_sequence = &nb_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes owned by the columnar kernel, exported through the buffer protocol.",
};

/* ------------------------------------------------------------------------------------------------ */
/* ArenaBlock: a writable window of a larger buffer (a shared-memory arena), exported through the buffer
   protocol. Views of it keep it alive; when the last reference goes, on_free(offset) is called so the
   arena can reuse the window. The bridge decodes chunks into such windows and lets the broker read them
   in place (no copy between the processes).                                                          */

typedef struct {
    PyObject_HEAD Py_buffer arena; /* an export of the whole arena: it cannot be closed under us */
    Py_ssize_t offset, len;
    PyObject *on_free;
} ArenaBlock;

static int ab_getbuffer(ArenaBlock *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, (char *)self->arena.buf + self->offset, self->len, 0, flags);
}

static void ab_dealloc(ArenaBlock *self) {
    if (self->on_free) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *r = PyObject_CallFunction(self->on_free, "n", self->offset);
        if (!r) PyErr_WriteUnraisable(self->on_free);
        Py_XDECREF(r);
        PyErr_Restore(type, value, tb);
        Py_DECREF(self->on_free);
    }
    if (self->arena.obj) PyBuffer_Release(&self->arena);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ab_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"arena", "offset", "length", "on_free", NULL};
    PyObject *arena_obj, *on_free;
    Py_ssize_t offset, len;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnnO", kw, &arena_obj, &offset, &len, &on_free)) return NULL;
    if (!PyCallable_Check(on_free)) {
        PyErr_SetString(PyExc_TypeError, "ArenaBlock: on_free must be callable");
        return NULL;
    }
    ArenaBlock *self = (ArenaBlock *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (PyObject_GetBuffer(arena_obj, &self->arena, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        self->arena.obj = NULL;
        Py_DECREF(self);
        return NULL;
    }
    if (offset < 0 || len < 0 || offset > self->arena.len - len) {
        PyErr_Format(PyExc_ValueError, "ArenaBlock: [%zd, %zd + %zd) is outside the arena's %zd bytes", offset,
                     offset, len, self->arena.len);
        Py_DECREF(self);
        return NULL;
    }
    self->offset = offset;
    self->len = len;
    Py_INCREF(on_free);
    self->on_free = on_free;
    return (PyObject *)self;
}

static Py_ssize_t ab_length(ArenaBlock *self) { return self->len; }

static PyObject *ab_get_offset(ArenaBlock *self, void *closure) { return PyLong_FromSsize_t(self->offset); }

static PyBufferProcs ab_as_buffer = {(getbufferproc)ab_getbuffer, NULL};
static PySequenceMethods ab_as_sequence = {.sq_length = (lenfunc)ab_length};
static PyGetSetDef ab_getset[] = {
    {"offset", (getter)ab_get_offset, NULL, "Where the block starts in the arena.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ArenaBlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "segment_format._native.ArenaBlock",
    .tp_basicsize = sizeof(ArenaBlock),
    .tp_dealloc = (destructor)ab_dealloc,
    .tp_as_buffer = &ab_as_buffer,
    .tp_as_sequence = &ab_as_sequence,
    .tp_getset = ab_getset,
    .tp_new = ab_new,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ArenaBlock(arena, offset, length, on_free): bytes [offset, offset + length) of a writable "
              "buffer, exported through the buffer protocol; on_free(offset) runs when the last reference "
              "(views included) is gone.",
};

/* buffer_address(obj) -> int: where obj's buffer starts in memory (the bridge locates views in its arena). */
static PyObject *py_buffer_address(PyObject *self, PyObject *obj) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *r = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return r;
}

/* ------------------------------------------------------------------------------------------------ */
/* Growable byte buffers.                                                                            */

typedef struct {
    char *p;
    size_t len, cap;
    int mapped; /* p is an mmap of cap bytes */
} Buf;

/* Large column buffers are anonymous mappings: growth is an mremap (no copy), the unused tail can be
   returned to the kernel, and released mappings go to the pool below.  Small buffers use malloc.
   Mapping sizes are multiples of MAP_UNIT. */
#define MMAP_MIN ((size_t)1 << 20)
#define MAP_UNIT ((size_t)2 << 20)

#ifdef USE_MMAP
/* Smallest pooled mapping of at least `need` bytes, removed from the pool; NULL if none. */
static char *pool_take(size_t need, size_t *cap) {
    int best = -1;
    for (int i = 0; i < pool_n; i++)
        if (pool[i].cap >= need && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    if (best < 0) return NULL;
    char *p = pool[best].p;
    *cap = pool[best].cap;
    pool_bytes -= *cap;
    pool[best] = pool[--pool_n];
    return p;
}

/* Transparent huge pages for column mappings: writing tens of MB of values into 4 KiB pages costs
   about 30% more in steady state (TLB misses) than into huge pages.  The price is on first touch:
   with the kernel's usual defrag=madvise setting a fault may stall in direct compaction (seen here: a
   first decode 100-300 ms slower on a busy host); pooled mappings are reused, so the price is paid
   once per process.  SEGMENT_FORMAT_HUGEPAGES=0 in the environment turns the advice off. */
static int use_hugepages = 1;

/* A fresh anonymous mapping of `cap` bytes. */
static char *map_fresh(size_t cap) {
    char *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (use_hugepages) madvise(p, cap, MADV_HUGEPAGE);
#endif
    return p;
}
#endif

static int buf_grow(Buf *b, size_t need) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
#ifdef USE_MMAP
    if (cap >= MMAP_MIN) {
        cap = (cap + MAP_UNIT - 1) & ~(MAP_UNIT - 1);
        size_t got = cap;
        char *np = pool_take(need, &got);
        if (!np) {
            if (b->mapped) {
                np = mremap(b->p, b->cap, cap, MREMAP_MAYMOVE);
                if (np == MAP_FAILED) {
                    PyErr_NoMemory();
                    return -1;
                }
                b->p = np;
                b->cap = cap;
                return 0;
            }
            np = map_fresh(cap);
            got = cap;
            if (!np) {
                PyErr_NoMemory();
                return -1;
            }
        }
        if (b->len) memcpy(np, b->p, b->len);
        mem_release(b->p, b->mapped ? b->cap : 0);
        b->p = np;
        b->cap = got;
        b->mapped = 1;
        return 0;
    }
#endif
    char *np = realloc(b->p, cap);
    if (!np) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    return buf_grow(b, b->len + extra);
}

/* Bitmaps: zero-filled on growth, `bits` counts bits. */
typedef struct {
    uint8_t *p;
    size_t bits, cap; /* cap in bytes */
} Bits;

static int bits_reserve(Bits *b, size_t extra_bits) {
    size_t need = (b->bits + extra_bits + 7) / 8;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 512;
    while (cap < need) cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np) {
        PyErr_NoMemory();
        return -1;
    }
    memset(np + b->cap, 0, cap - b->cap);
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline void bits_push(Bits *b, int v) {
    if (v) b->p[b->bits >> 3] |= (uint8_t)(1u << (b->bits & 7));
    b->bits++;
}

/* ------------------------------------------------------------------------------------------------ */
/* Column state.                                                                                     */

typedef struct {
    Py_ssize_t rows;
    Buf offset, timestamp, ts_type;      /* int64, int64, int8 */
    Buf key_off, key_data;               /* int32 offsets (rows+1), bytes */
    Bits key_valid;
    Py_ssize_t key_nulls;
    Buf val_off, val_data;
    Bits val_valid;
    Py_ssize_t val_nulls;
    Buf hdr_off;                         /* int32 offsets into headers (rows+1) */
    Py_ssize_t headers;                  /* total header count */
    Buf hk_off, hk_data;                 /* header keys: int32 offsets (headers+1), utf-8 bytes */
    Buf hv_off, hv_data;
    Bits hv_valid;
    Py_ssize_t hv_nulls;
    Py_ssize_t hk_bad_utf8; /* header keys that are not valid UTF-8 (Kafka decodes them leniently) */
    Buf leader_epoch, producer_id, producer_epoch, base_sequence, batch_base_offset;
    Bits is_txn, is_control;
} Columns;

static void columns_free(Columns *c) {
    Buf *bufs[] = {&c->offset, &c->timestamp, &c->ts_type, &c->key_off, &c->key_data, &c->val_off,
                   &c->val_data, &c->hdr_off, &c->hk_off, &c->hk_data, &c->hv_off, &c->hv_data,
                   &c->leader_epoch, &c->producer_id, &c->producer_epoch, &c->base_sequence,
                   &c->batch_base_offset};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mem_release(bufs[i]->p, bufs[i]->mapped ? bufs[i]->cap : 0);
    Bits *bits[] = {&c->key_valid, &c->val_valid, &c->hv_valid, &c->is_txn, &c->is_control};
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) free(bits[i]->p);
}

/* ------------------------------------------------------------------------------------------------ */
/* Errors.                                                                                           */

static PyObject *DecodeError;

static void raise_decode(Py_ssize_t position, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *args = Py_BuildValue("(ns)", position, msg);
    if (args) {
        PyErr_SetObject(DecodeError, args);
        Py_DECREF(args);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Big-endian reads and varints (Kafka's ByteUtils semantics: zigzag LEB128, at most 5 / 10 bytes).  */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}
static inline int32_t be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)__builtin_bswap32(v);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* Returns 0 on success, -1 if the input ends, -2 if the varint is longer than allowed. */
static inline int read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) {
        uint32_t v = *p;
        *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
        *pp = p + 1;
        return 0;
    }
    uint32_t value = 0;
    int shift = 0;
    for (;;) {
        if (p >= end) return -1;
        uint32_t b = *p++;
        if (!(b & 0x80)) {
            value |= b << shift;
            break;
        }
        value |= (b & 0x7F) << shift;
        shift += 7;
        if (shift > 28) return -2;
    }
    *out = (int32_t)((value >> 1) ^ (0u - (value & 1)));
    *pp = p;
    return 0;
}

static inline int read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) {
        uint64_t v = *p;
        *out = (int64_t)((v >> 1) ^ (0ull - (v & 1)));
        *pp = p + 1;
        return 0;
    }
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        if (p >= end) return -1;
        uint64_t b = *p++;
        if (!(b & 0x80)) {
            value |= b << shift;
            break;
        }
        value |= (b & 0x7F) << shift;
        shift += 7;
        if (shift > 63) return -2;
    }
    *out = (int64_t)((value >> 1) ^ (0ull - (value & 1)));
    *pp = p;
    return 0;
}

/* UTF-8 validity (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000)) return 0;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------------ */
/* Record parsing.                                                                                   */

typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, producer_id;
    int32_t leader_epoch, base_sequence;
    int16_t producer_epoch;
    int log_append_time, transactional, control;
} BatchInfo;

enum { PARSE_OK = 0, PARSE_ERR = -1, PARSE_STOP = 1 };

/* What of each record is materialised (the projection).  key_bytes / value_bytes: < 0 all of it, 0 none (the
   column is not built), n > 0 at most the first n bytes.  headers: build the header columns.  meta: build the
   batch-level per-row columns (timestamp type, leader epoch, producer fields, flags, batch base offset).
   control: emit the records of control batches.  Records are always walked and bounds-checked whole, whatever
   is materialised, so a malformed record is refused the same way under any projection. */
enum { OPT_HEADERS = 1, OPT_META = 2, OPT_CONTROL = 4, OPT_ALL = 7 };
typedef struct {
    Py_ssize_t key_bytes, value_bytes;
    int headers, meta, control;
} Opts;

/* The batch-level booleans of rows [from, c->rows): set once per batch, not per record. */
static void set_bit_range(Bits *b, size_t from, size_t to) {
    while (from < to && (from & 7)) {
        b->p[from >> 3] |= (uint8_t)(1u << (from & 7));
        from++;
    }
    if (to - from >= 8) {
        memset(b->p + (from >> 3), 0xFF, (to - from) >> 3);
        from += (to - from) & ~(size_t)7;
    }
    while (from < to) {
        b->p[from >> 3] |= (uint8_t)(1u << (from & 7));
        from++;
    }
}

static void fill_flags(Columns *c, const BatchInfo *bi, Py_ssize_t from, const Opts *o) {
    if (!o->meta) return;
    size_t to = (size_t)c->rows;
    if (bi->transactional) set_bit_range(&c->is_txn, (size_t)from, to);
    if (bi->control) set_bit_range(&c->is_control, (size_t)from, to);
    c->is_txn.bits = c->is_control.bits = to;
}

/* Parses `count` records from [p, end).  Rows for the first `skip` records are not emitted.  Stops
   (PARSE_STOP, *done = records consumed) when max_rows is reached or a data column would exceed
   data_limit.  On error sets DecodeError: errpos is the position to report; if compressed, positions
   inside the decompressed bytes are only described in the message. */
static int parse_records(Columns *c, const BatchInfo *bi, const uint8_t *start, const uint8_t *end,
                         int32_t count, int32_t skip, Py_ssize_t max_rows, size_t data_limit,
                         Py_ssize_t data_pos, int compressed, Py_ssize_t batch_pos, int32_t *done,
                         const Opts *o) {
    const uint8_t *p = start;
    size_t region = (size_t)(end - start);
    size_t n = (size_t)count;

    /* Reserve per-row storage once per batch: count is already bounded by region / 7. */
    const int want_key = o->key_bytes != 0, want_val = o->value_bytes != 0, want_hdr = o->headers,
              want_meta = o->meta;
    if (buf_reserve(&c->offset, 8 * n) || buf_reserve(&c->timestamp, 8 * n))
        return PARSE_ERR;
    if (want_key && (buf_reserve(&c->key_off, 4 * n) || buf_reserve(&c->key_data, region) ||
                     bits_reserve(&c->key_valid, n)))
        return PARSE_ERR;
    if (want_val && (buf_reserve(&c->val_off, 4 * n) || buf_reserve(&c->val_data, region) ||
                     bits_reserve(&c->val_valid, n)))
        return PARSE_ERR;
    if (want_hdr && buf_reserve(&c->hdr_off, 4 * n)) return PARSE_ERR;
    if (want_meta && (buf_reserve(&c->ts_type, n) || buf_reserve(&c->leader_epoch, 4 * n) ||
                      buf_reserve(&c->producer_id, 8 * n) || buf_reserve(&c->producer_epoch, 2 * n) ||
                      buf_reserve(&c->base_sequence, 4 * n) || buf_reserve(&c->batch_base_offset, 8 * n) ||
                      bits_reserve(&c->is_txn, n) || bits_reserve(&c->is_control, n)))
        return PARSE_ERR;
    const size_t key_cut = o->key_bytes < 0 ? SIZE_MAX : (size_t)o->key_bytes;
    const size_t val_cut = o->value_bytes < 0 ? SIZE_MAX : (size_t)o->value_bytes;

    const int8_t tstype = bi->log_append_time ? 1 : 0;
    const Py_ssize_t row_start = c->rows;
    int32_t i;
    const char *what = NULL;
    const uint8_t *rec_start = p;
    for (i = 0; i < count; i++) {
        rec_start = p;
        int32_t len, off_delta, klen, vlen, hcount;
        int64_t ts_delta;
        int r;
        if ((r = read_varint(&p, end, &len))) {
            what = r == -1 ? "record length varint runs past the end of the records" : "record length varint is too long";
            goto fail;
        }
        if (len < 0) {
            what = "negative record length";
            goto fail;
        }
        if ((size_t)len > (size_t)(end - p)) {
            what = "record length exceeds the remaining bytes of the batch";
            goto fail;
        }
        const uint8_t *rend = p + len;
        if (p >= rend) {
            what = "record ends before its attributes";
            goto fail;
        }
        p++; /* record attributes: unused */
        if ((r = read_varlong(&p, rend, &ts_delta))) {
            what = r == -1 ? "timestamp delta runs past the end of the record" : "timestamp delta varlong is too long";
            goto fail;
        }
        if ((r = read_varint(&p, rend, &off_delta))) {
            what = r == -1 ? "offset delta runs past the end of the record" : "offset delta varint is too long";
            goto fail;
        }
        if ((r = read_varint(&p, rend, &klen))) {
            what = r == -1 ? "key length runs past the end of the record" : "key length varint is too long";
            goto fail;
        }
        if (klen > 0 && (size_t)klen > (size_t)(rend - p)) { /* any negative length is null, as in Kafka */
            what = "key length exceeds the record";
            goto fail;
        }
        const uint8_t *kp = p;
        if (klen > 0) p += klen;
        if ((r = read_varint(&p, rend, &vlen))) {
            what = r == -1 ? "value length runs past the end of the record" : "value length varint is too long";
            goto fail;
        }
        if (vlen > 0 && (size_t)vlen > (size_t)(rend - p)) {
            what = "value length exceeds the record";
            goto fail;
        }
        const uint8_t *vp = p;
        if (vlen > 0) p += vlen;
        if ((r = read_varint(&p, rend, &hcount))) {
            what = r == -1 ? "header count runs past the end of the record" : "header count varint is too long";
            goto fail;
        }
        if (hcount < 0) {
            what = "invalid negative header count";
            goto fail;
        }
        if ((size_t)hcount > (size_t)(rend - p) / 2) {
            what = "header count exceeds what the record can hold";
            goto fail;
        }
        int emit = i >= skip;
        size_t kl = 0, vl = 0; /* bytes of the key and value that are materialised */
        if (want_key && klen > 0) kl = (size_t)klen < key_cut ? (size_t)klen : key_cut;
        if (want_val && vlen > 0) vl = (size_t)vlen < val_cut ? (size_t)vlen : val_cut;
        if (emit) {
            if ((max_rows >= 0 && c->rows >= max_rows) || c->key_data.len + kl > data_limit ||
                c->val_data.len + vl > data_limit) {
                fill_flags(c, bi, row_start, o);
                *done = i;
                return PARSE_STOP;
            }
        }
        /* Headers: parse (and validate) even when not emitting. */
        size_t hk_mark = c->hk_data.len, hv_mark = c->hv_data.len, hko_mark = c->hk_off.len,
               hvo_mark = c->hv_off.len, hvb_mark = c->hv_valid.bits;
        Py_ssize_t hn_mark = c->headers, hvn_mark = c->hv_nulls, bad_mark = c->hk_bad_utf8;
        if (hcount > 0) {
            if (emit && want_hdr &&
                (buf_reserve(&c->hk_off, 4 * (size_t)hcount) || buf_reserve(&c->hv_off, 4 * (size_t)hcount) ||
                 bits_reserve(&c->hv_valid, (size_t)hcount)))
                return PARSE_ERR;
            for (int32_t h = 0; h < hcount; h++) {
                int32_t hkl, hvl;
                if ((r = read_varint(&p, rend, &hkl))) {
                    what = r == -1 ? "header key length runs past the end of the record" : "header key length varint is too long";
                    goto fail;
                }
                if (hkl < 0 || (size_t)hkl > (size_t)(rend - p)) {
                    what = hkl < 0 ? "invalid negative header key length" : "header key length exceeds the record";
                    goto fail;
                }
                const uint8_t *hkp = p;
                p += hkl;

                if ((r = read_varint(&p, rend, &hvl))) {
                    what = r == -1 ? "header value length runs past the end of the record" : "header value length varint is too long";
                    goto fail;
                }
                if (hvl > 0 && (size_t)hvl > (size_t)(rend - p)) {
                    what = "header value length exceeds the record";
                    goto fail;
                }
                const uint8_t *hvp = p;
                if (hvl > 0) p += hvl;
                if (!emit || !want_hdr) continue;
                size_t hvs = hvl > 0 ? (size_t)hvl : 0;
                if (c->hk_data.len + (size_t)hkl > data_limit || c->hv_data.len + hvs > data_limit) {
                    /* roll back this record's headers and stop before it */
                    c->hk_data.len = hk_mark;
                    c->hv_data.len = hv_mark;
                    c->hk_off.len = hko_mark;
                    c->hv_off.len = hvo_mark;
                    for (size_t b = hvb_mark; b < c->hv_valid.bits; b++) c->hv_valid.p[b >> 3] &= (uint8_t)~(1u << (b & 7));
                    c->hv_valid.bits = hvb_mark;
                    c->headers = hn_mark;
                    c->hv_nulls = hvn_mark;
                    c->hk_bad_utf8 = bad_mark;
                    fill_flags(c, bi, row_start, o);
                    *done = i;
                    return PARSE_STOP;
                }
                if (buf_reserve(&c->hk_data, (size_t)hkl) || buf_reserve(&c->hv_data, hvs)) return PARSE_ERR;
                if (hkl > 0) {
                    if (!utf8_valid(hkp, (size_t)hkl)) c->hk_bad_utf8++;
                    memcpy(c->hk_data.p + c->hk_data.len, hkp, (size_t)hkl);
                    c->hk_data.len += (size_t)hkl;
                }
                int32_t o = (int32_t)c->hk_data.len;
                memcpy(c->hk_off.p + c->hk_off.len, &o, 4);
                c->hk_off.len += 4;
                if (hvs > 0) {
                    memcpy(c->hv_data.p + c->hv_data.len, hvp, hvs);
                    c->hv_data.len += hvs;
                }
                if (hvl < 0) c->hv_nulls++;
                bits_push(&c->hv_valid, hvl >= 0);
                o = (int32_t)c->hv_data.len;
                memcpy(c->hv_off.p + c->hv_off.len, &o, 4);
                c->hv_off.len += 4;
                c->headers++;
            }
        }
        if (p != rend) {
            what = "record length does not match its contents";
            goto fail;
        }
        if (!emit) continue;

        /* Emit the row. */
        Py_ssize_t row = c->rows;
        int64_t off = (int64_t)((uint64_t)bi->base_offset + (uint64_t)(int64_t)off_delta);
        int64_t ts = bi->log_append_time ? bi->max_timestamp
                                         : (int64_t)((uint64_t)bi->base_timestamp + (uint64_t)ts_delta);
        ((int64_t *)c->offset.p)[row] = off;
        ((int64_t *)c->timestamp.p)[row] = ts;
        c->offset.len += 8;
        c->timestamp.len += 8;
        if (want_key) {
            if (kl) {
                memcpy(c->key_data.p + c->key_data.len, kp, kl);
                c->key_data.len += kl;
            }
            if (klen < 0) c->key_nulls++;
            bits_push(&c->key_valid, klen >= 0);
            ((int32_t *)c->key_off.p)[row + 1] = (int32_t)c->key_data.len;
            c->key_off.len += 4;
        }
        if (want_val) {
            if (vl) {
                memcpy(c->val_data.p + c->val_data.len, vp, vl);
                c->val_data.len += vl;
            }
            if (vlen < 0) c->val_nulls++;
            bits_push(&c->val_valid, vlen >= 0);
            ((int32_t *)c->val_off.p)[row + 1] = (int32_t)c->val_data.len;
            c->val_off.len += 4;
        }
        if (want_hdr) {
            ((int32_t *)c->hdr_off.p)[row + 1] = (int32_t)c->headers;
            c->hdr_off.len += 4;
        }
        if (want_meta) {
            ((int8_t *)c->ts_type.p)[row] = tstype;
            ((int32_t *)c->leader_epoch.p)[row] = bi->leader_epoch;
            ((int64_t *)c->producer_id.p)[row] = bi->producer_id;
            ((int16_t *)c->producer_epoch.p)[row] = bi->producer_epoch;
            ((int32_t *)c->base_sequence.p)[row] = bi->base_sequence;
            ((int64_t *)c->batch_base_offset.p)[row] = bi->base_offset;
            c->ts_type.len += 1;
            c->leader_epoch.len += 4;
            c->producer_id.len += 8;
            c->producer_epoch.len += 2;
            c->base_sequence.len += 4;
            c->batch_base_offset.len += 8;
        }
        c->rows++;
    }
    if (p != end) {
        fill_flags(c, bi, row_start, o);
        raise_decode(compressed ? batch_pos : data_pos + (p - start),
                     "%zd bytes remain after the batch's %d records%s", (Py_ssize_t)(end - p), count,
                     compressed ? " (in the decompressed records)" : "");
        return PARSE_ERR;
    }
    fill_flags(c, bi, row_start, o);
    *done = count;
    return PARSE_OK;
fail:
    fill_flags(c, bi, row_start, o);
    if (compressed)
        raise_decode(batch_pos, "record %d at byte %zd of the decompressed records: %s", i,
                     (Py_ssize_t)(rec_start - start), what);
    else
        raise_decode(data_pos + (rec_start - start), "record %d of the batch at position %zd: %s", i, batch_pos, what);
    return PARSE_ERR;
}

/* ------------------------------------------------------------------------------------------------ */
/* decode_v2                                                                                         */

static const char *codec_names[] = {"none", "gzip", "snappy", "lz4", "zstd"};

static PyObject *nb_from_mem(char *data, size_t len, size_t mapped) {
    NativeBuffer *nb = PyObject_New(NativeBuffer, &NativeBufferType);
    if (!nb) {
        mem_release(data, mapped);
        return NULL;
    }
    if (!mapped && data && len) {
        char *shrunk = realloc(data, len);
        if (shrunk) data = shrunk;
    }
#ifdef USE_MMAP
    if (mapped) {
        /* Give back the unused tail when most of the mapping is unused, so a long-lived column holds
           at most about twice what it uses; a nearly full mapping is kept whole so it can serve the
           next decode of a similar chunk from the pool. Shrinking in place cannot move. */
        size_t keep = (len + MAP_UNIT - 1) & ~(MAP_UNIT - 1);
        if (keep == 0) keep = MAP_UNIT;
        if (mapped > 2 * keep && mremap(data, mapped, keep, 0) != MAP_FAILED) mapped = keep;
    }
#endif
    nb->data = data;
    nb->len = (Py_ssize_t)len;
    nb->mapped = mapped;
    return (PyObject *)nb;
}

static int put_buf(PyObject *d, const char *name, Buf *b) {
    PyObject *o = nb_from_mem(b->p, b->len, b->mapped ? b->cap : 0);
    b->p = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
    if (!o) return -1;
    int r = PyDict_SetItemString(d, name, o);
    Py_DECREF(o);
    return r;
}

static int put_bits(PyObject *d, const char *name, Bits *b, int keep) {
    size_t bytes = (b->bits + 7) / 8;
    if (!keep) {
        free(b->p);
        b->p = NULL;
        b->bits = b->cap = 0;
        return PyDict_SetItemString(d, name, Py_None);
    }
    PyObject *o = nb_from_mem((char *)b->p, bytes, 0);
    b->p = NULL;
    b->bits = b->cap = 0;
    if (!o) return -1;
    int r = PyDict_SetItemString(d, name, o);
    Py_DECREF(o);
    return r;
}

static int put_int(PyObject *d, const char *name, Py_ssize_t v) {
    PyObject *o = PyLong_FromSsize_t(v);
    if (!o) return -1;
    int r = PyDict_SetItemString(d, name, o);
    Py_DECREF(o);
    return r;
}

enum { STOP_END = 0, STOP_LEGACY = 1, STOP_MAX_ROWS = 2, STOP_LIMIT = 3, STOP_PARTIAL = 4 };

PyDoc_STRVAR(decode_v2_doc,
             "decode_v2(data, start, verify_crc, max_rows, skip_records, decompress, data_limit, partial_ok=False,\n"
             "          key_bytes=-1, value_bytes=-1, flags=7) -> dict\n\n"
             "Decode magic-2 batches from data[start:] into column buffers. max_rows < 0 means no limit;\n"
             "decompress is a tuple of 5 callables indexed by codec id; partial_ok stops (instead of failing)\n"
             "at a batch cut short by the end of data. The result holds 'stop' (0 end, 1 legacy entry,\n"
             "2 max_rows, 3 data limit, 4 partial batch), 'position' (where\n"
             "decoding stopped: the end, or the batch to resume at), 'skip' (records of that batch already\n"
             "returned), 'rows', 'headers', null counts and the NativeBuffer columns.\n"
             "The projection: key_bytes / value_bytes < 0 all, 0 none (the column's buffers stay empty), n the first\n"
             "n bytes; flags bit 1 header columns, 2 batch-level per-row columns, 4 records of control batches.");

static PyObject *decode_v2(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, max_rows, data_limit_arg;
    int verify_crc, skip_records, partial_ok = 0, flags = OPT_ALL;
    Py_ssize_t key_bytes = -1, value_bytes = -1;
    PyObject *decompress;
    if (!PyArg_ParseTuple(args, "y*npniOn|pnni", &view, &start, &verify_crc, &max_rows, &skip_records, &decompress,
                          &data_limit_arg, &partial_ok, &key_bytes, &value_bytes, &flags))
        return NULL;
    Opts o = {key_bytes < 0 ? -1 : key_bytes, value_bytes < 0 ? -1 : value_bytes, (flags & OPT_HEADERS) != 0,
              (flags & OPT_META) != 0, (flags & OPT_CONTROL) != 0};
    if (!PyTuple_Check(decompress) || PyTuple_GET_SIZE(decompress) != 5) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "decompress must be a tuple of 5 callables indexed by codec id");
        return NULL;
    }
    const uint8_t *data = view.buf;
    Py_ssize_t n = view.len;
    size_t data_limit = data_limit_arg < 0 || data_limit_arg > INT32_MAX ? (size_t)INT32_MAX : (size_t)data_limit_arg;
    Columns c;
    memset(&c, 0, sizeof c);
    PyObject *result = NULL;
    int stop = STOP_END;
    int32_t skip = skip_records;
    Py_ssize_t pos = start < 0 ? 0 : start;

    if (buf_reserve(&c.key_off, 4) || buf_reserve(&c.val_off, 4) || buf_reserve(&c.hdr_off, 4) ||
        buf_reserve(&c.hk_off, 4) || buf_reserve(&c.hv_off, 4))
        goto done;
    {
        /* Pre-pass over the batch headers ahead: reserve column space once instead of growing it.
           Claimed counts are capped by what the bytes can hold (a record takes >= 7 bytes; compressed
           ones are assumed to expand at most 64x here; growth handles the rest). */
        size_t rows_hint = 0, plain = 0, packed = 0;
        Py_ssize_t q = pos;
        while (q + 61 <= n) {
            int32_t bl = be32(data + q + 8);
            if (data[q + 16] != 2 || bl < 49 || (Py_ssize_t)bl > n - q - 12) break;
            int32_t cnt = be32(data + q + 57);
            if (!o.control && (be16(data + q + 21) & 0x20)) cnt = 0;
            if (cnt > 0) rows_hint += (size_t)cnt;
            if (be16(data + q + 21) & 7)
                packed += (size_t)bl - 49;
            else
                plain += (size_t)bl - 49;
            q += 12 + bl;
        }
        size_t row_cap = (plain + 64 * packed) / 7 + 1;
        if (rows_hint > row_cap) rows_hint = row_cap;
        if (max_rows >= 0 && rows_hint > (size_t)max_rows) rows_hint = (size_t)max_rows;
        size_t data_hint = plain + 3 * packed;
        if (data_hint > data_limit) data_hint = data_limit;
        if (o.value_bytes >= 0 && data_hint / (size_t)(o.value_bytes ? o.value_bytes : 1) > rows_hint)
            data_hint = rows_hint * (size_t)o.value_bytes; /* cut values: at most value_bytes per row */
        if (rows_hint) {
            size_t r = rows_hint;
            if (buf_reserve(&c.offset, 8 * r) || buf_reserve(&c.timestamp, 8 * r))
                goto done;
            if (o.key_bytes != 0 && (buf_reserve(&c.key_off, 4 * r + 4) || bits_reserve(&c.key_valid, r)))
                goto done;
            if (o.value_bytes != 0 &&
                (buf_reserve(&c.val_off, 4 * r + 4) || buf_reserve(&c.val_data, data_hint) ||
                 bits_reserve(&c.val_valid, r)))
                goto done;
            if (o.headers && buf_reserve(&c.hdr_off, 4 * r + 4)) goto done;
            if (o.meta && (buf_reserve(&c.ts_type, r) || buf_reserve(&c.leader_epoch, 4 * r) ||
                           buf_reserve(&c.producer_id, 8 * r) || buf_reserve(&c.producer_epoch, 2 * r) ||
                           buf_reserve(&c.base_sequence, 4 * r) || buf_reserve(&c.batch_base_offset, 8 * r) ||
                           bits_reserve(&c.is_txn, r) || bits_reserve(&c.is_control, r)))
                goto done;
        }
    }
    memset(c.key_off.p, 0, 4);
    memset(c.val_off.p, 0, 4);
    memset(c.hdr_off.p, 0, 4);
    memset(c.hk_off.p, 0, 4);
    memset(c.hv_off.p, 0, 4);
    c.key_off.len = c.val_off.len = c.hdr_off.len = c.hk_off.len = c.hv_off.len = 4;

    while (pos < n) {
        Py_ssize_t remaining = n - pos;
        const uint8_t *b = data + pos;
        if (remaining < 17) {
            if (partial_ok) {
                stop = STOP_PARTIAL;
                break;
            }
            raise_decode(pos, "truncated batch: %zd bytes left, fewer than a batch header up to its magic", remaining);
            goto done;
        }
        int32_t blen = be32(b + 8);
        int magic = (int8_t)b[16];
        if (magic == 0 || magic == 1) {
            stop = STOP_LEGACY;
            break;
        }
        if (magic != 2) {
            raise_decode(pos + 16, "unknown magic %d", magic);
            goto done;
        }
        if (blen < 49) {
            raise_decode(pos + 8, "batch length %d is below the minimum of 49 for magic 2", blen);
            goto done;
        }
        if ((Py_ssize_t)blen > remaining - 12) {
            if (partial_ok) {
                stop = STOP_PARTIAL;
                break;
            }
            raise_decode(pos, "truncated batch: length %d but only %zd bytes follow", blen, remaining - 12);
            goto done;
        }
        Py_ssize_t bend = pos + 12 + blen;
        int16_t attrs = be16(b + 21);
        int codec = attrs & 7;
        if (verify_crc) {
            uint32_t stored = (uint32_t)be32(b + 17);
            uint32_t actual = crc32c_value(0, b + 21, (size_t)blen - 9);
            if (stored != actual) {
                raise_decode(pos, "CRC-32C mismatch: stored 0x%08x, computed 0x%08x", stored, actual);
                goto done;
            }
        }
        if (codec > 4) {
            raise_decode(pos + 21, "unknown compression codec %d", codec);
            goto done;
        }
        int32_t count = be32(b + 57);
        if (count < 0) {
            raise_decode(pos + 57, "negative record count %d", count);
            goto done;
        }
        BatchInfo bi;
        bi.base_offset = be64(b);
        bi.leader_epoch = be32(b + 12);
        bi.base_timestamp = be64(b + 27);
        bi.max_timestamp = be64(b + 35);
        bi.producer_id = be64(b + 43);
        bi.producer_epoch = be16(b + 51);
        bi.base_sequence = be32(b + 53);
        bi.log_append_time = (attrs & 0x08) != 0;
        bi.transactional = (attrs & 0x10) != 0;
        bi.control = (attrs & 0x20) != 0;
        const uint8_t *rs = b + 61, *re = data + bend;
        int32_t done_recs = 0;
        int pr;
        if (count == 0 || (bi.control && !o.control)) {
            pr = PARSE_OK; /* Kafka never reads the records section of an empty batch. */
        } else if (codec == 0) {
            if ((size_t)count > (size_t)(re - rs) / 7) {
                raise_decode(pos + 57, "record count %d cannot fit in the batch's %zd record bytes", count,
                             (Py_ssize_t)(re - rs));
                goto done;
            }
            pr = parse_records(&c, &bi, rs, re, count, skip, max_rows, data_limit, pos + 61, 0, pos, &done_recs, &o);
        } else {
            PyObject *mv = PyMemoryView_FromMemory((char *)rs, re - rs, PyBUF_READ);
            if (!mv) goto done;
            PyObject *out = PyObject_CallOneArg(PyTuple_GET_ITEM(decompress, codec), mv);
            Py_DECREF(mv);
            if (!out) {
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                PyErr_NormalizeException(&et, &ev, &tb);
                /* segment_format errors carry a bare `reason`; anything else is quoted as str(). */
                PyObject *s = NULL;
                if (ev && PyObject_HasAttrString(ev, "reason")) {
                    PyObject *r = PyObject_GetAttrString(ev, "reason");
                    if (r && PyUnicode_Check(r)) s = r;
                    else Py_XDECREF(r);
                }
                if (!s && ev) s = PyObject_Str(ev);
                const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
                if (!msg) PyErr_Clear();
                raise_decode(pos, "cannot decompress %s records: %s", codec_names[codec], msg ? msg : "unknown error");
                Py_XDECREF(s);
                if (ev && PyErr_Occurred()) {
                    PyObject *t2, *v2, *tb2;
                    PyErr_Fetch(&t2, &v2, &tb2);
                    PyErr_NormalizeException(&t2, &v2, &tb2);
                    if (v2) {
                        PyException_SetCause(v2, ev); /* steals ev */
                        ev = NULL;
                    }
                    PyErr_Restore(t2, v2, tb2);
                }
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                goto done;
            }
            Py_buffer ob;
            if (PyObject_GetBuffer(out, &ob, PyBUF_SIMPLE) < 0) {
                Py_DECREF(out);
                goto done;
            }
            const uint8_t *ds = ob.buf, *de = ds + ob.len;
            if ((size_t)count > (size_t)ob.len / 7) {
                raise_decode(pos + 57, "record count %d cannot fit in the batch's %zd decompressed record bytes", count,
                             ob.len);
                pr = PARSE_ERR;
            } else {
                pr = parse_records(&c, &bi, ds, de, count, skip, max_rows, data_limit, pos, 1, pos, &done_recs, &o);
            }
            PyBuffer_Release(&ob);
            Py_DECREF(out);
        }
        if (pr == PARSE_ERR) goto done;
        if (pr == PARSE_STOP) {
            if (c.rows == 0 && !(max_rows >= 0 && c.rows >= max_rows)) {
                raise_decode(pos, "a single record of this batch exceeds the %zd-byte column limit", (Py_ssize_t)data_limit);
                goto done;
            }
            stop = (max_rows >= 0 && c.rows >= max_rows) ? STOP_MAX_ROWS : STOP_LIMIT;
            skip = done_recs;
            break;
        }
        skip = 0;
        pos = bend;
        if (max_rows >= 0 && c.rows >= max_rows) {
            stop = pos < n ? STOP_MAX_ROWS : STOP_END;
            break;
        }
    }

    result = PyDict_New();
    if (!result) goto done;
    int keep_kv = c.key_nulls > 0, keep_vv = c.val_nulls > 0, keep_hv = c.hv_nulls > 0;
    if (put_int(result, "stop", stop) || put_int(result, "position", pos) || put_int(result, "skip", skip) ||
        put_int(result, "rows", c.rows) || put_int(result, "headers", c.headers) ||
        put_int(result, "key_nulls", c.key_nulls) || put_int(result, "value_nulls", c.val_nulls) ||
        put_int(result, "header_value_nulls", c.hv_nulls) ||
        put_int(result, "header_key_bad_utf8", c.hk_bad_utf8) ||
        put_buf(result, "offset", &c.offset) || put_buf(result, "timestamp", &c.timestamp) ||
        put_buf(result, "timestamp_type", &c.ts_type) || put_buf(result, "key_offsets", &c.key_off) ||
        put_buf(result, "key_data", &c.key_data) || put_bits(result, "key_validity", &c.key_valid, keep_kv) ||
        put_buf(result, "value_offsets", &c.val_off) || put_buf(result, "value_data", &c.val_data) ||
        put_bits(result, "value_validity", &c.val_valid, keep_vv) || put_buf(result, "header_offsets", &c.hdr_off) ||
        put_buf(result, "header_key_offsets", &c.hk_off) || put_buf(result, "header_key_data", &c.hk_data) ||
        put_buf(result, "header_value_offsets", &c.hv_off) || put_buf(result, "header_value_data", &c.hv_data) ||
        put_bits(result, "header_value_validity", &c.hv_valid, keep_hv) ||
        put_buf(result, "partition_leader_epoch", &c.leader_epoch) || put_buf(result, "producer_id", &c.producer_id) ||
        put_buf(result, "producer_epoch", &c.producer_epoch) || put_buf(result, "base_sequence", &c.base_sequence) ||
        put_bits(result, "is_transactional", &c.is_txn, 1) || put_bits(result, "is_control", &c.is_control, 1) ||
        put_buf(result, "batch_base_offset", &c.batch_base_offset)) {
        Py_CLEAR(result);
    }
done:
    columns_free(&c);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------------ */

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long prev = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &view, &prev)) return NULL;
    uint32_t v;
    Py_BEGIN_ALLOW_THREADS v = crc32c_value((uint32_t)prev, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(v);
}

static PyObject *py_crc32c_hardware(PyObject *self, PyObject *noargs) { return PyBool_FromLong(crc_hw); }

static PyObject *py_set_crc32c_hardware(PyObject *self, PyObject *arg) {
    int want = PyObject_IsTrue(arg);
    if (want < 0) return NULL;
    int before = crc_hw;
#ifdef HAVE_SSE42_PATH
    crc_hw = want && __builtin_cpu_supports("sse4.2");
#endif
    return PyBool_FromLong(before);
}

/* copy_into(target, sources) -> int: the sources back to back at the start of target, with the GIL released
   for the copy (a 1 MiB memcpy is ~100 us: long enough that other threads should run meanwhile). */
static PyObject *py_copy_into(PyObject *self, PyObject *args) {
    PyObject *target_obj, *sources;
    if (!PyArg_ParseTuple(args, "OO", &target_obj, &sources)) return NULL;
    PyObject *seq = PySequence_Fast(sources, "copy_into: sources must be a sequence of buffers");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer target;
    if (PyObject_GetBuffer(target_obj, &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    Py_ssize_t got = 0, total = 0;
    PyObject *result = NULL;
    if (!views) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        total += views[got].len;
    }
    if (total > target.len) {
        PyErr_Format(PyExc_ValueError, "copy_into: %zd bytes of sources do not fit in a target of %zd bytes", total,
                     target.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS char *out = target.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(out, views[i].buf, (size_t)views[i].len);
        out += views[i].len;
    }
    Py_END_ALLOW_THREADS result = PyLong_FromSsize_t(total);
done:
    if (views) {
        for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
        PyMem_Free(views);
    }
    PyBuffer_Release(&target);
    Py_DECREF(seq);
    return result;
}

#ifdef HAVE_PREAD_INTO
/* pread_into(path, offset, target, checksum) -> (n, crc | None): bytes [offset, offset + len(target)) of the
   file at path read into target, the file opened and closed here, and their CRC-32C computed block by block
   while each block is still in the CPU's cache. Why one call: a plain chunk read through os.open, os.preadv,
   os.close and a checksum releases and retakes the GIL four times, and on a busy bridge each release hands
   the GIL to another thread and waits to get it back; here it is released once. n < len(target) means the
   file ended first. */
#define PREAD_BLOCK ((size_t)256 * 1024)
static PyObject *py_pread_into(PyObject *self, PyObject *args) {
    PyObject *path_obj, *path_bytes = NULL, *target_obj, *result = NULL;
    long long offset;
    int checksum;
    if (!PyArg_ParseTuple(args, "OLOp", &path_obj, &offset, &target_obj, &checksum)) return NULL;
    if (offset < 0) return PyErr_Format(PyExc_ValueError, "pread_into: negative offset %lld", offset);
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    Py_buffer target;
    if (PyObject_GetBuffer(target_obj, &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(path_bytes);
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(path_bytes);
    char *buf = target.buf;
    size_t want = (size_t)target.len, got = 0;
    uint32_t crc = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
    } else {
        while (got < want) {
            size_t step = want - got < PREAD_BLOCK ? want - got : PREAD_BLOCK;
            ssize_t n = pread(fd, buf + got, step, (off_t)(offset + (long long)got));
            if (n < 0) {
                if (errno == EINTR) continue;
                err = errno;
                break;
            }
            if (n == 0) break;
            if (checksum) crc = crc32c_value(crc, (const uint8_t *)buf + got, (size_t)n);
            got += (size_t)n;
        }
        close(fd);
    }
    Py_END_ALLOW_THREADS if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
    }
    else if (checksum) result = Py_BuildValue("(nk)", (Py_ssize_t)got, (unsigned long)crc);
    else result = Py_BuildValue("(nO)", (Py_ssize_t)got, Py_None);
    PyBuffer_Release(&target);
    Py_DECREF(path_bytes);
    return result;
}
#endif

static PyMethodDef native_methods[] = {
    {"decode_v2", decode_v2, METH_VARARGS, decode_v2_doc},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, crc=0) -> int: CRC-32C of data, continuing from crc."},
    {"crc32c_hardware", py_crc32c_hardware, METH_NOARGS, "True when CRC-32C uses the SSE4.2 instruction."},
    {"buffer_address", py_buffer_address, METH_O, "buffer_address(obj) -> int: where obj's buffer starts."},
    {"copy_into", py_copy_into, METH_VARARGS,
     "copy_into(target, sources) -> int: the sources back to back at the start of target, GIL released."},
#ifdef HAVE_PREAD_INTO
    {"pread_into", py_pread_into, METH_VARARGS,
     "pread_into(path, offset, target, checksum) -> (n, crc | None): a file range read into target, GIL released "
     "once."},
#endif
    {"_set_crc32c_hardware", py_set_crc32c_hardware, METH_O,
     "Testing hook: use (True, if supported) or avoid the SSE4.2 path; returns the previous setting."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Compiled columnar kernel: magic-2 record batches to column buffers, and CRC-32C.", -1, native_methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
#ifdef USE_MMAP
    const char *hp = getenv("SEGMENT_FORMAT_HUGEPAGES");
    if (hp && hp[0] == '0') use_hugepages = 0;
    const char *pool_mib = getenv("SEGMENT_FORMAT_POOL_MIB");
    if (pool_mib && pool_mib[0]) {
        char *end = NULL;
        unsigned long long mib = strtoull(pool_mib, &end, 10);
        if (end && *end == '\0' && mib <= 128) pool_limit = (size_t)mib << 20;
    }
#endif
    crc_zeros_table(crc_zeros_long, CRC_LONG);
    crc_zeros_table(crc_zeros_short, CRC_SHORT);
    if (PyType_Ready(&NativeBufferType) < 0 || PyType_Ready(&ArenaBlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    DecodeError = PyErr_NewExceptionWithDoc("segment_format._native.DecodeError",
                                            "Malformed batch bytes: args are (position, reason).", PyExc_ValueError,
                                            NULL);
    if (!DecodeError || PyModule_AddObjectRef(m, "DecodeError", DecodeError) < 0 ||
        PyModule_AddObjectRef(m, "NativeBuffer", (PyObject *)&NativeBufferType) < 0 ||
        PyModule_AddObjectRef(m, "ArenaBlock", (PyObject *)&ArenaBlockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
